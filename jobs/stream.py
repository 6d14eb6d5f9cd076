"""The live job: Spark Structured Streaming over the landing source or a Kafka topic; every micro-batch
journals first.

Per micro-batch, in order: (1) append its rows to the journal with new `seq` values, plus a clock row
with the estimated arrival time for every partition of the source that has no new event (spec 4); (2) decide the
new rows with the engine, from the last checkpoint; (3) commit the outputs, each commit tagged with the
transaction (app, batch); (4) commit the checkpoint. A crash anywhere leaves the batch either in the
journal or not: on restart, rows journaled but not decided yet are decided first, and a commit already
made for a batch is not made again. The journal is the truth; Spark's own checkpoint is only scratch.
When no data arrives for a heartbeat interval, a heartbeat journals clock rows alone and decides them as a
batch, so time moves on an idle source. After each batch: its processing lag and diagnostics (jobs.lag,
jobs.diagnostics).
"""
from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import diagnostics, lag
from jobs.offsets import EarlierRows
from replay.cli.runner import check_target, output_path, policy_hash, signature, target_metrics
from replay.engine import metrics, pipeline as engine
from replay.engine.decisions import NEG
from replay.io import checkpoints, journal, kafka_source as kafka, locks, manifest
from replay.io.checkpoints import Checkpoint, CheckpointMismatch, SourcePartition
from replay.io.spark import few_rows
from replay.io.store import AppTransaction, Replace, TableStore, commit_metadata, default_store
from replay.model.durations import describe_span, format_instant
from replay.model.jobs import Job, job_root
from replay.model.policy import Policy
from replay.model.state import State

CLOCKS = ("system", "simulated")
NEVER_SEEN_DELAY = 5_000_000  # microseconds: a partition that never had a row is estimated at now - 5 s (ASA)
# Journaled arrivals this far behind the system clock are not live data (historical files, an old topic): the clock
# rows estimated from that clock would put watermarks past them, so the live job warns once. One hour leaves room for
# sources that deliver late by design (Firehose buffers up to 15 minutes).
FAR_BEHIND = 3_600_000_000


def processing_time(clock: str, latest_arrival: int | None) -> int:
    """Now, in microseconds: the wall clock, or (simulated, for tests and demos) the latest arrival seen."""
    if clock == "system":
        return time.time_ns() // 1000
    return latest_arrival if latest_arrival is not None else 0


def _release_java_objects() -> None:
    """Free the JVM objects behind a batch's Python garbage now. Each py4j JavaObject caches its method
    handles, which point back at it: a reference cycle, so only Python's full collection frees it, and that
    seldom runs; until then the batch's plans, cached blocks and broadcasts stay on the driver's heap."""
    gc.collect()


@contextmanager
def _persisted(df: DataFrame):
    """`df` kept for the block (a batch's rows are read by several steps), then freed even if a step fails."""
    df = df.persist()
    try:
        yield df
    finally:
        df.unpersist()


def _crash_point(name: str) -> None:
    """Fault injection for the recovery tests: RETRACE_CRASH_AT=<name> kills the job here with SIGKILL
    (`<job>:<name>` at that point of a user job's commit)."""
    if os.environ.get("RETRACE_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class BatchReport:
    batch: int
    files: int
    rows: int
    clock_rows: int
    seq_from: int
    seq_to: int
    watermark_delay_s: float | None
    files_waiting: int | None
    seconds: float
    committed_at: float = 0.0  # wall-clock time (epoch seconds) when the batch's last commit landed
    unit: str = "files"  # what `files` counts: landing files, or Kafka partitions with new records
    trigger: str = "data"  # data, or heartbeat (clock rows alone, no data arrived)
    processing_delay_s: float | None = None  # wall clock at commit minus the output watermark
    backlog: int | None = None  # input not journaled yet (landing files or Kafka records), None: unknown

    def line(self) -> str:
        delay = "n/a" if self.watermark_delay_s is None else f"{self.watermark_delay_s:.1f}s"
        waiting = "?" if self.files_waiting is None else self.files_waiting
        lag = f"{waiting} landing files waiting, " if self.unit == "files" else ""
        what = "heartbeat" if self.trigger == "heartbeat" else f"{self.files} {self.unit}"
        return (f"batch {self.batch}: {what}, {self.rows} rows (seq {self.seq_from}-{self.seq_to}, "
                f"{self.clock_rows} clock rows) committed in {self.seconds:.1f}s; lag: {lag}watermark delay {delay}")


@dataclass
class LiveJob:
    """The micro-batch step of the live job, usable on any DataFrame of landing lines (source, source_line, line).
    A source only decides how its batch becomes sequenced journal rows (`_append`); journaling with clock rows
    (`_journal`), deciding and committing (`_decide`) are shared (see KafkaLiveJob)."""

    spark: SparkSession
    lake: str
    policy: Policy
    target: str = "production"
    clock: str = "system"
    partitions: int | None = None  # the source's partition count; recorded with the journal the first time
    store: TableStore = field(default_factory=default_store)
    landing: object | None = None  # a replay.io.landing.Landing, to report files waiting
    reports: list[BatchReport] = field(default_factory=list)
    on_batch: object | None = None  # called with each BatchReport (progress, benchmarks)
    jobs: tuple[Job, ...] = ()  # users' jobs on this source, each deciding from its own checkpoint
    fields: journal.SourceFields = field(default_factory=journal.SourceFields)  # the payload's time and key
    heartbeat_seconds: float | None = None  # no data for this long: journal clock rows alone (system clock)
    never_seen_delay: int = NEVER_SEEN_DELAY  # a partition that never had a row: clock rows at now - this
    silent_after: int = diagnostics.SILENT_AFTER  # no event for this long: partition_not_progressing
    on_diagnostic: object | None = None  # called with each diagnostic that starts (alerts)
    unit = "files"

    def __post_init__(self):
        check_target(self.target)
        if self.clock not in CLOCKS:
            raise ValueError(f"clock: {self.clock!r} is not one of {', '.join(CLOCKS)}")
        self.source_partitions = journal.declare_partitions(self.spark, self.lake, self.partitions, self.store)
        self._policy_json = json.dumps(self.policy.to_dict(), sort_keys=True)
        self._policy_hash = policy_hash(self.policy)
        self.cp = self._load()
        self.consumers = [Consumer.load(self, job) for job in self.jobs]
        self.caught_up = False  # the journal has no rows past the checkpoint (checked once, then kept so)
        self.sources: set[str] | None = None  # landing files journaled (for the lag report), loaded lazily
        self.started_at = processing_time(self.clock, max((s.last_arrival for s in self.cp.source.values()),
                                                          default=None))
        self.watchdog = diagnostics.Watchdog(self.silent_after)
        self.late: diagnostics.LateEvents | None = None  # the spec job's late events in the batch being decided
        self.idle_since = time.monotonic()  # when the last batch or heartbeat ended
        self.warned_behind = False  # the far-behind warning is printed once per run
        self._lock = threading.Lock()  # a heartbeat (driver thread) and a micro-batch (Spark's) never overlap
        self.earlier = EarlierRows()  # the journal before a batch: offsets it could repeat, last events

    def _load(self) -> Checkpoint:
        cp = checkpoints.load(self.spark, self.lake, self.target, self.store, policy=self._policy_json)
        return cp or Checkpoint(-1, State(), {}, self._policy_json)

    # -- the micro-batch -------------------------------------------------------------------------------

    def process(self, lines: DataFrame, spark_batch_id: int | None = None) -> None:
        """foreachBatch: journal the batch's landing lines, then decide and commit them."""
        try:
            with self._lock, _persisted(lines) as read_once:  # read from the landing once
                self._process(read_once)
        finally:
            _release_java_objects()
            self.idle_since = time.monotonic()

    def heartbeat(self, idle_for: float = 0.0) -> bool:
        """No data for a heartbeat interval: journal a clock row for every partition of the source (each with
        its estimated arrival, spec 4) and decide them as a batch. False when there is nothing to journal, or
        a batch ended less than `idle_for` seconds ago."""
        with self._lock:
            if not self.caught_up or time.monotonic() - self.idle_since < idle_for:
                return False
            if self._input_waiting():  # Spark has not picked it up yet: its arrivals come before any estimate
                self.idle_since = time.monotonic()
                return False
            try:
                began = time.perf_counter()
                base = self.cp.state.seq + 1
                new = self._journal(None, base, 0)
                if new is None:
                    return False
                self._decide(new, 0, began, trigger="heartbeat")
                return True
            finally:
                _release_java_objects()
                self.idle_since = time.monotonic()

    def _process(self, lines: DataFrame) -> None:
        began = time.perf_counter()
        per_file = {r["source"]: r for r in lines.groupBy("source").agg(
            F.count("*").alias("count"), F.max("source_line").alias("lines")).collect()}
        files = sorted(per_file)
        tail = None if self.caught_up else self._tail()
        if tail is not None:
            pending, rows = tail
            if set(files) <= pending:  # a retried batch that an earlier attempt journaled
                self._decide(rows, len(files), began)
                return
            if pending & set(files):
                raise RuntimeError(f"landing files {sorted(pending & set(files))} are half journaled")
            self._decide(rows, len(pending), began)  # finish what a crashed run journaled, then go on
            began = time.perf_counter()
        self.caught_up = True
        self._start_consumers()
        if not files:
            return
        with few_rows(self.spark, sum(r["count"] for r in per_file.values())):
            rows = self._append(lines, {f: per_file[f]["lines"] for f in files})
        if self.sources is not None:
            self.sources |= set(files)
        self._decide(rows, len(files), began)

    def _start_consumers(self) -> None:
        """Once, before journaling anything new: every job finishes what a crashed run left half-committed
        (with the same journal rows) and catches up with the journal (a job added since starts at seq 0)."""
        if not getattr(self, "_consumers_started", False):
            for consumer in self.consumers:
                consumer.catch_up(self)
            self._consumers_started = True

    def _tail(self) -> tuple[set[str], DataFrame] | None:
        """Journal rows after the checkpoint (journaled by a run that crashed before deciding them)."""
        path = journal.journal_path(self.lake)
        if not self.store.exists(path):
            return None
        rows = self.store.read(self.spark, path).where(F.col("seq") > self.cp.state.seq)
        found = rows.agg(F.count("*").alias("n"), F.collect_set("source").alias("sources")).first()
        return (set(found["sources"]), rows) if found["n"] else None

    def _append(self, lines: DataFrame, per_file: dict[str, int]) -> DataFrame:
        """Journal the batch (`per_file`: each file's line count): its rows in (file, line) order, then the clock
        rows; returns the new rows."""
        files = sorted(per_file)
        rows = journal.normalize(journal.raw_from_lines(lines, self.fields), self.source_partitions)
        base = self.cp.state.seq + 1
        observed = manifest.observe(self.landing, files) if self.landing is not None else {}
        new = self._journal(journal.with_seq(self.spark, rows, files, per_file, base), base, sum(per_file.values()))
        manifest.record(self.spark, self.lake, observed, self.store, new=True)  # a half-journaled file stops the job
        return new

    def _journal(self, events: DataFrame | None, base: int, count: int) -> DataFrame | None:
        """Append `count` source rows (seq `base`...; None: a heartbeat) and the clock rows after them; returns
        the new rows (None: nothing to journal). Shared by every source: only how a batch becomes sequenced
        rows differs."""
        path = journal.journal_path(self.lake)
        seen = {} if events is None else {r["partition"]: r for r in events.where(F.col("kind") == "event").groupBy(
            "partition").agg(F.max(F.unix_micros("arrival_time")).alias("arrival")).collect()}
        latest = max([r["arrival"] for r in seen.values()] + [s.last_arrival for s in self.cp.source.values()],
                     default=None)
        now = processing_time(self.clock, latest)
        clocks = self._clock_rows(now, seen, base + count)
        if events is None and clocks is None:
            return None
        _crash_point("journal")
        rows = clocks if events is None else events if clocks is None else events.unionByName(clocks)
        version = self.store.write(rows.coalesce(1), path, metadata={"job": "replay stream", "table": "journal",
                                                                     "seq_from": base, "rows": count})
        _crash_point("journaled")
        # the commit's own files: no rebuild of the journal's state to plan the read
        added = self.store.read_commit(self.spark, path, version) if version is not None else None
        return added if added is not None else self.store.read(self.spark, path).where(F.col("seq") >= base)

    def _clock_rows(self, now: int, seen: dict, first_seq: int) -> DataFrame | None:
        """Estimated arrival times (spec 4) for the partitions of the source with no event in this batch:
        last arrival + processing time elapsed since it was seen; for one that never had an event, processing
        time - `never_seen_delay` (as Azure Stream Analytics estimates it). None: every partition had one."""
        out = []
        for p in sorted(set(self.source_partitions) | set(self.cp.source)):
            if p in seen:
                continue
            s = self.cp.source.get(p)
            if s is None:
                estimate, offset = now - self.never_seen_delay, None
                note = {"estimated_arrival": "processing_time - never_seen_delay (no event yet)",
                        "never_seen_delay_s": self.never_seen_delay / 1e6, "processing_time": format_instant(now)}
            else:
                estimate, offset = s.last_arrival + max(0, now - s.seen_at), s.last_offset
                note = {"estimated_arrival": "last_arrival + (processing_time - seen_at)",
                        "last_arrival": format_instant(s.last_arrival), "seen_at": format_instant(s.seen_at),
                        "processing_time": format_instant(now)}
            out.append((first_seq + len(out), p, offset, "clock", estimate, json.dumps(note)))
        if not out:
            return None
        df = self.spark.createDataFrame(out, "seq long, partition int, offset long, kind string, arrival long, "
                                             "payload string")
        return df.select("seq", "partition", "offset", "kind", F.timestamp_micros("arrival").alias("arrival_time"),
                         F.lit(None).cast("timestamp").alias("event_time"), F.lit(None).cast("string").alias("key"),
                         F.lit(None).cast("double").alias("value"), "payload",
                         F.lit(None).cast("string").alias("source"), F.lit(None).cast("long").alias("source_line"))

    def _decide(self, rows: DataFrame, files: int, began: float, trigger: str = "data") -> None:
        """Decide `rows` (the journal after the checkpoint) from the checkpoint; commit outputs, then state;
        record the batch's lag and diagnostics; then every user job on the source from its own checkpoint."""
        batch = self.cp.batch + 1
        with _persisted(rows) as rows:  # the batch's journal rows, read from Delta once for every step below
            read, span = lag.reads(rows)
            source = self._source_after(read, span["noted"])
            self.late = None
            with few_rows(self.spark, span["n"]):
                self.cp = commit_batch(self, self.lake, self.target, self.policy, None, self.cp, rows, span, source)
                report = self._report(batch, files, span, began, trigger)
                self._observe(report, read)
        self.reports.append(report)
        print(report.line(), file=sys.stderr, flush=True)
        for consumer in self.consumers:
            consumer.catch_up(self)
        if self.on_batch is not None:
            self.on_batch(report)

    def _source_after(self, read: list[lag.PartitionRead], noted: str | None) -> dict[int, SourcePartition]:
        """Last arrival, offset and seen-at time per partition, after the batch (its clock rows name the
        processing time they were made at; without one, the latest arrival stands in for it)."""
        stats = [r for r in read if r.events]
        latest = max([r.last_arrival for r in stats], default=None)
        now = _micros(noted) if noted else (latest if self.clock == "simulated" or latest is None
                                             else processing_time(self.clock, latest))
        self.batch_time = now  # the batch's processing time, which diagnostics judge by
        self._warn_if_far_behind(stats, now)
        source = dict(self.cp.source)
        for r in stats:
            source[r.partition] = SourcePartition(r.last_arrival, now, r.last_offset)
        return source

    def _warn_if_far_behind(self, stats: list[lag.PartitionRead], now: int) -> None:
        """Once per run, on the system clock: the partition whose journaled arrivals lag that clock most, when by
        more than FAR_BEHIND. Idle partitions' clock rows are estimated from the clock, so with such data they would
        put watermarks past the events (every later event out of order, no window emitted)."""
        if self.clock != "system" or self.warned_behind or not stats:
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

    def _report(self, batch: int, files: int, span, began: float, trigger: str) -> BatchReport:
        owm = [s.owm for s in self.cp.state.scopes.values() if s.owm > NEG]
        latest = max([s.last_arrival for s in self.cp.source.values()], default=None)
        delay = (latest - min(owm)) / 1e6 if owm and latest is not None else None
        waiting = None
        if self.landing is not None:
            if self.sources is None:
                self.sources = journal.journaled_sources(self.spark, self.lake, self.store)
            waiting = sum(1 for f in self.landing.files() if f.name not in self.sources)
        committed = time.time()
        return BatchReport(batch, files, span["n"], span["clocks"], span["lo"], span["hi"], delay, waiting,
                           time.perf_counter() - began, committed, self.unit, trigger,
                           committed - min(owm) / 1e6 if owm else None)

    def _backlog(self, report: BatchReport) -> tuple[dict, str]:
        """Input not journaled yet: per partition, or under None for the whole source."""
        return {None: report.files_waiting}, "landing files"

    def _input_waiting(self) -> bool:
        """A landing file not journaled yet (a heartbeat would estimate arrivals past the rows it holds)."""
        if self.landing is None:
            return False
        if self.sources is None:
            self.sources = journal.journaled_sources(self.spark, self.lake, self.store)
        return any(f.name not in self.sources for f in self.landing.files())

    def _observe(self, report: BatchReport, read: list[lag.PartitionRead]) -> None:
        """The batch's processing lag per partition, and the diagnostics it shows (alerting those that start):
        appended to `lag` and `diagnostics` next to the outputs, once per batch (a retried batch is not
        recorded twice). Processing time is the clock's, so the simulated clock gives data time."""
        now = self.batch_time
        committed = int(report.committed_at * 1e6)
        backlog, unit = self._backlog(report)
        known = [v for v in backlog.values() if v is not None]
        report.backlog = sum(known) if known else None
        last_arrival = {p: s.last_arrival for p, s in self.cp.source.items()}
        rows = lag.rows_of(report.batch, report.trigger, read, self.source_partitions, self.cp.state,
                           self.policy.independent, last_arrival, backlog, unit, committed, report.seconds)
        txn = lambda name: AppTransaction(f"retrace-{self.target}-{name}", report.batch)  # noqa: E731
        meta = {"job": "replay stream", "target": self.target, "batch": report.batch}
        self.store.write(lag.table(self.spark, rows), output_path(self.lake, self.target, "lag"), txn=txn("lag"),
                         metadata={**meta, "table": "lag"})
        seen = {p: self.cp.source[p].seen_at if p in self.cp.source else self.started_at
                for p in self.source_partitions}
        found = self.watchdog.not_progressing(report.batch, now, seen)
        if self.late is not None:
            found += self.watchdog.late_input(report.batch, now, self.late)
        if not found:
            return
        self.store.write(diagnostics.table(self.spark, found), output_path(self.lake, self.target, "diagnostics"),
                         txn=txn("diagnostics"), metadata={**meta, "table": "diagnostics"})
        for d in found:
            if d.started:
                print(f"diagnostic {d.kind}: {d.message}", file=sys.stderr, flush=True)
                if self.on_diagnostic is not None:
                    try:
                        self.on_diagnostic(d)
                    except Exception as e:  # noqa: BLE001 - an alert that cannot be sent must not stop the job
                        print(f"diagnostic {d.kind}: alert not sent ({e})", file=sys.stderr, flush=True)


def commit_batch(live: "LiveJob", root: str, target: str, policy: Policy, job: Job | None, cp: Checkpoint,
                 rows: DataFrame, span, source: dict) -> Checkpoint:
    """Decide `rows` (the journal after `cp`) for one job and commit its outputs, then its checkpoint; every
    commit is tagged with the transaction (app, batch), so a batch retried after a crash is not committed twice.
    Returns the checkpoint as committed."""
    spark, store, batch = live.spark, live.store, cp.batch + 1
    crash = lambda name: _crash_point(name if job is None else f"{job.name}:{name}")  # noqa: E731
    txn = lambda name: AppTransaction(f"retrace-{target}-{name}", batch)  # noqa: E731
    # the batch is the run: every table's commit for it names the same run, whichever process made it
    meta = lambda name: {"job": "replay stream", "retrace_job": job.name if job else "default",  # noqa: E731
                         "target": target, "table": name, "policy": policy_hash(policy), "seq_from": span["lo"],
                         "seq_to": span["hi"] + 1, "batch": batch, "run": f"live-batch-{batch}"}

    def committed_decisions(decided: DataFrame) -> DataFrame:
        """The decisions, committed first, as every other output then reads them: from the commit's files, so
        each of their queries plans over a file scan, not over the engine's whole plan (nor its cache)."""
        path = output_path(root, target, "decisions")
        version = store.write(decided, path, txn=txn("decisions"), metadata=meta("decisions"))
        crash("decisions")
        added = store.read_commit(spark, path, version) if version is not None else None
        if added is None:  # an earlier attempt committed the batch's decisions (or a rewrite of the table)
            added = store.read(spark, path).where(F.col("seq").between(span["lo"], span["hi"]))
        return added

    journaled = store.read(spark, journal.journal_path(live.lake))
    history = live.earlier.history(journaled, cp.state.seq, span)  # where duplicate (partition, offset) are
    out = engine.replay(rows, policy, flush=True, state=cp.state, partitions=live.source_partitions,
                        keep_state=True, history=history, job=job, rows_at_most=span["n"],
                        materialize=committed_decisions)
    tables = out.tables()
    if job is None:
        live.late = diagnostics.late_events(tables["decisions"], rows)
    for name in ("dead_letters", "watermarks"):
        store.write(tables[name], output_path(root, target, name), txn=txn(name), metadata=meta(name))
        crash(name)
    # emitted windows are appended; the open ones (null emitted_at, what a flush would emit now) replaced
    store.write(tables["windows"], output_path(root, target, "windows"), txn=txn("windows"),
                replace=Replace("emitted_at", span["lo"], None, nulls=True), metadata=meta("windows"))
    crash("windows")
    before = lambda: live.earlier.last_events(journaled, cp.state.seq, span["partitions"])  # noqa: E731
    _commit_metrics(store, spark, root, target, out, before, txn("metrics"), meta("metrics"))
    crash("metrics")
    state = out.state.advanced(span["hi"])
    signed = signature(policy, job)
    versions = checkpoints.save(spark, root, target, Checkpoint(batch, state, source, signed), store,
                                metadata=meta("checkpoints"))
    crash("checkpoint")
    live.earlier.advance(cp.state.seq, state.seq, span)
    out.unpersist()
    return _committed(live, root, target, Checkpoint(batch, state, source, signed), versions)


def _commit_metrics(store: TableStore, spark: SparkSession, root: str, target: str, out: engine.Outputs,
                    last_events, txn: AppTransaction, metadata: dict) -> None:
    """Merge the metrics of the batch's rows into the table (`metrics.combine`), so a batch's cost does not
    grow with the rows before it in the same hour. `last_events()`: each partition's last event before the
    batch (`journal.last_events_before`). Tagged with the batch's transaction: a retried batch does not add
    its rows twice."""
    path = output_path(root, target, "metrics")
    table = store.read_current(spark, path) if store.exists(path) else None
    if table is None or set(metrics.COLUMNS) - set(table.columns):  # none yet, or from an older Retrace
        store.write(target_metrics(spark, store, root, target), path, mode="overwrite", txn=txn, metadata=metadata)
        return
    tables = out.tables()
    fresh = metrics.of_stretch(tables["decisions"], tables["dead_letters"], last_events())
    # one file in (partition, hour) order, sorted where it is gathered (a global sort would sample first)
    store.write(metrics.combine(table, fresh).coalesce(1).sortWithinPartitions("partition", "hour"), path,
                mode="overwrite", txn=txn, metadata=metadata)


def _committed(live: "LiveJob", root: str, target: str, cp: Checkpoint, versions: dict) -> Checkpoint:
    """The checkpoint as committed: its open windows and keys read back (this cuts the lineage), from the
    files of the commits that wrote them when `versions` names them (no rebuild of the tables' state)."""
    def read(table: str, present: bool):
        if not present:
            return None
        path = output_path(root, target, table)
        version = versions.get(table)
        df = live.store.read_commit(live.spark, path, version) if version is not None else None
        if df is None:
            df = live.store.read(live.spark, path)
        return df.where(F.col("batch") == cp.batch).drop("batch")

    state = replace(cp.state, windows=read("checkpoint_windows", cp.state.windows is not None),
                    keys=read("checkpoint_keys", cp.state.keys is not None))
    return replace(cp, state=state)


@dataclass
class Consumer:
    """A user's job on the live source: a cursor into the journal (its checkpoint's seq) that it decides from,
    after the journal has been written. A job added later starts at the start of the journal; a job that
    fails is reported and retried from its checkpoint at the next batch, and the others go on."""

    job: Job
    root: str
    cp: Checkpoint
    failures: int = 0

    @classmethod
    def load(cls, live: "LiveJob", job: Job) -> "Consumer":
        root, signed = job_root(live.lake, job), signature(job.policy, job)
        cp = checkpoints.load(live.spark, root, live.target, live.store)
        if cp is not None and cp.policy != signed:
            raise CheckpointMismatch(f"{job.describe()}: its checkpoint (batch {cp.batch}) at {root} was made with "
                                     "another definition; replay it from the start (`replay run --job "
                                     f"{job.name}`) and remove its checkpoints, or keep the old definition")
        return cls(job, root, cp or Checkpoint(-1, State(), {}, signed))

    def catch_up(self, live: "LiveJob") -> None:
        """Decide the journal rows after this job's checkpoint, committing its outputs."""
        if not live.store.exists(journal.journal_path(live.lake)):
            return
        rows = live.store.read(live.spark, journal.journal_path(live.lake)).where(F.col("seq") > self.cp.state.seq)
        decisions = output_path(self.root, live.target, "decisions")
        meta = commit_metadata(live.spark, decisions) if live.store.exists(decisions) else None
        if meta and meta.get("job") == "replay stream" and meta.get("batch") == self.cp.batch + 1:
            rows = rows.where(F.col("seq") < meta["seq_to"])  # a half-committed batch is redone with its own rows
        with _persisted(rows) as rows:  # the batch's journal rows, read from Delta once
            span = lag.reads(rows)[1]
            if not span["n"]:
                return
            began = time.perf_counter()
            try:
                with few_rows(live.spark, span["n"]):
                    self.cp = commit_batch(live, self.root, live.target, self.job.policy, self.job, self.cp, rows,
                                           span, {})
            except Exception as e:  # noqa: BLE001 - one job's failure must not stop the source or the other jobs
                self.failures += 1
                print(f"{self.job.describe()}: failed on journal seq {span['lo']}-{span['hi']} ({type(e).__name__}: "
                      f"{' '.join(str(e).split())[:300]}); retried from its checkpoint at the next batch",
                      file=sys.stderr, flush=True)
                return
        print(f"{self.job.describe()}: batch {self.cp.batch}: {span['n']} rows (seq {span['lo']}-{span['hi']}) "
              f"committed in {time.perf_counter() - began:.1f}s", file=sys.stderr, flush=True)


def _micros(iso: str) -> int:
    from replay.model.durations import parse_instant

    return parse_instant(iso, "processing_time")


@dataclass
class StreamSummary:
    batches: int
    rows: int
    clock_rows: int
    seconds: float
    reports: list[BatchReport]


def run_stream(spark: SparkSession, landing: str, lake: str, policy: Policy, *, target: str = "production",
               max_files_per_batch: int | None = None, max_bytes_per_batch: int | None = None,
               max_batches: int | None = None, clock: str = "system", until_idle: bool = False,
               partitions: int | None = None, trigger_seconds: float = 1.0, on_batch=None,
               jobs: tuple[Job, ...] = (), fields: journal.SourceFields | None = None,
               **watch) -> StreamSummary:
    """Run the live job: micro-batches over the landing source until it is idle (`until_idle`), `max_batches`
    (heartbeats included) were committed, or the process is stopped; every batch is journaled (payload fields
    `fields` hold the event time and the key), decided for the spec's job on `policy`, then for each of `jobs`.
    `watch`: heartbeat_seconds, never_seen_delay, silent_after, on_diagnostic (see `live_options`). Holds the
    journal's and the targets' locks (one writer at a time) and first reports journaled landing files that
    changed since."""
    _check_bounds(max_files_per_batch=max_files_per_batch, max_bytes_per_batch=max_bytes_per_batch,
                  max_batches=max_batches)
    check_target(target)
    options = live_options(clock, until_idle, trigger_seconds, **watch)
    with _locks(lake, target, jobs):
        return _run_stream(spark, landing, lake, policy, target, max_files_per_batch, max_bytes_per_batch,
                           max_batches, clock, until_idle, partitions, trigger_seconds, on_batch, tuple(jobs),
                           fields or journal.SourceFields(), options)


def live_options(clock: str, until_idle: bool, trigger_seconds: float, heartbeat_seconds: float | None = None,
                 never_seen_delay: float = NEVER_SEEN_DELAY / 1e6, silent_after: float = diagnostics.SILENT_AFTER / 1e6,
                 on_diagnostic=None) -> dict:
    """The live job's watch over time, in seconds: a heartbeat after `heartbeat_seconds` without data (None: the
    trigger interval; 0: none; only on the system clock and when running on, since simulated processing time
    stands still without data); clock rows at processing time - `never_seen_delay` for a partition that never
    had a row; `partition_not_progressing` after `silent_after`; `on_diagnostic` alerts."""
    for name, v in (("heartbeat_seconds", heartbeat_seconds), ("never_seen_delay", never_seen_delay),
                    ("silent_after", silent_after)):
        if v is not None and v < 0:
            raise ValueError(f"{name}: {v} must not be negative")
    beat = trigger_seconds if heartbeat_seconds is None else heartbeat_seconds
    return {"heartbeat_seconds": beat if beat and clock == "system" and not until_idle else None,
            "never_seen_delay": round(never_seen_delay * 1e6), "silent_after": round(silent_after * 1e6),
            "on_diagnostic": on_diagnostic}


def _locks(lake: str, target: str, jobs) -> ExitStack:
    """The journal's lock and the target's of the spec's job and of every job on the source."""
    stack = ExitStack()
    stack.enter_context(locks.hold(locks.journal_lock(lake), "stream"))
    for root in [lake, *[job_root(lake, j) for j in jobs]]:
        stack.enter_context(locks.hold(locks.target_lock(root, target), "stream"))
    return stack


def _run_stream(spark, landing, lake, policy, target, max_files_per_batch, max_bytes_per_batch, max_batches,
                clock, until_idle, partitions, trigger_seconds, on_batch, jobs, fields, options) -> StreamSummary:
    from replay.io import landing as landing_source

    began = time.perf_counter()
    source = landing_source.Landing.of(landing)
    for change in manifest.changes(source, manifest.load(spark, lake)):  # journaled files are never re-read
        print(change.line(), file=sys.stderr, flush=True)
    job = LiveJob(spark, lake, policy, target=target, clock=clock, partitions=partitions, landing=source,
                  on_batch=on_batch, jobs=jobs, fields=fields, **options)
    job.process(spark.createDataFrame([], "source string, source_line long, line string"))  # finish a crashed batch
    landing_source.register(spark)
    reader = (spark.readStream.format("retrace_landing").option("landing", landing)
              .option("exclude", json.dumps(sorted(journal.journaled_sources(spark, lake)))))
    if max_files_per_batch:
        reader = reader.option("maxFilesPerBatch", str(max_files_per_batch))
    if max_bytes_per_batch:
        reader = reader.option("maxBytesPerBatch", str(max_bytes_per_batch))
    return _run_query(job, reader.load(), began, until_idle=until_idle, max_batches=max_batches,
                      trigger_seconds=trigger_seconds)


@dataclass
class KafkaLiveJob(LiveJob):
    """The live job over a Kafka topic: a micro-batch is Kafka records; partition, offset and arrival time
    (the broker's append time) come from Kafka, the rest from the JSON value, kept whole in `payload`."""

    topic: str = ""
    bootstrap: str = ""  # the broker, asked for the topic's end offsets (the backlog)
    unit = "partitions"

    def __post_init__(self):
        super().__post_init__()
        self.offsets = kafka.journaled_offsets(self.spark, self.lake, self.topic, self.store)

    def _backlog(self, report: BatchReport) -> tuple[dict, str]:
        """Records past the journaled offset of each partition (None when the broker cannot be asked)."""
        ends = kafka.end_offsets(self.spark, self.bootstrap, self.topic, self.source_partitions)
        return {p: max(0, ends[p] - self.offsets.get(p, -1) - 1) if p in ends else None
                for p in self.source_partitions}, "records"

    def _input_waiting(self) -> bool:
        """Records past the journaled offsets (unknown when the broker cannot be asked: then none are assumed)."""
        backlog, _ = self._backlog(None)
        return any(n for n in backlog.values())

    def _process(self, records: DataFrame) -> None:
        began = time.perf_counter()
        if not self.caught_up:
            tail = self._tail()
            if tail is not None:  # finish what a crashed run journaled (its offsets are not read again)
                self._decide(tail[1], 0, began)
                began = time.perf_counter()
            self.caught_up = True
        self._start_consumers()
        raw = kafka.raw_from_records(kafka.after(records, self.offsets), self.topic, self.fields)
        with _persisted(journal.normalize(raw, self.source_partitions)) as rows:
            per_partition = {r["partition"]: r for r in rows.groupBy("partition").agg(
                F.count("*").alias("n"), F.max("offset").alias("offset")).collect()}
            if not per_partition:
                return
            base = self.cp.state.seq + 1
            new = self._journal(kafka.with_seq(rows, base), base, sum(r["n"] for r in per_partition.values()))
        self.offsets.update({p: r["offset"] for p, r in per_partition.items()})
        self._decide(new, len(per_partition), began)


KAFKA_RECORDS = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"


def run_kafka_stream(spark: SparkSession, bootstrap: str, topic: str, lake: str, policy: Policy, *,
                     target: str = "production", trust_create_time: bool = False,
                     max_records_per_batch: int | None = None, max_batches: int | None = None,
                     clock: str = "system", until_idle: bool = False, partitions: int | None = None,
                     trigger_seconds: float = 1.0, on_batch=None, jobs: tuple[Job, ...] = (),
                     fields: journal.SourceFields | None = None, **watch) -> StreamSummary:
    """Run the live job over a Kafka topic, from the offsets after the journal's, until it is caught up with
    the topic (`until_idle`), `max_batches` (heartbeats included) were committed, or the process is stopped.
    `watch`: as for run_stream. Holds the journal's and the target's locks (one writer at a time)."""
    _check_bounds(max_records_per_batch=max_records_per_batch, max_batches=max_batches)
    check_target(target)
    options = live_options(clock, until_idle, trigger_seconds, **watch)
    began = time.perf_counter()
    info = kafka.describe(spark, bootstrap, topic)  # a topic that is refused leaves the lake untouched
    kafka.check_arrival_time(info, trust_create_time)
    if partitions is not None and partitions != info.partitions:
        raise ValueError(f"--partitions {partitions} differs from the {info.partitions} partitions of topic {topic}")
    with _locks(lake, target, jobs):
        return _run_kafka_stream(spark, bootstrap, topic, info, lake, policy, target, max_records_per_batch,
                                 max_batches, clock, until_idle, trigger_seconds, on_batch, began, tuple(jobs),
                                 fields or journal.SourceFields(), options)


def _run_kafka_stream(spark, bootstrap, topic, info, lake, policy, target, max_records_per_batch, max_batches,
                      clock, until_idle, trigger_seconds, on_batch, began, jobs, fields, options) -> StreamSummary:
    job = KafkaLiveJob(spark, lake, policy, target=target, clock=clock, partitions=info.partitions,
                       on_batch=on_batch, topic=topic, bootstrap=bootstrap, jobs=jobs, fields=fields, **options)
    job.process(spark.createDataFrame([], KAFKA_RECORDS))  # finish a crashed batch
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", kafka.starting_offsets(topic, info.partitions, job.offsets)))
    if max_records_per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(max_records_per_batch))
    return _run_query(job, reader.load(), began, until_idle=until_idle, max_batches=max_batches,
                      trigger_seconds=trigger_seconds)


def _check_bounds(**bounds: int | None) -> None:
    for name, v in bounds.items():
        if v is not None and v < 1:
            raise ValueError(f"{name}: {v} must be at least 1")


def _idle(query) -> bool:
    """Spark found no new input at its last trigger and is not in one now: time moves by heartbeat only then
    (a backlog is input; a heartbeat over it would estimate arrivals past rows still waiting). Not before the
    query has run its first trigger: while it starts, its status says no data is available, whatever waits."""
    status = query.status
    return query.lastProgress is not None and not status["isTriggerActive"] and not status["isDataAvailable"]


def _run_query(job: LiveJob, batches: DataFrame, began: float, *, until_idle: bool, max_batches: int | None,
               trigger_seconds: float) -> StreamSummary:
    """Micro-batches of `batches` through `job.process` (foreachBatch) with a scratch Spark checkpoint; between
    them, a heartbeat whenever no batch ran for the job's heartbeat interval."""
    scratch = tempfile.mkdtemp(prefix="retrace-stream-")  # Spark's checkpoint: the journal is the real one
    writer = batches.writeStream.foreachBatch(job.process).option("checkpointLocation", scratch)
    writer = writer.trigger(availableNow=True) if until_idle else writer.trigger(processingTime=f"{trigger_seconds} seconds")
    query = writer.start()
    try:
        while query.isActive:
            query.awaitTermination(0.2)
            if max_batches is not None and len(job.reports) >= max_batches:
                query.stop()
            elif job.heartbeat_seconds and time.monotonic() - job.idle_since >= job.heartbeat_seconds and _idle(query):
                job.heartbeat(idle_for=job.heartbeat_seconds)
        query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    reports = job.reports
    return StreamSummary(len(reports), sum(r.rows for r in reports), sum(r.clock_rows for r in reports),
                         time.perf_counter() - began, reports)
