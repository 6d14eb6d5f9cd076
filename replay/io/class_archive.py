"""Record the JVM class archive from a real run (set-up's demo), instead of a run of its own at set-up.

Java's dynamic class-data sharing writes the classes a JVM loaded to a file as the JVM exits
(-XX:ArchiveClassesAtExit); later local drivers map it (replay/io/spark.py) and start seconds sooner. With
RETRACE_RECORD_CLASS_ARCHIVE=PATH, this process's local driver records instead of mapping; when the process ends,
the driver is let exit, and the archive it wrote goes to PATH (a half-written one never does).
"""
from __future__ import annotations

import atexit
import os
import sys
import time

RECORD = "RETRACE_RECORD_CLASS_ARCHIVE"


def recording() -> str | None:
    """The archive this process's driver records, or None."""
    return os.environ.get(RECORD) or None


def record_options(archive: str) -> str:
    """The driver JVM's options to record `archive` (beside it, until the JVM has written all of it)."""
    return f"-XX:ArchiveClassesAtExit={archive}.partial -Xlog:cds=off -Xlog:cds+dynamic=off"


def finish_at_exit(archive: str) -> None:
    atexit.register(finish, archive)


def finish(archive: str) -> None:
    """End the driver JVM (it writes the archive as it exits), wait for it, and put the archive in place."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None or proc.poll() is not None and not os.path.isfile(archive + ".partial"):
        return
    began = time.perf_counter()
    context = SparkContext._active_spark_context
    if context is not None:
        context.stop()  # its accumulator server too, which would print a trace if the driver went first
    if proc.stdin and not proc.stdin.closed:
        proc.stdin.close()  # the driver exits when its Python's pipe closes
    proc.wait(timeout=600)
    if not os.path.isfile(archive + ".partial"):
        print(f"replay: the JVM wrote no class archive at {archive}.partial", file=sys.stderr)
        return
    os.replace(archive + ".partial", archive)
    print(f"replay: recorded the JVM class archive {archive} ({os.path.getsize(archive) / 2**20:.0f} MiB; "
          f"{time.perf_counter() - began:.0f} s to write it)", file=sys.stderr)
