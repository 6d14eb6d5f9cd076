"""What the live job says about each micro-batch (`BatchReport`: one line on stderr, and the Dagster run's
metadata) and about a whole run (`StreamSummary`)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchReport:
    batch: int
    files: int
    rows: int
    clock_rows: int
    seq_from: int
    seq_to: int
    watermark_delay_s: float | None
    files_waiting: int | None
    seconds: float
    committed_at: float = 0.0  # wall-clock time (epoch seconds) when the batch's last commit landed
    unit: str = "files"  # what `files` counts: landing files, or Kafka partitions with new records
    trigger: str = "data"  # data; heartbeat (clock rows alone, no data arrived); recovery (rows a run journaled
    # before it stopped, decided on restart)
    processing_delay_s: float | None = None  # processing time at commit minus the output watermark
    backlog: int | None = None  # input not journaled yet (landing files or Kafka records), None: unknown
    processing_time: float = 0.0  # epoch seconds: the wall clock at commit, or the simulated clock's time

    def line(self) -> str:
        waiting = "?" if self.files_waiting is None else self.files_waiting
        lag = f"{waiting} landing files waiting, " if self.unit == "files" else ""
        what = {"heartbeat": "heartbeat", "recovery": "recovered rows journaled before a restart"}.get(
            self.trigger, f"{self.files} {self.unit}")
        return (f"batch {self.batch}: {what}, {self.rows} rows (seq {self.seq_from}-{self.seq_to}, "
                f"{self.clock_rows} clock rows) committed in {self.seconds:.1f}s; lag: {lag}{self.delay_text()}")

    def delay_text(self) -> str:
        """The arrival-based watermark delay in words: behind the latest arrival, or (early events adjusted to
        at most arrival + the early tolerance raise it) ahead of it; n/a before the watermark is defined."""
        d = self.watermark_delay_s
        if d is None:
            return "watermark delay n/a (not every partition has had a row)"
        return f"watermark delay {d:.1f}s" if d >= 0 else f"watermark {-d:.1f}s ahead of the latest arrival"


@dataclass(frozen=True)
class StreamSummary:
    batches: int
    rows: int
    clock_rows: int
    seconds: float
    reports: list[BatchReport]

    @classmethod
    def of(cls, reports: list[BatchReport], seconds: float) -> "StreamSummary":
        return cls(len(reports), sum(r.rows for r in reports), sum(r.clock_rows for r in reports), seconds,
                   list(reports))
