"""`replay run`: replay the journal, or an arrival range of it, into a target of a job: read the journal, run
the engine, commit the outputs. Every job, the spec's count/sum job (`Job.spec`) included, takes this path."""
from __future__ import annotations

import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from replay.engine import job_sql, metrics, pipeline as engine
from replay.io import checkpoints, faults, journal, lake_fs, lake_marker, locks
from replay.io.lake import Lake, TargetDir
from replay.io.paths import spark_path
from replay.io.runs import describe, table_runs
from replay.io.store import Replace, TableStore, commit_metadata, default_store
from replay.model.durations import format_instant, parse_instant
from replay.model.jobs import Job
from replay.model.policy import policy_hash
from replay.ops.progress import progress
from replay.ops import hashing, outputs

WRITER = "replay run"  # a commit's `writer`: which program wrote it


@dataclass
class RunSummary:
    target: str
    seq_from: int | None
    seq_to: int | None
    seconds: float = 0.0
    checkpoint: int | None = None  # the checkpoint (batch) the replay started from, if any
    run_id: str = ""  # recorded in every commit's userMetadata
    journal_version: int | None = None  # the journal version every pass read, recorded in every commit too
    output_hash: str | None = None  # the target's `replay hash`, when asked for


@dataclass(frozen=True)
class _Replay:
    """One `run`: what it replays, where to, and the id its commits record."""

    lake: str
    job: Job
    where: TargetDir
    start: str | None
    end: str | None
    checkpoints_of: TargetDir
    run_id: str
    journal_version: int  # the one version of the journal the run reads (versionAsOf)

    def metadata(self, table: str, lo: int | None, hi: int | None) -> dict:
        return {"writer": WRITER, "job": self.job.name, "target": self.where.target, "table": table,
                "policy": policy_hash(self.job.policy), "seq_from": lo, "seq_to": hi, "run": self.run_id,
                "journal_version": self.journal_version}


def new_run_id() -> str:
    return uuid.uuid4().hex[:16]


def admit(spark: SparkSession, lake: str, job: Job) -> None:
    """What a replay checks before it creates anything: a job Spark accepts and a lake with a journal (a mistyped
    lake is not made), then the lake's marker. The CLI calls it before it takes the target's lock."""
    job_sql.check(spark, job)
    journal.require(lake)
    lake_marker.claim(lake)


def run(spark: SparkSession, lake: str, job: Job, target: str = "production", start: str | None = None,
        end: str | None = None, *, checkpoints_of: str | None = None, run_id: str | None = None,
        journal_version: int | None = None, hashed: bool = False) -> RunSummary:
    """Replay the journal (or the arrival range [start, end)) into `target` of `job`. A range replay starts from
    the latest checkpoint before `start` of target `checkpoints_of` (default: `target`), made for this job and
    policy. Holds the target's lock: one writer at a time. Every commit records `run_id` (default: a new one),
    so a target whose tables come from different runs (an interrupted run) can be told apart (`replay.io.runs`).
    Every read of the journal is of one version, `journal_version` (default: the latest when the run starts), which
    every commit records: an ingest committing during the run is not seen, not even by some of its passes.
    `hashed`: the summary gives the target's output hash (`replay hash`)."""
    admit(spark, lake, job)
    if journal_version is not None:
        journal.pinned_version(lake, wanted=journal_version)  # a version the journal lacks: refused before the lock
    where = Lake(lake).target(job.name, target)
    with locks.hold(where.lock, "run"):
        for left in where.scratch_folders():  # a killed range run's: only the lock's holder writes one
            lake_fs.of(left).remove_tree(left)
        pinned = journal.pinned_version(lake, wanted=journal_version)  # taken as the run starts, under its lock
        return _run(spark, _Replay(lake, job, where, start, end, Lake(lake).target(job.name, checkpoints_of or target),
                                   run_id or new_run_id(), pinned), hashed)


def _run(spark: SparkSession, r: _Replay, hashed: bool) -> RunSummary:
    began, store = time.perf_counter(), default_store()
    rows = journal.read(spark, r.lake, store, r.journal_version)
    if r.job.fields:
        journal.require_payloads(rows, r.lake)
    lo, hi = seq_bounds(rows, r.start, r.end)
    if hi is not None:
        rows = rows.where(F.col("seq") < hi)
    cp = _checkpoint_before(spark, r.checkpoints_of, r.job, lo, store)
    rows, continuing = engine.Continuing.after(rows, cp and cp.state)
    scratch = r.where.scratch()
    # Every output reads the decided rows, kept aside as Parquet; the table stores only their exceptions
    # (`outputs`): of a range, the range's.
    partitions = journal.declared_partitions(spark, r.lake, store)
    with progress(spark, f"replay {r.job.name}") as step, _removed(scratch):
        step("decisions")
        faults.interrupt_point("replay")  # for the tests: a Ctrl-C here, or (replay+<seconds>) during the replay
        out = engine.replay(rows, r.job, flush=hi is None, since_seq=lo, partitions=partitions,
                            materialize=lambda df: _materialize(df, scratch),
                            continuing=continuing)
        covered = (lo or 0, hi if hi is not None else (rows.agg(F.max("seq")).first()[0] or -1) + 1)
        _commit(spark, store, r, out, (lo, hi), step, partitions, covered)
        digest = _hash(spark, r.where, out, whole=lo is None and hi is None) if hashed else None
    out.unpersist()
    return RunSummary(r.where.target, lo, hi, time.perf_counter() - began, cp and cp.batch, r.run_id,
                      r.journal_version, digest)


def _hash(spark: SparkSession, where: TargetDir, out: engine.Outputs, whole: bool) -> str:
    """The target's output hash. A whole replay's decided rows are every row of the decisions view, at hand: hashed
    as they are instead of derived again from the journal (a decide pass); a range replay's target holds others."""
    return hashing.target_hash(spark, where, {"decisions": out.decisions} if whole else None)


def _commit(spark: SparkSession, store: TableStore, r: _Replay, out: engine.Outputs, span, step,
            partitions: list[int] | None, covered: tuple[int, int]) -> None:
    """The decisions' exceptions, the other outputs, then the metrics; a range replay replaces only its rows.
    `covered`: the seq range the run decided, which the decisions commit adds to the table's `covers`."""
    lo, hi = span
    partial = lo is not None or hi is not None
    for name in ("decisions", "windows", "dead_letters", "watermarks"):
        step(name)
        path, meta = r.where.table(name), r.metadata(name, lo, hi)
        if name == "decisions":
            before = commit_metadata(spark, path) if partial and store.exists(path) else None
            meta = {**meta, **outputs.stored_metadata(r.job, partitions, before, *covered)}
        df = out.exceptions if name == "decisions" else getattr(out, name)
        _write(store, df, path, name, span, meta)
        faults.interrupt_point(name)
    step("metrics")
    # metrics cover the whole target: a range replay's are recomputed from its tables (cheap to scan); a
    # whole replay's tables are the ones just computed, whose decisions and dead letters are at hand
    hourly = target_metrics(spark, store, r.where) if partial else out.metrics
    first, last = out.arrival_span()
    hours = None if first is None else hours_between(first, last)
    store.write(hourly, r.where.table("metrics"), mode="overwrite",
                metadata={**r.metadata("metrics", lo, hi), "hours": hours})


def arrival_hours(decisions: DataFrame) -> list[str] | None:
    """The first and the last hour (ISO) in which the rows a run decided arrived: the hourly partitions it wrote,
    which the run's last commit records for the Dagster sensor that reports runs made outside Dagster."""
    hour = lambda c: F.unix_micros(F.date_trunc("hour", c))  # noqa: E731 - in UTC, the session's time zone
    first, last = decisions.agg(hour(F.min("arrival_time")), hour(F.max("arrival_time"))).first()
    return None if first is None else hours_between(first, last)


def hours_between(first: int, last: int) -> list[str]:
    """The hours (ISO) holding the instants `first` and `last` (microseconds), as a commit records them."""
    return [format_instant(us - us % 3_600_000_000) for us in (first, last)]


def seq_bounds(rows: DataFrame, start: str | None, end: str | None) -> tuple[int | None, int | None]:
    """An arrival-time range [start, end) as a seq range [lo, hi): the first seq arriving at or after each
    bound; None leaves that side open (an `end` nothing arrives after is the end of the journal)."""
    def first_at(bound: str, name: str) -> int | None:
        us = parse_instant(bound, name)
        return rows.where(F.unix_micros("arrival_time") >= us).agg(F.min("seq")).first()[0]

    if start is not None and end is not None and parse_instant(start, "--from") >= parse_instant(end, "--to"):
        raise ValueError(f"--from {start} must be before --to {end}")
    lo = None if start is None else first_at(start, "--from")
    if start is not None and lo is None:  # nothing arrives that late: an empty range at the end
        lo = (rows.agg(F.max("seq")).first()[0] or -1) + 1
    hi = None if end is None else first_at(end, "--to")
    return lo, hi


def target_metrics(spark: SparkSession, store: TableStore, where: TargetDir) -> DataFrame:
    """The hourly metrics of a target's whole `decisions` and `dead_letters` tables, read back: for when the
    rows at hand cover only part of the target (a range replay, a live batch)."""
    return metrics.hourly(*(outputs.read(spark, where, n, store) for n in ("decisions", "dead_letters")))


def _checkpoint_before(spark, where: TargetDir, job: Job, lo, store):
    """The target's latest checkpoint before seq `lo`, if it was made for this job and policy: a replay from
    `lo` starts there instead of at the start of the journal."""
    if lo is None:
        return None
    cp = checkpoints.load(spark, where, store, before_seq=lo)
    return cp if cp is not None and cp.policy == job.signature() else None


def _materialize(df: DataFrame, folder: str) -> DataFrame:
    """Per-row results, read by every output, kept as Parquet: cheaper than Spark's cache at this size."""
    df.write.parquet(folder)
    return df.sparkSession.read.schema(df.schema).parquet(spark_path(folder))  # the lake path may hold `[`


@contextmanager
def _removed(folder: str):
    try:
        yield
    finally:
        lake_fs.of(folder).remove_tree(folder)


def _write(store: TableStore, df: DataFrame, path: str, name: str, span, metadata: dict) -> None:
    lo, hi = span
    if (lo is None and hi is None) or not store.exists(path):
        store.write(df, path, mode="overwrite", metadata=metadata)
        return
    column = "emitted_at" if name == "windows" else "seq"
    store.write(df, path, replace=Replace(column, lo or 0, hi, nulls=hi is None), metadata=metadata)


def interrupted(spark: SparkSession, where: TargetDir, run_id: str, again: str) -> str:
    """One sentence: what an interrupted run left in its target, and what to run next (`again`)."""
    try:
        runs = table_runs(spark, where)
    except Exception as e:  # noqa: BLE001  (the session may be unusable after the interrupt)
        return f"could not read target {where.target!r} ({type(e).__name__}); run `{again}` to make it whole"
    ours = [t.table for t in runs if t.run == run_id]
    if not ours:
        return f"target {where.target!r} is unchanged (no table was committed by this run)"
    if len(ours) == len(runs):
        return f"target {where.target!r} is whole (every table was committed by this run {run_id})"
    return (f"target {where.target!r} is half-written ({describe(runs)}; this run was {run_id}): "
            f"run `{again}` to finish it")
