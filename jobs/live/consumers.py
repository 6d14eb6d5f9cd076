"""The jobs of the live source, each a consumer of the journal: a cursor (its checkpoint's seq) from which it
decides, through the same commit protocol (`commit.commit_batch`), after the journal has been written.

The first job is the lead: its checkpoint also carries the source's partitions (for estimated arrival times),
its batches are the ones reported (lag, diagnostics), and its failure stops the live job. Every other job
follows: it decides the batch the lead just decided when it is at the same place in the journal, else the
journal rows after its own checkpoint (a job added later starts at the start of the journal); its failure is
reported and retried from its checkpoint at the next batch while the others' outputs are committed; a job
killed in the middle of its commits redoes that batch with the same journal rows.
"""
from __future__ import annotations

import copy
import sys
import time
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.live import deferred, lag
from jobs.live.commit import WRITER, Batch, Decided, commit_batch, persisted
from replay.io import checkpoints
from replay.io.checkpoints import Checkpoint
from replay.io.lake import Lake, TargetDir
from replay.io.runs import writer
from replay.io.spark import few_rows
from replay.io.store import commit_metadata
from replay.model.jobs import Job
from replay.model.state import State


@dataclass
class Consumer:
    job: Job
    where: TargetDir
    cp: Checkpoint
    lead: bool = False
    failures: int = 0
    held: deferred.Held | None = None  # what its batches since the last flush found for the flush

    @classmethod
    def load(cls, live, job: Job, lead: bool) -> "Consumer":
        """The job's consumer from its checkpoint; a checkpoint made for another policy or definition of the
        job is refused (its state would not apply)."""
        where = Lake(live.lake).target(job.name, live.options.target)
        signed = job.signature()
        cp = checkpoints.load(live.spark, where, live.store, policy=signed)
        return cls(job, where, cp or Checkpoint(-1, State(), {}, signed), lead)

    @property
    def seq(self) -> int:
        """The last journal row it has decided (-1: none)."""
        return self.cp.state.seq

    def decide(self, live, batch: Batch) -> Decided:
        """Decide `batch` (the journal rows after the checkpoint) and commit; the checkpoint moves on."""
        start = self.seq + 1
        decided = commit_batch(live, self.job, self.cp, batch, self.lead)
        self.cp = decided.checkpoint
        more = deferred.Held.of(start, self.seq + 1, decided.partials)
        self.held = self.held.then(more) if self.held is not None else more
        return decided

    def taken(self) -> "Consumer":
        """The job as it is, for a flush to write (the next batch moves this one's checkpoint on), with the partials
        held: this one holds none from now on."""
        taken, self.held = copy.copy(self), None
        return taken

    def pending(self, live) -> DataFrame | None:
        """The journal rows after the checkpoint (None: no journal); after a batch half-committed by a run that
        was killed, only that batch's rows, so it is redone with the same rows."""
        path = Lake(live.lake).journal
        if not live.store.exists(path):
            return None
        rows = live.store.read(live.spark, path).where(F.col("seq") > self.seq)
        decisions = self.where.table("decisions")
        meta = commit_metadata(live.spark, decisions) if live.store.exists(decisions) else None
        if meta and writer(meta) == WRITER and meta.get("batch") == self.cp.batch + 1:
            rows = rows.where(F.col("seq") < meta["seq_to"])
        return rows

    def follow(self, live, batch: Batch | None = None) -> None:
        """Decide `batch` when this job is where it starts, else the rows pending; a failure is reported and
        retried from the checkpoint at the next batch."""
        if batch is not None and self.seq == batch.span["lo"] - 1:
            self._follow(live, batch)
            return
        rows = self.pending(live)
        if rows is None:
            return
        with persisted(rows) as rows:  # the batch's journal rows, read from Delta once
            span = lag.reads(rows)[1]
            if span["n"]:
                self._follow(live, Batch(rows, span))

    def _follow(self, live, batch: Batch) -> None:
        began, span = time.perf_counter(), batch.span
        try:
            with few_rows(live.spark, span["n"]):
                self.decide(live, batch)
        except Exception as e:  # noqa: BLE001 - one job's failure must not stop the source or the other jobs
            self.failures += 1
            print(f"{self.job.describe()}: failed on journal seq {span['lo']}-{span['hi']} ({type(e).__name__}: "
                  f"{' '.join(str(e).split())[:300]}); retried from its checkpoint at the next batch",
                  file=sys.stderr, flush=True)
            return
        print(f"{self.job.describe()}: batch {self.cp.batch}: {span['n']} rows (seq {span['lo']}-{span['hi']}) "
              f"committed in {time.perf_counter() - began:.1f}s", file=sys.stderr, flush=True)
