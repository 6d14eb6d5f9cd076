"""Progress of long Spark work: each step names the Spark jobs it runs (the Spark UI's job descriptions) and,
where the application asked for it (`report_on`; the CLI does, on stderr), ticks `[label] 12s step: stage S:
T/N tasks` while a step is slow, counting only the stages of its own block's Spark jobs (the demo replays its
jobs side by side). A library operation reports through it and prints nothing itself."""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from pyspark.sql import SparkSession

_reporting: list[TextIO] = []  # where ticks go when the caller names no stream (set by the application)
_blocks = itertools.count()  # each block's job tag: its ticks count the stages of its own Spark jobs only


def report_on(stream: TextIO | None) -> None:
    """Where every `progress` of this process ticks (None: nowhere, only job descriptions)."""
    _reporting[:] = [stream] if stream is not None else []


@contextmanager
def progress(spark: SparkSession, label: str, every: float = 5.0,
             stream: TextIO | None = None) -> Iterator[Callable[[str], None]]:
    """Yields `step(name)`, which names what runs next in the Spark UI's job descriptions; with a stream (or
    one set by `report_on`), prints the current step and its stage and task counts every `every` seconds
    while the body runs (only when it is slow)."""
    sc = spark.sparkContext
    out = stream if stream is not None else (_reporting[0] if _reporting else None)
    done, current = threading.Event(), [""]
    tag = f"retrace-progress-{next(_blocks)}"

    def step(name: str) -> None:
        current[0] = name
        sc.setJobDescription(f"{label}: {name}")

    thread = None
    if out is not None:
        sc.addJobTag(tag)  # a property of this thread: the Spark jobs the body starts
        thread = threading.Thread(target=_tick, args=(sc, label, tag, every, out, done, current), daemon=True)
        thread.start()
    try:
        yield step
    finally:
        done.set()
        if thread is not None:
            thread.join()
            sc.removeJobTag(tag)
        sc.setJobDescription(None)


def _tick(sc, label: str, tag: str, every: float, out: TextIO, done: threading.Event, current: list[str]) -> None:
    tracker, began, ended = sc.statusTracker(), time.monotonic(), set()
    tagged = sc._jsc.sc().statusTracker()  # pyspark's tracker has no lookup by tag
    while not done.wait(every):
        parts, active = [], set(tracker.getActiveStageIds())
        for job in tagged.getJobIdsForTag(tag):
            info = None if job in ended else tracker.getJobInfo(job)
            if info is None or info.status != "RUNNING":
                if info is not None and info.status != "UNKNOWN":
                    ended.add(job)
                continue
            for sid in sorted(set(info.stageIds) & active):
                stage = tracker.getStageInfo(sid)
                if stage is not None:
                    parts.append(f"stage {sid}: {stage.numCompletedTasks}/{stage.numTasks} tasks")
        name = f"{current[0]}: " if current[0] else ""
        print(f"[{label}] {time.monotonic() - began:5.0f}s {name}" + ("; ".join(parts) or "working"),
              file=out, flush=True)
