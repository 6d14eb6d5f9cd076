"""Progress of long Spark work on stderr: the current step, stage and task counts, polled from the status tracker."""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession


@contextmanager
def progress(spark: SparkSession, label: str, every: float = 5.0, stream=sys.stderr) -> Iterator[Callable[[str], None]]:
    """Prints `[label] 12s step: stage S: T/N tasks` every `every` seconds while the body runs (only when it
    is slow). Yields `step(name)`, which names what runs next, here and in the Spark UI's job descriptions."""
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    done = threading.Event()
    began = time.monotonic()
    current = [""]

    def step(name: str) -> None:
        current[0] = name
        sc.setJobDescription(f"{label}: {name}")

    def report() -> None:
        while not done.wait(every):
            parts = []
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info is not None:
                    parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks")
            elapsed = time.monotonic() - began
            name = f"{current[0]}: " if current[0] else ""
            print(f"[{label}] {elapsed:5.0f}s {name}" + ("; ".join(parts) or "working"), file=stream, flush=True)

    thread = threading.Thread(target=report, daemon=True)
    thread.start()
    try:
        yield step
    finally:
        done.set()
        thread.join()
        sc.setJobDescription(None)
