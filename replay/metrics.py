"""Per-partition, per-hour metrics (spec section 8), named as Azure Stream Analytics names them."""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F


def hourly(decisions: DataFrame, dead_letters: DataFrame) -> DataFrame:
    """Counts of early, late and out-of-order events by action, dead letters, watermark delay, and events
    repeating an earlier (partition, offset) or whose offset goes backwards in their partition."""
    has = lambda reason: F.array_contains(F.col("reasons"), reason)  # noqa: E731
    action = F.col("action")
    counts = []
    for reason in ("early", "late", "out_of_order"):
        for act in ("dropped", "adjusted", "accepted"):
            counts.append(F.count(F.when(has(reason) & (action == act), 1)).alias(f"{reason}_{act}"))
    delay = (F.unix_micros("arrival_time") - F.unix_micros("output_watermark")) / 1e6
    is_event = F.col("kind") == "event"
    earlier = Window.partitionBy("partition").orderBy("seq").rowsBetween(Window.unboundedPreceding, -1)
    prior = F.last(F.when(is_event, F.col("offset")), ignorenulls=True).over(earlier)  # the previous event's
    decisions = decisions.withColumn("_backward", is_event & F.coalesce(F.col("offset") < prior, F.lit(False)))
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
    return (
        per_row.join(letters, ["partition", "hour"], "left")
        .fillna(0, ["dead_letters", "window_closed"])
        .orderBy("partition", "hour")
    )
