"""What a live batch does not commit itself (issue 46): a job's metrics and watermark timeline, derivable from its
decisions and dead letters, the lead's lag and diagnostics, observations, and the landing files' manifest rows
(bookkeeping for the change check; the next start records any a kill lost). Written every `flush_every` batches
and when the stream stops, so a batch commits only the journal, its outputs and its checkpoint.

The metrics table names the rows it covers (its commit's `seq_to`); a flush merges the metrics of the rows decided
after them, up to the checkpoint: from the counts the batches' decide runs kept (`Held`), or else decided again from
the tables: a SIGKILL between flushes loses no metrics (the next run's first flush covers them) and counts none
twice. The timeline continues from its last step the same way.
Observations not written yet are lost with the process."""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.live import diagnostics, lag
from jobs.live.commit import WRITER, crash_point
from replay.engine import metrics, one_pass, watermarks
from replay.engine.pipeline import engine_rows, timeline_rows
from replay.io import journal, manifest
from replay.io.lake import Lake
from replay.io.store import AppTransaction, commit_metadata
from replay.model.policy import policy_hash
from replay.ops import outputs
from replay.ops.run import arrival_hours, hours_between


@dataclass(frozen=True)
class Held:
    """What the decide runs of a job's consecutive batches, journal seq [start, upto), found for its flush: their
    metric counts (partition, hour, counts: `metrics.PARTIAL`) and timeline steps (partition, seq, arrival, wp,
    output watermark), a few rows a batch (`one_pass.scope_ends`). A flush merges them when they cover exactly
    the rows its tables lack; else (a restart, a flush that failed, a policy the one pass does not decide) it decides
    those rows again."""

    start: int
    upto: int
    metrics: tuple[tuple, ...] = ()
    steps: tuple[tuple, ...] = ()

    @classmethod
    def of(cls, start: int, upto: int, partials: list | None) -> "Held | None":
        if partials is None:
            return None
        metric, step = one_pass.METRICS, one_pass.STEP
        return cls(start, upto, tuple((r.s, r.x, list(r.counts)) for r in partials if r.tag == metric),
                   tuple((r.s, r.y, r.z, r.counts[0], r.counts[1]) for r in partials if r.tag == step))

    def then(self, more: "Held | None") -> "Held | None":
        """These batches' partials and the next batch's, when it follows them (else the next batch's alone)."""
        if more is None or more.start != self.upto:
            return more
        return Held(self.start, more.upto, self.metrics + more.metrics, self.steps + more.steps)

    def covers(self, start: int, upto: int) -> bool:
        return (self.start, self.upto) == (start, upto)


def commit_derived(live, consumer) -> bool:
    """What `consumer`'s batches left to the flush: its metrics, then its watermark timeline, merged from what its
    batches held (`Consumer.held`), or else from the decisions of the rows after what each covers (derived once
    when both start at the same row, as they usually do). Whether it decided rows again."""
    views = {}

    def decided(start: int, upto: int) -> DataFrame:
        if (start, upto) not in views:
            views[start, upto] = outputs.decisions(live.spark, consumer.where, live.store, start, upto)
        return views[start, upto]

    commit_metrics(live, consumer, decided, consumer.held)
    commit_timeline(live, consumer, decided, consumer.held)
    return bool(views)


def commit_metrics(live, consumer, derive, held: Held | None = None) -> None:
    """Bring `consumer`'s metrics table up to its checkpoint: merge the metrics of the rows decided after those
    the table covers (`metrics.combine`), or compute them over every decided row when the table covers none
    (no table, one from an older Retrace, or one that does not say which rows it covers)."""
    spark, store, where, cp = live.spark, live.store, consumer.where, consumer.cp
    upto = cp.state.seq + 1  # rows of a batch decided but not checkpointed (a follower that failed) wait
    path = where.table("metrics")
    meta = commit_metadata(spark, path) if store.exists(path) else None
    covered = meta.get("seq_to") if meta else None
    table = store.read_current(spark, path) if isinstance(covered, int) else None
    if table is not None and set(metrics.COLUMNS) - set(table.columns):
        table = None
    if table is not None and covered >= upto:
        return
    start = covered if table is not None else 0
    if upto <= start:
        return
    dead = store.read_current(spark, where.table("dead_letters")).where(F.col("seq").between(start, upto - 1))
    if held is not None and held.covers(start, upto):  # the batches' own counts: nothing is decided again
        partials = spark.createDataFrame(held.metrics, "partition int, hour long, counts array<long>").select(
            "partition", F.timestamp_micros("hour").alias("hour"), "counts")
        events = [p for p, _, counts in held.metrics if counts[0]]
        journaled = store.read(spark, Lake(live.lake).journal)
        before = journal.last_events_before(journaled, start, sorted(set(events))) if start else None
        stretch = metrics.of_partials(partials, dead, journaled.where(F.col("seq").between(start, upto - 1)), before)
        hours = [h for _, h, _ in held.metrics]
        hours = hours_between(min(hours), max(hours)) if hours else None
    else:
        decided = derive(start, upto)
        before = _last_events(live, decided, start) if table is not None else None
        stretch = metrics.of_stretch(decided, dead, before) if before is not None else metrics.hourly(decided, dead)
        hours = arrival_hours(decided)
    merged = stretch if table is None else metrics.combine(table, stretch)
    # one file in (partition, hour) order, sorted where it is gathered (a global sort would sample first)
    store.write(merged.coalesce(1).sortWithinPartitions("partition", "hour"), path, mode="overwrite",
                metadata={**_flushed(consumer, "metrics", start, upto),
                          "hours": hours})  # reported by retrace_outside_runs
    crash_point(f"{consumer.job.name}:metrics")


def commit_timeline(live, consumer, derive, held: Held | None = None) -> None:
    """Bring `consumer`'s watermark timeline up to its checkpoint: the steps of the rows decided after its last
    step, each partition continuing from the step it had reached (the table's highest), appended in one commit.
    Rows between a partition's last step and the rows the table covers reach no new step: deciding them again
    adds nothing, so a flush after a SIGKILL neither loses nor doubles a step."""
    spark, store, where, cp = live.spark, live.store, consumer.where, consumer.cp
    upto = cp.state.seq + 1
    path = where.table("watermarks")
    reached, start = {}, 0
    if store.exists(path):
        meta = commit_metadata(spark, path) or {}
        ends = store.read_current(spark, path).groupBy("partition").agg(
            F.max("seq").alias("seq"), F.max(F.unix_micros("watermark")).alias("wp"))
        for r in ends.collect():
            reached[r["partition"]] = r["wp"]
            start = max(start, r["seq"] + 1)
        if isinstance(meta.get("seq_to"), int):
            start = max(start, meta["seq_to"])
    if upto <= start:
        return
    if held is not None and held.covers(start, upto):  # the batches' own steps: nothing is decided again
        decided = spark.createDataFrame(held.steps, "partition int, seq long, arrival long, wp long, "
                                        "output_watermark long")
    else:
        decided = engine_rows(derive(start, upto))
    store.write(timeline_rows(watermarks.timeline(decided, before=reached)).coalesce(1), path,
                metadata=_flushed(consumer, "watermarks", start, upto))
    crash_point(f"{consumer.job.name}:watermarks")


def _flushed(consumer, table: str, start: int, upto: int) -> dict:
    """A flush's commit metadata: the rows [start, upto) it covers, as of the consumer's last batch."""
    batch = consumer.cp.batch
    return {"writer": WRITER, "job": consumer.job.name, "target": consumer.where.target, "table": table,
            "policy": policy_hash(consumer.job.policy), "seq_from": start, "seq_to": upto, "batch": batch,
            "run": f"live-batch-{batch}"}


def _last_events(live, decisions: DataFrame, first: int) -> DataFrame:
    """Each partition of the stretch's events: its last event before seq `first` (backward offsets compare to it)."""
    partitions = sorted(r[0] for r in decisions.where(F.col("kind") == "event").select("partition").distinct()
                        .collect())
    return journal.last_events_before(live.store.read(live.spark, Lake(live.lake).journal), first, partitions)


class Observations:
    """The lead's lag and diagnostics rows not written yet (`observe.record` adds a batch's), and the manifest rows of
    the landing files journaled since the last flush (`landed`), kept as driver-side values: no JVM object lives
    from one batch to the next."""

    SCHEMAS = {"lag": lag.SCHEMA, "diagnostics": diagnostics.SCHEMA}

    def __init__(self):
        self.rows: dict[str, list[tuple]] = {t: [] for t in self.SCHEMAS}
        self.batch: int | None = None  # the last batch whose rows are held
        self.files: dict[str, manifest.Recorded] = {}

    def add(self, table: str, rows: list[tuple], batch: int) -> None:
        self.rows[table] += rows
        self.batch = batch

    def landed(self, files: dict[str, manifest.Recorded]) -> None:
        """Journaled landing files, as they were read: their manifest rows wait for the flush (bookkeeping for the
        change check, not the batch's output; a kill before it leaves them to the next start, which records them)."""
        self.files.update(files)

    def take(self) -> "Observations":
        """The rows held, to commit (a flush running beside the batches), and none held here from now on."""
        taken = Observations()
        taken.rows, taken.batch, taken.files = self.rows, self.batch, self.files
        self.rows, self.files = {t: [] for t in self.SCHEMAS}, {}
        return taken

    def commit(self, live) -> None:
        """Append the landing files' manifest rows, then each table's rows held, in one commit per table (tagged
        with the last batch held: written once), and forget them."""
        files, self.files = self.files, {}
        manifest.record(live.spark, live.lake, files, live.store, new=True)
        lead = live.lead
        for table, schema in self.SCHEMAS.items():
            held, self.rows[table] = self.rows[table], []
            if not held:
                continue
            live.store.write(lag.frame(live.spark, held, schema).coalesce(1), lead.where.table(table),
                             txn=AppTransaction(f"retrace-{lead.where.target}-{table}", self.batch),
                             metadata={"writer": WRITER, "job": lead.job.name, "target": lead.where.target,
                                       "batch": self.batch, "table": table})
