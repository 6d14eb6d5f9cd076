"""Landing sources: local folders and S3 (a real S3-compatible server, moto in server mode, on 127.0.0.1),
the batch ingest from S3, and the bounded streaming reader the live job uses."""
from __future__ import annotations

import json
import os
import socket

import boto3
import pytest
from moto.server import ThreadedMotoServer

from replay.io import journal, landing
from replay.io.journal import ingest
from replay.io.lake import Lake
from replay.io.store import default_store
from replay.model.jobs import Job
from replay.ops.generate import StreamSpec, generate
from tests.support import target_dir

BUCKET = "retrace-landing"


@pytest.fixture(scope="session")
def s3_endpoint():
    """A moto S3 server on a free local port, for the whole test session."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(scope="module")
def s3(s3_endpoint):
    """AWS_* settings pointing at the local server (this module only) and a client with a bucket."""
    with pytest.MonkeyPatch.context() as mp:
        for name in [k for k in os.environ if k.startswith("AWS_")]:
            mp.delenv(name)
        mp.setenv("AWS_ENDPOINT_URL", s3_endpoint)
        mp.setenv("AWS_ACCESS_KEY_ID", "retrace-test")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "retrace-test")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """600 generated events in 6 JSON-lines files (a local folder)."""
    folder = str(tmp_path_factory.mktemp("landing") / "landing")
    generate(folder, StreamSpec(600, partitions=2, keys=20, files=6, seed=7))
    return folder


def upload(client, folder: str, prefix: str, names: list[str] | None = None) -> str:
    """Copy files of a local folder under s3://BUCKET/prefix/; returns that URI."""
    for name in names if names is not None else sorted(os.listdir(folder)):
        client.upload_file(os.path.join(folder, name), BUCKET, f"{prefix}/{name}")
    return f"s3://{BUCKET}/{prefix}"


def put(client, prefix: str, name: str, body: str) -> None:
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=body.encode())


def run_stream(spark, uri: str, checkpoint: str, transform=None, **options) -> list[dict]:
    """Run the streaming source with trigger(availableNow) and return what each micro-batch saw."""
    landing.register(spark)
    seen = []

    def record(df, batch_id):
        rows = [r.asDict() for r in (transform(df) if transform else df).collect()]
        seen.append({"batch": batch_id, "files": sorted({r["source"] for r in rows}), "rows": rows})

    reader = spark.readStream.format("retrace_landing").option("landing", uri)
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (reader.load().writeStream.foreachBatch(record).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return seen


def names(n: int) -> list[str]:
    return [f"part-{i:05d}.jsonl" for i in range(n)]


def test_s3_listing_is_in_name_order_and_skips_hidden_files(s3, generated):
    uri = upload(s3, generated, "listing", list(reversed(names(6))))
    put(s3, "listing", ".part-00099.jsonl", "{}\n")
    put(s3, "listing", "_temporary.jsonl", "{}\n")
    put(s3, "listing", "notes.txt", "not data\n")
    put(s3, "listing", "sub/part-00000.parquet", "")
    files = landing.Landing.of(uri).files()
    assert [f.name for f in files] == names(6) + ["sub/part-00000.parquet"]
    assert [f.size for f in files[:6]] == [os.path.getsize(os.path.join(generated, n)) for n in names(6)]


@pytest.fixture(scope="module")
def ingested(spark, s3, generated, tmp_path_factory):
    """The generated files ingested from S3 and, into another lake, from the local folder."""
    root = tmp_path_factory.mktemp("ingest")
    uri = upload(s3, generated, "ingest")
    lakes = {"s3": str(root / "lake_s3"), "folder": str(root / "lake_folder")}
    result = ingest(spark, uri, lakes["s3"])
    ingest(spark, generated, lakes["folder"])
    return {"uri": uri, "result": result, **lakes}


def _journal(spark, lake: str) -> list[dict]:
    return [r.asDict() for r in journal.read(spark, lake).orderBy("seq").collect()]


def test_ingest_from_s3_journals_the_same_rows_as_ingest_from_a_local_folder(spark, ingested, generated):
    s3_rows = _journal(spark, ingested["s3"])
    assert ingested["result"].files == names(6) and ingested["result"].rows == 600
    assert s3_rows == _journal(spark, ingested["folder"])
    with open(os.path.join(generated, "part-00002.jsonl")) as f:
        third = json.loads(f.read().split("\n")[2])
    row = next(r for r in s3_rows if (r["source"], r["source_line"]) == ("part-00002.jsonl", 3))
    assert (row["partition"], row["offset"]) == (third["partition"], third["offset"])


def test_reingest_from_s3_is_a_no_op(spark, ingested):
    version = default_store().version(Lake(ingested["s3"]).journal)
    again = ingest(spark, ingested["uri"], ingested["s3"])
    assert (again.files, again.skipped, again.rows, again.version) == ([], 6, 0, None)
    assert journal.read(spark, ingested["s3"]).count() == 600
    assert default_store().version(Lake(ingested["s3"]).journal) == version


def test_max_files_per_batch_delivers_batches_of_n_files_in_name_order(spark, s3, generated, tmp_path):
    uri = upload(s3, generated, "max-files", list(reversed(names(6))))
    seen = run_stream(spark, uri, str(tmp_path / "checkpoint"), maxFilesPerBatch=2)
    assert [b["files"] for b in seen] == [names(6)[0:2], names(6)[2:4], names(6)[4:6]]
    assert [b["batch"] for b in seen] == [0, 1, 2]
    assert sum(len(b["rows"]) for b in seen) == 600


def test_max_bytes_per_batch_bounds_a_batch_but_takes_at_least_one_file(spark, tmp_path):
    folder = tmp_path / "landing"
    folder.mkdir()
    line = json.dumps({"partition": 0, "offset": 0, "arrival_time": "2024-01-01T00:00:00Z"}) + "\n"
    sizes = {"a.jsonl": 3, "b.jsonl": 3, "c.jsonl": 10, "d.jsonl": 2, "e.jsonl": 2}  # lines per file
    for name, n in sizes.items():
        (folder / name).write_text(line * n)
    bound = 7 * len(line)  # b + c would exceed it, and c alone does too
    seen = run_stream(spark, str(folder), str(tmp_path / "checkpoint"), maxBytesPerBatch=bound)
    assert [b["files"] for b in seen] == [["a.jsonl", "b.jsonl"], ["c.jsonl"], ["d.jsonl", "e.jsonl"]]


def test_restarted_query_does_not_reread_committed_files_and_reads_new_ones(spark, s3, generated, tmp_path):
    uri = upload(s3, generated, "restart", names(4))
    checkpoint = str(tmp_path / "checkpoint")
    first = run_stream(spark, uri, checkpoint, maxFilesPerBatch=2)
    consumed = sorted(f for b in first for f in b["files"])  # what the live job has journaled
    upload(s3, generated, "restart", names(6)[4:])
    second = run_stream(spark, uri, checkpoint, maxFilesPerBatch=2, exclude=json.dumps(consumed))
    assert [b["files"] for b in first] == [names(4)[:2], names(4)[2:]]
    assert [(b["batch"], b["files"]) for b in second] == [(2, names(6)[4:6])]


def test_a_batch_replanned_after_a_crash_reads_exactly_the_files_it_was_planned_with(
        spark, s3, generated, tmp_path):
    uri = upload(s3, generated, "crash", names(4))
    checkpoint = str(tmp_path / "checkpoint")

    def crash_on_second_batch(df):
        if "part-00002.jsonl" in {r["source"] for r in df.select("source").distinct().collect()}:
            raise RuntimeError("sink down")
        return df

    with pytest.raises(Exception, match="sink down"):
        run_stream(spark, uri, checkpoint, transform=crash_on_second_batch, maxFilesPerBatch=2)
    # A file that sorts first lands while the query is down; the failed batch must not change.
    upload(s3, generated, "crash", ["part-00005.jsonl"])
    s3.copy_object(Bucket=BUCKET, Key="crash/a-early.jsonl", CopySource=f"{BUCKET}/crash/part-00005.jsonl")
    again = run_stream(spark, uri, checkpoint, maxFilesPerBatch=2, exclude=json.dumps(names(2)))
    assert [(b["batch"], b["files"]) for b in again] == [
        (1, ["part-00002.jsonl", "part-00003.jsonl"]), (2, ["a-early.jsonl", "part-00005.jsonl"])]


def test_excluded_files_are_never_read(spark, s3, generated, tmp_path):
    uri = upload(s3, generated, "exclude")
    excluded = ["part-00001.jsonl", "part-00004.jsonl"]
    seen = run_stream(spark, uri, str(tmp_path / "checkpoint"), maxFilesPerBatch=3, exclude=json.dumps(excluded))
    read = [f for b in seen for f in b["files"]]
    assert read == [n for n in names(6) if n not in excluded]


GOOD = ('{"partition": 0, "offset": 0, "arrival_time": "2024-01-01T00:00:01Z", '
        '"event_time": "2024-01-01T00:00:00Z", "key": "a", "value": 1.5}')
BROKEN = '{"partition": 0, "offset": 1, "arrival_time": "2024-01-01T00:00:02Z", "event_ti'


def test_a_broken_json_line_comes_through_as_a_line_and_becomes_malformed(spark, s3, tmp_path):
    put(s3, "broken", "part-00000.jsonl", "\n".join([GOOD, "", BROKEN]) + "\n")
    uri = f"s3://{BUCKET}/broken"
    lines = run_stream(spark, uri, str(tmp_path / "lines"))
    normalized = run_stream(spark, uri, str(tmp_path / "normalized"),
                            transform=lambda df: journal.normalize(journal.raw_from_lines(df)))
    assert [(r["source_line"], r["line"]) for r in lines[0]["rows"]] == [(1, GOOD), (3, BROKEN)]
    by_line = {r["source_line"]: r for r in normalized[0]["rows"]}
    assert (by_line[1]["kind"], by_line[1]["payload"]) == ("event", GOOD)
    assert (by_line[3]["kind"], by_line[3]["payload"], by_line[3]["source"]) == (
        "malformed", BROKEN, "part-00000.jsonl")


def test_parquet_rows_come_through_as_json_lines_that_normalize_like_the_jsonl_rows(spark, tmp_path):
    common = dict(partitions=2, keys=20, files=2, seed=0)
    generate(str(tmp_path / "jsonl"), StreamSpec(200, fmt="jsonl", **common))
    generate(str(tmp_path / "parquet"), StreamSpec(200, fmt="parquet", **common))
    compared = ("partition", "offset", "kind", "arrival_time", "event_time", "key", "value", "source_line")

    def rows(folder):
        seen = run_stream(spark, folder, str(tmp_path / f"ck-{os.path.basename(folder)}"),
                          transform=lambda df: journal.normalize(journal.raw_from_lines(df)))
        return sorted(tuple(r[c] for c in compared) for b in seen for r in b["rows"])

    assert rows(str(tmp_path / "parquet")) == rows(str(tmp_path / "jsonl"))


def test_an_unknown_bucket_is_refused_naming_it_and_creates_no_lake(spark, s3, tmp_path):
    with pytest.raises(FileNotFoundError, match="landing bucket 'no-such-retrace-bucket'"):
        ingest(spark, "s3://no-such-retrace-bucket/landing", str(tmp_path / "lake"))
    assert not (tmp_path / "lake").exists()


def test_a_corrupt_parquet_object_fails_ingest_in_one_line_naming_its_key(spark, s3, tmp_path, capsys, monkeypatch):
    from replay.cli import main as cli

    monkeypatch.setenv("RETRACE_LOG_DIR", str(tmp_path / "logs"))
    put(s3, "corrupt", "part-00000.jsonl", GOOD + "\n")
    put(s3, "corrupt", "day=1/part-00001.parquet", "PAR1 this is no Parquet file PAR1")
    code = cli.main(["ingest", "--landing", f"s3://{BUCKET}/corrupt", "--lake", str(tmp_path / "lake")])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("replay ingest:")]
    assert code == 2 and len(lines) == 1, lines
    assert f"s3://{BUCKET}/corrupt/day=1/part-00001.parquet" in lines[0], lines[0]


@pytest.mark.parametrize("uri", ["gs://bucket/landing", "s3://Bad_Bucket/landing", "s3://"])
def test_bad_landing_uri_error_names_the_value(spark, lake, uri):
    with pytest.raises(ValueError, match=uri.replace("/", ".")):
        ingest(spark, uri, lake)


def test_a_bad_batch_bound_option_fails_the_query_naming_it(spark, tmp_path, generated):
    with pytest.raises(Exception, match="maxFilesPerBatch: 'none'"):
        run_stream(spark, generated, str(tmp_path / "checkpoint"), maxFilesPerBatch="none")


def test_the_live_job_streams_from_s3_into_outputs_equal_to_a_replay(spark, s3, generated, tmp_path):
    from replay.model.policy import Policy
    from replay.ops.hashing import target_hash
    from replay.ops.run import run
    from tests.support.live import stream_files

    uri = upload(s3, generated, "live")
    lake = str(tmp_path / "lake")
    policy = Policy.from_dict({"late_arrival_tolerance": "5s", "window": {"kind": "tumbling", "size": "10s"}})
    summary = stream_files(spark, uri, lake, policy, max_files_per_batch=4, until_idle=True, clock="simulated",
                          partitions=2)
    assert summary.batches == 2
    sources = {r["source"] for r in journal.read(spark, lake).select("source").distinct().collect()} - {None}
    assert sources == set(sorted(os.listdir(generated)))
    run(spark, lake, Job.spec(policy), target="replayed")
    assert target_hash(spark, target_dir(lake, "production")) == target_hash(spark, target_dir(lake, "replayed"))


ODD = "sp ace+plus(paren)[br]{cu}%25 #hash é*?"


def test_s3_keys_may_hold_any_character(spark, s3, tmp_path):
    prefix = f"odd {ODD}"
    bodies = {f"part[4] {ODD}.jsonl": [GOOD, GOOD.replace('"offset": 0', '"offset": 1')],
              f"sub {ODD}/part+(1).jsonl": [GOOD.replace('"offset": 0', '"offset": 2')]}
    for name, lines in bodies.items():
        put(s3, prefix, name, "\ufeff" + "\n".join(lines) + "\n")  # with a byte order mark, too
    lake = str(tmp_path / "lake")
    r = ingest(spark, f"s3://{BUCKET}/{prefix}", lake)
    assert (r.rows, r.events, r.malformed) == (3, 3, 0)
    journaled = sorted((row["source"], row["source_line"]) for row in journal.read(spark, lake).collect())
    assert journaled == sorted((n, i + 1) for n, lines in bodies.items() for i in range(len(lines)))
    assert ingest(spark, f"s3://{BUCKET}/{prefix}", lake).files == []


def test_the_live_job_reads_a_landing_folder_whose_names_hold_any_character(spark, tmp_path):
    from replay.model.policy import Policy
    from replay.ops.verify import verify
    from tests.support.live import stream_files

    folder = tmp_path / f"land {ODD}"
    (folder / f"sub {ODD}").mkdir(parents=True)
    (folder / f"part[4] {ODD}.jsonl").write_text(GOOD + "\n")
    (folder / f"sub {ODD}" / "part+(1).jsonl").write_text("\ufeff" + GOOD.replace('"offset": 0', '"offset": 1') + "\n")
    lake = str(tmp_path / "lake")
    policy = Policy.from_dict({"late_arrival_tolerance": "5s", "window": {"kind": "tumbling", "size": "10s"}})
    stream_files(spark, str(folder), lake, policy, until_idle=True, clock="simulated", partitions=2)
    rows = journal.read(spark, lake).where("kind = 'event'").collect()
    assert sorted((r["source"], r["source_line"]) for r in rows) == sorted(
        [(f"part[4] {ODD}.jsonl", 1), (f"sub {ODD}/part+(1).jsonl", 1)])
    assert verify(spark, lake, Job.spec(policy)).identical  # the live job's outputs equal a replay of its journal
