"""What a live batch does not commit itself (issue 46): a job's metrics and watermark timeline, derivable from its
decisions and dead letters, and the lead's lag and diagnostics, observations. Written every `flush_every` batches
and when the stream stops, so a batch commits only the journal, its outputs and its checkpoint.

The metrics table names the rows it covers (its commit's `seq_to`); a flush merges the metrics of the rows decided
after them, up to the checkpoint, read back from the tables: a SIGKILL between flushes loses no metrics (the next
run's first flush covers them) and counts none twice. The timeline continues from its last step the same way.
Observations not written yet are lost with the process."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.live import diagnostics, lag
from jobs.live.commit import WRITER, crash_point
from replay.engine import metrics, watermarks
from replay.engine.pipeline import engine_rows, timeline_rows
from replay.io import journal
from replay.io.lake import Lake
from replay.io.store import AppTransaction, commit_metadata
from replay.model.policy import policy_hash
from replay.ops import outputs
from replay.ops.run import arrival_hours


def commit_derived(live, consumer) -> None:
    """What `consumer`'s batches left to the flush: its metrics, then its watermark timeline, from the decisions of
    the rows after what each covers (derived once when both start at the same row, as they usually do)."""
    views = {}

    def decided(start: int, upto: int) -> DataFrame:
        if (start, upto) not in views:
            views[start, upto] = outputs.decisions(live.spark, consumer.where, live.store, start, upto)
        return views[start, upto]

    commit_metrics(live, consumer, decided)
    commit_timeline(live, consumer, decided)


def commit_metrics(live, consumer, derive) -> None:
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
    decided = {"decisions": derive(start, upto),
               "dead_letters": store.read_current(spark, where.table("dead_letters"))
               .where(F.col("seq").between(start, upto - 1))}
    if table is None:
        merged = metrics.hourly(decided["decisions"], decided["dead_letters"])
    else:
        merged = metrics.combine(table, metrics.of_stretch(decided["decisions"], decided["dead_letters"],
                                                           _last_events(live, decided["decisions"], start)))
    # one file in (partition, hour) order, sorted where it is gathered (a global sort would sample first)
    store.write(merged.coalesce(1).sortWithinPartitions("partition", "hour"), path, mode="overwrite",
                metadata={**_flushed(consumer, "metrics", start, upto),
                          "hours": arrival_hours(decided["decisions"])})  # reported by retrace_outside_runs
    crash_point(f"{consumer.job.name}:metrics")


def commit_timeline(live, consumer, derive) -> None:
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
    """The lead's lag and diagnostics rows not written yet (`observe.record` adds a batch's), kept as driver-side
    tuples: no JVM object lives from one batch to the next."""

    SCHEMAS = {"lag": lag.SCHEMA, "diagnostics": diagnostics.SCHEMA}

    def __init__(self):
        self.rows: dict[str, list[tuple]] = {t: [] for t in self.SCHEMAS}
        self.batch: int | None = None  # the last batch whose rows are held

    def add(self, table: str, rows: list[tuple], batch: int) -> None:
        self.rows[table] += rows
        self.batch = batch

    def take(self) -> "Observations":
        """The rows held, to commit (a flush running beside the batches), and none held here from now on."""
        taken = Observations()
        taken.rows, taken.batch, self.rows = self.rows, self.batch, {t: [] for t in self.SCHEMAS}
        return taken

    def commit(self, live) -> None:
        """Append each table's rows held, in one commit per table (tagged with the last batch held: written
        once), and forget them."""
        lead = live.lead
        for table, schema in self.SCHEMAS.items():
            held, self.rows[table] = self.rows[table], []
            if not held:
                continue
            live.store.write(lag.frame(live.spark, held, schema).coalesce(1), lead.where.table(table),
                             txn=AppTransaction(f"retrace-{lead.where.target}-{table}", self.batch),
                             metadata={"writer": WRITER, "job": lead.job.name, "target": lead.where.target,
                                       "batch": self.batch, "table": table})
