"""What the live job notices about its source, as data and as alerts (Azure Stream Analytics' activity log):

- `partition_not_progressing`: a partition with no new event for longer than `silent_after` while others
  have had one within it (a partition that never had an event counts from the job's start, and says so);
- `late_input_events`: per micro-batch, how many events the late policy (spec step 3) caught, and one of them.

A diagnostic starts when its condition appears (the first batch it holds after one where it did not): that row
is `started` and raises an alert (`alert_on`: through `replay.io.alerts`' sinks). Both are observations of
processing time, so they live next to the outputs (the `diagnostics` table of the lead job's target), not in them:
a replay does not remake them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.live import options
from replay.io.alerts import Alert, deliver
from replay.model.durations import format_instant

SILENT_AFTER = round(options.SILENT_AFTER * 1e6)  # microseconds without an event: not progressing
KINDS = ("partition_not_progressing", "late_input_events")
SCHEMA = ("batch long, kind string, started boolean, at timestamp, partition int, since timestamp, count long, "
          "sample_event_time timestamp, sample_arrival_time timestamp, sample_partition int, sample_offset long, "
          "message string")


@dataclass(frozen=True)
class Diagnostic:
    batch: int
    kind: str
    started: bool   # the first batch of this condition: it raised an alert
    at: int         # processing time (microseconds) when it was observed
    message: str
    partition: int | None = None
    since: int | None = None  # not progressing: the processing time of the partition's last event (None: never had one)
    count: int | None = None  # late input events: how many in the batch
    sample: dict = field(default_factory=dict)  # late input events: event_time, arrival_time, partition, offset

    def row(self) -> tuple:
        s = self.sample
        return (self.batch, self.kind, self.started, self.at, self.partition, self.since, self.count,
                s.get("event_time"), s.get("arrival_time"), s.get("partition"), s.get("offset"), self.message)


@dataclass
class Watchdog:
    """Tracks which conditions hold, so that each raises one alert when it starts and again only after it
    has cleared."""

    silent_after: int = SILENT_AFTER
    silent: set[int] = field(default_factory=set)  # partitions not progressing at the last batch
    late: bool = False  # the last batch had late input events

    def not_progressing(self, batch: int, now: int, last_event: dict[int, int],
                        never: set[int] = frozenset()) -> list[Diagnostic]:
        """`last_event`: per declared partition, the processing time of its last event, or for those in `never`
        (no event yet) the job's start."""
        quiet = {p for p, t in last_event.items() if now - t > self.silent_after}
        if len(quiet) == len(last_event):  # nothing progresses: the whole source is idle, not one partition
            quiet = set()
        out = [Diagnostic(batch, "partition_not_progressing", p not in self.silent, now,
                          _silence(p, last_event[p], now, p in never), partition=p,
                          since=None if p in never else last_event[p])
               for p in sorted(quiet)]
        self.silent = quiet
        return out

    def late_input(self, batch: int, now: int, late: "LateEvents") -> list[Diagnostic]:
        started, self.late = not self.late and late.count > 0, late.count > 0
        if not late.count:
            return []
        s = late.sample
        message = (f"{late.count} late input event(s) in batch {batch}; e.g. partition {s['partition']} offset "
                   f"{s['offset']}: event time {format_instant(s['event_time'])}, arrival "
                   f"{format_instant(s['arrival_time'])}")
        return [Diagnostic(batch, "late_input_events", started, now, message, count=late.count, sample=s)]


def _silence(p: int, since: int, now: int, never: bool) -> str:
    span = f"{(now - since) / 1e6:.0f} s"
    if never:
        return (f"partition {p} has had no event since this live job started at {format_instant(since)} ({span}) "
                "while other partitions progress")
    return f"partition {p} has had no new event since {format_instant(since)} ({span}) while other partitions progress"


@dataclass(frozen=True)
class LateEvents:
    count: int
    sample: dict  # the first (lowest seq) late event: event_time, arrival_time (microseconds), partition, offset


def late_events(decisions: DataFrame, rows: DataFrame) -> LateEvents:
    """Events of the batch's decisions that spec step 3 found late, and the first of them with its event time
    (from the journal rows)."""
    late = decisions.where(F.array_contains("reasons", "late")).select("seq").join(
        rows.select("seq", "partition", "offset", F.unix_micros("event_time").alias("event_time"),
                    F.unix_micros("arrival_time").alias("arrival_time")), "seq")
    found = late.agg(F.count("*").alias("n"), F.min_by(F.struct("event_time", "arrival_time", "partition", "offset"),
                                                        "seq").alias("sample")).first()
    return LateEvents(found["n"], found["sample"].asDict() if found["n"] else {})


def alert(d: Diagnostic) -> Alert:
    """The alert for a diagnostic as it starts."""
    numbers = {k: v for k, v in (("batch", d.batch), ("late_events", d.count)) if v is not None}
    return Alert(asset="live", partition="all" if d.partition is None else str(d.partition), check=d.kind,
                 severity="WARN", message=d.message, numbers=numbers, diagnostic=True)


def alert_on(sinks: list, warn=None):
    """`on_diagnostic` for the live job: each diagnostic, as it starts, delivered to `sinks` (a failing sink is
    reported through `warn`, redacted: `replay.io.alerts.deliver`)."""
    return lambda d: deliver(alert(d), sinks, warn)
