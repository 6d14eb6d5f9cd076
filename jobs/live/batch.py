"""The live job's micro-batch core, whatever its source: every micro-batch journals first.

Per micro-batch, in order: (1) append its rows to the journal with new `seq` values, plus a clock row with the
estimated arrival time for every partition of the source that has no new event (spec 4); (2) every job on the
source decides the new rows from its own checkpoint and commits its outputs, then its checkpoint (`consumers`,
`commit`); (3) the batch's processing lag and diagnostics (`observe`), written with every job's metrics every few
batches, beside the next batches, and when the stream stops (`deferred`). A crash anywhere leaves the batch either in
the journal or not: on restart, rows journaled but not decided yet are decided first, and a commit already made
for a batch is not made again. The journal is the truth; Spark's own checkpoint is only scratch. When no data
arrives for a heartbeat interval, a heartbeat journals clock rows alone and decides them as a batch, so time
moves on an idle source. A source (`files`, `kafka`) only says how its batch becomes sequenced journal rows.
"""
from __future__ import annotations

import gc
import json
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.live import deferred, diagnostics, lag, observe
from jobs.live.commit import Batch, crash_point, persisted
from jobs.live.consumers import Consumer
from jobs.live.offsets import EarlierRows
from jobs.live.options import LiveOptions
from jobs.live.report import BatchReport
from replay.io import journal
from replay.io.checkpoints import SourcePartition
from replay.io.lake import Lake
from replay.io.spark import driver_rows, few_rows
from replay.io.store import default_store
from replay.model.durations import describe_span, format_instant, parse_instant
from replay.model.jobs import Job
from replay.model.state import NEG

WRITER = "replay stream"
# Journaled arrivals this far behind the system clock are not live data (historical files, an old topic): the clock
# rows estimated from that clock would put watermarks past them, so the live job warns once. One hour leaves room for
# sources that deliver late by design (Firehose buffers up to 15 minutes).
FAR_BEHIND = 3_600_000_000


class Journaled(NamedTuple):
    """A batch's journal rows as appended, and their `lag.reads` (known before the append: no Spark job)."""

    rows: DataFrame
    reads: tuple[list[lag.PartitionRead], dict]


def processing_time(clock: str, latest_arrival: int | None) -> int:
    """Now, in microseconds: the wall clock, or (simulated, for tests and demos) the latest arrival seen."""
    if clock == "system":
        return time.time_ns() // 1000
    return latest_arrival if latest_arrival is not None else 0


def release_java_objects() -> None:
    """Free the JVM objects behind a batch's Python garbage now. Each py4j JavaObject caches its method
    handles, which point back at it: a reference cycle, so only Python's full collection frees it, and that
    seldom runs; until then the batch's plans, cached blocks and broadcasts stay on the driver's heap."""
    gc.collect()


class LiveStream:
    """The micro-batches of the live job over one source, for its jobs (the first is the lead: `consumers`)."""

    unit = "files"  # what a report's `files` counts

    def __init__(self, spark: SparkSession, lake: str, jobs: tuple[Job, ...] | list[Job],
                 options: LiveOptions = LiveOptions(), fields: journal.SourceFields | None = None):
        if not jobs:
            raise ValueError("the live job needs at least one job to decide its batches")
        self.spark, self.lake, self.options = spark, lake, options
        self.fields = fields or journal.SourceFields()  # the payload fields holding the event time and the key
        self.store = default_store()
        declared = options.partitions if options.partitions is not None else self.fields.partitions  # count or list
        self.source_partitions = journal.declare_partitions(spark, lake, declared, self.store)
        self.earlier = EarlierRows()  # the journal before a batch: offsets it could repeat, last events
        self.consumers = [Consumer.load(self, job, lead=i == 0) for i, job in enumerate(jobs)]
        self.reports: list[BatchReport] = []
        self.caught_up = False  # no journal rows past the lead's checkpoint (checked once, then kept so)
        self._followers_started = False
        # when the run began, in processing time (a partition never seen counts from it); on the simulated clock
        # with an empty journal there is no time yet: the first batch's
        latest = self._latest_arrival()
        self.started_at = processing_time(options.clock, latest) if options.clock == "system" or latest else None
        self.watchdog = diagnostics.Watchdog(options.silent_after_us)
        self.observed = deferred.Observations()  # lag and diagnostics rows until the next flush
        self.unflushed = 0  # batches decided since the last flush
        self.idle_since = time.monotonic()  # when the last batch or heartbeat ended
        self.warned_behind = False  # the far-behind warning is printed once per run
        self._lock = threading.Lock()  # a heartbeat (driver thread) and a micro-batch (Spark's) never overlap
        # the threads the other jobs decide a batch in (kept: each holds its own connection to the JVM)
        self.beside = ThreadPoolExecutor(max(1, len(jobs) - 1), thread_name_prefix="retrace-follower")
        self.flusher = ThreadPoolExecutor(1, thread_name_prefix="retrace-flush")  # `_flush_beside`
        self.flushing: Future | None = None

    @property
    def lead(self) -> Consumer:
        return self.consumers[0]

    def _latest_arrival(self) -> int | None:
        return max((s.last_arrival for s in self.lead.cp.source.values()), default=None)

    # -- the micro-batch ---------------------------------------------------------------------------------------

    def process(self, batch: DataFrame, spark_batch_id: int | None = None) -> None:
        """foreachBatch: journal the batch, then decide and commit it."""
        try:
            with self._lock, persisted(batch) as read_once:  # read from the source once
                self._process(read_once)
        finally:
            release_java_objects()
            self.idle_since = time.monotonic()

    def _process(self, batch: DataFrame) -> None:
        raise NotImplementedError  # a source's: how its batch becomes journal rows

    def heartbeat(self, idle_for: float = 0.0) -> bool:
        """No data for a heartbeat interval: journal a clock row for every partition of the source (each with
        its estimated arrival, spec 4) and decide them as a batch. False when there is nothing to journal, or
        a batch ended less than `idle_for` seconds ago."""
        with self._lock:
            if not self.caught_up or time.monotonic() - self.idle_since < idle_for:
                return False
            if self.input_waiting():  # Spark has not picked it up yet: its arrivals come before any estimate
                self.idle_since = time.monotonic()
                return False
            try:
                began = time.perf_counter()
                new = self.journal_batch(None, self.lead.seq + 1, 0)
                if new is None:
                    return False
                self.decide(new.rows, 0, began, trigger="heartbeat", reads=new.reads)
                return True
            finally:
                release_java_objects()
                self.idle_since = time.monotonic()

    def tail(self) -> tuple[set[str], DataFrame] | None:
        """Journal rows after the lead's checkpoint (journaled by a run that crashed before deciding them), with
        the sources they came from; None when there are none."""
        rows = self.lead.pending(self)
        if rows is None:
            return None
        found = rows.agg(F.count("*").alias("n"), F.collect_set("source").alias("sources")).first()
        return (set(found["sources"]), rows) if found["n"] else None

    def start_followers(self) -> None:
        """Once, before journaling anything new: every other job finishes what a crashed run left half-committed
        (with the same journal rows) and catches up with the journal (a job added since starts at seq 0)."""
        if not self._followers_started:
            self._followers_started = True
            for consumer in self.consumers[1:]:
                consumer.follow(self)

    def journal_batch(self, events: DataFrame | None, base: int, count: int) -> Journaled | None:
        """Append `count` source rows (seq `base`...; None: a heartbeat) and the clock rows after them; returns
        the new rows with their `lag.reads` (None: nothing to journal). A micro-batch's rows are in the stream's own
        session (Spark's clone of `self.spark`): the few-rows settings are made where its queries run."""
        with few_rows(self.spark if events is None else events.sparkSession, count):
            path = Lake(self.lake).journal
            found = None if events is None else lag.reads(events)  # the source rows' reads: one Spark job
            seen = {} if found is None else {r.partition: r.last_arrival for r in found[0] if r.events}
            latest = max([*seen.values(), *(s.last_arrival for s in self.lead.cp.source.values())], default=None)
            now = processing_time(self.options.clock, latest)
            made = self._clock_rows(now, seen, base + count)
            if events is None and made is None:
                return None
            clocks, clock_reads = made if made is not None else (None, [])
            crash_point("journal")
            rows = clocks if events is None else events if clocks is None else events.unionByName(clocks)
            version = self.store.write(rows.coalesce(1), path, metadata={"writer": WRITER, "table": "journal",
                                                                         "seq_from": base, "rows": count})
            crash_point("journaled")
            # the commit's own files: no rebuild of the journal's state to plan the read
            added = self.store.read_commit(self.spark, path, version) if version is not None else None
            added = added if added is not None else self.store.read(self.spark, path).where(F.col("seq") >= base)
            return Journaled(added, lag.with_clock_rows(found, clock_reads, format_instant(now)))

    def _clock_rows(self, now: int, seen: dict, first_seq: int) -> tuple[DataFrame, list[tuple[int, int, int]]] | None:
        """Estimated arrival times (spec 4) for the partitions of the source with no event in this batch:
        last arrival + processing time elapsed since it was seen; for one that never had an event, processing
        time - the never-seen delay (as Azure Stream Analytics estimates it). The rows, and each one's (seq,
        partition, arrival); None: every partition had one."""
        source, out = self.lead.cp.source, []
        for p in sorted(set(self.source_partitions) | set(source)):
            if p not in seen:
                estimate, offset, note = _estimate(source.get(p), now, self.options.never_seen_delay_us)
                out.append((first_seq + len(out), p, offset, "clock", estimate, json.dumps(note)))
        if not out:
            return None
        df = driver_rows(self.spark, out, "seq long, partition int, offset long, kind string, arrival long, "
                                             "payload string")
        return df.select("seq", "partition", "offset", "kind", F.timestamp_micros("arrival").alias("arrival_time"),
                         F.lit(None).cast("timestamp").alias("event_time"), F.lit(None).cast("string").alias("key"),
                         F.lit(None).cast("double").alias("value"), "payload",
                         F.lit(None).cast("string").alias("source"), F.lit(None).cast("long").alias("source_line")), [
            (seq, p, arrival) for seq, p, _, _, arrival, _ in out]

    def decide(self, rows: DataFrame, files: int, began: float, trigger: str = "data",
               reads: tuple[list[lag.PartitionRead], dict] | None = None) -> None:
        """Every job decides `rows` (the journal after the lead's checkpoint; `reads`: their `lag.reads` when
        known): the lead first, whose batch is reported with its lag and diagnostics, then the others."""
        number = self.lead.cp.batch + 1
        with persisted(rows) as rows:  # the batch's journal rows, read from Delta once for every step below
            read, span = reads if reads is not None else lag.reads(rows)
            source, now = self._source_after(read, span["noted"])
            if self.started_at is None:
                self.started_at = now
            batch = Batch(rows, span, source)
            with few_rows(self.spark, span["n"]):
                decided = self.lead.decide(self, batch)
                self._followers_started = True
                # then the other jobs side by side: a job's batch is partly the driver waiting on small queries and
                # commits, which another job's planning fills (each reports its own failure: `Consumer.follow`);
                # meanwhile the lead's batch is reported, with its late input events (a query of its own)
                following = [self.beside.submit(c.follow, self, batch) for c in self.consumers[1:]]
                try:
                    late = decided.late() if decided.late is not None else None
                    report, backlog = self._report(number, files, span, began, trigger, read, now,
                                                   decided.committed_at)
                    observe.record(self, report, read, late, now, backlog)
                    print(report.line(), file=sys.stderr, flush=True)
                finally:
                    for done in following:
                        done.result()
        self.unflushed += 1
        if self.unflushed >= self.options.flush_every:
            self._flush_beside()
        self.reports.append(report)  # last: `max_batches` stops the query once every job has committed the batch
        if self.options.on_batch is not None:
            self.options.on_batch(report)

    def close(self) -> None:
        """The stream has stopped: its threads end (a flush running beside the batches first)."""
        self.beside.shutdown(wait=True)
        self.flusher.shutdown(wait=True)

    def flush(self) -> None:
        """Write what the batches since the last flush did not commit (`deferred`): every job's metrics and
        watermark timeline, up to its checkpoint, the lead's lag and diagnostics, the landing files' manifest rows.
        When the stream stops, after the flush running beside the batches if there is one."""
        self._flush(*self._to_flush())

    def _flush_beside(self) -> None:
        """The flush every `flush_every` batches, in a thread of its own: the next batch does not wait for it (ten
        batches of three jobs took 20 s to flush). One flush at a time; a lead's failure in it stops the job at the
        next batch, as it stopped it in the batch before."""
        self.flushing = self.flusher.submit(self._flush, *self._to_flush())

    def _to_flush(self) -> tuple[list[Consumer], deferred.Observations, int]:
        """What a flush writes, taken now, once the flush running beside the batches has ended: each job as it is
        with the counts its batches kept (`Consumer.taken`), the observations held, the batches since."""
        running, self.flushing = self.flushing, None
        if running is not None:
            running.result()
        held, self.unflushed = self.unflushed, 0
        return [c.taken() for c in self.consumers], self.observed.take(), held

    def _flush(self, consumers: list[Consumer], observed: deferred.Observations, held: int) -> None:
        """A follower's failure is reported and its tables catch up at the next flush."""
        began, again = time.perf_counter(), []
        try:
            if deferred.commit_derived(self, consumers[0]):
                again.append(consumers[0].job.name)
            observed.commit(self)
            for consumer in consumers[1:]:
                try:
                    if deferred.commit_derived(self, consumer):
                        again.append(consumer.job.name)
                except Exception as e:  # noqa: BLE001 - one job's failure must not stop the source or the others
                    print(f"{consumer.job.describe()}: metrics and watermarks not written ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:300]}); written at the next flush", file=sys.stderr,
                          flush=True)
            if held or again:  # rows decided again: the counts of batches before a restart were lost with them
                print(f"flush: metrics, watermarks, lag and diagnostics of {held} batch(es) written in "
                      f"{time.perf_counter() - began:.1f}s"
                      + (f" (rows decided again for {', '.join(again)})" if again else ""), file=sys.stderr, flush=True)
        finally:
            release_java_objects()

    def _source_after(self, read: list[lag.PartitionRead], noted: str | None) -> tuple[dict, int]:
        """Last arrival, offset and seen-at time per partition after the batch, and the batch's processing time
        (its clock rows name the processing time they were made at; without one, the latest arrival stands in)."""
        stats = [r for r in read if r.events]
        latest = max([r.last_arrival for r in stats], default=None)
        now = (parse_instant(noted, "processing_time") if noted else
               latest if self.options.clock == "simulated" or latest is None
               else processing_time(self.options.clock, latest))
        self._warn_if_far_behind(stats, now)
        source = dict(self.lead.cp.source)
        for r in stats:
            source[r.partition] = SourcePartition(r.last_arrival, now, r.last_offset)
        return source, now

    def _warn_if_far_behind(self, stats: list[lag.PartitionRead], now: int) -> None:
        """Once per run, on the system clock: the partition whose journaled arrivals lag that clock most, when by
        more than FAR_BEHIND. Idle partitions' clock rows are estimated from the clock, so with such data they would
        put watermarks past the events (every later event out of order, no window emitted)."""
        if self.options.clock != "system" or self.warned_behind or not stats:
            return
        worst = max(stats, key=lambda r: (now - r.last_arrival, -r.partition))
        if now - worst.last_arrival < FAR_BEHIND:
            return
        self.warned_behind = True
        print(f"warning: partition {worst.partition}'s latest arrival ({format_instant(worst.last_arrival)}) is "
              f"{describe_span(now - worst.last_arrival)} behind the system clock, which this live job estimates "
              "idle partitions' arrivals from: their clock rows would put watermarks past these events; journal "
              "files that landed earlier with `replay ingest`, or run the live job with `--clock simulated`",
              file=sys.stderr, flush=True)

    def _report(self, batch: int, files: int, span: dict, began: float, trigger: str, read: list[lag.PartitionRead],
                now: int, committed: float) -> tuple[BatchReport, tuple]:
        """The batch's report, and its backlog (per partition, or under None for the whole source; its unit). The
        arrival-based delay is against the latest arrival the watermark has seen, a clock row's estimate included
        (a heartbeat's clock rows arrive after the last event); the processing delay against the clock the job
        estimates arrivals from: the wall clock at commit, or the simulated clock (`now`, data time)."""
        owm = [s.owm for s in self.lead.cp.state.scopes.values() if s.owm > NEG]
        latest = max([r.latest for r in read if r.latest is not None]
                     + ([self._latest_arrival()] if self._latest_arrival() is not None else []), default=None)
        delay = (latest - min(owm)) / 1e6 if owm and latest is not None else None
        waiting = self.files_waiting()
        backlog = self.backlog(waiting)
        known = [v for v in backlog[0].values() if v is not None]
        clock = committed if self.options.clock == "system" else now / 1e6
        return BatchReport(batch, files, span["n"], span["clocks"], span["lo"], span["hi"], delay, waiting,
                           time.perf_counter() - began, committed, self.unit, trigger,
                           clock - min(owm) / 1e6 if owm else None, sum(known) if known else None, clock), backlog

    def files_waiting(self) -> int | None:
        """Landing files not journaled yet (None: the source has no files)."""
        return None

    def input_waiting(self) -> bool:
        """Input not journaled yet (a heartbeat would estimate arrivals past the rows it holds)."""
        return False

    def backlog(self, files_waiting: int | None) -> tuple[dict, str]:
        """Input not journaled yet: per partition, or under None for the whole source; and its unit."""
        return {None: files_waiting}, "landing files"


def _estimate(seen: SourcePartition | None, now: int, never_seen_delay: int) -> tuple[int, int | None, dict]:
    """A clock row's estimated arrival, offset and note (how it was estimated, kept as its payload)."""
    if seen is None:
        return now - never_seen_delay, None, {
            "estimated_arrival": "processing_time - never_seen_delay (no event yet)",
            "never_seen_delay_s": never_seen_delay / 1e6, "processing_time": format_instant(now)}
    return seen.last_arrival + max(0, now - seen.seen_at), seen.last_offset, {
        "estimated_arrival": "last_arrival + (processing_time - seen_at)",
        "last_arrival": format_instant(seen.last_arrival), "seen_at": format_instant(seen.seen_at),
        "processing_time": format_instant(now)}
