"""Throughput of Retrace's ingest and replay, next to a plain Spark scan and Spark Structured Streaming.

    python bench/replay_bench.py --events 10000000 [--partitions 8] [--keys 10000] [--files 100]
                                 [--work DIR] [--files-per-batch 10] [--job jobs/examples/device_minute.yaml]
                                 [--format parquet|jsonl]

One run, one local SparkSession: generate a landing stream (Parquet, or JSON lines with `--format jsonl`),
ingest it into the journal, replay it (tumbling 1 min windows per key), scan the journal (warm), copy it
(read + write Parquet, warm: the floor for anything that writes a row per journal row), and run a Structured
Streaming query doing the same windowed count over the landing files; last, ingest one more file of 1,000
events into the full journal (`later_ingest_s`: a periodic ingest's cost). Events/s per step go to stdout; the LAST
line is one JSON object (events, ingest_s, replay_s, scan_s, structured_streaming_s, ...). `--job` also
replays a user's job (e.g. one with several aggregates) over the same journal, generated in the "sensors"
shape so the example jobs find their fields. The driver's peak RSS (Python and its JVM) during the ingest and during
the replay is reported at the end, each step's own (the bench's data generator in Python is not the driver's work).

Structured Streaming advances its watermark only between micro-batches (and one early event moves
it for everything after), so the events its emitted windows cover (`ss_events_in_windows`) depend on
--files-per-batch; it is not the same computation as the replay, only the closest built-in one.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root

from replay.ops.demo import DEFAULT_POLICY as POLICY  # noqa: E402  (1-minute tumbling windows per key)


def timed(fn, *args):
    t0 = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - t0, result


def generate_step(landing: str, args) -> dict:
    from replay.ops.generate import StreamSpec, generate

    return generate(landing, StreamSpec(args.events, partitions=args.partitions, keys=args.keys, files=args.files,
                                        seed=args.seed, fmt=args.format, shape="sensors" if args.job else "basic"))


def ingest_step(spark, landing: str, lake: str):
    from replay.io.journal import ingest

    return ingest(spark, landing, lake)


def replay_step(spark, lake: str):
    from replay.model.jobs import Job
    from replay.model.policy import Policy
    from replay.ops.run import run

    return run(spark, lake, Job.spec(Policy.from_yaml(POLICY)), target="production")


def job_step(spark, lake: str, path: str):
    from replay.model.jobs import load_folder
    from replay.ops.run import run

    catalog = load_folder(os.path.dirname(os.path.abspath(path)))
    job = next(j for j in catalog.jobs.values() if os.path.abspath(str(j.origin)) == os.path.abspath(path))
    return job.name, run(spark, lake, job, target="production")


LATER = 1_000  # events in the file a later ingest adds


def later_ingest_step(spark, work: str, landing: str, lake: str, args) -> float:
    """Ingest one more landing file of LATER events into the full journal (its offsets repeat the first
    ones'): what a periodic ingest costs once the journal is large. Last, as it changes the landing."""
    from replay.ops.generate import StreamSpec, generate

    more = os.path.join(work, "more")
    shutil.rmtree(more, ignore_errors=True)
    generate(more, StreamSpec(LATER, partitions=args.partitions, keys=args.keys, files=1, seed=args.seed + 1,
                              fmt=args.format, shape="sensors" if args.job else "basic"))
    [name] = [f for f in os.listdir(more) if f.startswith("part-")]
    shutil.copy(os.path.join(more, name), os.path.join(landing, "zz-later" + os.path.splitext(name)[1]))
    seconds, _ = timed(ingest_step, spark, landing, lake)
    return seconds


def driver_pids() -> dict[str, int]:
    """This Python process and its driver JVM (local mode: a child process of this one running java)."""
    out = {"python": os.getpid()}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            with open(f"/proc/{pid}/cmdline") as f:
                cmd = f.read()
        except OSError:
            continue
        if int(status.get("PPid", "0").strip()) == os.getpid() and "java" in cmd:
            out["jvm"] = pid
    return out


WHOLE_RUN: dict[str, int] = {}  # the peaks before the last reset (a reset clears ru_maxrss too)


def reset_peak_rss() -> None:
    """Start a new high-water mark of resident memory in the driver's processes (Linux: `5` to clear_refs), so
    that a step's peak is its own and not the bench's data generator's."""
    whole_run_peak_rss_mib()
    for pid in driver_pids().values():
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")


def peak_rss_mib() -> dict:
    """The high-water mark of resident memory (VmHWM) of the driver's processes since the last reset."""
    out = {}
    for name, pid in driver_pids().items():
        with open(f"/proc/{pid}/status") as f:
            hwm = next(line for line in f if line.startswith("VmHWM:"))
        out[name] = round(int(hwm.split()[1]) / 1024)
    return out


def whole_run_peak_rss_mib() -> dict:
    """The peaks of the whole run so far: the largest of every stretch between resets."""
    for name, mib in peak_rss_mib().items():
        WHOLE_RUN[name] = max(WHOLE_RUN.get(name, 0), mib)
    return dict(WHOLE_RUN)


def step_peak(fn, *args):
    """Run a step timed; returns (seconds, result, the driver's peak RSS in MiB during the step)."""
    reset_peak_rss()
    seconds, result = timed(fn, *args)
    return seconds, result, peak_rss_mib()


def folder_bytes(folder: str) -> int:
    """The bytes of every file under `folder` (a Delta table's data files and its log)."""
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(folder) for f in files)


def target_bytes(lake: str, job: str = "default") -> dict[str, int]:
    """The bytes of each table of a job's production target, written once by the replay (no older files)."""
    from replay.io.lake import OUTPUT_TABLES, Lake

    where = Lake(lake).target(job, "production")
    return {t: folder_bytes(where.table(t)) for t in OUTPUT_TABLES}


def scan_step(spark, lake: str) -> tuple[float, int]:
    """Read every column of the journal (its current version); the warm (second) time, and the row count."""
    df = spark.read.format("delta").load(os.path.join(lake, "journal"))
    timed(df.write.format("noop").mode("overwrite").save)  # cold: JVM warm-up, file listing, page cache
    seconds, _ = timed(df.write.format("noop").mode("overwrite").save)
    return seconds, df.count()


def copy_step(spark, lake: str, work: str) -> float:
    """Read the journal and write it back as Parquet, warm: the floor for any replay that writes one row
    per journal row (the decisions table), before it computes anything."""
    df = spark.read.format("delta").load(os.path.join(lake, "journal"))
    seconds = []
    for i in range(2):  # the first is cold
        folder = os.path.join(work, f"copy-{i}")
        t, _ = timed(df.write.parquet, folder)
        shutil.rmtree(folder, ignore_errors=True)
        seconds.append(t)
    return seconds[-1]


def structured_streaming_step(spark, landing: str, checkpoint: str, files_per_batch: int, fmt: str) -> dict:
    """Windowed count and sum per key over the landing files with Spark's own event-time machinery."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

    schema = StructType([StructField("partition", IntegerType()), StructField("offset", LongType()),
                         StructField("arrival_time", StringType()), StructField("event_time", StringType()),
                         StructField("key", StringType()), StructField("value", DoubleType())])
    reader = spark.readStream.schema(schema).option("maxFilesPerTrigger", files_per_batch)
    events = ((reader.parquet(landing) if fmt == "parquet" else reader.json(landing))
              # try_: ANSI mode (replay.io.spark) makes to_timestamp fail on "not-a-time"
              .withColumn("event_time", F.try_to_timestamp("event_time"))
              .where(F.col("event_time").isNotNull()))  # Retrace quarantines these
    windows = (events.withWatermark("event_time", "5 seconds")
               .groupBy(F.window("event_time", "1 minute"), "key")
               .agg(F.count("*").alias("count"), F.sum("value").alias("sum")))
    name = "ss_windows"
    query = (windows.writeStream.outputMode("append").format("memory").queryName(name)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    seconds, _ = timed(query.awaitTermination)
    if query.exception() is not None:
        raise RuntimeError(f"structured streaming query failed: {query.exception()}")
    covered, emitted = spark.table(name).agg(F.sum("count"), F.count("*")).first()
    batches = sum(1 for p in query.recentProgress if p["numInputRows"] > 0)
    spark.catalog.dropTempView(name)
    return {"seconds": seconds, "events_in_windows": int(covered or 0), "windows": int(emitted), "batches": batches}


def rate(events: int, seconds: float) -> str:
    return f"{seconds:8.2f} s  {events / seconds:>12,.0f} events/s" if seconds > 0 else f"{seconds:8.2f} s"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, required=True)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--files-per-batch", type=int, default=10,
                    help="maxFilesPerTrigger of the Structured Streaming run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--format", choices=("parquet", "jsonl"), default="parquet", help="the landing files' format")
    ap.add_argument("--work", help="work folder (kept); default: a temporary folder, removed at the end")
    ap.add_argument("--job", help="also replay this job file (its folder's sources.yaml names its fields)")
    args = ap.parse_args(argv)
    if args.job and not os.path.isfile(args.job):
        ap.error(f"--job: no such file {args.job!r}")
    if args.files_per_batch < 1:
        ap.error(f"--files-per-batch must be > 0, got {args.files_per_batch}")

    work = os.path.abspath(args.work) if args.work else tempfile.mkdtemp(prefix="retrace-bench-")
    landing, lake, checkpoint = (os.path.join(work, d) for d in ("landing", "lake", "ss_checkpoint"))
    for d in (landing, lake, checkpoint):  # leftovers of an earlier run would skew every step
        shutil.rmtree(d, ignore_errors=True)
    n = args.events
    try:
        from replay.io.spark import get_spark

        spark_s, spark = timed(get_spark, "retrace-bench")
        print(f"spark session        {spark_s:8.2f} s", flush=True)
        gen_s, summary = timed(generate_step, landing, args)
        print(f"generate             {rate(n, gen_s)}  ({summary['bytes'] / 2**20:,.0f} MiB {args.format}, "
              f"{summary['files']} files, {summary['malformed']} malformed)", flush=True)
        ingest_s, _, ingest_rss = step_peak(ingest_step, spark, landing, lake)
        print(f"ingest               {rate(n, ingest_s)}", flush=True)
        replay_s, _, replay_rss = step_peak(replay_step, spark, lake)
        print(f"replay               {rate(n, replay_s)}", flush=True)
        job_s, job_name = None, None
        if args.job:
            job_s, (job_name, _) = timed(job_step, spark, lake, args.job)
            print(f"replay job {job_name:<10}{rate(n, job_s)}", flush=True)
        scan_s, journal_rows = scan_step(spark, lake)
        print(f"scan journal (warm)  {rate(n, scan_s)}  ({journal_rows:,} journal rows)", flush=True)
        copy_s = copy_step(spark, lake, work)
        print(f"copy journal (warm)  {rate(n, copy_s)}  (read it and write it back as Parquet)", flush=True)
        ss = structured_streaming_step(spark, landing, checkpoint, args.files_per_batch, args.format)
        print(f"structured streaming {rate(n, ss['seconds'])}  ({ss['batches']} batches of <= "
              f"{args.files_per_batch} files; its {ss['windows']:,} windows cover "
              f"{ss['events_in_windows']:,} of {n:,} events)", flush=True)
        journal_bytes, tables = folder_bytes(os.path.join(lake, "journal")), target_bytes(lake)
        print(f"production target    {sum(tables.values()) / 2**20:8.1f} MiB  ("
              + ", ".join(f"{t} {b / 2**20:,.1f}" for t, b in tables.items())
              + f"), journal {journal_bytes / 2**20:,.1f} MiB", flush=True)
        later_s = later_ingest_step(spark, work, landing, lake, args)
        print(f"later ingest         {rate(LATER, later_s)}  (one more file into the journal of {n:,} events)",
              flush=True)
        result = {
            "events": n, "ingest_s": round(ingest_s, 3), "later_ingest_s": round(later_s, 3),
            "ingest_over_copy": round(ingest_s / copy_s, 2), "replay_s": round(replay_s, 3),
            "scan_s": round(scan_s, 3), "copy_s": round(copy_s, 3), "structured_streaming_s": round(ss["seconds"], 3),
            "generate_s": round(gen_s, 3), "spark_start_s": round(spark_s, 3),
            "replay_over_scan": round(replay_s / scan_s, 2), "copy_over_scan": round(copy_s / scan_s, 2),
            "replay_over_copy": round(replay_s / copy_s, 2),
            "replay_over_structured_streaming": round(replay_s / ss["seconds"], 2),
            "ss_events_in_windows": ss["events_in_windows"], "ss_windows": ss["windows"], "ss_batches": ss["batches"],
            "journal_rows": journal_rows, "partitions": args.partitions, "keys": args.keys, "files": args.files,
            "files_per_batch": args.files_per_batch, "format": args.format,
            "peak_rss_mib": {"replay": replay_rss, "ingest": ingest_rss, "whole_run": whole_run_peak_rss_mib()},
            "journal_bytes": journal_bytes, "target_bytes": tables,
            "target_over_journal_bytes": round(sum(tables.values()) / journal_bytes, 3),
        }
        if job_s is not None:
            result.update({"job": job_name, "job_replay_s": round(job_s, 3),
                           "job_over_structured_streaming": round(job_s / ss["seconds"], 2)})
        print(f"ingest / copy                 {result['ingest_over_copy']:.2f}x the time")
        print(f"replay / scan                 {result['replay_over_scan']:.2f}x the time")
        print(f"copy / scan                   {result['copy_over_scan']:.2f}x the time")
        print(f"replay / copy                 {result['replay_over_copy']:.2f}x the time")
        print(f"replay / structured streaming {result['replay_over_structured_streaming']:.2f}x the time")
        if job_s is not None:
            print(f"job {job_name} / structured streaming {result['job_over_structured_streaming']:.2f}x the time")
        print(f"production target / journal   {result['target_over_journal_bytes']:.2f}x the bytes")
        peaks = result["peak_rss_mib"]
        print(f"peak RSS of the driver (MiB)  replay {peaks['replay']}, ingest {peaks['ingest']}; the whole run "
              f"{peaks['whole_run']} (with the bench's data generator)")
        print(json.dumps(result), flush=True)
        return result
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
