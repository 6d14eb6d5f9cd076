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

from replay.decisions import NEG, ordering_check
from replay.policy import Policy, Punctuated


@dataclass(frozen=True)
class Chunks:
    """seq in [lo, hi] cut into `count` chunks of `size` consecutive values."""

    lo: int
    hi: int
    count: int

    @property
    def size(self) -> int:
        return max(1, -(-(self.hi - self.lo + 1) // self.count))

    def column(self) -> Column:
        return ((F.col("seq") - self.lo) / self.size).cast("int")


def _upto(*keys: str):
    return Window.partitionBy(*keys).orderBy("seq").rowsBetween(Window.unboundedPreceding, Window.currentRow)


def _before(*keys: str):
    return Window.partitionBy(*keys).orderBy("seq").rowsBetween(Window.unboundedPreceding, -1)


def _running_max(c: Column, window, start: Column | None = None) -> Column:
    running = F.coalesce(F.max(c).over(window), F.lit(NEG))
    return running if start is None else F.greatest(running, start)


def _prefix(table: dict[tuple[int, object], int], keys: list, count: int) -> dict[object, list[int]]:
    """Per key, the maximum over all earlier chunks (NEG before any): a chunk's starting value."""
    out = {}
    for key in keys:
        acc, starts = NEG, []
        for c in range(count):
            starts.append(acc)
            v = table.get((c, key))
            if v is not None:
                acc = max(acc, v)
        out[key] = starts
    return out


def _lookup(values: list[int], index: Column) -> Column:
    return F.element_at(F.array(*[F.lit(v) for v in values]), index + 1)


def _per_partition(starts: dict[int, list[int]], partitions: list[int]) -> Column:
    """The starting value of the row's own partition in the row's chunk."""
    expr = F.lit(NEG)
    for p in partitions:
        expr = F.when(F.col("partition") == p, _lookup(starts[p], F.col("chunk"))).otherwise(expr)
    return expr


def decide(rows: DataFrame, policy: Policy, partitions: list[int], chunks: Chunks) -> tuple[DataFrame, dict]:
    """Rows after the arrival checks -> the ordering check done, with `watermark` (the row's scope after
    the row) and `wp` (its partition's watermark after the row), clustered by `chunk`. Also returns each
    partition's `wp` at the start of every chunk, for the output watermark."""
    rows = rows.withColumn("chunk", chunks.column())
    if policy.punctuated:
        return _punctuated(rows, policy, partitions, chunks)
    return _bounded(rows, policy, partitions, chunks)


def _bounded(rows: DataFrame, policy: Policy, partitions: list[int], chunks: Chunks):
    """W_s = max(max over kept events of the scope of t - O, max over all rows of the partition of
    arrival - L). An out-of-order event never raises it, so the maxima may include every event."""
    L, O = policy.late_arrival_tolerance, policy.out_of_order_tolerance
    floor = F.lit(NEG) if L is None else F.col("arrival") - L
    contribution = F.when(F.col("passed"), F.col("t") - O)
    rows = rows.withColumn("floor_c", floor).withColumn("event_c", contribution)
    ends = rows.groupBy("chunk", "partition").agg(F.max("floor_c").alias("f"), F.max("event_c").alias("e")).collect()
    floor_start = _prefix({(r["chunk"], r["partition"]): r["f"] for r in ends}, partitions, chunks.count)
    event_start = _prefix({(r["chunk"], r["partition"]): r["e"] for r in ends}, partitions, chunks.count)
    rows = rows.repartition(chunks.count, "chunk").withColumn("floor_start", _per_partition(floor_start, partitions))
    if policy.substream_by:
        keys = rows.groupBy("chunk", "partition", "key").agg(F.max("event_c").alias("e"))
        earlier = Window.partitionBy("partition", "key").orderBy("chunk").rowsBetween(Window.unboundedPreceding, -1)
        keys = keys.select("chunk", "partition", "key", F.coalesce(F.max("e").over(earlier), F.lit(NEG)).alias("event_start"))
        rows = rows.join(keys, ["chunk", "partition", "key"], "left").fillna(NEG, ["event_start"])
        scope = ("chunk", "partition", "key")
        wp_start = floor_start
    else:
        rows = rows.withColumn("event_start", _per_partition(event_start, partitions))
        scope = ("chunk", "partition")
        wp_start = {p: [max(a, b) for a, b in zip(floor_start[p], event_start[p])] for p in partitions}
    rows = rows.select(
        "*",
        _running_max(F.col("floor_c"), _upto("chunk", "partition"), F.col("floor_start")).alias("floor_after"),
        _running_max(F.col("event_c"), _upto(*scope), F.col("event_start")).alias("events_after"),
        F.greatest(_running_max(F.col("floor_c"), _before("chunk", "partition"), F.col("floor_start")),
                   _running_max(F.col("event_c"), _before(*scope), F.col("event_start"))).alias("w_before"),
    )
    decided = ordering_check(rows, policy)
    scope_wm = F.greatest("floor_after", "events_after")
    if policy.substream_by:
        decided = decided.select(
            "*",
            F.when(F.col("kind") == "event", scope_wm).otherwise(F.col("floor_after")).alias("watermark"),
            F.col("floor_after").alias("wp"),
        )
    else:
        decided = decided.select("*", scope_wm.alias("watermark"), scope_wm.alias("wp"))
    return decided, wp_start


def _punctuated(rows: DataFrame, policy: Policy, partitions: list[int], chunks: Chunks):
    """CTIs: punctuation flags per partition, W_p = running max of (t - delay) at punctuations. Counts
    and `every` chains span chunks, so this runs per partition, then a pass finds chunk starts."""
    strategy: Punctuated = policy.watermark
    if strategy.every is None:
        n = F.count(F.when(F.col("passed"), 1)).over(_upto("partition"))
        flagged = rows.withColumn("punct", F.col("passed") & (n % strategy.every_events == 0))
    else:
        schema = rows.schema.add("punct", "boolean")
        flagged = rows.groupBy("partition").applyInPandas(_sequential_punctuations(strategy), schema)
    value = F.when(F.col("punct"), F.col("t") - strategy.delay)
    flagged = flagged.select(
        "*",
        _running_max(value, _upto("partition")).alias("wp"),
        _running_max(value, _before("partition")).alias("w_before"),
    )
    decided = ordering_check(flagged, policy).withColumn("watermark", F.col("wp")).persist()
    ends = decided.groupBy("chunk", "partition").agg(F.max("wp").alias("w")).collect()
    wp_start = _prefix({(r["chunk"], r["partition"]): r["w"] for r in ends}, partitions, chunks.count)
    return decided, wp_start


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


def output_watermark(decided: DataFrame, policy: Policy, partitions: list[int], wp_start: dict,
                     raise_start: list[int]) -> DataFrame:
    """Adds `output_watermark`: independent = the partition's own; merged = min over all partitions of
    their latest `wp` (-infinity until each has had a row); either raised by idle timeouts (`raise`)."""
    if policy.independent:
        raised = _running_max(F.col("raise"), _upto("partition"))
        return decided.withColumn("output_watermark", F.greatest("wp", raised))
    in_chunk = _upto("chunk")
    latest = [
        _running_max(F.when(F.col("partition") == p, F.col("wp")), in_chunk, _lookup(wp_start[p], F.col("chunk")))
        for p in partitions
    ]
    merged = F.least(*latest) if len(latest) > 1 else latest[0]
    raised = _running_max(F.col("raise"), in_chunk, _lookup(raise_start, F.col("chunk")))
    return decided.withColumn("output_watermark", F.greatest(merged, raised))


def raise_starts(raises: DataFrame | None, chunks: Chunks) -> list[int]:
    """Each chunk's starting idle-timeout raise (the maximum raise of earlier chunks)."""
    if raises is None:
        return [NEG] * chunks.count
    ends = raises.groupBy(chunks.column().alias("chunk")).agg(F.max("raise").alias("r")).collect()
    return _prefix({(r["chunk"], 0): r["r"] for r in ends}, [0], chunks.count)[0]


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
