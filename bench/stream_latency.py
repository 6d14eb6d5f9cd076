"""End-to-end latency of the live job: landing file written -> its micro-batch's outputs committed.

    python bench/stream_latency.py [--files 10] [--events-per-file 1000] [--examples] [--soak 20 [--stacks FILE]]

Generates the files in a staging folder, starts `replay stream` (system clock, one file per batch,
1 s trigger) on an empty landing folder, then drops the files in one at a time (atomic rename), each
once the previous one is committed, and times each from its rename to its batch's last commit (the spec's job's
checkpoint). With `--examples` the files are sensor readings and the example jobs (`jobs/examples`, source
`sensors`) follow the spec's job on the source; the latency to the last of every job's commits is printed too
(`all_jobs_median_s`).
With `--soak K` (and --files >= 2K + 1, e.g. `--files 200 --soak 20`) it also compares the median latency
of the last K batches with that of the first K after the first one (target: within 1.2x), so the cost of a
batch does not grow with the history behind it, and the driver JVM's heap after a full GC at both points, so
neither does its memory; `--stacks FILE` also samples the batch's stack over those batches and writes each
line's seconds per batch, early against late (bench/stack_sampler.py), to show which step grows. It ends with
the floor that the Delta commits alone put under a batch: the commits a batch made (counted in the lake's Delta
logs; the metrics, lag and diagnostics a stream writes every few batches and when it stops count too) times the
median time of one idempotent append of 1,000 rows, measured in the same session. The last line is one JSON object
(median and p95 latency after the first batch, commits per batch).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--events-per-file", type=int, default=1000)
    ap.add_argument("--work", default=None, help="the folder to work in, kept afterwards (default: a new one, removed)")
    ap.add_argument("--soak", type=int, default=0, help="compare the median of the last K batches with the first K")
    ap.add_argument("--stacks", default=None, help="with --soak: where each line's seconds per batch go, early vs late")
    ap.add_argument("--examples", action="store_true", help="the example jobs follow the spec's job on the source")
    args = ap.parse_args()
    if args.soak and args.files < 2 * args.soak + 1:
        ap.error(f"--soak {args.soak} needs --files >= {2 * args.soak + 1}, got {args.files}")
    if args.stacks and not args.soak:
        ap.error("--stacks needs --soak K")
    work = args.work or tempfile.mkdtemp(prefix="retrace-latency-")
    try:
        _measure(args, work)
    finally:
        if not args.work:  # a folder of its own: removed (a --work folder is kept to look into)
            shutil.rmtree(work, ignore_errors=True)


def _measure(args, work: str) -> None:
    from jobs.live import run_stream
    from jobs.live.options import FileSource, LiveOptions
    from replay.io.spark import get_spark
    from replay.model.jobs import Job
    from replay.model.policy import Policy
    from replay.io.journal import SourceFields
    from replay.ops.catalog import catalog
    from replay.ops.demo import DEFAULT_POLICY, SOURCE
    from replay.ops.generate import StreamSpec, generate

    staging, landing, lake = (os.path.join(work, d) for d in ("staging", "landing", "lake"))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(landing)
    generate(staging, StreamSpec(args.files * args.events_per_file, partitions=8, keys=1000, files=args.files, seed=0,
                                 shape="sensors" if args.examples else "basic"))
    jobs, fields = [Job.spec(Policy.from_yaml(DEFAULT_POLICY))], None
    if args.examples:
        examples = catalog()
        jobs, fields = [*jobs, *examples.reading(SOURCE)], SourceFields.of(examples.sources[SOURCE])
    spark = get_spark("retrace-latency")
    committed: list = []
    every_job_at: list = []  # when every job's batch was committed (the followers' commits too)
    done = threading.Event()
    sampler = None
    if args.stacks:
        from stack_sampler import StackSampler

        sampler = StackSampler()

    def on_batch(report):
        every_job_at.append(time.time())
        committed.append(report)
        if sampler is not None:  # the phase of the batch after this one
            n = len(committed)
            sampler.phase = "early" if n <= args.soak else "late" if n >= args.files - args.soak else None
        done.set()

    options = LiveOptions(max_batches=args.files, clock="system", partitions=8, trigger_seconds=1.0,
                          on_batch=on_batch, heartbeat_seconds=0)  # the data path alone: no heartbeat between files
    stream = threading.Thread(target=run_stream, daemon=True, args=(
        spark, FileSource(landing, max_files_per_batch=1), lake, jobs, options, fields))
    stream.start()
    time.sleep(5)  # the query is up
    latencies, every_job, heap = [], [], {}
    for i, name in enumerate(sorted(os.listdir(staging))):
        done.clear()
        tmp = os.path.join(landing, f".{name}")
        shutil.copy(os.path.join(staging, name), tmp)
        written = time.time()
        os.rename(tmp, os.path.join(landing, name))
        if not done.wait(600):
            raise SystemExit(f"file {name} was not committed within 600 s")
        latencies.append(committed[-1].committed_at - written)
        every_job.append(every_job_at[-1] - written)
        print(f"file {i + 1}/{args.files}: {latencies[-1]:.2f} s from landing to committed outputs "
              f"(batch {committed[-1].seconds:.2f} s; every job's: {every_job[-1]:.2f} s)", file=sys.stderr, flush=True)
        if args.soak and i + 1 in (args.soak + 1, args.files):  # between batches: not in any latency
            heap[i + 1] = _heap_after_gc(spark)
    stream.join(60)
    if sampler is not None:
        sampler.phase = None
        sampler.write(args.stacks, "early", "late", args.soak)
    steady = latencies[1:] or latencies  # the first batch includes JVM code generation
    steady_all = every_job[1:] or every_job
    result = {"files": args.files, "events_per_file": args.events_per_file,
              "first_s": round(latencies[0], 2), "median_s": round(statistics.median(steady), 2),
              "p95_s": round(_nearest_rank(steady, 0.95), 2), "min_s": round(min(steady), 2),
              "max_s": round(max(steady), 2),
              "batch_median_s": round(statistics.median(r.seconds for r in committed[1:] or committed), 2),
              "jobs": [j.name for j in jobs], "all_jobs_median_s": round(statistics.median(steady_all), 2),
              "all_jobs_p95_s": round(_nearest_rank(steady_all, 0.95), 2)}
    if args.soak:
        first, last = statistics.median(steady[:args.soak]), statistics.median(steady[-args.soak:])
        (n0, h0), (n1, h1) = sorted(heap.items())
        result.update({"soak_first_median_s": round(first, 2), "soak_last_median_s": round(last, 2),
                       "soak_last_over_first": round(last / first, 2),
                       "heap_mib": {str(n0): h0, str(n1): h1}})
        print(f"median latency, last {args.soak} / first {args.soak} batches: {last / first:.2f}x "
              f"({last:.2f} s / {first:.2f} s; target: at most 1.2x)")
        print(f"driver heap after a full GC: {h0} MiB after batch {n0}, {h1} MiB after batch {n1}")
    commits = _commits_per_batch(lake, len(committed))
    one = _one_commit_seconds(spark, os.path.join(work, "floor"))
    result.update({"commits_per_batch": round(commits, 1), "commit_s": round(one, 3),
                   "commit_floor_s": round(commits * one, 2),
                   "batch_over_commit_floor": round(result["batch_median_s"] / (commits * one), 2)})
    print(f"commit floor: {commits:.1f} Delta commits per batch x {one:.3f} s per commit = {commits * one:.2f} s; "
          f"batch median / floor: {result['batch_median_s'] / (commits * one):.1f}x (target: a 2 s batch)")
    print(json.dumps(result))


def _nearest_rank(values: list[float], q: float) -> float:
    """The q-quantile by nearest rank (with few batches, the largest of the lowest ceil(q * n))."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _commits_per_batch(lake: str, batches: int) -> float:
    """Delta commits the live job made per batch: the commit files of every table in the lake."""
    found = 0
    for folder, _, names in os.walk(lake):
        if os.path.basename(folder) == "_delta_log":
            found += sum(1 for n in names if n.endswith(".json") and n[:-5].isdigit())
    return found / batches


def _one_commit_seconds(spark, path: str, rounds: int = 12) -> float:
    """Median time of an idempotent append of 1,000 rows to a table (the cheapest commit a batch makes)."""
    from pyspark.sql import functions as F

    from replay.io.store import AppTransaction, DeltaStore

    store, times = DeltaStore(), []
    for r in range(rounds):
        rows = spark.range(1000).select((F.col("id") + r * 1000).alias("seq"), F.lit("x" * 50).alias("payload"))
        began = time.perf_counter()
        store.write(rows.coalesce(1), path, txn=AppTransaction("floor", r))
        times.append(time.perf_counter() - began)
    return statistics.median(times[2:])


def _heap_after_gc(spark) -> int:
    """The driver JVM's live heap in MiB (in local mode it holds the executors' cached blocks too)."""
    jvm = spark.sparkContext._jvm
    jvm.java.lang.System.gc()
    runtime = jvm.java.lang.Runtime.getRuntime()
    return (runtime.totalMemory() - runtime.freeMemory()) >> 20


if __name__ == "__main__":
    main()
