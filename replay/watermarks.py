"""Watermarks (spec section 4): scope and partition watermarks per row, then the output watermark.

Every watermark is a running maximum, so it is a window function over (partition, seq); the merged
output watermark is the minimum over partitions of their running maxima, computed per chunk of `seq`
from a small prefix table, so no step needs all rows in one task.
"""
from __future__ import annotations


import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from replay.decisions import NEG
from replay.policy import Policy, Punctuated


def _upto(*keys: str):
    return Window.partitionBy(*keys).orderBy("seq").rowsBetween(Window.unboundedPreceding, Window.currentRow)


def _before(*keys: str):
    return Window.partitionBy(*keys).orderBy("seq").rowsBetween(Window.unboundedPreceding, -1)


def _running_max(c: Column, window) -> Column:
    return F.coalesce(F.max(c).over(window), F.lit(NEG))


def scope_watermarks(rows: DataFrame, policy: Policy) -> DataFrame:
    """Adds `w_before` (the scope's watermark after the previous row) and the inputs of `with_watermark`."""
    if policy.punctuated:
        return _punctuations(rows, policy.watermark)
    L, O = policy.late_arrival_tolerance, policy.out_of_order_tolerance
    floor = F.lit(NEG) if L is None else F.col("arrival") - L
    contribution = F.when(F.col("passed"), F.col("t") - O)
    scope = ("partition", "key") if policy.substream_by else ("partition",)
    return rows.select(
        "*",
        _running_max(floor, _upto("partition")).alias("floor_after"),
        _running_max(contribution, _upto(*scope)).alias("events_after"),
        F.greatest(_running_max(floor, _before("partition")),
                   _running_max(contribution, _before(*scope))).alias("w_before"),
    )


def with_watermark(rows: DataFrame, policy: Policy) -> DataFrame:
    """Adds `watermark` (the row's scope after the row) and `wp` (its partition's watermark after the row)."""
    if policy.punctuated:
        return rows.withColumn("watermark", F.col("w_after")).withColumn("wp", F.col("w_after"))
    scope_wm = F.greatest("floor_after", "events_after")
    if policy.substream_by:
        return rows.select(
            "*",
            F.when(F.col("kind") == "event", scope_wm).otherwise(F.col("floor_after")).alias("watermark"),
            F.col("floor_after").alias("wp"),
        )
    return rows.select("*", scope_wm.alias("watermark"), scope_wm.alias("wp"))


def _punctuations(rows: DataFrame, strategy: Punctuated) -> DataFrame:
    """CTIs: punctuation flags per partition, then W_p = running max of (t - delay) at punctuations."""
    if strategy.every is None:
        n = F.count(F.when(F.col("passed"), 1)).over(_upto("partition"))
        flagged = rows.withColumn("punct", F.col("passed") & (n % strategy.every_events == 0))
    else:
        schema = rows.schema.add("punct", "boolean")
        flagged = rows.groupBy("partition").applyInPandas(_sequential_punctuations(strategy), schema)
    value = F.when(F.col("punct"), F.col("t") - strategy.delay)
    return flagged.select(
        "*",
        _running_max(value, _upto("partition")).alias("w_after"),
        _running_max(value, _before("partition")).alias("w_before"),
    )


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


def output_watermark(rows: DataFrame, policy: Policy, partitions: list[int], seq_range: tuple[int, int],
                     chunks: int) -> DataFrame:
    """Adds `output_watermark`: independent = the partition's own (raised by idle timeouts, if any);
    merged = min over all partitions of their latest `wp`, -infinity until each has had a row."""
    if policy.independent:
        return rows.withColumn("output_watermark", F.greatest("wp", _running_max(F.col("raise"), _upto("partition"))))
    lo, hi = seq_range
    size = max(1, -(-(hi - lo + 1) // chunks))
    rows = rows.withColumn("chunk", ((F.col("seq") - lo) / size).cast("int"))
    timelines = {p: F.when(F.col("partition") == p, F.col("wp")) for p in partitions}
    timelines["raise"] = F.col("raise")
    # Pass 1: each timeline's value at the end of each chunk (a running max: the chunk's max).
    names = {key: f"tl{i}" for i, key in enumerate(timelines)}
    ends = rows.groupBy("chunk").agg(*[F.max(c).alias(names[k]) for k, c in timelines.items()]).collect()
    start = _chunk_starts(ends, list(names.values()), chunks)
    # Pass 2: within each chunk, the running max of every timeline from its start value, then the min.
    in_chunk = _upto("chunk")
    current = {
        k: F.greatest(_running_max(c, in_chunk), _lookup(start[names[k]], F.col("chunk")))
        for k, c in timelines.items()
    }
    per_partition = [current[p] for p in partitions]
    merged = F.least(*per_partition) if len(per_partition) > 1 else per_partition[0]
    return rows.withColumn("output_watermark", F.greatest(merged, current["raise"])).drop("chunk")


def _chunk_starts(ends, names: list[str], chunks: int) -> dict[str, list[int]]:
    """Prefix maxima over chunks: a timeline's value just before each chunk (a table of chunks x partitions)."""
    by_chunk = {r["chunk"]: r for r in ends}
    start = {n: [] for n in names}
    for n in names:
        acc = NEG
        for c in range(chunks):
            start[n].append(acc)
            v = by_chunk[c][n] if c in by_chunk else None
            if v is not None:
                acc = max(acc, v)
    return start


def _lookup(values: list[int], index: Column) -> Column:
    return F.element_at(F.array(*[F.lit(v) for v in values]), index + 1)


def timeline(decisions: DataFrame) -> DataFrame:
    """The watermark timeline: rows at which a partition's watermark or the output watermark advanced."""
    by_part = Window.partitionBy("partition").orderBy("seq")
    advanced = (
        F.lag("wp").over(by_part).isNull()
        | (F.col("wp") > F.lag("wp").over(by_part))
        | (F.col("output_watermark") > F.lag("output_watermark").over(by_part))
    )
    return decisions.withColumn("advanced", advanced).where("advanced").drop("advanced")


