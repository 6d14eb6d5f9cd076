"""The replay engine: journal rows and a policy in, decisions, windows, dead letters, watermark
timeline and metrics out. Functions from DataFrames to DataFrames; no I/O, no clock."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from replay import idle, metrics, watermarks, windows
from replay.decisions import NEG, last_reason
from replay.policy import Policy

KEPT = ("seq", "partition", "offset", "kind", "arrival", "key", "value", "action", "reasons", "timestamp",
        "watermark", "wp", "output_watermark")


@dataclass
class Outputs:
    decisions: DataFrame
    windows: DataFrame
    dead_letters: DataFrame
    watermarks: DataFrame
    metrics: DataFrame
    cached: list[DataFrame] = field(default_factory=list)  # persisted intermediates, freed by unpersist()

    def tables(self) -> dict[str, DataFrame]:
        return {"decisions": self.decisions, "windows": self.windows, "dead_letters": self.dead_letters,
                "watermarks": self.watermarks, "metrics": self.metrics}

    def unpersist(self) -> None:
        for df in self.cached:
            df.unpersist()


def _instant(c: str) -> Column:
    """Microseconds -> UTC timestamp; -infinity -> null."""
    return F.when(F.col(c) > NEG, F.timestamp_micros(F.col(c)))


def prepare(journal: DataFrame) -> DataFrame:
    """Journal rows the semantics act on (events and clocks), times in integer microseconds."""
    return journal.where(F.col("kind").isin("event", "clock")).select(
        "seq", "partition", "offset", "kind",
        F.unix_micros("arrival_time").alias("arrival"),
        F.unix_micros("event_time").alias("et"),
        "key", "value",
    )


def replay(journal: DataFrame, policy: Policy, *, flush: bool = True, since_seq: int | None = None,
           materialize: Callable[[DataFrame], DataFrame] | None = None) -> Outputs:
    """Run the spec over `journal` (rows with seq, partition, offset, kind, arrival_time, event_time,
    key, value). `flush`: the journal is complete, so open windows are flushed (if the policy says so).
    `since_seq`: keep only outputs of rows from this seq on (the history before it still counts).
    `materialize`: how the per-row results, which every output reads, are kept (default: persisted)."""
    rows = prepare(journal)
    decided, wp_start = watermarks.decide(rows, policy)
    if not wp_start.values:
        return _empty(journal)
    cached = [decided]
    if policy.idle_timeout is not None and policy.window is not None:
        decided = decided.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(decided)
        raised = idle.raises(decided, policy).persist()
        cached.append(raised)
        decided = decided.join(F.broadcast(raised), "seq", "left").fillna(NEG, ["raise"])
        raise_start = watermarks.raise_starts(raised, wp_start)
    else:
        raise_start = None  # no idle timeout: nothing raises the output watermark
    full = watermarks.output_watermark(decided, policy, wp_start, raise_start).select(*KEPT)
    if materialize is None:
        full = full.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(full)
    else:
        full = materialize(full)

    in_range = (lambda df: df) if since_seq is None else (lambda df: df.where(F.col("seq") >= since_seq))
    decisions = in_range(full).select(
        "seq", "partition", "offset", "kind", "action", "reasons",
        _instant("timestamp").alias("timestamp"),
        _instant("watermark").alias("watermark"),
        _instant("output_watermark").alias("output_watermark"),
        F.timestamp_micros("arrival").alias("arrival_time"),
    )
    dropped = in_range(full).where(F.col("action").isin("dropped", "quarantined")).select(
        "seq", "partition", "offset", last_reason().alias("reason"),
        F.lit(None).cast("timestamp").alias("window_start"),
        F.timestamp_micros("arrival").alias("arrival_time"),
    )
    malformed = in_range(_malformed(journal))
    if policy.window is not None:
        win, closed, closes = windows.windows_and_closed(full, policy, flush and policy.flush_at_end)
        cached.append(closes)
        if since_seq is not None:
            win = win.where(F.col("emitted_at").isNull() | (F.col("emitted_at") >= since_seq))
            closed = closed.where(F.col("seq") >= since_seq)
        dead = dropped.unionByName(closed).unionByName(malformed)
    else:
        win = _no_windows(journal)
        dead = dropped.unionByName(malformed)
    timeline = watermarks.timeline(in_range(full)).select(
        "partition", "seq", F.timestamp_micros("arrival").alias("arrival_time"),
        _instant("wp").alias("watermark"), _instant("output_watermark").alias("output_watermark"),
    )
    return Outputs(decisions, win, dead, timeline, metrics.hourly(decisions, dead), cached)


def _malformed(journal: DataFrame) -> DataFrame:
    """Landing rows that could not be placed are dead letters too: nothing is lost."""
    return journal.where(F.col("kind") == "malformed").select(
        "seq", "partition", "offset", F.lit("malformed").alias("reason"),
        F.lit(None).cast("timestamp").alias("window_start"), "arrival_time",
    )


def _no_windows(journal: DataFrame) -> DataFrame:
    spark = journal.sparkSession
    return spark.createDataFrame([], WINDOW_SCHEMA)


WINDOW_SCHEMA = (
    "window_start timestamp, window_end timestamp, key string, partition int, count long, sum double, emitted_at long"
)


def _empty(journal: DataFrame) -> Outputs:
    spark = journal.sparkSession
    decisions = spark.createDataFrame([], "seq long, partition int, offset long, kind string, action string, "
                                          "reasons array<string>, timestamp timestamp, watermark timestamp, "
                                          "output_watermark timestamp, arrival_time timestamp")
    dead = _malformed(journal)
    timeline = spark.createDataFrame([], "partition int, seq long, arrival_time timestamp, watermark timestamp, "
                                         "output_watermark timestamp")
    return Outputs(decisions, _no_windows(journal), dead, timeline, metrics.hourly(decisions, dead))
