"""Record the JVM class archive with a small run of its own (the test command's set-up, when no demo recorded one).

A cold driver spends seconds loading and verifying Spark's classes. Java's application class-data
sharing keeps them, parsed, in one file: the driver maps it instead (session start 5.8 s -> 3.2 s on the
2-core machine). `infra/setup.sh` records it while its first demo runs (replay/io/class_archive.py); this script
records it from a driver that ingests and replays a tiny stream, so it holds the classes an ingest, a replay and
the Delta commits load. `replay.io.spark` uses it when it is there.
"""
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from replay.io import class_archive  # noqa: E402
from replay.io.spark import CLASS_ARCHIVE  # noqa: E402


def main(archive: str = CLASS_ARCHIVE) -> None:
    began = time.perf_counter()
    os.makedirs(os.path.dirname(archive), exist_ok=True)
    os.environ[class_archive.RECORD] = archive  # this process's driver records instead of mapping an old archive

    from replay.io.journal import SourceFields, ingest
    from replay.io.lake import Lake
    from replay.io.spark import get_spark
    from replay.model.jobs import Job
    from replay.ops.catalog import catalog
    from replay.ops.generate import StreamSpec, generate
    from replay.ops.hashing import target_hash
    from replay.ops.run import run

    spark = get_spark("retrace-class-archive")
    with tempfile.TemporaryDirectory(prefix="retrace-class-archive-") as work:
        landing, lake = os.path.join(work, "landing"), os.path.join(work, "lake")
        generate(landing, StreamSpec(2000, partitions=4, keys=50, files=2, seed=0, shape="sensors"))
        jobs = catalog()
        job = jobs.jobs["device_minute"]  # a user's job: fields, filter, several aggregates
        source = jobs.sources[job.source]
        ingest(spark, landing, lake, fields=SourceFields(source.event_time_field, source.key_field))
        spec = Job.spec(job.policy)
        run(spark, lake, spec)
        run(spark, lake, job)
        target_hash(spark, Lake(lake).target(spec.name, "production"))
    spark.stop()
    class_archive.finish(archive)
    if not os.path.isfile(archive):
        raise SystemExit(f"setup: the JVM wrote no class archive at {archive}")
    print(f"setup: the class archive's run took {time.perf_counter() - began:.0f} s in all", file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:])
