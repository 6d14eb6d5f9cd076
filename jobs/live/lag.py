"""The live job's processing lag, per micro-batch and partition (the `lag` table of the lead job's target), as Azure
Stream Analytics measures it: rows and bytes read, input still waiting (landing files not journaled yet, or Kafka
records past the journaled offset), and the watermark delay both against processing time (the clock the job
estimates arrivals from, at commit, minus the output watermark: is the job falling behind?) and against the
partition's latest arrival, an event's or a clock row's estimate (the arrival-based delay of the batch report).
Observations of processing time: a replay does not remake them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from replay.engine.windows import MERGED
from replay.io.spark import driver_rows
from replay.model.state import NEG, State

SCHEMA = ("batch long, trigger string, partition int, events long, clock_rows long, bytes long, backlog long, "
          "backlog_unit string, last_arrival timestamp, partition_watermark timestamp, output_watermark timestamp, "
          "processing_delay_s double, arrival_delay_s double, batch_seconds double, committed_at timestamp")


@dataclass(frozen=True)
class PartitionRead:
    """What one micro-batch journaled for one partition."""

    partition: int
    events: int
    clock_rows: int
    bytes: int
    last_arrival: int | None  # the latest event arrival (microseconds)
    last_offset: int | None
    latest: int | None = None  # the latest arrival of any of its rows: an event's, or a clock row's estimate


def reads(rows: DataFrame) -> tuple[list[PartitionRead], dict]:
    """Per partition of the batch's journal rows: events, clock rows, bytes (of the whole landed line), latest
    event arrival and offset (of its records: events and punctuations), latest arrival of any row; and the batch's
    span (lo, hi, n, clocks, noted: the latest processing time its clock rows name; offsets: its records' least and
    greatest offset; first_offsets, last_offsets: the same per partition; distinct: no (partition, offset) of its
    records repeats in it, so with no earlier journal rows to meet, each job's duplicate check has nothing to find;
    partitions: those of its events, clocks and punctuations, the rows each job's watermark pass decides).
    One Spark job."""
    event, clock = F.col("kind") == "event", F.col("kind") == "clock"
    record = F.col("kind").isin("event", "punctuation")  # the broker's records: offsets are theirs
    per = rows.groupBy("partition").agg(
        F.count(F.when(event, 1)).alias("events"), F.count(F.when(clock, 1)).alias("clocks"),
        F.sum(F.when(F.col("kind") != "clock", F.octet_length("payload"))).alias("bytes"),
        F.max(F.when(event, F.unix_micros("arrival_time"))).alias("arrival"),
        F.max(F.unix_micros("arrival_time")).alias("latest"),
        F.max(F.when(record, F.col("offset"))).alias("offset"),
        F.min("seq").alias("lo"), F.max("seq").alias("hi"), F.count("*").alias("n"),
        F.min(F.when(record, F.col("offset"))).alias("low_offset"),
        F.count(F.when(record, 1)).alias("records"),
        F.count_distinct(F.when(record, F.col("offset"))).alias("distinct"),
        F.max(F.when(clock, F.get_json_object("payload", "$.processing_time"))).alias("noted")).collect()
    out = [PartitionRead(r["partition"], r["events"], r["clocks"], r["bytes"] or 0, r["arrival"], r["offset"],
                         r["latest"])
           for r in sorted(per, key=lambda r: (r["partition"] is None, r["partition"] or 0))]
    return out, _span(per)


def _span(per: list) -> dict:
    """The batch's span from `reads`' rows per partition."""
    return {"lo": min((r["lo"] for r in per), default=None), "hi": max((r["hi"] for r in per), default=None),
            "n": sum(r["n"] for r in per), "clocks": sum(r["clocks"] for r in per),
            "noted": max((r["noted"] for r in per if r["noted"]), default=None),
            "offsets": _bounds([r["low_offset"] for r in per], [r["offset"] for r in per]),
            "first_offsets": {r["partition"]: r["low_offset"] for r in per if r["low_offset"] is not None},
            "last_offsets": {r["partition"]: r["offset"] for r in per if r["offset"] is not None},
            "distinct": all(r["records"] == r["distinct"] for r in per),
            "partitions": sorted(r["partition"] for r in per if r["records"] or r["clocks"])}


def with_clock_rows(found: tuple[list[PartitionRead], dict] | None, clocks: list[tuple[int, int, int]],
                    noted: str | None) -> tuple[list[PartitionRead], dict]:
    """`reads` of a batch's source rows (`found`; None: none) and the clock rows made beside them in the driver
    ((seq, partition, estimated arrival), each noting `noted`): the same as `reads` of the journaled batch, with
    no Spark job for the rows the driver already holds."""
    read, span = found if found is not None else ([], _span([]))
    if not clocks:
        return read, span
    by = {r.partition: r for r in read}
    for seq, p, arrival in clocks:
        r = by.get(p) or PartitionRead(p, 0, 0, 0, None, None)
        latest = arrival if r.latest is None else max(r.latest, arrival)
        by[p] = replace(r, clock_rows=r.clock_rows + 1, latest=latest)
    seqs = [seq for seq, _, _ in clocks]
    lo, hi = min(seqs), max(seqs)
    span = {**span, "lo": lo if span["lo"] is None else min(span["lo"], lo),
            "hi": hi if span["hi"] is None else max(span["hi"], hi), "n": span["n"] + len(clocks),
            "clocks": span["clocks"] + len(clocks),
            "partitions": sorted(set(span["partitions"]) | {p for _, p, _ in clocks}),
            "noted": max((v for v in (span["noted"], noted) if v), default=None)}
    return sorted(by.values(), key=lambda r: (r.partition is None, r.partition or 0)), span


def _bounds(lows: list, highs: list) -> tuple[int, int] | None:
    lows, highs = [v for v in lows if v is not None], [v for v in highs if v is not None]
    return (min(lows), max(highs)) if lows else None


def rows_of(report, read: list[PartitionRead], partitions: list[int], state: State, independent: bool,
            last_arrival: dict[int, int], backlog: dict[int | None, int | None], unit: str) -> list[tuple]:
    """A row per partition of the source (those the batch did not touch too), for the batch of `report` (a
    BatchReport). `last_arrival`: each partition's latest event arrival; `backlog`: per partition, or under None
    for the whole source (landing files). The processing delay is measured against the report's processing time
    (the wall clock at commit, or the simulated clock's), the arrival delay against the partition's latest row."""
    by = {r.partition: r for r in read}
    ps = sorted(set(partitions) | {r.partition for r in read if r.partition is not None})
    committed_at, now, out = int(report.committed_at * 1e6), round(report.processing_time * 1e6), []
    for p in ps:
        r = by.get(p)
        owm = state.scope(p if independent else MERGED).owm
        wp = state.partition(p).wp
        arrival = last_arrival.get(p)
        latest = max((v for v in (arrival, r and r.latest) if v is not None), default=None)
        out.append((report.batch, report.trigger, p, r.events if r else 0, r.clock_rows if r else 0,
                    r.bytes if r else 0, backlog.get(p, backlog.get(None)), unit, arrival, wp if wp > NEG else None,
                    owm if owm > NEG else None, (now - owm) / 1e6 if owm > NEG else None,
                    (latest - owm) / 1e6 if owm > NEG and latest is not None else None, report.seconds,
                    committed_at))
    return out


def frame(spark: SparkSession, rows: list[tuple], schema: str) -> DataFrame:
    """Driver-side rows with instants in microseconds -> a DataFrame of `schema` (timestamps as timestamps)."""
    df = driver_rows(spark, rows, schema.replace(" timestamp", " long"))
    return df.select(*[F.timestamp_micros(c).alias(c) if t == "timestamp" else F.col(c)
                       for c, t in (f.split() for f in schema.split(", "))])
