"""Progress of long Spark work on stderr: stage and task counts, polled from the status tracker."""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

from pyspark.sql import SparkSession


@contextmanager
def progress(spark: SparkSession, label: str, every: float = 5.0, stream=sys.stderr):
    """Prints `label: stage S, T/N tasks` every `every` seconds while the body runs (only when it is slow)."""
    tracker = spark.sparkContext.statusTracker()
    done = threading.Event()
    began = time.monotonic()

    def report() -> None:
        while not done.wait(every):
            parts = []
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info is not None:
                    parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks")
            elapsed = time.monotonic() - began
            print(f"[{label}] {elapsed:5.0f}s " + ("; ".join(parts) or "working"), file=stream, flush=True)

    thread = threading.Thread(target=report, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
