"""What the live job says about its batches reads right: a partition that never had an event is counted from the
job's start (not 1970), a heartbeat's watermark delay is measured against its own clock rows (never negative), the
simulated clock's processing delay is in data time (not against the wall clock), a batch finished after a
restart says it recovered journaled rows, a batch's reads are those of the rows it journaled, and the periodic
flush runs beside the batches. Batches are handed to the job directly (no streaming query)."""
from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

from jobs.live import lag
from jobs.live.files import LINES, FileStream
from jobs.live.options import LiveOptions
from replay.io.lake import Lake
from replay.io.store import default_store
from replay.model.jobs import Job
from replay.model.policy import Policy
from tests.support import target_dir

POLICY = Policy.from_dict({"late_arrival_tolerance": "1s", "window": {"kind": "tumbling", "size": "10s"}})
START = datetime(2024, 1, 1, tzinfo=timezone.utc)


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _lines(spark, name: str, partitions: list[int], times: list[datetime], first_offset: int = 0,
           lateness: timedelta = timedelta(0)):
    """A micro-batch of landing lines: an event per partition arriving at each time, `lateness` after its event
    time."""
    rows, n = [], 0
    for i, t in enumerate(times):
        for p in partitions:
            n += 1
            rows.append((name, n, json.dumps({"partition": p, "offset": first_offset + i, "arrival_time": _iso(t),
                                              "event_time": _iso(t - lateness), "key": "k", "value": 1.0})))
    return spark.createDataFrame(rows, LINES)


def _stream(spark, lake: str, **options) -> FileStream:
    return FileStream(spark, lake, [Job.spec(POLICY)], LiveOptions(**options))


def test_a_partition_that_never_had_an_event_is_not_progressing_since_the_jobs_start(spark, tmp_path):
    lake = str(tmp_path / "lake")
    live = _stream(spark, lake, clock="simulated", partitions=3, silent_after=60.0)
    live.process(_lines(spark, "part-0.jsonl", [0, 1], [START + timedelta(seconds=s) for s in range(0, 30, 5)]))
    live.process(_lines(spark, "part-1.jsonl", [0, 1], [START + timedelta(seconds=s) for s in range(100, 130, 5)],
                        first_offset=6))
    live.flush()
    found = default_store().read(spark, target_dir(lake).table("diagnostics")).collect()
    [silent] = [d for d in found if d["kind"] == "partition_not_progressing"]
    assert silent["partition"] == 2 and silent["since"] is None  # it never had an event
    assert "1970" not in silent["message"]
    assert "partition 2 has had no event since this live job started at 2024-01-01T00:00:25Z" in silent["message"]


def test_a_heartbeat_measures_the_watermark_delay_against_its_clock_rows(spark, tmp_path):
    """On the system clock, a heartbeat's clock rows arrive after the last event: the delay is theirs (L = 1 s),
    not the last event's arrival minus a watermark already past it."""
    lake = str(tmp_path / "lake")
    live = _stream(spark, lake, clock="system", partitions=2)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    live.process(_lines(spark, "part-0.jsonl", [0, 1], [now - timedelta(seconds=s) for s in (3, 2)]))
    time.sleep(3)  # longer than L: the estimates pass the last event's arrival by more than L
    assert live.heartbeat()
    beat = live.reports[-1]
    assert beat.trigger == "heartbeat" and beat.clock_rows == 2
    assert 0 <= beat.watermark_delay_s <= 1.0, beat
    assert "ahead" not in beat.line() and "watermark delay 1.0s" in beat.line()
    live.flush()
    lag = default_store().read(spark, target_dir(lake).table("lag")).where(f"batch = {beat.batch}").collect()
    assert all(0 <= r["arrival_delay_s"] <= 1.0 for r in lag), lag


def test_the_simulated_clocks_processing_delay_is_measured_in_data_time(spark, tmp_path):
    lake = str(tmp_path / "lake")
    live = _stream(spark, lake, clock="simulated", partitions=1)
    live.process(_lines(spark, "part-0.jsonl", [0], [START + timedelta(seconds=s) for s in range(0, 30, 3)],
                        lateness=timedelta(milliseconds=500)))
    [report] = live.reports
    assert report.processing_time == (START + timedelta(seconds=27)).timestamp()  # the latest arrival
    # the watermark is the last event time, 0.5 s behind the latest arrival, not years behind the wall clock
    assert report.processing_delay_s == report.watermark_delay_s == 0.5
    live.flush()
    [row] = default_store().read(spark, target_dir(lake).table("lag")).collect()
    assert row["processing_delay_s"] == 0.5


def test_a_batch_decided_after_a_restart_says_it_recovered_journaled_rows(spark, tmp_path):
    """A run journals a file and stops before deciding it; the next run decides those rows first and says so."""
    lake = str(tmp_path / "lake")
    first = _stream(spark, lake, clock="simulated", partitions=2)
    first.process(_lines(spark, "part-0.jsonl", [0, 1], [START + timedelta(seconds=s) for s in range(3)]))
    first._append(_lines(spark, "part-1.jsonl", [0, 1], [START + timedelta(seconds=s) for s in range(3, 7)], 3),
                  {"part-1.jsonl": 8})  # journaled, not decided: as a run killed between the two
    again = _stream(spark, lake, clock="simulated", partitions=2)
    again.process(spark.createDataFrame([], LINES))
    [report] = again.reports
    assert (report.trigger, report.files, report.rows) == ("recovery", 1, 8)
    assert report.line().startswith("batch 1: recovered rows journaled before a restart, 8 rows"), report.line()


def test_a_batch_reports_the_reads_of_the_rows_it_journaled(spark, tmp_path):
    """A batch's reads (rows, clock rows, bytes per partition) are known before its append, its clock rows made in
    the driver: they are those of the journal rows it appended, a partition with events and one with a clock row
    alike, and a heartbeat's too."""
    lake = str(tmp_path / "lake")
    live = _stream(spark, lake, clock="simulated", partitions=3)
    live.process(_lines(spark, "part-0.jsonl", [0, 1], [START + timedelta(seconds=s) for s in (0, 5, 9)]))
    live.process(_lines(spark, "part-1.jsonl", [1], [START + timedelta(seconds=s) for s in (12, 14)], first_offset=3))
    assert live.heartbeat()
    live.flush()
    journal = default_store().read(spark, Lake(lake).journal)
    lags = default_store().read(spark, target_dir(lake).table("lag"))
    assert [r.clock_rows for r in live.reports] == [1, 2, 3]
    for report in live.reports:
        read, span = lag.reads(journal.where(f"seq between {report.seq_from} and {report.seq_to}"))
        assert (report.rows, report.clock_rows) == (span["n"], span["clocks"])
        written = {r["partition"]: (r["events"], r["clock_rows"], r["bytes"])
                   for r in lags.where(f"batch = {report.batch}").collect()}
        assert written == {r.partition: (r.events, r.clock_rows, r.bytes) for r in read}, report


def test_a_batch_does_not_wait_for_its_periodic_flush_and_the_last_flush_waits_for_it(spark, tmp_path):
    """The flush every `flush_every` batches runs beside the next batches; the flush as the stream stops comes
    after it, so every batch's metrics and lag are written once."""
    lake = str(tmp_path / "lake")
    live = _stream(spark, lake, clock="simulated", partitions=2, flush_every=1)
    live.process(_lines(spark, "part-0.jsonl", [0, 1], [START + timedelta(seconds=s) for s in (0, 5, 9)]))
    running = live.flushing
    assert running is not None and not running.done()  # the batch returned while its flush was being written
    live.process(_lines(spark, "part-1.jsonl", [0, 1], [START + timedelta(seconds=s) for s in (12, 21)],
                        first_offset=3))
    live.flush()
    assert running.done() and live.flushing is None
    metrics = default_store().read(spark, target_dir(lake).table("metrics"))
    assert metrics.agg({"events": "sum"}).first()[0] == 10
    lags = default_store().read(spark, target_dir(lake).table("lag"))
    assert sorted({r["batch"] for r in lags.collect()}) == [r.batch for r in live.reports]
    assert lags.count() == 4  # each batch's two partitions, once
