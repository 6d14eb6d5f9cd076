"""Watermarks (spec section 4): scope and partition watermarks per row, then the output watermark.

Every watermark is a running maximum. Rows are cut into chunks of consecutive `seq`; a small table of
each chunk's maxima gives every chunk its starting values, and then each chunk computes its running
maxima on its own (window functions over `chunk`). One shuffle, and no task needs all rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StructField, StructType

from replay.decisions import NEG, arrival_checks, ordering_check
from replay.policy import Policy, Punctuated


CHUNK_ROWS = 250_000  # seq values per chunk: a chunk is one task of the watermark pass


def chunk_column(size: int = CHUNK_ROWS) -> Column:
    return F.floor(F.col("seq") / size).cast("int")


@dataclass(frozen=True)
class Starts:
    """Each timeline's value at the start of every chunk: the maximum over earlier chunks (NEG before any).
    Built from a small table of per-chunk maxima, so a chunk can run its running maxima on its own."""

    first: int
    values: dict  # timeline key -> [start of chunk first, first + 1, ...]

    @property
    def last(self) -> int:
        return self.first + len(next(iter(self.values.values()))) - 1

    @classmethod
    def from_maxima(cls, maxima: list[tuple[int, object, int | None]], keys: list,
                    span: tuple[int, int] | None = None) -> "Starts":
        chunks = [c for c, _, _ in maxima]
        first, last = span or ((min(chunks), max(chunks)) if chunks else (0, 0))
        table = {(c, k): v for c, k, v in maxima if v is not None}
        values = {}
        for key in keys:
            acc, starts = NEG, []
            for c in range(first, last + 1):
                starts.append(acc)
                if (c, key) in table:
                    acc = max(acc, table[(c, key)])
            values[key] = starts
        return cls(first, values)

    def name(self, key, prefix: str) -> str:
        return f"{prefix}{list(self.values).index(key)}"

    def attach(self, rows: DataFrame, prefix: str) -> DataFrame:
        """Adds one column per timeline (`prefix` + its index) holding its start value in the row's chunk:
        a broadcast join with the small chunks x timelines table, which keeps the generated code small."""
        names = [self.name(k, prefix) for k in self.values]
        table = [(self.first + i, *[self.values[k][i] for k in self.values]) for i in range(self.last - self.first + 1)]
        schema = ", ".join(["chunk int", *[f"{n} long" for n in names]])
        return rows.join(F.broadcast(rows.sparkSession.createDataFrame(table, schema)), "chunk")

    def combine(self, other: "Starts") -> "Starts":
        """Element-wise maximum of two tables over the same chunks (a watermark of two running maxima)."""
        return Starts(self.first, {k: [max(a, b) for a, b in zip(v, other.values[k])] for k, v in self.values.items()})


def _upto(*keys: str):
    return Window.partitionBy(*keys).orderBy("seq").rowsBetween(Window.unboundedPreceding, Window.currentRow)


def _before(*keys: str):
    return Window.partitionBy(*keys).orderBy("seq").rowsBetween(Window.unboundedPreceding, -1)


def _running_max(c: Column, window, start: Column | None = None) -> Column:
    running = F.coalesce(F.max(c).over(window), F.lit(NEG))
    return running if start is None else F.greatest(running, start)


def _own_partition(starts: Starts, prefix: str) -> Column:
    """The start value of the row's own partition in the row's chunk (after `starts.attach`)."""
    expr = F.lit(NEG)
    for p in starts.values:
        expr = F.when(F.col("partition") == p, F.col(starts.name(p, prefix))).otherwise(expr)
    return expr


def decide(rows: DataFrame, policy: Policy) -> tuple[DataFrame, Starts]:
    """Journal rows (engine.prepare) -> every decision, with `watermark` (the row's scope after the row)
    and `wp` (its partition's watermark after the row), clustered by `chunk`. Also returns each
    partition's `wp` at the start of every chunk (its keys are all the partitions of the source)."""
    rows = rows.withColumn("chunk", chunk_column())
    if policy.punctuated:
        return _punctuated(arrival_checks(rows, policy), policy)
    return _bounded(rows, policy)


def _contributions(rows: DataFrame, policy: Policy) -> DataFrame:
    """The arrival checks, and the two terms of the bounded watermark: arrival - L, and t - O of events."""
    L, O = policy.late_arrival_tolerance, policy.out_of_order_tolerance
    floor = F.lit(NEG) if L is None else F.col("arrival") - L
    checked = arrival_checks(rows, policy)
    return checked.withColumn("floor_c", floor).withColumn("event_c", F.when(F.col("passed"), F.col("t") - O))


def _bounded(rows: DataFrame, policy: Policy) -> tuple[DataFrame, Starts]:
    """W_s = max(max over kept events of the scope of t - O, max over all rows of the partition of
    arrival - L). An out-of-order event never raises it, so the maxima may include every event."""
    ends = (_contributions(rows, policy).groupBy("chunk", "partition")
            .agg(F.max("floor_c").alias("f"), F.max("event_c").alias("e")).collect())
    partitions = sorted({r["partition"] for r in ends})
    if not partitions:
        return rows, Starts(0, {})
    floor_start = Starts.from_maxima([(r["chunk"], r["partition"], r["f"]) for r in ends], partitions)
    event_start = Starts.from_maxima([(r["chunk"], r["partition"], r["e"]) for r in ends], partitions)
    # The checks run again after the shuffle: moving the 9 journal columns is cheaper than moving 16.
    rows = _contributions(rows.repartition(floor_start.last - floor_start.first + 1, "chunk"), policy)
    if policy.substream_by:
        return _substreams(rows, policy, floor_start), floor_start
    wp_start = floor_start.combine(event_start)
    return _partition_scopes(rows, policy, wp_start), wp_start


def _partition_scopes(rows: DataFrame, policy: Policy, start: Starts) -> DataFrame:
    """Scope = partition: per partition, a running max of both terms, masked to its rows, over the chunk
    in seq order. One sort per chunk, shared with the output watermark that follows."""
    c = F.greatest("floor_c", F.coalesce("event_c", F.lit(NEG)))
    rows = start.attach(rows, "s")
    after, before = F.lit(NEG), F.lit(NEG)
    for p in start.values:
        masked, mine, s0 = F.when(F.col("partition") == p, c), F.col("partition") == p, F.col(start.name(p, "s"))
        after = F.when(mine, _running_max(masked, _upto("chunk"), s0)).otherwise(after)
        before = F.when(mine, _running_max(masked, _before("chunk"), s0)).otherwise(before)
    decided = ordering_check(rows.select("*", before.alias("w_before"), after.alias("wp")), policy)
    return decided.withColumn("watermark", F.col("wp"))


def _substreams(rows: DataFrame, policy: Policy, floor_start: Starts) -> DataFrame:
    """Scope = (partition, key): the floor runs per partition, the event term per key, each from its
    chunk's starting value (per key: a small window over the per-chunk maxima)."""
    keys = rows.groupBy("chunk", "partition", "key").agg(F.max("event_c").alias("e"))
    earlier = Window.partitionBy("partition", "key").orderBy("chunk").rowsBetween(Window.unboundedPreceding, -1)
    keys = keys.select("chunk", "partition", "key", F.coalesce(F.max("e").over(earlier), F.lit(NEG)).alias("e0"))
    rows = floor_start.attach(rows.join(keys, ["chunk", "partition", "key"], "left").fillna(NEG, ["e0"]), "f")
    f0 = _own_partition(floor_start, "f")
    scope = ("chunk", "partition", "key")
    rows = rows.select(
        "*",
        _running_max(F.col("floor_c"), _upto("chunk", "partition"), f0).alias("floor_after"),
        _running_max(F.col("event_c"), _upto(*scope), F.col("e0")).alias("events_after"),
        F.greatest(_running_max(F.col("floor_c"), _before("chunk", "partition"), f0),
                   _running_max(F.col("event_c"), _before(*scope), F.col("e0"))).alias("w_before"),
    )
    scope_wm = F.greatest("floor_after", "events_after")
    return ordering_check(rows, policy).select(
        "*",
        F.when(F.col("kind") == "event", scope_wm).otherwise(F.col("floor_after")).alias("watermark"),
        F.col("floor_after").alias("wp"),
    )


def _punctuated(rows: DataFrame, policy: Policy) -> tuple[DataFrame, Starts]:
    """CTIs: punctuation flags per partition, W_p = running max of (t - delay) at punctuations. Counts
    and `every` chains span chunks, so this runs per partition, then a pass finds chunk starts."""
    strategy: Punctuated = policy.watermark
    if strategy.every is None:
        n = F.count(F.when(F.col("passed"), 1)).over(_upto("partition"))
        flagged = rows.withColumn("punct", F.col("passed") & (n % strategy.every_events == 0))
    else:
        schema = StructType([*rows.schema.fields, StructField("punct", BooleanType())])
        flagged = rows.groupBy("partition").applyInPandas(_sequential_punctuations(strategy), schema)
    value = F.when(F.col("punct"), F.col("t") - strategy.delay)
    flagged = flagged.select(
        "*",
        _running_max(value, _upto("partition")).alias("wp"),
        _running_max(value, _before("partition")).alias("w_before"),
    )
    decided = ordering_check(flagged, policy).withColumn("watermark", F.col("wp")).persist()
    ends = decided.groupBy("chunk", "partition").agg(F.max("wp").alias("w")).collect()
    partitions = sorted({r["partition"] for r in ends})
    return decided, Starts.from_maxima([(r["chunk"], r["partition"], r["w"]) for r in ends], partitions)


def _sequential_punctuations(strategy: Punctuated):
    """`every T` refers to the event that made the last punctuation: a chain, so it runs in seq order,
    one partition per task, on the executors."""
    N, T = strategy.every_events, strategy.every

    def flag(pdf: pd.DataFrame) -> pd.DataFrame:
        pdf = pdf.sort_values("seq", kind="stable").reset_index(drop=True)
        passed = pdf["passed"].to_numpy()
        t = pdf["t"].to_numpy()
        out = [False] * len(pdf)
        count, ref = 0, None
        for i in range(len(pdf)):
            if not passed[i]:
                continue
            count += 1
            ti = int(t[i])
            make = (N is not None and count % N == 0) or (ref is not None and ti >= ref + T)
            if make or ref is None:
                ref = ti
            out[i] = make
        pdf["punct"] = out
        return pdf

    return flag


def output_watermark(decided: DataFrame, policy: Policy, wp_start: Starts,
                     raise_start: Starts | None = None) -> DataFrame:
    """Adds `output_watermark`: independent = the partition's own; merged = min over all partitions of
    their latest `wp` (-infinity until each has had a row); either raised by idle timeouts (column
    `raise`, with `raise_start` its chunk starts; None when there is no idle timeout)."""
    if policy.independent:
        if raise_start is None:
            return decided.withColumn("output_watermark", F.col("wp"))
        raised = _running_max(F.col("raise"), _upto("partition"))
        return decided.withColumn("output_watermark", F.greatest("wp", raised))
    in_chunk = _upto("chunk")
    decided = wp_start.attach(decided, "o")
    latest = [_running_max(F.when(F.col("partition") == p, F.col("wp")), in_chunk, F.col(wp_start.name(p, "o")))
              for p in wp_start.values]
    merged = F.least(*latest) if len(latest) > 1 else latest[0]
    if raise_start is None:
        return decided.withColumn("output_watermark", merged)
    decided = raise_start.attach(decided, "r")
    raised = _running_max(F.col("raise"), in_chunk, F.col(raise_start.name("raise", "r")))
    return decided.withColumn("output_watermark", F.greatest(merged, raised))


def raise_starts(raises: DataFrame, span: Starts) -> Starts:
    """Each chunk's starting idle-timeout raise (the maximum raise of earlier chunks)."""
    ends = raises.groupBy(chunk_column().alias("chunk")).agg(F.max("raise").alias("r")).collect()
    return Starts.from_maxima([(r["chunk"], "raise", r["r"]) for r in ends], ["raise"], (span.first, span.last))


def timeline(decisions: DataFrame, resolution_us: int = 1_000_000) -> DataFrame:
    """The watermark timeline: per partition, the first row at which its watermark reached each new
    `resolution` step (a second by default), with the output watermark at that row."""
    step = F.floor(F.col("wp") / resolution_us)
    first = F.min_by(F.struct("seq", "arrival", "wp", "output_watermark"), F.col("seq"))
    return (
        decisions.where(F.col("wp") > NEG)
        .groupBy("partition", step.alias("step"))
        .agg(first.alias("r"))
        .select("partition", "r.seq", "r.arrival", "r.wp", "r.output_watermark")
    )
