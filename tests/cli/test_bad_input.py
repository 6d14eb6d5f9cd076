"""Landing input a new user really has: odd paths, a byte order mark, Parquet files that disagree on a field's
type, empty files. Each is journaled line for line (every landing line exactly once) and replays like any
other journal; what cannot be read says which file."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from replay.io import journal
from replay.io.journal import ingest
from replay.io.lake import Lake
from replay.io.store import default_store
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.run import run
from replay.ops.verify import verify
from replay.ops import outputs
from tests.support import ROOT, target_dir

POLICY = Policy.from_yaml(os.path.join(ROOT, "infra", "policies", "production.yaml"))
# every character the issue named, plus the rest of Hadoop's glob characters
ODD = "sp ace+plus(paren)[br]{cu}%25 #hash é*?"


def event(offset: int, partition: int = 0, value: float | str = 1.0, second: int = 0) -> dict:
    t = f"2024-01-01T00:00:{second:02d}Z"
    return {"partition": partition, "offset": offset, "arrival_time": t, "event_time": t, "key": "k",
            "value": value}


def write_jsonl(folder: str, name: str, rows: list[dict], prefix: bytes = b"") -> list[str]:
    path = os.path.join(folder, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lines = [json.dumps(r) for r in rows]
    with open(path, "wb") as f:
        f.write(prefix + "\n".join(lines).encode() + b"\n")
    return lines


def journaled_lines(spark, lake: str) -> list[tuple[str, int]]:
    rows = journal.read(spark, lake).where(F.col("kind") != journal.EMPTY)
    return sorted((r["source"], r["source_line"]) for r in rows.select("source", "source_line").collect())


def landing_lines(landing: str) -> list[tuple[str, int]]:
    """(name relative to the landing, 1-based line) of every non-blank JSON line and every Parquet row."""
    out = []
    for root, _, names in os.walk(landing):
        for n in names:
            path = os.path.join(root, n)
            rel = os.path.relpath(path, landing)
            if n.endswith(".parquet"):
                out += [(rel, i + 1) for i in range(pq.read_metadata(path).num_rows if os.path.getsize(path) else 0)]
            elif n.endswith(".jsonl"):
                text = open(path, encoding="utf-8-sig").read().split("\n")
                out += [(rel, i + 1) for i, line in enumerate(text) if line.strip()]
    return sorted(out)


def test_landing_folder_and_file_names_may_hold_any_character(spark, tmp_path):
    landing, lake = str(tmp_path / f"land {ODD}"), str(tmp_path / "lake")
    write_jsonl(landing, f"part[4] {ODD}.jsonl", [event(0), event(1, second=1)])
    write_jsonl(landing, f"sub {ODD}/part+(1).jsonl", [event(2, second=2)])
    write_jsonl(landing, "part-0.jsonl", [event(3, second=3)])
    r = ingest(spark, landing, lake)
    assert (r.rows, r.events, r.malformed) == (4, 4, 0)
    assert journaled_lines(spark, lake) == landing_lines(landing)
    again = ingest(spark, landing, lake)
    assert (again.files, again.skipped) == ([], 3)
    run(spark, lake, Job.spec(POLICY))
    assert verify(spark, lake, Job.spec(POLICY)).identical  # the outputs equal a replay of the journal


def test_a_file_name_with_a_colon_is_journaled_like_any_other(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    write_jsonl(landing, "2024-01-01T00:00:00.jsonl", [event(0), event(1, second=1)])
    write_jsonl(landing, "plain.jsonl", [event(2, second=2)])
    r = ingest(spark, landing, lake)
    assert (r.rows, r.events, r.malformed) == (3, 3, 0)
    assert journaled_lines(spark, lake) == landing_lines(landing)


def test_a_lake_path_may_hold_any_character(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / f"la ke {ODD}")
    write_jsonl(landing, "part-0.jsonl", [event(0), event(1, second=1)])
    assert ingest(spark, landing, lake).rows == 2
    assert journaled_lines(spark, lake) == landing_lines(landing)
    run(spark, lake, Job.spec(POLICY))
    assert verify(spark, lake, Job.spec(POLICY)).identical
    assert ingest(spark, landing, lake).files == []


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_line(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    write_jsonl(landing, "bom.jsonl", [event(0), event(1)], prefix="\ufeff".encode())
    r = ingest(spark, landing, lake)
    assert (r.rows, r.events, r.malformed) == (2, 2, 0)
    assert journaled_lines(spark, lake) == [("bom.jsonl", 1), ("bom.jsonl", 2)]


def test_parquet_files_typing_a_field_differently_are_each_read_as_they_are(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    os.makedirs(landing)
    pq.write_table(pa.Table.from_pylist([event(0, value="2.5"), event(1, value="not a number")]),
                   os.path.join(landing, "a-strings.parquet"))
    pq.write_table(pa.Table.from_pylist([event(2, value=4.0)]), os.path.join(landing, "b-doubles.parquet"))
    r = ingest(spark, landing, lake)
    assert (r.rows, r.events, r.malformed) == (3, 2, 1)
    assert journaled_lines(spark, lake) == landing_lines(landing)
    rows = {r["offset"] if r["kind"] == "event" else "bad": r
            for r in journal.read(spark, lake).collect()}
    assert (rows[0]["value"], rows[2]["value"]) == (2.5, 4.0)
    bad = rows["bad"]
    assert (bad["source"], bad["source_line"]) == ("a-strings.parquet", 2)
    assert "not a number" in bad["payload"]


def test_an_empty_landing_file_is_journaled_once(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    write_jsonl(landing, "a.jsonl", [event(0)])
    open(os.path.join(landing, "b-empty.jsonl"), "wb").close()
    open(os.path.join(landing, "c-empty.parquet"), "wb").close()
    first = ingest(spark, landing, lake)
    assert (first.files, first.rows) == (["a.jsonl", "b-empty.jsonl", "c-empty.parquet"], 1)
    version = first.version
    again = ingest(spark, landing, lake)
    assert (again.files, again.skipped, again.version) == ([], 3, None)
    assert journaled_lines(spark, lake) == [("a.jsonl", 1)]
    assert default_store().read(spark, Lake(lake).journal).count() == 3  # a.jsonl's line, 2 empty rows
    run(spark, lake, Job.spec(POLICY))
    assert verify(spark, lake, Job.spec(POLICY)).identical
    assert version == 0


def test_a_landing_file_spark_cannot_read_fails_the_command_in_one_line_naming_it(spark, tmp_path, capsys):
    from replay.cli import main as cli

    landing, lake = str(tmp_path / "land ing"), str(tmp_path / "lake")
    os.makedirs(landing)
    path = os.path.join(landing, "torn (1).parquet")
    pq.write_table(pa.Table.from_pylist([event(i) for i in range(200)]), path, compression="none")
    with open(path, "r+b") as f:  # the footer is intact, the first data pages are not
        f.seek(4)
        f.write(b"\xff" * 64)
    code = cli.main(["ingest", "--landing", landing, "--lake", lake])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("replay ingest:")]
    assert code == 2
    assert len(err) == 1 and path in err[0] and "full trace in" in err[0], err
    log = err[0].rsplit("full trace in ", 1)[1]
    assert "Traceback" in open(log).read()
    assert not default_store().exists(Lake(lake).journal)  # nothing half-journaled


def test_a_landing_file_that_is_not_parquet_is_refused_naming_it(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    write_jsonl(landing, "a.jsonl", [event(0)])
    with open(os.path.join(landing, "b.parquet"), "wb") as f:
        f.write(b"not parquet at all")
    with pytest.raises(ValueError) as info:
        ingest(spark, landing, lake)
    message = str(info.value)
    assert os.path.join(landing, "b.parquet") in message and "\n" not in message, message


def test_dead_letters_keep_the_raw_text_and_the_landing_file_and_line(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    no_time = {k: v for k, v in event(2, second=2).items() if k != "event_time"}
    lines = write_jsonl(landing, "a (1).jsonl", [event(0), event(1, second=1), no_time])
    with open(os.path.join(landing, "a (1).jsonl"), "a") as f:
        f.write('{"partition": 0, broken\n')
    ingest(spark, landing, lake)
    run(spark, lake, Job.spec(POLICY))
    dead = {r["reason"]: r for r in default_store().read(
        spark, target_dir(lake, "production").table("dead_letters")).collect()}
    assert (dead["malformed"]["source"], dead["malformed"]["source_line"]) == ("a (1).jsonl", 4)
    assert dead["malformed"]["payload"] == '{"partition": 0, broken'
    quarantined = next(r for reason, r in dead.items() if reason != "malformed")
    assert (quarantined["source"], quarantined["source_line"], quarantined["payload"]) == ("a (1).jsonl", 3, lines[2])


def test_malformed_lines_filling_a_whole_chunk_replay_like_any_other_journal(spark, tmp_path, monkeypatch):
    """A chunk of the watermark pass with no event or clock row (only lines that could not be placed) is a task
    without rows: the replay goes on past it."""
    from replay.engine import watermarks

    monkeypatch.setattr(watermarks, "CHUNK_ROWS", 4)  # seq 4-7, the second chunk, are all malformed
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    write_jsonl(landing, "a.jsonl", [event(0), event(1, second=1)])
    with open(os.path.join(landing, "a.jsonl"), "a") as f:
        f.write("".join(f'{{"partition": 0, broken {i}\n' for i in range(6)))
        f.write("\n".join(json.dumps(event(o, second=o)) for o in (2, 3)) + "\n")
    ingest(spark, landing, lake)
    run(spark, lake, Job.spec(POLICY))
    read = lambda name: outputs.read(spark, target_dir(lake, "production"), name)  # noqa: E731
    assert sorted(r["seq"] for r in read("decisions").collect()) == [0, 1, 8, 9]
    assert sorted(r["seq"] for r in read("dead_letters").where(F.col("reason") == "malformed").collect()) == [
        2, 3, 4, 5, 6, 7]
