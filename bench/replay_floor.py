"""The floor under `replay run`: the least an exact replay that keeps its tables writes, next to Structured Streaming.

    python bench/replay_floor.py --events 1000000 [--partitions 8] [--keys 10000] [--files 100] [--seed 0]

One local SparkSession; the Parquet landing and journal of `bench/replay_bench.py`. Each step runs twice and
the second (warm) time counts:
- Structured Streaming: the bench's `withWatermark` + `window` count and sum per key (the target's baseline);
- chunk maxima: one pass over the journal for each chunk's largest arrival and event time per partition, what
  gives every chunk its starting watermarks so that chunks run in parallel;
- decisions as a copy: a decision row per journal row (its columns taken from the journal, nothing computed)
  written as the `decisions` Delta table is;
- windows: 1-minute count and sum per key of the events, written as Delta;
- the engine's route through Python, no kernel: the first pass's columns to Python as Arrow (nothing back), then
  the watermark pass's columns there and back, turned into decision rows and written as Delta, both where the
  rows lie, as `replay/engine/pipeline.first_pass` and `watermarks._partition_scopes` send them;
- `replay run` itself.
The floor is chunk maxima + decisions as a copy + windows: no replay that writes those tables can take less
on this machine. The Arrow floor is the two passes through Python + windows: no replay whose sequential logic
runs in Python over Arrow batches (numpy on the executors, as the engine's) can take less.
The LAST line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root

from bench.common import data_options, warm  # noqa: E402

ap = data_options(argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter),
                  1_000_000)
ap.add_argument("--files-per-batch", type=int, default=10, help="maxFilesPerTrigger of the Structured Streaming run")

TARGET = {1_000_000: 1 / 1.5, 10_000_000: 1 / 2}  # replay / Structured Streaming, issue 15


def decision_columns(rows):
    """A decisions table's columns from journal rows alone: what writing a decision per row costs."""
    from pyspark.sql import functions as F

    t = F.col("event_time")
    return rows.select("seq", "partition", "offset", "kind", F.lit("accepted").alias("action"),
                       F.array().cast("array<string>").alias("reasons"), t.alias("timestamp"), t.alias("watermark"),
                       t.alias("output_watermark"), "arrival_time", "key", "value", t.alias("partition_watermark"))


def main(argv=None) -> dict:
    args = ap.parse_args(argv)
    from pyspark.sql import functions as F

    from bench.replay_bench import POLICY, structured_streaming_step
    from replay.ops.generate import StreamSpec, generate
    from replay.engine.watermarks import chunk_column
    from replay.io import journal
    from replay.io.spark import get_spark
    from replay.io.store import default_store
    from replay.model.jobs import Job
    from replay.model.policy import Policy
    from replay.ops.run import run

    work = tempfile.mkdtemp(prefix="retrace-replay-floor-")
    try:
        landing, lake, out = (os.path.join(work, d) for d in ("landing", "lake", "floor"))
        generate(landing, StreamSpec(args.events, partitions=args.partitions, keys=args.keys, files=args.files,
                                     seed=args.seed, fmt="parquet"))
        spark = get_spark("retrace-replay-floor")
        journal.ingest(spark, landing, lake)
        store, rows = default_store(), journal.read(spark, lake)
        events = rows.where((F.col("kind") == "event") & F.col("event_time").isNotNull())
        runs = iter(range(2))

        def ss():
            structured_streaming_step(spark, landing, os.path.join(work, f"ss_{next(runs)}"), args.files_per_batch,
                                      "parquet")

        def maxima():
            rows.groupBy(chunk_column().alias("chunk"), "partition").agg(
                F.max("arrival_time"), F.max("event_time")).collect()

        def copy():
            store.write(decision_columns(rows), os.path.join(out, "decisions"), mode="overwrite")

        def windows():
            per_key = events.groupBy(F.date_trunc("minute", "event_time").alias("window_start"), "key").agg(
                F.count("*").alias("count"), F.sum("value").alias("sum"))
            store.write(per_key, os.path.join(out, "windows"), mode="overwrite")

        def first_pass_through_arrow():
            """The first pass's columns to Python (`pipeline.first_pass`), one row back per batch."""
            t, a = F.unix_micros("event_time"), F.unix_micros("arrival_time")
            hour = F.unix_micros(F.date_trunc("hour", "arrival_time"))
            narrow = rows.select(
                chunk_column().alias("chunk"), F.xxhash64(F.input_file_name()).alias("file"), "partition", "seq",
                "offset", hour.alias("hour"), (F.col("kind") == "event").alias("event"), F.lit(True).alias("row"),
                a.alias("floor"), t.alias("events"))
            narrow.mapInArrow(lambda batches: (_count(b) for b in batches), "n long").collect()

        def through_arrow():
            """The watermark pass's columns (`watermarks._partition_scopes`) through Python and back, written as
            the decisions are: the route without the kernel."""
            t = F.unix_micros("event_time")
            narrow = rows.select("seq", "partition", "offset", (F.col("kind") == "event").alias("_event"),
                                 F.unix_micros("arrival_time").alias("arrival"), t.alias("et"), "key", "value",
                                 F.lit(False).alias("duplicate"), chunk_column().alias("chunk"), t.alias("c"),
                                 F.lit(True).alias("row"))
            back = narrow.mapInArrow(lambda batches: batches, narrow.schema)
            journal_columns = back.select(
                "seq", "partition", "offset", F.when(F.col("_event"), "event").otherwise("clock").alias("kind"),
                F.timestamp_micros("arrival").alias("arrival_time"), F.timestamp_micros("et").alias("event_time"),
                "key", "value")
            store.write(decision_columns(journal_columns), os.path.join(out, "decisions_arrow"), mode="overwrite")

        def replay():
            run(spark, lake, Job.spec(Policy.from_yaml(POLICY)), target="production")

        seconds = {"structured_streaming_s": warm(ss), "chunk_maxima_s": warm(maxima),
                   "decisions_copy_s": warm(copy), "windows_s": warm(windows),
                   "first_pass_through_arrow_s": warm(first_pass_through_arrow),
                   "decisions_through_arrow_s": warm(through_arrow), "replay_s": warm(replay)}
        seconds["floor_s"] = seconds["chunk_maxima_s"] + seconds["decisions_copy_s"] + seconds["windows_s"]
        seconds["arrow_floor_s"] = (seconds["first_pass_through_arrow_s"] + seconds["decisions_through_arrow_s"]
                                    + seconds["windows_s"])
        ss_s = seconds["structured_streaming_s"]
        for name, s in seconds.items():
            print(f"{name[:-2].replace('_', ' '):26s} {s:7.2f} s  {s / ss_s:5.2f}x Structured Streaming", flush=True)
        target = TARGET.get(args.events)
        if target is not None:
            print(f"target: replay / Structured Streaming at most {target:.2f}x; the floor alone is "
                  f"{seconds['floor_s'] / ss_s:.2f}x, the Arrow floor {seconds['arrow_floor_s'] / ss_s:.2f}x",
                  flush=True)
        result = {"events": args.events, "partitions": args.partitions,
                  **{k: round(v, 3) for k, v in seconds.items()},
                  "floor_over_structured_streaming": round(seconds["floor_s"] / ss_s, 2),
                  "arrow_floor_over_structured_streaming": round(seconds["arrow_floor_s"] / ss_s, 2),
                  "replay_over_structured_streaming": round(seconds["replay_s"] / ss_s, 2),
                  "replay_over_floor": round(seconds["replay_s"] / seconds["floor_s"], 2),
                  "target_replay_over_structured_streaming": target and round(target, 2)}
        print(json.dumps(result), flush=True)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _count(batch):
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({"n": [batch.num_rows]}, schema=pa.schema([("n", pa.int64())]))


if __name__ == "__main__":
    main()
