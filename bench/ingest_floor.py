"""The floor under `replay ingest`: building the journal rows and writing them, next to a journal copy.

    python bench/ingest_floor.py --events 2000000 [--partitions 8] [--keys 10000] [--files 100] [--seed 0]

One local SparkSession, a Parquet landing as `bench/replay_bench.py` generates it. Each step runs twice and
the second (warm) time counts: reading the landing (`noop` sink); building the journal rows from it without
writing them (each row's JSON text as `payload`, the typed fields, `seq`: ingest's own functions); building
and writing them as a Delta table (what ingest's one big job does, without its counts, offset checks and
manifest); and copying the journal written (read it, write Parquet: the baseline of the ingest target).
The ratios against the copy say how much of ingest's time no change to its counts and checks can remove.
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
                  2_000_000)


def main(argv=None) -> dict:
    args = ap.parse_args(argv)
    from replay.ops.generate import StreamSpec, generate
    from replay.io import journal
    from replay.io import landing as landings
    from replay.io.spark import get_spark

    work = tempfile.mkdtemp(prefix="retrace-ingest-floor-")
    try:
        landing = os.path.join(work, "landing")
        generate(landing, StreamSpec(args.events, partitions=args.partitions, keys=args.keys, files=args.files,
                                     seed=args.seed, fmt="parquet"))
        spark = get_spark("retrace-ingest-floor")
        source = landings.Landing.of(landing)
        files = sorted(f.name for f in source.files())
        lines = journal._line_counts(spark, source, files)

        def rows():  # the journal rows, as ingest builds them from a local Parquet landing
            raw = journal._read_raw(spark, source.root, files, journal.SourceFields())
            return journal.with_seq(spark, journal.normalize(raw), files, lines, 0)

        def delta():
            shutil.rmtree(os.path.join(work, "journal"), ignore_errors=True)
            rows().write.format("delta").save(os.path.join(work, "journal"))

        noop = lambda df: df.write.format("noop").mode("overwrite").save()  # noqa: E731
        seconds = {
            "read_landing_s": warm(lambda: noop(spark.read.parquet(landing))),
            "build_rows_s": warm(lambda: noop(rows())),
            "build_and_write_delta_s": warm(delta),
        }
        written = spark.read.format("delta").load(os.path.join(work, "journal"))
        seconds["journal_copy_s"] = warm(lambda: written.write.mode("overwrite").parquet(os.path.join(work, "copy")))
        copy = seconds["journal_copy_s"]
        for name, s in seconds.items():
            print(f"{name[:-2].replace('_', ' '):24s} {s:7.2f} s  {s / copy:5.2f}x the journal copy", flush=True)
        result = {"events": args.events, **{k: round(v, 3) for k, v in seconds.items()},
                  "build_over_copy": round(seconds["build_rows_s"] / copy, 2),
                  "build_and_write_over_copy": round(seconds["build_and_write_delta_s"] / copy, 2)}
        print(json.dumps(result), flush=True)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
