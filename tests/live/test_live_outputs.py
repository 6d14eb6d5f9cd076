"""The live job's micro-batches (spec: outputs are a pure function of the journal): whatever the batch
sizes, its outputs equal a replay of its own journal; a replay from a checkpoint gives the same suffix."""
from __future__ import annotations

import gc
import os

import pytest
from py4j.java_gateway import JavaObject
from pyspark.sql import functions as F

from jobs.live.files import FileStream
from jobs.live.options import LiveOptions
from replay.engine import pipeline
from replay.io import journal, manifest
from replay.io.lake import Lake
from replay.io.landing import Landing, read_lines
from replay.io.store import default_store
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.generate import StreamSpec, generate
from replay.ops.hashing import target_hash
from replay.ops.run import run
from tests.support import target_dir
from tests.support.live import file_stream, stream_files

POLICY = Policy.from_dict({
    "early_arrival_tolerance": "10s", "late_arrival_tolerance": "5s", "out_of_order_tolerance": "1s",
    "window": {"kind": "tumbling", "size": "10s"}, "allowed_lateness": "2s",
})


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("landing"))
    generate(out, StreamSpec(3000, partitions=4, keys=20, files=14, seed=7, rate=20.0))
    return out


SHORT_FILES = 6


@pytest.fixture(scope="module")
def short_landing(tmp_path_factory):
    """Six landing files of ~215 events: every batch size from one file to all of them."""
    out = str(tmp_path_factory.mktemp("short-landing"))
    generate(out, StreamSpec(1290, partitions=4, keys=20, files=SHORT_FILES, seed=7, rate=20.0))
    return out


@pytest.fixture(scope="module")
def live_lake(spark, landing, tmp_path_factory):
    """The 14-file landing through the live job in micro-batches of 3 files (5 batches, 5 checkpoints)."""
    lake = str(tmp_path_factory.mktemp("live") / "lake")
    run_live(spark, landing, lake, 3)
    return lake


def lines_of(spark, landing: str, files: list[str]):
    """A micro-batch as the landing source delivers it: (source, source_line, line) per line."""
    return read_lines(spark, landing, files)


def run_live(spark, landing, lake, per_batch: int, policy=POLICY, clock="simulated") -> FileStream:
    job = file_stream(spark, lake, policy, clock=clock, partitions=4)
    files = journal.landing_files(landing)
    for i in range(0, len(files), per_batch):
        job.process(lines_of(spark, landing, files[i:i + per_batch]))
    job.flush()  # the metrics, lag and diagnostics, as a stream that stops writes them
    return job


@pytest.mark.parametrize("per_batch", [2, SHORT_FILES])
def test_live_outputs_equal_a_replay_of_the_live_journal(spark, short_landing, tmp_path, per_batch):
    """Through Structured Streaming, micro-batches of 2 and all 6 landing files (3 batches and 1)."""
    lake = str(tmp_path / "lake")
    summary = stream_files(spark, short_landing, lake, POLICY, max_files_per_batch=per_batch, until_idle=True,
                         clock="simulated", partitions=4)
    assert summary.batches == -(-SHORT_FILES // per_batch)
    run(spark, lake, Job.spec(POLICY), target="replayed")
    assert target_hash(spark, target_dir(lake, "production")) == target_hash(spark, target_dir(lake, "replayed"))
    # the late input events diagnostics count every late decision once, whatever the batch sizes
    store = default_store()
    late = store.read(spark, target_dir(lake, "replayed").table("decisions")).where(
        F.array_contains("reasons", "late")).count()
    diagnosed = store.read(spark, target_dir(lake, "production").table("diagnostics")).where(
        "kind = 'late_input_events'").agg(F.sum("count")).first()[0]
    assert late > 0 and diagnosed == late


def test_every_landing_row_is_journaled_exactly_once(spark, landing, live_lake):
    rows = journal.read(spark, live_lake).where(F.col("source").isNotNull())
    lines = lines_of(spark, landing, journal.landing_files(landing))
    assert rows.count() == lines.count() == rows.select("source", "source_line").distinct().count()


def _java_objects() -> int:
    return sum(isinstance(o, JavaObject) for o in gc.get_objects())


def test_each_micro_batch_frees_its_java_objects(spark, short_landing, tmp_path):
    """py4j's JavaObjects sit in reference cycles, so only Python's full collection frees them (and the JVM
    objects behind them: plans, broadcasts); the job runs one after every batch, so none pile up in between."""
    gc.collect()
    gc.disable()  # only the job's own collections run
    try:
        run_live(spark, short_landing, str(tmp_path / "lake"), 2)
        left = _java_objects()
        gc.collect()
        left -= _java_objects()
    finally:
        gc.enable()
    # the last batch's input DataFrame (the test's) is all that may be left
    assert left <= 2, f"{left} JavaObjects were garbage the job had not collected"


def _rows_from(spark, lake, target, lo):
    store = default_store()
    out = {}
    for name, column in (("decisions", "seq"), ("dead_letters", "seq"), ("windows", "emitted_at")):
        df = store.read(spark, target_dir(lake, target).table(name))
        keep = (F.col(column) >= lo) | F.col(column).isNull() if name == "windows" else F.col(column) >= lo
        out[name] = sorted(map(str, df.where(keep).collect()))
    return out


@pytest.fixture(scope="module")
def whole(spark, live_lake):
    """`replay run` of the live journal into target `whole`, which the suffix and metrics tests compare to."""
    run(spark, live_lake, Job.spec(POLICY), target="whole")
    return live_lake


def test_a_replay_from_a_mid_point_checkpoint_gives_the_suffix_of_the_outputs(spark, whole):
    lake = whole
    rows = journal.read(spark, lake)
    middle = rows.agg(F.percentile_approx(F.unix_micros("arrival_time"), 0.5)).first()[0]
    start = F.timestamp_micros(F.lit(middle))
    start_iso = spark.range(1).select(F.date_format(start, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'")).first()[0]
    s = run(spark, lake, Job.spec(POLICY), target="suffix", start=start_iso, checkpoints_of="production")
    assert s.checkpoint is not None and s.checkpoint > 0
    assert _rows_from(spark, lake, "suffix", s.seq_from) == _rows_from(spark, lake, "whole", s.seq_from)


def test_live_metrics_merged_per_batch_equal_a_replays_bit_for_bit(spark, whole):
    """Each batch merges its own rows' metrics into the table; the table ends equal to a replay's, averages too."""
    live_lake, store = whole, default_store()

    def rows(target):
        df = store.read(spark, target_dir(live_lake, target).table("metrics"))
        return sorted(tuple(r) for r in df.collect())

    assert rows("production") == rows("whole")
    assert sum(r[2] for r in rows("production")) == 3000  # every event counted once (column `events`)


def test_flushes_merge_their_batches_counts_and_after_a_kill_decide_the_rows_again(spark, landing, tmp_path, capfd):
    """A flush every two batches merges what the batches' decide runs counted: no row is decided twice. A job killed
    before a flush leaves rows no later run has counts of: the next run's first flush decides those again. Either way
    the metrics and the watermark timeline equal a replay's, bit for bit."""
    lake, files, store = str(tmp_path / "lake"), journal.landing_files(landing), default_store()
    killed = file_stream(spark, lake, POLICY, partitions=4, flush_every=2)
    for i in (0, 3, 6):  # flushed after the second batch; the third's counts die with the job
        killed.process(lines_of(spark, landing, files[i:i + 3]))
    if killed.flushing is not None:
        killed.flushing.result()  # the flush after the second batch, written beside the third
    before_kill = capfd.readouterr().err
    resumed = file_stream(spark, lake, POLICY, partitions=4, flush_every=2)
    for i in (9, 12):
        resumed.process(lines_of(spark, landing, files[i:i + 3]))
    resumed.flush()
    after_restart = capfd.readouterr().err
    assert "flush: metrics" in before_kill and "decided again" not in before_kill
    assert "rows decided again for default" in after_restart
    run(spark, lake, Job.spec(POLICY), target="replayed")

    def rows(target, table):
        return sorted(tuple(r) for r in store.read(spark, target_dir(lake, target).table(table)).collect())

    for table in ("metrics", "watermarks"):
        assert rows("production", table) == rows("replayed", table), table


def test_a_batch_too_large_to_hold_its_counts_is_decided_again_at_the_flush(spark, short_landing, tmp_path, capfd,
                                                                           monkeypatch):
    """A catch-up batch's timeline steps could fill the driver: above `PARTIALS_AT_MOST` rows a batch keeps no counts,
    and the flush decides its rows again, to the same metrics."""
    monkeypatch.setattr(pipeline, "PARTIALS_AT_MOST", 500)
    lake, files = str(tmp_path / "lake"), journal.landing_files(short_landing)
    live = file_stream(spark, lake, POLICY, partitions=4)
    live.process(lines_of(spark, short_landing, files[:2]))  # about 430 rows: held
    live.process(lines_of(spark, short_landing, files[2:]))  # about 860: decided again
    live.flush()
    assert "rows decided again for default" in capfd.readouterr().err
    run(spark, lake, Job.spec(POLICY), target="replayed")
    store = default_store()

    def rows(target):
        return sorted(tuple(r) for r in store.read(spark, target_dir(lake, target).table("metrics")).collect())

    assert rows("production") == rows("replayed")


def test_a_batch_commits_its_outputs_and_checkpoint_and_leaves_metrics_and_lag_to_the_flush(live_lake):
    """Five batches, flushed once as they end: a Delta commit per batch to each output and to the checkpoints (the
    open windows with them, not in a table of their own), one to the metrics (derivable) and the lag (observations),
    not one per batch (issue 46)."""
    tables = ("decisions", "windows", "checkpoints", "metrics", "lag")
    assert {t: _commits(target_dir(live_lake).table(t)) for t in tables} == {
        "decisions": 5, "windows": 5, "checkpoints": 5, "metrics": 1, "lag": 1}
    assert not os.path.exists(target_dir(live_lake).table("checkpoint_windows"))


def test_a_batch_leaves_its_landing_files_manifest_rows_to_the_flush(spark, short_landing, tmp_path):
    """The manifest is bookkeeping for the change check, not an output: no batch commits it; the flush records every
    file the batches journaled, in one commit."""
    lake, files = str(tmp_path / "lake"), journal.landing_files(short_landing)
    live = FileStream(spark, lake, [Job.spec(POLICY)], LiveOptions(clock="simulated", partitions=4),
                      landing=Landing.of(short_landing))
    live.process(lines_of(spark, short_landing, files[:2]))
    live.process(lines_of(spark, short_landing, files[2:4]))
    assert not default_store().exists(Lake(lake).journal_files)
    live.flush()
    recorded = manifest.load(spark, lake)
    assert {n: r.size for n, r in recorded.items()} == {
        n: os.path.getsize(os.path.join(short_landing, n)) for n in files[:4]}
    assert _commits(Lake(lake).journal_files) == 1


def _commits(table: str) -> int:
    """The Delta commits a table's log holds."""
    log = os.path.join(table, "_delta_log")
    return sum(1 for n in os.listdir(log) if n.endswith(".json") and n[:-5].isdigit())


def _write_jsonl(path, rows):
    import json

    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def test_a_silent_partition_does_not_stall_output_and_the_replay_reproduces_it(spark, tmp_path):
    """Partition 1 stops sending after 10 s; its clock rows (estimated arrivals) let the merged watermark,
    and so the windows, go on; ingesting the same files without clock rows stalls until the flush."""
    landing = tmp_path / "landing"
    landing.mkdir()
    second = lambda s: f"2024-01-01T00:00:{s:02d}Z"  # noqa: E731
    for f in range(4):
        rows = []
        for s in range(f * 10, f * 10 + 10):
            for p in ((0, 1) if s < 10 else (0,)):
                rows.append({"partition": p, "offset": s, "arrival_time": second(s), "event_time": second(s),
                             "key": "k", "value": 1.0})
        _write_jsonl(landing / f"part-{f:05d}.jsonl", rows)
    policy = Policy.from_dict({"late_arrival_tolerance": "1s", "window": {"kind": "tumbling", "size": "10s"}})
    live = str(tmp_path / "live")
    job = file_stream(spark, live, policy, partitions=2)
    for f in journal.landing_files(str(landing)):
        job.process(lines_of(spark, str(landing), [f]))
    job.flush()  # the metrics, as a stream that stops writes them
    store = default_store()
    clocks = journal.read(spark, live).where("kind = 'clock'")
    assert clocks.where("partition = 1").count() == 3
    emitted = store.read(spark, target_dir(live, "production").table("windows")).where("emitted_at IS NOT NULL")
    assert emitted.count() >= 2
    run(spark, live, Job.spec(policy), target="replayed")
    assert target_hash(spark, target_dir(live, "production")) == target_hash(spark, target_dir(live, "replayed"))

    batch = str(tmp_path / "batch")
    journal.ingest(spark, str(landing), batch)
    run(spark, batch, Job.spec(policy))
    stalled = store.read(spark, target_dir(batch, "production").table("windows")).where("emitted_at IS NOT NULL")
    assert stalled.count() == 0


SESSIONS = Policy.from_dict({
    "early_arrival_tolerance": "10s", "late_arrival_tolerance": "5s", "late_arrival_action": "accept",
    "out_of_order_action": "accept", "window": {"kind": "session", "gap": "2s"}, "allowed_lateness": "1s",
})


@pytest.mark.parametrize("per_batch", [1, 4])
def test_live_session_windows_equal_a_replay_of_the_live_journal(spark, short_landing, tmp_path, per_batch):
    """Sessions open across micro-batches (of 1 and of 4 landing files) continue from the checkpoint exactly, and
    late events touching sessions a batch closed are `window_closed` with that session's start, as in a replay."""
    lake = str(tmp_path / "lake")
    run_live(spark, short_landing, lake, per_batch, policy=SESSIONS)
    run(spark, lake, Job.spec(SESSIONS), target="replayed")
    store = default_store()
    closed = store.read(spark, target_dir(lake, "replayed").table("dead_letters")).where("reason = 'window_closed'")
    assert closed.count() > 0
    assert target_hash(spark, target_dir(lake, "production")) == target_hash(spark, target_dir(lake, "replayed"))
