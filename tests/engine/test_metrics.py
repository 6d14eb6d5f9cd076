"""Metrics by partition and hour (spec 8). A live micro-batch merges its own rows' metrics into the table:
merged stretch by stretch they equal the whole table's, bit for bit; an offset going backwards is found
against its partition's previous event however long ago that was; nothing is left out of them."""
from __future__ import annotations

import random

from pyspark.sql import functions as F

from replay.engine.metrics import COLUMNS, HOUR, combine, hourly, of_stretch
from replay.io.journal import last_events_before

H0 = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z in microseconds
DECISIONS = ("seq long, partition int, offset long, kind string, action string, reasons array<string>, "
             "arrival us, owm us")


def _decisions(spark):
    """Two partitions over three hours; partition 1 silent from seq 4 to seq 6000."""
    rows = [
        (1, 0, 5, "event", "accepted", [], 0, 0),
        (2, 0, 6, "event", "dropped", ["late"], 1, 0),
        (4, 1, 10, "event", "accepted", [], 2, 1),
        (5, 1, 10, "event", "accepted", ["duplicate"], 3, 1),
        (3000, 0, 4, "event", "adjusted", ["out_of_order"], 60, 50),  # backwards from offset 6
        (3001, 0, None, "clock", "accepted", [], 61, 55),
        (3002, 0, 7, "event", "accepted", ["early"], 120, 100),
        (6000, 1, 2, "event", "accepted", [], 150, 140),  # backwards from offset 10, 5995 rows before
    ]
    schema = DECISIONS.replace(" us", " long")
    df = spark.createDataFrame(rows, schema)
    minute = lambda c: F.timestamp_micros(F.lit(H0) + F.col(c) * 60_000_000)  # noqa: E731
    decisions = df.select(*[c for c in df.columns if c not in ("arrival", "owm")],
                          minute("arrival").alias("arrival_time"), minute("owm").alias("output_watermark"))
    letters = spark.createDataFrame([(2, 0, 1, "late"), (3003, 0, 62, "window_closed"),
                                     (6000, 1, 150, "window_closed")],
                                    "seq long, partition int, arrival long, reason string")
    dead = letters.select("seq", "partition", "reason", minute("arrival").alias("arrival_time"))
    return decisions, dead


def _rows(df):
    return sorted(tuple(r) for r in df.collect())


def _merged(decisions, dead, cuts):
    """The metrics merged stretch by stretch, the stretches starting at the seqs in `cuts`, as a live job does."""
    bounds = [0, *cuts, None]
    table = None
    for lo, hi in zip(bounds, bounds[1:]):
        within = lambda df: df.where((F.col("seq") >= lo) & (F.col("seq") < hi if hi else F.lit(True)))  # noqa: E731
        rows = within(decisions)
        partitions = [r[0] for r in rows.where(F.col("kind") == "event").select("partition").distinct().collect()]
        fresh = of_stretch(rows, within(dead), last_events_before(decisions, lo, partitions))
        merged = fresh if table is None else combine(table, fresh)
        table = decisions.sparkSession.createDataFrame(merged.collect(), merged.schema)  # as committed, then read
    return table


def test_metrics_merged_stretch_by_stretch_equal_the_whole_tables_bit_for_bit(spark):
    decisions, dead = _decisions(spark)
    whole = _rows(hourly(decisions, dead))
    for cuts in ([3001], [2, 5, 3000, 3002, 6000]):
        assert _rows(_merged(decisions, dead, cuts)) == whole, cuts


def test_an_offset_going_backwards_is_found_against_a_previous_event_thousands_of_rows_earlier(spark):
    decisions, dead = _decisions(spark)
    last = of_stretch(decisions.where(F.col("seq") >= 6000), dead.where(F.col("seq") >= 6000),
                      last_events_before(decisions, 6000, [1]))
    assert [(r["partition"], r["backward_offsets"]) for r in last.collect()] == [(1, 1)]


def test_an_hour_with_dead_letters_and_no_decided_row_has_its_metrics_row(spark):
    decisions, dead = _decisions(spark)
    malformed = spark.createDataFrame([(7000, 1, "malformed")], "seq long, partition int, reason string").select(
        "seq", "partition", "reason", F.timestamp_micros(F.lit(H0 + 5 * HOUR)).alias("arrival_time"))
    row = hourly(decisions, dead.unionByName(malformed)).where(F.unix_micros("hour") == H0 + 5 * HOUR).collect()
    assert [(r["partition"], r["events"], r["dead_letters"], r["watermark_delay_avg_s"]) for r in row] == [
        (1, 0, 1, None)]


def test_the_average_delay_is_the_same_double_however_the_rows_are_split_into_tasks(spark):
    """Delays of 0.1 s, 0.2 s, ... in a random order: a sum of doubles would depend on the order of addition."""
    rng = random.Random(5)
    delays = [rng.choice((100_000, 200_000, 300_000, 700_000, 1_100_000, 1)) for _ in range(3000)]
    rows = [(i, 0, i, "event", "accepted", [], H0 + 10**9, H0 + 10**9 - d) for i, d in enumerate(delays)]
    df = spark.createDataFrame(rows, DECISIONS.replace(" us", " long")).select(
        "seq", "partition", "offset", "kind", "action", "reasons",
        F.timestamp_micros("arrival").alias("arrival_time"), F.timestamp_micros("owm").alias("output_watermark"))
    dead = spark.createDataFrame([], "seq long, partition int, reason string, arrival_time timestamp")
    averages = {hourly(df.repartition(n), dead).first()["watermark_delay_avg_s"] for n in (1, 3, 7, 16)}
    assert averages == {sum(delays) / 1e6 / len(delays)}


def test_the_table_has_its_columns_in_order(spark):
    decisions, dead = _decisions(spark)
    assert tuple(hourly(decisions, dead).columns) == COLUMNS


def test_backward_offsets_from_the_duplicate_checks_kernel_equal_those_from_the_decisions(spark):
    """A whole replay takes its backward offsets from the sort its duplicate check already made (the first pass)."""
    from replay.engine.pipeline import backward_table, first_pass

    decisions, dead = _decisions(spark)
    rows = decisions.select("seq", "partition", "offset", "kind", F.unix_micros("arrival_time").alias("arrival"))
    steps = first_pass(rows, chunk_rows=1000).steps  # seq 1-5, 3000-3002, 6000: 3 chunks
    assert [(p, b, n) for p, _, b, n in steps] == [(0, 1, 1), (1, 0, 1), (1, 1, 1)]  # seq 5 repeats offset 10
    assert _rows(hourly(decisions, dead, backward_table(spark, steps))) == _rows(hourly(decisions, dead))
