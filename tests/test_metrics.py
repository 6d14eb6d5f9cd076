"""Metrics by partition and hour (spec 8). A live micro-batch recomputes only the hours its rows arrived in:
those hours' metrics equal the whole table's rows for them, an offset going backwards is found against its
partition's previous event however long ago that was."""
from __future__ import annotations

from pyspark.sql import functions as F

from replay.engine.metrics import HOUR, hourly, hourly_between, hours_of

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
    letters = spark.createDataFrame([(0, 1, "late"), (0, 62, "window_closed"), (1, 150, "window_closed")],
                                    "partition int, arrival long, reason string")
    dead = letters.select("partition", "reason", minute("arrival").alias("arrival_time"))
    return decisions, dead


def _rows(df):
    return sorted(tuple(r) for r in df.collect())


def test_the_metrics_of_an_hour_range_equal_the_whole_tables_rows_for_those_hours(spark):
    decisions, dead = _decisions(spark)
    whole = hourly(decisions, dead)
    for lo, hi in ((0, 1), (1, 2), (2, 3), (1, 3), (0, 3)):
        start, end = H0 + lo * HOUR, H0 + hi * HOUR
        expected = whole.where((F.unix_micros("hour") >= start) & (F.unix_micros("hour") < end))
        assert _rows(hourly_between(decisions, dead, start, end)) == _rows(expected), (lo, hi)


def test_an_offset_going_backwards_is_found_against_a_previous_event_hours_earlier(spark):
    decisions, dead = _decisions(spark)
    last_hour = hourly_between(decisions, dead, H0 + 2 * HOUR, H0 + 3 * HOUR)
    assert {r["partition"]: r["backward_offsets"] for r in last_hour.collect()} == {0: 0, 1: 1}
    second_hour = hourly_between(decisions, dead, H0 + HOUR, H0 + 2 * HOUR)
    assert {r["partition"]: r["backward_offsets"] for r in second_hour.collect()} == {0: 1}


def test_the_hours_a_batch_changes_run_from_its_first_arrivals_hour_to_its_last(spark):
    assert hours_of(H0 + HOUR + 5, H0 + HOUR + 9) == (H0 + HOUR, H0 + 2 * HOUR)
    assert hours_of(H0, H0 + 2 * HOUR) == (H0, H0 + 3 * HOUR)
    assert hours_of(None, None) is None
