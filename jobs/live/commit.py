"""The commit protocol of a live batch, the same for every job: decide the journal rows after the job's checkpoint,
commit decisions, dead letters and windows, then the checkpoint (the metrics and the watermark timeline follow every
few batches: `deferred`). Every commit is tagged with
the transaction (app `retrace-<target>-<table>`, the job's batch), so a batch retried after a crash lands once."""
from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from pyspark.sql import DataFrame

from jobs.live import diagnostics
from replay.engine import pipeline as engine
from replay.io import checkpoints
from replay.io.checkpoints import Checkpoint, SourcePartition
from replay.io.lake import Lake, TargetDir
from replay.io.store import AppTransaction, Replace, commit_metadata
from replay.model.jobs import Job
from replay.model.policy import policy_hash
from replay.ops import outputs

WRITER = "replay stream"  # a commit's `writer`: which program wrote it


@dataclass(frozen=True)
class Batch:
    """Journal rows to decide, read once: the rows, their span (`lag.reads`) and, for the lead job's checkpoint,
    the source's partitions after them (last arrival, when seen, last offset)."""

    rows: DataFrame
    span: dict
    source: dict[int, SourcePartition] = field(default_factory=dict)


@dataclass(frozen=True)
class Decided:
    """A job's batch as committed: its checkpoint, (for the lead job) how to find its late input events, when its
    last commit (the checkpoint's) landed (epoch seconds), and its decide run's partials for the flush (the one
    pass's: `Outputs.partials`; None for other policies)."""

    checkpoint: Checkpoint
    late: Callable[[], diagnostics.LateEvents] | None = None  # called once: it frees the batch's outputs
    committed_at: float = 0.0
    partials: list | None = None


@contextmanager
def persisted(df: DataFrame):
    """`df` kept for the block (a batch's rows are read by several steps), then freed even if a step fails."""
    df = df.persist()
    try:
        yield df
    finally:
        df.unpersist()


def crash_point(name: str) -> None:
    """Fault injection for the recovery tests: RETRACE_CRASH_AT=<name> kills the job here with SIGKILL (a job's
    commit steps are `<job>:<step>`, e.g. `default:windows`)."""
    if os.environ.get("RETRACE_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def commit_batch(live, job: Job, cp: Checkpoint, batch: Batch, lead: bool) -> Decided:
    """Decide `batch.rows` (the journal after `cp`) for `job` and commit its outputs, then its checkpoint (with the
    source's partitions when `lead`). Returns the checkpoint as committed."""
    step = _Step(live, job, cp.batch + 1, batch.span)
    journaled = live.store.read(live.spark, Lake(live.lake).journal)
    history = live.earlier.history(journaled, cp.state.seq, batch.span)  # where duplicate (partition, offset) are
    span = batch.span
    counted = engine.Counted(span["distinct"], tuple(span["partitions"]), (span["lo"], span["hi"]))
    continuing = engine.Continuing(cp.state, history, keep_state=True, counted=counted)
    out = engine.replay(batch.rows, job, partitions=live.source_partitions, rows_at_most=batch.span["n"],
                        materialize=_computed_once, continuing=continuing)
    step.write_decisions(out.exceptions)  # first: the rest is derived (`outputs`)
    step.write(out.dead_letters, "dead_letters")  # the watermark timeline and the metrics follow at the flush
    # emitted windows are appended; the open ones (null emitted_at, what a flush would emit now) replaced
    step.write(out.windows, "windows", replace=Replace("emitted_at", batch.span["lo"], None, nulls=True))
    state = out.state.advanced(batch.span["hi"])
    made = Checkpoint(step.batch, state, batch.source if lead else {}, job.signature(),
                      checkpoints.windows_from(cp, step.batch, state))
    version = checkpoints.save(live.spark, step.where, made, live.store, metadata=step.metadata("checkpoints"))
    crash_point(step.crash("checkpoint"))
    committed_at = time.time()
    live.earlier.advance(cp.state.seq, state.seq, batch.span)
    late = _late_events(out, batch.rows) if lead else None
    if not lead:
        out.unpersist()
    return Decided(_committed(live, step.where, made, version, cp), late, committed_at, out.partials)


def _late_events(out: engine.Outputs, rows: DataFrame) -> Callable[[], diagnostics.LateEvents]:
    """The lead's late input events, an observation, not an output: found while the other jobs decide the batch
    (`LiveStream.decide`), then the batch's outputs are freed."""
    def late() -> diagnostics.LateEvents:
        try:
            return diagnostics.late_events(out.exceptions, rows)
        finally:
            out.unpersist()
    return late


@dataclass(frozen=True)
class _Step:
    """One job's batch: where its tables are, and how each commit is tagged."""

    live: object
    job: Job
    batch: int
    span: dict

    @property
    def where(self) -> TargetDir:
        return Lake(self.live.lake).target(self.job.name, self.live.options.target)

    def crash(self, name: str) -> str:
        return f"{self.job.name}:{name}"

    def txn(self, name: str) -> AppTransaction:
        return AppTransaction(f"retrace-{self.live.options.target}-{name}", self.batch)

    def metadata(self, name: str) -> dict:
        # the batch is the run: every table's commit for it names the same run, whichever process made it
        return {"writer": WRITER, "job": self.job.name, "target": self.live.options.target, "table": name,
                "policy": policy_hash(self.job.policy), "seq_from": self.span["lo"], "seq_to": self.span["hi"] + 1,
                "batch": self.batch, "run": f"live-batch-{self.batch}"}

    def write(self, df: DataFrame, name: str, extra: dict | None = None, **how) -> int | None:
        version = self.live.store.write(df, self.where.table(name), txn=self.txn(name),
                                        metadata={**self.metadata(name), **(extra or {})}, **how)
        crash_point(self.crash(name))
        return version

    def write_decisions(self, exceptions: DataFrame) -> None:
        """The decisions' exceptions, recording the seq range the batch decided (`outputs`: the rest is derived)."""
        spark, store, path = self.live.spark, self.live.store, self.where.table("decisions")
        before = commit_metadata(spark, path) if store.exists(path) else None
        covered = outputs.stored_metadata(self.job, self.live.source_partitions, before, self.span["lo"],
                                          self.span["hi"] + 1)
        self.write(exceptions, "decisions", extra=covered)


def _computed_once(decided: DataFrame) -> DataFrame:
    """A batch's decided rows, computed once (a local checkpoint: every other output's query plans over it, not over
    the engine's whole plan)."""
    return decided.localCheckpoint(eager=True)


def _committed(live, where: TargetDir, cp: Checkpoint, version: int | None, previous: Checkpoint) -> Checkpoint:
    """The checkpoint as committed: its open windows and keys read back (this cuts the lineage), from the
    files of the commit that wrote them when `version` names it (no rebuild of the table's state); when it saved
    only the open windows' new rows, after `previous`'s."""
    if cp.state.windows is None and cp.state.keys is None:
        return replace(cp, state=replace(cp.state, windows_added=None))
    path = where.table("checkpoints")
    table = live.store.read_commit(live.spark, path, version) if version is not None else None
    if table is not None:  # the commit's own rows
        windows = checkpoints.state_rows(table, checkpoints.WINDOW, cp.batch)
        if cp.adds_windows:
            windows = previous.state.windows.unionByName(windows)
    else:
        table = live.store.read(live.spark, path)
        windows = checkpoints.state_rows(table, checkpoints.WINDOW, cp.batch, cp.windows_from)
    state = replace(cp.state, windows=windows, keys=checkpoints.state_rows(table, checkpoints.KEY, cp.batch),
                    windows_added=None)
    return replace(cp, state=state)
