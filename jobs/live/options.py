"""The live job's options as frozen values, checked when built (one line naming the option and its value): how it
runs (`LiveOptions`) and what it reads (`FileSource`: a landing folder or S3 prefix; `KafkaSource`: a topic)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from replay.io.lake import check_target

CLOCKS = ("system", "simulated")
NEVER_SEEN_DELAY = 5.0  # seconds: a partition that never had a row is estimated at now - 5 s (ASA)
SILENT_AFTER = 300.0  # seconds without an event before a partition is not progressing
# a batch commits its outputs and checkpoint; the metrics (derivable) and lag and diagnostics (observations) are
# written every so many batches and when the stream stops: about two Delta commits per batch fewer per table
FLUSH_EVERY = 10


@dataclass(frozen=True)
class LiveOptions:
    """How the live job runs: into which target, on which clock, until when, how often, and how it watches
    time without data (heartbeats, estimates for partitions never seen, partitions gone silent)."""

    target: str = "production"
    clock: str = "system"  # processing time: the wall clock, or (simulated) the latest arrival seen
    until_idle: bool = False  # stop when the input the source held at start is journaled
    max_batches: int | None = None  # stop after this many batches (heartbeats included)
    trigger_seconds: float = 1.0
    partitions: int | tuple[int, ...] | None = None  # the source's partitions (a count or a list), recorded once
    heartbeat_seconds: float | None = None  # no data for this long: clock rows alone (None: the trigger; 0: off)
    never_seen_delay: float = NEVER_SEEN_DELAY  # seconds: clock rows of a partition never seen, at now - this
    silent_after: float = SILENT_AFTER  # seconds: a partition with no event for this long is not progressing
    on_batch: Callable[[Any], None] | None = None  # called with each BatchReport (progress, benchmarks)
    on_diagnostic: Callable[[Any], None] | None = None  # called with each diagnostic that starts (alerts)
    flush_every: int = FLUSH_EVERY  # batches between writes of the metrics, lag and diagnostics (and at the end)

    def __post_init__(self):
        check_target(self.target)
        if self.clock not in CLOCKS:
            raise ValueError(f"clock: {self.clock!r} is not one of {', '.join(CLOCKS)}")
        at_least_one(max_batches=self.max_batches, flush_every=self.flush_every)
        for name in ("heartbeat_seconds", "never_seen_delay", "silent_after"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise ValueError(f"{name}: {v} must not be negative")

    @property
    def heartbeat(self) -> float | None:
        """Seconds without data before a heartbeat; None when there are none: turned off, on the simulated
        clock (its processing time is the data's, which stands still without data), or until idle."""
        beat = self.trigger_seconds if self.heartbeat_seconds is None else self.heartbeat_seconds
        return beat if beat and self.clock == "system" and not self.until_idle else None

    @property
    def never_seen_delay_us(self) -> int:
        return round(self.never_seen_delay * 1e6)

    @property
    def silent_after_us(self) -> int:
        return round(self.silent_after * 1e6)


@dataclass(frozen=True)
class FileSource:
    """Landing files: a folder or s3://bucket/prefix, at most so many files or bytes per micro-batch."""

    landing: str
    max_files_per_batch: int | None = None
    max_bytes_per_batch: int | None = None

    def __post_init__(self):
        at_least_one(max_files_per_batch=self.max_files_per_batch, max_bytes_per_batch=self.max_bytes_per_batch)


@dataclass(frozen=True)
class KafkaSource:
    """A Kafka topic on a broker; `trust_create_time` takes a CreateTime topic's producer clocks as arrivals."""

    bootstrap: str
    topic: str
    trust_create_time: bool = False
    max_records_per_batch: int | None = None

    def __post_init__(self):
        if not self.topic:
            raise ValueError("--topic is needed with --kafka-bootstrap")
        at_least_one(max_records_per_batch=self.max_records_per_batch)


def at_least_one(**bounds: int | None) -> None:
    for name, v in bounds.items():
        if v is not None and v < 1:
            raise ValueError(f"{name}: {v} must be at least 1")
