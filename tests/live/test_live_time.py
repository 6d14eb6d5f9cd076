"""Live time as the spec defines it (section 4): heartbeats move time on an idle source, a partition that never
had data gets clock rows, and every batch records its processing lag and diagnostics; the replay of the
journal needs no clock to give the same outputs."""
from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timedelta, timezone

from pyspark.sql import functions as F

from jobs.live.diagnostics import alert_on
from replay.io import journal
from replay.io.alerts import Webhook
from replay.io.store import default_store
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.hashing import target_hash
from replay.ops.run import run
from replay.ops import outputs
from tests.support import target_dir
from tests.support.live import stream_files
from tests.support.receivers import HttpReceiver


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _land(folder, name: str, rows: list[dict]) -> None:
    """A landing file appears whole (written aside, then renamed), as the landing source expects."""
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}")
    with open(tmp, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    os.rename(tmp, os.path.join(folder, name))


def _events(partition: int, first_offset: int, times: list[datetime]) -> list[dict]:
    return [{"partition": partition, "offset": first_offset + i, "arrival_time": _iso(t), "event_time": _iso(t),
             "key": "k", "value": 1.0} for i, t in enumerate(times)]


def _table(spark, lake, name, target="production"):
    return outputs.read(spark, target_dir(lake, target), name)


def _emitted(spark, lake) -> int:
    path = target_dir(lake, "production").table("windows")
    if not default_store().exists(path):
        return 0
    return _table(spark, lake, "windows").where("emitted_at IS NOT NULL").count()


def test_an_idle_source_emits_its_window_by_heartbeat_and_the_replay_gives_the_same_outputs(spark, tmp_path):
    """One file, then nothing: heartbeats journal clock rows whose estimated arrivals pass the idle timeout."""
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    _land(landing, "part-00000.jsonl", _events(0, 0, [start + timedelta(seconds=s) for s in range(4)]))
    policy = Policy.from_dict({"late_arrival_tolerance": None, "out_of_order_tolerance": "0s",
                               "window": {"kind": "tumbling", "size": "5s"}, "idle_timeout": "1s"})
    seen: list[tuple[str, int]] = []
    stream_files(spark, landing, lake, policy, clock="system", partitions=1, trigger_seconds=0.5,
                 heartbeat_seconds=1.0, max_batches=3,
                 on_batch=lambda r: seen.append((r.trigger, _emitted(spark, lake))))
    first = [trigger for trigger, _ in seen].index("data")
    assert seen[first][1] == 0, seen  # the file alone leaves its window open
    assert any(trigger == "heartbeat" and emitted == 1 for trigger, emitted in seen[first:]), seen
    clocks = journal.read(spark, lake).where("kind = 'clock'")
    assert clocks.count() >= 1 and clocks.where(F.col("source").isNotNull()).count() == 0
    run(spark, lake, Job.spec(policy), target="replayed")
    assert target_hash(spark, target_dir(lake, "production")) == target_hash(spark, target_dir(lake, "replayed"))


def test_a_declared_partition_that_never_had_data_gets_clock_rows_and_output_goes_on(spark, tmp_path):
    """Partitions 0 and 1 send, partition 2 never does: its clock rows (processing time - 5 s) define the
    merged watermark, so windows are emitted; the replay of the journal is identical."""
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    for f in range(2):
        times = [start + timedelta(seconds=s) for s in range(f * 10, f * 10 + 10)]
        _land(landing, f"part-{f:05d}.jsonl", _events(0, f * 10, times) + _events(1, f * 10, times))
    policy = Policy.from_dict({"late_arrival_tolerance": "1s", "window": {"kind": "tumbling", "size": "10s"}})
    stream_files(spark, landing, lake, policy, clock="simulated", partitions=3, until_idle=True, max_files_per_batch=1)
    never = journal.read(spark, lake).where("partition = 2")
    assert never.where("kind = 'event'").count() == 0
    assert never.where("kind = 'clock'").count() == 2  # one per batch
    assert _emitted(spark, lake) >= 1
    run(spark, lake, Job.spec(policy), target="replayed")
    assert target_hash(spark, target_dir(lake, "production")) == target_hash(spark, target_dir(lake, "replayed"))


def test_a_job_falling_behind_records_growing_lag_and_alerts_once_for_a_silent_partition(spark, tmp_path):
    """Files land faster than batches of one file are committed: the lag table shows the backlog and the
    processing-time delay growing; partition 2 stops after the first file and is alerted once, by webhook."""
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    receiver = HttpReceiver()
    sink = Webhook(url=receiver.url)  # alerts without Dagster, as `replay stream` delivers them
    stop = threading.Event()

    def write_files():  # a file every 0.5 s until the job stops: faster than it commits batches of one file
        f = 0
        while not stop.is_set():
            now = datetime.now(timezone.utc)
            times = [now - timedelta(milliseconds=50 * (9 - i)) for i in range(10)]
            rows = _events(0, f * 10, times) + _events(1, f * 10, times) + (_events(2, 0, times) if f == 0 else [])
            _land(landing, f"part-{f:05d}.jsonl", rows)
            f += 1
            stop.wait(0.5)

    writer = threading.Thread(target=write_files)
    writer.start()
    try:
        summary = stream_files(spark, landing, lake, Policy.from_dict({"window": {"kind": "tumbling", "size": "2s"}}),
                               clock="system", partitions=3, trigger_seconds=0.5, max_files_per_batch=1,
                               max_batches=4, silent_after=3.0, on_diagnostic=alert_on([sink]))
    finally:
        stop.set()
        writer.join()
        posts = receiver.drain()
        receiver.close()
    lag = _table(spark, lake, "lag").collect()
    batches = sorted({r["batch"] for r in lag})
    assert len(lag) == 3 * len(batches) == 3 * summary.batches
    assert {(r["batch"], r["partition"]) for r in lag} == {(b, p) for b in batches for p in range(3)}
    backlog = [r.backlog for r in summary.reports]
    delay = [r.processing_delay_s for r in summary.reports if r.processing_delay_s is not None]
    assert max(backlog) > backlog[0] and delay[-1] > delay[0], (backlog, delay)
    silent = [p for p in posts if "not progressing" in p["json"]["text"]]
    assert len(silent) == 1 and "partition 2" in silent[0]["json"]["text"], [p["json"]["text"] for p in posts]
    diagnosed = _table(spark, lake, "diagnostics").where("kind = 'partition_not_progressing'")
    assert diagnosed.where("started").count() == 1
    assert {r["partition"] for r in diagnosed.collect()} == {2}


def test_a_live_start_on_the_system_clock_over_waiting_files_journals_no_clock_row_before_its_first_data_batch(
        spark, tmp_path, capfd):
    """Historical files already wait in the landing when the live job starts on the system clock: no heartbeat
    runs before the first data batch (its clock rows, at now - 5 s, would put every watermark past the data), the
    outputs equal a replay of the journal, and one warning names the partition whose arrivals lag the clock."""
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    for f in range(4):
        times = [start + timedelta(seconds=s) for s in range(f * 10, f * 10 + 10)]
        _land(landing, f"part-{f:05d}.jsonl", _events(0, f * 10, times) + _events(1, f * 10, times))
    policy = Policy.from_dict({"late_arrival_tolerance": "1s", "window": {"kind": "tumbling", "size": "10s"}})
    stream_files(spark, landing, lake, policy, clock="system", partitions=2, trigger_seconds=0.5,
                 heartbeat_seconds=0.2, max_files_per_batch=2, max_batches=3)
    rows = journal.read(spark, lake).select("seq", "kind").collect()
    first_event = min(r["seq"] for r in rows if r["kind"] == "event")
    assert [r["seq"] for r in rows if r["kind"] == "clock" and r["seq"] < first_event] == []
    assert _table(spark, lake, "decisions").where("action = 'adjusted'").count() == 0  # in order, none late
    err = capfd.readouterr().err
    behind = [line for line in err.splitlines() if "behind the system clock" in line]
    assert len(behind) == 1 and "partition 0" in behind[0], err
    run(spark, lake, Job.spec(policy), target="replayed")
    assert target_hash(spark, target_dir(lake)) == target_hash(spark, target_dir(lake, "replayed"))
