"""The clock rows a live run would have journaled, for a journal ingested without them (`replay ingest`), so that
`replay advise` measures the output delay of the windows a live run would emit.

Without clock rows a partition that falls silent holds the merged output watermark until its next event, so a
replay of an ingested journal emits few windows before the end and flushes the rest. A live job keeping up with its
source journals, at every heartbeat, a clock row per partition with its estimated arrival time (spec 4): the
processing time, or for a partition that has never had an event, the processing time - 5 s. Here the heartbeats are
ticks of arrival time every `every` microseconds from the first arrival to the last (a live job keeping up), and
each tick's rows come after the journal rows that arrived by then. A clock row for a partition that also had an
event in the tick moves its floor at most one tick earlier than a live run would, so delays are exact to a tick.
A journal that already holds clock rows (journaled live) is taken as it is.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from replay.io import journal

NEVER_SEEN_DELAY = 5_000_000  # a partition with no event yet is estimated at processing time - 5 s (ASA)
NOTE = "simulated by replay advise: a live run keeping up with its source, a heartbeat every {every}"


def with_live_clock(rows: DataFrame, partitions: list[int] | None, every: int, every_text: str) -> tuple[DataFrame,
                                                                                                         dict]:
    """`rows` (journal rows in seq order, seq consecutive from their least) with the clock rows of a live run
    inserted and every seq renumbered, consecutive; and what was done (for the advice). Rows that already hold
    clock rows are returned as they are."""
    kinds = rows.agg(F.count(F.when(F.col("kind") == "clock", 1)).alias("clocks"), F.min("seq").alias("lo"),
                     F.min(F.unix_micros("arrival_time")).alias("first"),
                     F.max(F.unix_micros("arrival_time")).alias("last")).first()
    if kinds["clocks"]:
        return rows, {"clock_rows": "journaled", "added": 0}
    if kinds["first"] is None:
        return rows, {"clock_rows": "none (no arrivals)", "added": 0}
    lo, first = kinds["lo"], kinds["first"]
    ticks = np.arange(first - first % every + every, kinds["last"] + 1, every, dtype=np.int64)
    if partitions is None:
        partitions = sorted(r["partition"] for r in rows.select("partition").distinct().collect()
                            if r["partition"] is not None)
    if not len(ticks) or not partitions:
        return rows, {"clock_rows": "none (the range is shorter than a heartbeat)", "added": 0}
    anchors = _anchors(rows, ticks, every, lo)
    seen = {r["partition"]: r["t"] for r in rows.where(F.col("kind") == "event").groupBy("partition").agg(
        F.min(F.unix_micros("arrival_time")).alias("t")).collect()}
    renumbered = _renumbered(rows, anchors, len(partitions), lo)
    clocks = _clock_rows(rows.sparkSession, ticks, anchors, partitions, seen, lo, NOTE.format(every=every_text))
    return renumbered.unionByName(clocks), {"clock_rows": NOTE.format(every=every_text),
                                           "added": int(len(ticks) * len(partitions))}


def _anchors(rows: DataFrame, ticks: np.ndarray, every: int, lo: int) -> np.ndarray:
    """Per tick, the last seq (in the rows' order) of a row that arrived at or before it (lo - 1: none yet): a
    running maximum over the ticks of each tick's latest seq, from one aggregation of the rows by tick."""
    first = int(ticks[0])
    # the first tick at or after a row's arrival: ceil((arrival - first) / every), 0 for rows before the first tick
    index = F.greatest(F.lit(0), F.ceil((F.unix_micros("arrival_time") - F.lit(first)) / F.lit(every))).cast("long")
    per = rows.groupBy(index.alias("i")).agg(F.max("seq").alias("seq")).where(F.col("i") < len(ticks)).collect()
    latest = np.full(len(ticks), lo - 1, dtype=np.int64)
    for r in per:  # one value per tick that has arrivals: at most len(ticks)
        latest[r["i"]] = max(latest[r["i"]], r["seq"])
    return np.maximum.accumulate(latest)


def _renumbered(rows: DataFrame, anchors: np.ndarray, n: int, lo: int) -> DataFrame:
    """Journal row seq s -> s + n * (ticks whose rows come before it: anchor < s), on the executors (numpy's
    binary search over the ticks' anchors, shipped with the function)."""
    schema = rows.schema

    def shift(batches):
        for batch in batches:
            seq = batch.column("seq").to_numpy()
            moved = seq + n * np.searchsorted(anchors, seq, side="left")
            columns = [pa.array(moved, pa.int64()) if name == "seq" else batch.column(name)
                       for name in batch.schema.names]
            yield pa.RecordBatch.from_arrays(columns, schema=batch.schema)

    return rows.mapInArrow(shift, schema)


def _clock_rows(spark, ticks: np.ndarray, anchors: np.ndarray, partitions: list[int], seen: dict[int, int], lo: int,
                note: str) -> DataFrame:
    """Tick k's clock row of the i-th partition: seq anchor_k + 1 + n * k + i, after the rows it follows and
    the clock rows of the ticks before it; arrival the tick, or the tick - 5 s before the partition's first event."""
    n = len(partitions)
    table = spark.createDataFrame([(int(i), int(t), int(a)) for i, (t, a) in enumerate(zip(ticks, anchors))],
                                  "k long, tick long, anchor long")
    parts = spark.createDataFrame([(i, p, seen.get(p)) for i, p in enumerate(partitions)],
                                  "i int, partition int, first long")
    grid = table.crossJoin(parts)
    arrival = F.when(F.col("first").isNull() | (F.col("tick") < F.col("first")),
                     F.col("tick") - NEVER_SEEN_DELAY).otherwise(F.col("tick"))
    columns = {
        "seq": (F.col("anchor") + 1 + F.lit(n) * F.col("k") + F.col("i")).cast("long"),
        "partition": F.col("partition"), "offset": F.lit(None).cast("long"), "kind": F.lit("clock"),
        "arrival_time": F.timestamp_micros(arrival), "event_time": F.lit(None).cast("timestamp"),
        "key": F.lit(None).cast("string"), "value": F.lit(None).cast("double"),
        "payload": F.lit(json.dumps({"estimated_arrival": note})),
        "source": F.lit(None).cast("string"), "source_line": F.lit(None).cast("long"),
    }
    return grid.select(*[columns[c].alias(c) for c in journal.names()])
