"""Replay time against the number of source partitions, at the same event count.

    python bench/partition_sweep.py [--events 200000] [--partitions 8 64 512] [--keys 1000] [--files 20]

One local SparkSession. For each partition count: generate a parquet landing stream with that many
partitions, ingest it into its own lake, replay it with the default job (1-minute tumbling windows,
merged output watermark) and time the replay (after one warm-up replay). The baseline is the replay at the smallest
partition count, measured in the same run; each other count prints its ratio to it (target: at most 1.5x).
The LAST line is one JSON object.
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

from replay.ops.demo import DEFAULT_POLICY as POLICY  # noqa: E402


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, nargs="+", default=[8, 64, 512])
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", help="work folder (kept); default: a temporary folder, removed at the end")
    args = ap.parse_args(argv)
    if any(p < 1 for p in args.partitions):
        ap.error(f"--partitions must all be > 0, got {args.partitions}")

    from replay.io.journal import ingest
    from replay.io.spark import get_spark
    from replay.model.jobs import Job
    from replay.model.policy import Policy
    from replay.ops.generate import StreamSpec, generate
    from replay.ops.run import run

    work = os.path.abspath(args.work) if args.work else tempfile.mkdtemp(prefix="retrace-sweep-")
    spark = get_spark("retrace-partition-sweep")
    job = Job.spec(Policy.from_yaml(POLICY))
    counts = sorted(set(args.partitions))
    seconds: dict[int, float] = {}
    try:
        for p in counts:
            landing, lake = os.path.join(work, f"landing-{p}"), os.path.join(work, f"lake-{p}")
            for d in (landing, lake):
                shutil.rmtree(d, ignore_errors=True)
            generate(landing, StreamSpec(args.events, partitions=p, keys=args.keys, files=args.files, seed=args.seed,
                                         fmt="parquet"))
            ingest(spark, landing, lake)
            if p == counts[0]:  # warm-up: the first replay of a session pays for JVM code generation
                run(spark, lake, job, target="warmup")
            t0 = time.perf_counter()
            run(spark, lake, job, target="production")
            seconds[p] = time.perf_counter() - t0
            print(f"replay {args.events:,} events on {p:>4} partitions  {seconds[p]:8.2f} s", flush=True)
        base = counts[0]
        ratios = {p: seconds[p] / seconds[base] for p in counts}
        for p in counts[1:]:
            print(f"replay on {p} / on {base} partitions   {ratios[p]:.2f}x the time")
        result = {"events": args.events, "keys": args.keys, "files": args.files, "baseline_partitions": base,
                  "replay_s": {str(p): round(s, 3) for p, s in seconds.items()},
                  "ratio_to_baseline": {str(p): round(r, 2) for p, r in ratios.items()}}
        print(json.dumps(result), flush=True)
        return result
    finally:
        spark.stop()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
