"""Per-partition, per-hour metrics (spec section 8), named as Azure Stream Analytics names them."""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F


HOUR = 3_600_000_000  # microseconds


def hourly(decisions: DataFrame, dead_letters: DataFrame) -> DataFrame:
    """Counts of early, late and out-of-order events by action, dead letters, watermark delay, and events
    repeating an earlier (partition, offset) or whose offset goes backwards in their partition."""
    prior = F.last(F.when(F.col("kind") == "event", F.col("offset")), ignorenulls=True).over(_earlier())
    return _aggregate(decisions.withColumn("_prior", prior), dead_letters).orderBy("partition", "hour")


def _earlier():
    """The rows before this one in its partition, in seq order (built per call: a Window needs a session)."""
    return Window.partitionBy("partition").orderBy("seq").rowsBetween(Window.unboundedPreceding, -1)


def hours_of(first: int | None, last: int | None) -> tuple[int, int] | None:
    """The hours from arrival `first` to `last` (microseconds) as [first hour, last hour + 1 h): the metrics a
    micro-batch whose rows arrived then changes (None: no rows)."""
    return None if first is None else (first // HOUR * HOUR, last // HOUR * HOUR + HOUR)


def hourly_between(decisions: DataFrame, dead_letters: DataFrame, lo: int, hi: int) -> DataFrame:
    """hourly() for the hours in [lo, hi) alone, equal to its rows there. Reads the rows arriving in those
    hours and, for backward offsets, the events after them in seq and each partition's last event before
    them, so a live batch's cost does not grow with the table's history (Delta skips the other files)."""
    arrived = lambda df: df.where((F.col("arrival_time") >= F.timestamp_micros(F.lit(lo)))  # noqa: E731
                                  & (F.col("arrival_time") < F.timestamp_micros(F.lit(hi))))
    rows = arrived(decisions)
    found = rows.agg(F.min("seq").alias("first"),
                     F.collect_set(F.when(F.col("kind") == "event", F.col("partition"))).alias("partitions")).first()
    first = found["first"]
    if first is None:
        return _aggregate(rows.withColumn("_prior", F.lit(None).cast("long")), arrived(dead_letters))
    events = decisions.where(F.col("kind") == "event").select("partition", "seq", "offset")
    after = events.where(F.col("seq") >= first)
    before = _last_before(events, first, found["partitions"])
    priors = after.unionByName(before).select("seq", F.last("offset").over(_earlier()).alias("_prior"))
    return _aggregate(rows.join(priors, "seq", "left"), arrived(dead_letters))


def _last_before(events: DataFrame, first: int, partitions: list) -> DataFrame:
    """Each partition's last event before seq `first`, looking back over growing seq ranges so that only
    recent files are read unless a partition has been silent for long."""
    found, span, top = [], 1024, first
    need = set(partitions)
    while need and top > 0:
        bottom = max(0, first - span)
        got = (events.where((F.col("seq") >= bottom) & (F.col("seq") < top) & F.col("partition").isin(sorted(need)))
               .groupBy("partition").agg(F.max("seq").alias("seq"), F.max_by("offset", "seq").alias("offset")).collect())
        found += [(r["partition"], r["seq"], r["offset"]) for r in got]
        need -= {r["partition"] for r in got}
        top, span = bottom, span * 8
    return events.sparkSession.createDataFrame(found, "partition int, seq long, offset long")


def _aggregate(decisions: DataFrame, dead_letters: DataFrame) -> DataFrame:
    """The metrics of rows that carry `_prior`, their partition's previous event's offset."""
    has = lambda reason: F.array_contains(F.col("reasons"), reason)  # noqa: E731
    action = F.col("action")
    counts = []
    for reason in ("early", "late", "out_of_order"):
        for act in ("dropped", "adjusted", "accepted"):
            counts.append(F.count(F.when(has(reason) & (action == act), 1)).alias(f"{reason}_{act}"))
    delay = (F.unix_micros("arrival_time") - F.unix_micros("output_watermark")) / 1e6
    is_event = F.col("kind") == "event"
    decisions = decisions.withColumn("_backward", is_event & F.coalesce(F.col("offset") < F.col("_prior"), F.lit(False)))
    per_row = decisions.groupBy("partition", F.date_trunc("hour", "arrival_time").alias("hour")).agg(
        F.count(F.when(F.col("kind") == "event", 1)).alias("events"),
        F.count(F.when(F.col("kind") == "clock", 1)).alias("clock_rows"),
        F.count(F.when(action == "accepted", 1)).alias("accepted"),
        F.count(F.when(action == "adjusted", 1)).alias("adjusted"),
        F.count(F.when(action == "dropped", 1)).alias("dropped"),
        F.count(F.when(action == "quarantined", 1)).alias("quarantined"),
        F.count(F.when(has("duplicate"), 1)).alias("duplicate_offsets"),
        F.count(F.when(F.col("_backward"), 1)).alias("backward_offsets"),
        *counts,
        F.max(delay).alias("watermark_delay_max_s"),
        F.avg(delay).alias("watermark_delay_avg_s"),
    )
    letters = dead_letters.where(F.col("partition").isNotNull()).groupBy(
        "partition", F.date_trunc("hour", "arrival_time").alias("hour")
    ).agg(
        F.count("*").alias("dead_letters"),
        F.count(F.when(F.col("reason") == "window_closed", 1)).alias("window_closed"),
    )
    return per_row.join(letters, ["partition", "hour"], "left").fillna(0, ["dead_letters", "window_closed"])
