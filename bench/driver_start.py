"""Cold start of a local Spark driver, with the JVM class archive set-up records and without it.

    python bench/driver_start.py [--runs 3]

Each run is a new Python process: start the session, count a range, write and read back a small Delta
table (what every `replay` command and Dagster run does first). Runs alternate between the two modes; the
ratio is the median without the archive over the median with it. The last line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DRIVER = """
import sys, time
began = time.perf_counter()
from replay.io.spark import get_spark
spark = get_spark("retrace-start-bench")
spark.range(10).count()
spark.range(10).write.format("delta").save(sys.argv[1])
spark.read.format("delta").load(sys.argv[1]).count()
print("seconds", time.perf_counter() - began)
"""


def one_start(archive: str, table: str) -> float:
    env = {**os.environ, "PYTHONPATH": ROOT, "RETRACE_CLASS_ARCHIVE": archive}
    done = subprocess.run([sys.executable, "-c", DRIVER, table], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True, timeout=600)
    return float(done.stdout.split("seconds")[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from replay.io.spark import CLASS_ARCHIVE

    if not os.path.isfile(CLASS_ARCHIVE):
        raise SystemExit(f"no class archive at {CLASS_ARCHIVE}: run `bash infra/setup.sh --no-demo` first")
    times = {"without": [], "with": []}
    with tempfile.TemporaryDirectory(prefix="retrace-start-bench-") as work:
        for i in range(args.runs):
            for mode, archive in (("without", os.devnull), ("with", CLASS_ARCHIVE)):
                seconds = one_start(archive, os.path.join(work, f"{mode}-{i}"))
                times[mode].append(seconds)
                print(f"run {i + 1}/{args.runs} {mode} the archive: {seconds:.2f} s", file=sys.stderr, flush=True)
    without, with_ = statistics.median(times["without"]), statistics.median(times["with"])
    print(f"driver start to a Delta read: {without:.2f} s without the class archive, {with_:.2f} s with it: "
          f"{without / with_:.2f}x faster")
    print(json.dumps({"bench": "driver_start", "runs": args.runs, "without_s": round(without, 2),
                      "with_s": round(with_, 2), "ratio": round(without / with_, 2)}))


if __name__ == "__main__":
    main()
