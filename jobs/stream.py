"""The live job: Spark Structured Streaming over the landing source or a Kafka topic; every micro-batch
journals first.

Per micro-batch, in order: (1) append its rows to the journal with new `seq` values, plus a clock row
with the estimated arrival time for every partition seen before that has no new event; (2) decide the
new rows with the engine, from the last checkpoint; (3) commit the outputs, each commit tagged with the
transaction (app, batch); (4) commit the checkpoint. A crash anywhere leaves the batch either in the
journal or not: on restart, rows journaled but not decided yet are decided first, and a commit already
made for a batch is not made again. The journal is the truth; Spark's own checkpoint is only scratch.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field, replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from replay import checkpoints, engine, journal, kafka_source as kafka, locks, manifest, metrics
from replay.checkpoints import Checkpoint, CheckpointMismatch, SourcePartition
from replay.decisions import NEG
from replay.durations import format_instant
from replay.jobs import Job, job_root
from replay.policy import Policy
from replay.runner import check_target, output_path, policy_hash, signature
from replay.state import State
from replay.store import AppTransaction, Replace, TableStore, commit_metadata, default_store

CLOCKS = ("system", "simulated")


def processing_time(clock: str, latest_arrival: int | None) -> int:
    """Now, in microseconds: the wall clock, or (simulated, for tests and demos) the latest arrival seen."""
    if clock == "system":
        return time.time_ns() // 1000
    return latest_arrival if latest_arrival is not None else 0


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

    def line(self) -> str:
        delay = "n/a" if self.watermark_delay_s is None else f"{self.watermark_delay_s:.1f}s"
        waiting = "?" if self.files_waiting is None else self.files_waiting
        lag = f"{waiting} landing files waiting, " if self.unit == "files" else ""
        return (f"batch {self.batch}: {self.files} {self.unit}, {self.rows} rows (seq {self.seq_from}-{self.seq_to}, "
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
    landing: object | None = None  # a replay.landing.Landing, to report files waiting
    reports: list[BatchReport] = field(default_factory=list)
    on_batch: object | None = None  # called with each BatchReport (progress, benchmarks)
    jobs: tuple[Job, ...] = ()  # users' jobs on this source, each deciding from its own checkpoint
    fields: journal.SourceFields = field(default_factory=journal.SourceFields)  # the payload's time and key
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

    def _load(self) -> Checkpoint:
        cp = checkpoints.load(self.spark, self.lake, self.target, self.store, policy=self._policy_json)
        return cp or Checkpoint(-1, State(), {}, self._policy_json)

    # -- the micro-batch -------------------------------------------------------------------------------

    def process(self, lines: DataFrame, spark_batch_id: int | None = None) -> None:
        """foreachBatch: journal the batch's landing lines, then decide and commit them."""
        lines = lines.persist()  # read from the landing once
        try:
            self._process(lines)
        finally:
            lines.unpersist()

    def _process(self, lines: DataFrame) -> None:
        began = time.perf_counter()
        files = sorted(r["source"] for r in lines.select("source").distinct().collect())
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
        rows = self._append(lines, files)
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

    def _append(self, lines: DataFrame, files: list[str]) -> DataFrame:
        """Journal the batch: its rows in (file, line) order, then the clock rows; returns the new rows."""
        rows = journal.normalize(journal.raw_from_lines(lines, self.fields), self.source_partitions).persist()
        per_file = {r["source"]: r["lines"] for r in rows.groupBy("source").agg(F.max("source_line").alias("lines")).collect()}
        base = self.cp.state.seq + 1
        observed = manifest.observe(self.landing, files) if self.landing is not None else {}
        try:
            new = self._journal(journal.with_seq(self.spark, rows, files, per_file, base), base,
                                sum(per_file.values()))
        finally:
            rows.unpersist()
        manifest.record(self.spark, self.lake, observed, self.store)
        return new

    def _journal(self, events: DataFrame, base: int, count: int) -> DataFrame:
        """Append `count` source rows (seq `base`...) and the clock rows after them; returns the new rows.
        Shared by every source: only how a batch becomes sequenced rows differs."""
        path = journal.journal_path(self.lake)
        seen = {r["partition"]: r for r in events.where(F.col("kind") == "event").groupBy("partition").agg(
            F.max(F.unix_micros("arrival_time")).alias("arrival"), F.max("offset").alias("offset")).collect()}
        latest = max([r["arrival"] for r in seen.values()] + [s.last_arrival for s in self.cp.source.values()],
                     default=None)
        now = processing_time(self.clock, latest)
        clocks = self._clock_rows(now, seen, base + count)
        _crash_point("journal")
        self.store.write(events.unionByName(clocks).coalesce(1), path,
                         metadata={"job": "replay stream", "table": "journal", "seq_from": base, "rows": count})
        _crash_point("journaled")
        return self.store.read(self.spark, path).where(F.col("seq") >= base)

    def _clock_rows(self, now: int, seen: dict, first_seq: int) -> DataFrame:
        """Estimated arrival times (spec 4) for partitions seen before with no event in this batch:
        last arrival + processing time elapsed since it was seen."""
        out = []
        for p, s in sorted(self.cp.source.items()):
            if p in seen:
                continue
            estimate = s.last_arrival + max(0, now - s.seen_at)
            note = {"estimated_arrival": "last_arrival + (processing_time - seen_at)",
                    "last_arrival": format_instant(s.last_arrival), "seen_at": format_instant(s.seen_at),
                    "processing_time": format_instant(now)}
            out.append((first_seq + len(out), p, s.last_offset, "clock", estimate, json.dumps(note)))
        df = self.spark.createDataFrame(out, "seq long, partition int, offset long, kind string, arrival long, "
                                             "payload string")
        return df.select("seq", "partition", "offset", "kind", F.timestamp_micros("arrival").alias("arrival_time"),
                         F.lit(None).cast("timestamp").alias("event_time"), F.lit(None).cast("string").alias("key"),
                         F.lit(None).cast("double").alias("value"), "payload",
                         F.lit(None).cast("string").alias("source"), F.lit(None).cast("long").alias("source_line"))

    def _decide(self, rows: DataFrame, files: int, began: float) -> None:
        """Decide `rows` (the journal after the checkpoint) from the checkpoint; commit outputs, then state;
        then every user job on the source from its own checkpoint."""
        batch = self.cp.batch + 1
        span = rows.agg(F.min("seq").alias("lo"), F.max("seq").alias("hi"), F.count("*").alias("n"),
                        F.count(F.when(F.col("kind") == "clock", 1)).alias("clocks")).first()
        source = self._source_after(rows)
        self.cp = commit_batch(self, self.lake, self.target, self.policy, None, self.cp, rows, span, source)
        self.reports.append(self._report(batch, files, span, began))
        print(self.reports[-1].line(), file=sys.stderr, flush=True)
        for consumer in self.consumers:
            consumer.catch_up(self)
        if self.on_batch is not None:
            self.on_batch(self.reports[-1])

    def _source_after(self, rows: DataFrame) -> dict[int, SourcePartition]:
        """Last arrival, offset and seen-at time per partition, after `rows` (its clock rows name the
        processing time they were made at; without one, the latest arrival stands in for it)."""
        stats = rows.where(F.col("kind") == "event").groupBy("partition").agg(
            F.max(F.unix_micros("arrival_time")).alias("arrival"), F.max("offset").alias("offset")).collect()
        noted = rows.where(F.col("kind") == "clock").select(
            F.get_json_object("payload", "$.processing_time").alias("t")).agg(F.max("t").alias("t")).first()["t"]
        latest = max([r["arrival"] for r in stats], default=None)
        now = _micros(noted) if noted else (latest if self.clock == "simulated" or latest is None
                                             else processing_time(self.clock, latest))
        source = dict(self.cp.source)
        for r in stats:
            source[r["partition"]] = SourcePartition(r["arrival"], now, r["offset"])
        return source

    def _report(self, batch: int, files: int, span, began: float) -> BatchReport:
        owm = [s.owm for s in self.cp.state.scopes.values() if s.owm > NEG]
        latest = max([s.last_arrival for s in self.cp.source.values()], default=None)
        delay = (latest - min(owm)) / 1e6 if owm and latest is not None else None
        waiting = None
        if self.landing is not None:
            if self.sources is None:
                self.sources = journal.journaled_sources(self.spark, self.lake, self.store)
            waiting = sum(1 for f in self.landing.files() if f.name not in self.sources)
        return BatchReport(batch, files, span["n"], span["clocks"], span["lo"], span["hi"], delay, waiting,
                           time.perf_counter() - began, time.time(), self.unit)


def commit_batch(live: "LiveJob", root: str, target: str, policy: Policy, job: Job | None, cp: Checkpoint,
                 rows: DataFrame, span, source: dict) -> Checkpoint:
    """Decide `rows` (the journal after `cp`) for one job and commit its outputs, then its checkpoint; every
    commit is tagged with the transaction (app, batch), so a batch retried after a crash is not committed twice.
    Returns the checkpoint as committed."""
    spark, store, batch = live.spark, live.store, cp.batch + 1
    crash = lambda name: _crash_point(name if job is None else f"{job.name}:{name}")  # noqa: E731
    history = store.read(spark, journal.journal_path(live.lake))  # for duplicate (partition, offset)
    history = history.where(F.col("seq") <= cp.state.seq)
    out = engine.replay(rows, policy, flush=True, state=cp.state, partitions=live.source_partitions,
                        keep_state=True, history=history, job=job)
    tables = out.tables()
    txn = lambda name: AppTransaction(f"retrace-{target}-{name}", batch)  # noqa: E731
    # the batch is the run: every table's commit for it names the same run, whichever process made it
    meta = lambda name: {"job": "replay stream", "retrace_job": job.name if job else "default",  # noqa: E731
                         "target": target, "table": name, "policy": policy_hash(policy), "seq_from": span["lo"],
                         "seq_to": span["hi"] + 1, "batch": batch, "run": f"live-batch-{batch}"}
    for name in ("decisions", "dead_letters", "watermarks"):
        store.write(tables[name], output_path(root, target, name), txn=txn(name), metadata=meta(name))
        crash(name)
    # emitted windows are appended; the open ones (null emitted_at, what a flush would emit now) replaced
    store.write(tables["windows"], output_path(root, target, "windows"), txn=txn("windows"),
                replace=Replace("emitted_at", span["lo"], None, nulls=True), metadata=meta("windows"))
    crash("windows")
    written = {n: store.read(spark, output_path(root, target, n)) for n in ("decisions", "dead_letters")}
    store.write(metrics.hourly(written["decisions"], written["dead_letters"]),
                output_path(root, target, "metrics"), mode="overwrite", metadata=meta("metrics"))
    state = out.state.advanced(span["hi"])
    signed = signature(policy, job)
    checkpoints.save(spark, root, target, Checkpoint(batch, state, source, signed), store,
                     metadata=meta("checkpoints"))
    crash("checkpoint")
    out.unpersist()
    return _committed(live, root, target, Checkpoint(batch, state, source, signed))


def _committed(live: "LiveJob", root: str, target: str, cp: Checkpoint) -> Checkpoint:
    """The checkpoint as committed: its open windows and keys read back (this cuts the lineage)."""
    def read(table: str, present: bool):
        if not present:
            return None
        df = live.store.read(live.spark, output_path(root, target, table))
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
        span = rows.agg(F.min("seq").alias("lo"), F.max("seq").alias("hi"), F.count("*").alias("n")).first()
        if not span["n"]:
            return
        began = time.perf_counter()
        try:
            self.cp = commit_batch(live, self.root, live.target, self.job.policy, self.job, self.cp, rows, span, {})
        except Exception as e:  # noqa: BLE001 - one job's failure must not stop the source or the other jobs
            self.failures += 1
            print(f"{self.job.describe()}: failed on journal seq {span['lo']}-{span['hi']} ({type(e).__name__}: "
                  f"{' '.join(str(e).split())[:300]}); retried from its checkpoint at the next batch",
                  file=sys.stderr, flush=True)
            return
        print(f"{self.job.describe()}: batch {self.cp.batch}: {span['n']} rows (seq {span['lo']}-{span['hi']}) "
              f"committed in {time.perf_counter() - began:.1f}s", file=sys.stderr, flush=True)


def _micros(iso: str) -> int:
    from replay.durations import parse_instant

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
               jobs: tuple[Job, ...] = (), fields: journal.SourceFields | None = None) -> StreamSummary:
    """Run the live job: micro-batches over the landing source until it is idle (`until_idle`), `max_batches`
    were committed, or the process is stopped; every batch is journaled (payload fields `fields` hold the
    event time and the key), decided for the spec's job on `policy`, then for each of `jobs`. Holds the
    journal's and the targets' locks (one writer at a time) and first reports journaled landing files that
    changed since."""
    _check_bounds(max_files_per_batch=max_files_per_batch, max_bytes_per_batch=max_bytes_per_batch,
                  max_batches=max_batches)
    check_target(target)
    with _locks(lake, target, jobs):
        return _run_stream(spark, landing, lake, policy, target, max_files_per_batch, max_bytes_per_batch,
                           max_batches, clock, until_idle, partitions, trigger_seconds, on_batch, tuple(jobs),
                           fields or journal.SourceFields())


def _locks(lake: str, target: str, jobs) -> ExitStack:
    """The journal's lock and the target's of the spec's job and of every job on the source."""
    stack = ExitStack()
    stack.enter_context(locks.hold(locks.journal_lock(lake), "stream"))
    for root in [lake, *[job_root(lake, j) for j in jobs]]:
        stack.enter_context(locks.hold(locks.target_lock(root, target), "stream"))
    return stack


def _run_stream(spark, landing, lake, policy, target, max_files_per_batch, max_bytes_per_batch, max_batches,
                clock, until_idle, partitions, trigger_seconds, on_batch, jobs, fields) -> StreamSummary:
    from replay import landing as landing_source

    began = time.perf_counter()
    source = landing_source.Landing.of(landing)
    for change in manifest.changes(source, manifest.load(spark, lake)):  # journaled files are never re-read
        print(change.line(), file=sys.stderr, flush=True)
    job = LiveJob(spark, lake, policy, target=target, clock=clock, partitions=partitions, landing=source,
                  on_batch=on_batch, jobs=jobs, fields=fields)
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
    unit = "partitions"

    def __post_init__(self):
        super().__post_init__()
        self.offsets = kafka.journaled_offsets(self.spark, self.lake, self.topic, self.store)

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
        rows = journal.normalize(raw, self.source_partitions).persist()
        try:
            per_partition = {r["partition"]: r for r in rows.groupBy("partition").agg(
                F.count("*").alias("n"), F.max("offset").alias("offset")).collect()}
            if not per_partition:
                return
            base = self.cp.state.seq + 1
            new = self._journal(kafka.with_seq(rows, base), base, sum(r["n"] for r in per_partition.values()))
        finally:
            rows.unpersist()
        self.offsets.update({p: r["offset"] for p, r in per_partition.items()})
        self._decide(new, len(per_partition), began)


KAFKA_RECORDS = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"


def run_kafka_stream(spark: SparkSession, bootstrap: str, topic: str, lake: str, policy: Policy, *,
                     target: str = "production", trust_create_time: bool = False,
                     max_records_per_batch: int | None = None, max_batches: int | None = None,
                     clock: str = "system", until_idle: bool = False, partitions: int | None = None,
                     trigger_seconds: float = 1.0, on_batch=None, jobs: tuple[Job, ...] = (),
                     fields: journal.SourceFields | None = None) -> StreamSummary:
    """Run the live job over a Kafka topic, from the offsets after the journal's, until it is caught up with
    the topic (`until_idle`), `max_batches` were committed, or the process is stopped. Holds the journal's and
    the target's locks (one writer at a time)."""
    _check_bounds(max_records_per_batch=max_records_per_batch, max_batches=max_batches)
    check_target(target)
    began = time.perf_counter()
    info = kafka.describe(spark, bootstrap, topic)  # a topic that is refused leaves the lake untouched
    kafka.check_arrival_time(info, trust_create_time)
    if partitions is not None and partitions != info.partitions:
        raise ValueError(f"--partitions {partitions} differs from the {info.partitions} partitions of topic {topic}")
    with _locks(lake, target, jobs):
        return _run_kafka_stream(spark, bootstrap, topic, info, lake, policy, target, max_records_per_batch,
                                 max_batches, clock, until_idle, trigger_seconds, on_batch, began, tuple(jobs),
                                 fields or journal.SourceFields())


def _run_kafka_stream(spark, bootstrap, topic, info, lake, policy, target, max_records_per_batch, max_batches,
                      clock, until_idle, trigger_seconds, on_batch, began, jobs, fields) -> StreamSummary:
    job = KafkaLiveJob(spark, lake, policy, target=target, clock=clock, partitions=info.partitions,
                       on_batch=on_batch, topic=topic, jobs=jobs, fields=fields)
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


def _run_query(job: LiveJob, batches: DataFrame, began: float, *, until_idle: bool, max_batches: int | None,
               trigger_seconds: float) -> StreamSummary:
    """Micro-batches of `batches` through `job.process` (foreachBatch) with a scratch Spark checkpoint."""
    scratch = tempfile.mkdtemp(prefix="retrace-stream-")  # Spark's checkpoint: the journal is the real one
    writer = batches.writeStream.foreachBatch(job.process).option("checkpointLocation", scratch)
    writer = writer.trigger(availableNow=True) if until_idle else writer.trigger(processingTime=f"{trigger_seconds} seconds")
    query = writer.start()
    try:
        while query.isActive:
            query.awaitTermination(0.2)
            if max_batches is not None and len(job.reports) >= max_batches:
                query.stop()
        query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    reports = job.reports
    return StreamSummary(len(reports), sum(r.rows for r in reports), sum(r.clock_rows for r in reports),
                         time.perf_counter() - began, reports)
