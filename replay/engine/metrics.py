"""Per-partition, per-hour metrics (spec section 8), named as Azure Stream Analytics names them.

Every column adds up across stretches of rows (counts and the watermark delay's exact total add, its
maximum is a maximum), so a live micro-batch merges its own rows' metrics into the table (`combine`)
and gets, bit for bit, what a replay computes over all the rows at once."""
from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F


HOUR = 3_600_000_000  # microseconds
REASONS = ("early", "late", "out_of_order")
COUNTS = ("events", "clock_rows", "accepted", "adjusted", "dropped", "quarantined", "duplicate_offsets",
          "backward_offsets", *(f"{r}_{a}" for r in REASONS for a in ("dropped", "adjusted", "accepted")))
LETTERS = ("dead_letters", "window_closed")
# watermark delay: its maximum and average in seconds; the average is total / rows, kept exact (decimal
# seconds to the microsecond), so merged and whole computations give the same double
DELAY = ("watermark_delay_max_s", "watermark_delay_avg_s", "watermark_delay_rows", "watermark_delay_total_s")
COLUMNS = ("partition", "hour", *COUNTS, *DELAY, *LETTERS)


def hourly(decisions: DataFrame, dead_letters: DataFrame, backward: DataFrame | None = None) -> DataFrame:
    """Counts of early, late and out-of-order events by action, dead letters, watermark delay, and events
    repeating an earlier (partition, offset) or whose offset goes backwards in their partition. `backward`:
    the decisions' backward offsets per partition and hour (as `_backward` gives them), when already known."""
    backward = _backward(_events(decisions)) if backward is None else backward
    return _aggregate(decisions, dead_letters, backward).orderBy("partition", "hour")


def of_stretch(decisions: DataFrame, dead_letters: DataFrame, before: DataFrame) -> DataFrame:
    """hourly() of a stretch of rows that follows others (a live batch): `before` holds each partition's last
    event before it (partition, seq, offset; `replay.io.journal.last_events_before`), which backward offsets
    compare to."""
    return _aggregate(decisions, dead_letters, _backward(_after(_events(decisions), before)))


def of_partials(partials: DataFrame, dead_letters: DataFrame, journal: DataFrame,
                before: DataFrame | None) -> DataFrame:
    """from_partials() of a stretch of rows whose decide runs' counts were kept (a live job's batches since its last
    flush): their backward offsets are the stretch's `journal` rows' own (the source's offsets, not a decision),
    after `before` (as of_stretch takes it; None: no row before the stretch)."""
    return from_partials(partials, dead_letters, _backward(_after(_events(journal), before)))


def _after(events: DataFrame, before: DataFrame | None) -> DataFrame:
    """A stretch's events after each partition's last event before it, which its first event's offset compares to."""
    if before is None:
        return events
    return events.unionByName(
        before.select("partition", "seq", "offset", F.lit(None).cast("timestamp").alias("arrival_time")))


def backward_of(decisions: DataFrame) -> DataFrame:
    """The decisions' backward offsets per partition and hour (`hourly`'s `backward`)."""
    return _backward(_events(decisions))


def _events(decisions: DataFrame) -> DataFrame:
    """The source's records, whose offsets are the broker's: events and the source's punctuations."""
    return decisions.where(F.col("kind").isin("event", "punctuation")).select("partition", "seq", "offset",
                                                                             "arrival_time")


def _backward(events: DataFrame) -> DataFrame:
    """Per partition and hour of arrival: events whose offset is below the previous event's in their partition,
    in seq order. The sort this takes moves four narrow columns, not the decisions' rows."""
    prior = F.lag("offset").over(Window.partitionBy("partition").orderBy("seq"))
    flagged = events.select("partition", "arrival_time", (F.col("offset") < prior).alias("_backward"))
    backward = flagged.where(F.col("_backward") & F.col("arrival_time").isNotNull())
    return backward.groupBy("partition", F.date_trunc("hour", "arrival_time").alias("hour")).agg(
        F.count("*").alias("backward_offsets"))


def combine(a: DataFrame, b: DataFrame) -> DataFrame:
    """The metrics of two stretches of rows together (rows of `hourly` or `of_stretch`), one row per
    partition and hour: what hourly() gives over both stretches' rows."""
    summed = (*COUNTS, *LETTERS, "watermark_delay_rows", "watermark_delay_total_s")
    both = a.select(*COLUMNS).unionByName(b.select(*COLUMNS)).groupBy("partition", "hour").agg(
        *[F.sum(c).alias(c) for c in summed], F.max("watermark_delay_max_s").alias("watermark_delay_max_s"))
    return _finished(both)


def _aggregate(decisions: DataFrame, dead_letters: DataFrame, backward: DataFrame) -> DataFrame:
    """The metrics of decided rows, their dead letters and their backward offsets (`_backward`)."""
    return _assemble(_per_row(decisions), dead_letters, backward)


# The per-row counts of a partition's hour, as the decide pass sends them summed over its rows (`Decide.Partials`):
# every one adds up, but the delay's maximum (last), which is null without delay rows.
PARTIAL = (*COUNTS[:7], *(f"{r}_{a}" for r in REASONS for a in ("dropped", "adjusted", "accepted")),
           "watermark_delay_rows", "_s", "_us", "_max_us")


def from_partials(partials: DataFrame, dead_letters: DataFrame, backward: DataFrame) -> DataFrame:
    """The metrics from the decide pass's partial counts (partition, hour, counts: `PARTIAL`'s, per task), their
    dead letters and their backward offsets: what `hourly` computes from the decided rows themselves."""
    c = F.col("counts")
    per_row = partials.groupBy("partition", "hour").agg(
        *[F.sum(c[i]).alias(n) for i, n in enumerate(PARTIAL[:-1])],
        F.max(F.when(c[PARTIAL.index("watermark_delay_rows")] > 0, c[len(PARTIAL) - 1])).alias("_max_us"))
    return _assemble(per_row, dead_letters, backward).orderBy("partition", "hour")


def _per_row(decisions: DataFrame) -> DataFrame:
    """Per partition and hour of arrival: the counts of its decided rows (`PARTIAL`'s)."""
    has = lambda reason: F.array_contains(F.col("reasons"), reason)  # noqa: E731
    action, is_event = F.col("action"), F.col("kind") == "event"
    count = lambda condition, name: F.count(F.when(condition, 1)).alias(name)  # noqa: E731
    delay_us = F.expr(_DELAY_SQL)
    return decisions.groupBy("partition", F.date_trunc("hour", "arrival_time").alias("hour")).agg(
        count(is_event, "events"), count(F.col("kind") == "clock", "clock_rows"),
        *[count(action == a, a) for a in ("accepted", "adjusted", "dropped", "quarantined")],
        count(has("duplicate"), "duplicate_offsets"),
        *[count(has(r) & (action == a), f"{r}_{a}") for r in REASONS for a in ("dropped", "adjusted", "accepted")],
        F.max(delay_us).alias("_max_us"), F.count(delay_us).alias("watermark_delay_rows"),
        # the total as whole seconds and the microseconds left over, two sums of longs (exact and fast;
        # a decimal per row would be summed as a BigDecimal)
        F.sum(F.expr(f"({_DELAY_SQL} - pmod({_DELAY_SQL}, 1000000)) div 1000000")).alias("_s"),
        F.sum(F.expr(f"pmod({_DELAY_SQL}, 1000000)")).alias("_us"),
    )


def _assemble(per_row: DataFrame, dead_letters: DataFrame, backward: DataFrame) -> DataFrame:
    """The metrics from the per-row counts (`_per_row`), the dead letters and the backward offsets. An hour with
    dead letters and no decided row (only malformed lines) has a row too: nothing is left out."""
    count = lambda condition, name: F.count(F.when(condition, 1)).alias(name)  # noqa: E731
    per_row = per_row.select("*", (F.col("_max_us") / 1e6).alias("watermark_delay_max_s"),
             (F.col("_s").cast("decimal(38,6)") + _seconds(F.col("_us"))).alias("watermark_delay_total_s"),
             ).drop("_max_us", "_s", "_us")
    letters = dead_letters.where(F.col("partition").isNotNull()).groupBy(
        "partition", F.date_trunc("hour", "arrival_time").alias("hour")
    ).agg(F.count("*").alias("dead_letters"), count(F.col("reason") == "window_closed", "window_closed"))
    zero = [*COUNTS, *LETTERS, "watermark_delay_rows", "watermark_delay_total_s"]
    joined = per_row.join(backward, ["partition", "hour"], "left").join(letters, ["partition", "hour"], "full")
    return _finished(joined.fillna(0, zero))


_DELAY_SQL = "(unix_micros(arrival_time) - unix_micros(output_watermark))"  # watermark delay, microseconds


def _seconds(us: Column) -> Column:
    """Microseconds as exact decimal seconds: sums of them do not depend on the order they are added in."""
    return (us.cast("decimal(38,6)") / 1_000_000).cast("decimal(38,6)")


def _finished(rows: DataFrame) -> DataFrame:
    """Adds the average delay from its exact total, and orders the columns."""
    n, total = F.col("watermark_delay_rows"), F.col("watermark_delay_total_s").cast("decimal(38,6)")
    columns = {c: F.col(c) for c in COLUMNS}
    columns["watermark_delay_total_s"] = total
    columns["watermark_delay_avg_s"] = F.when(n > 0, total.cast("double") / n)
    return rows.select(*[v.alias(c) for c, v in columns.items()])
