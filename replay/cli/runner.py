"""`replay run`: read the journal, run the engine, commit the outputs of a target. The I/O edge."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from replay.cli.progress import progress
from replay.engine import job_sql, metrics, pipeline as engine
from replay.io import checkpoints, journal, locks
from replay.io.paths import spark_path
from replay.io.store import Replace, TableStore, default_store
from replay.model.durations import parse_instant
from replay.model.jobs import Job, job_root
from replay.model.policy import Policy

TABLES = ("decisions", "windows", "dead_letters", "watermarks", "metrics")
TARGET_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_-")


def output_path(lake: str, target: str, table: str) -> str:
    return os.path.join(lake, "outputs", target, table)


def check_target(target: str) -> str:
    if not target or not set(target) <= TARGET_CHARS:
        raise ValueError(f"target: {target!r} must be lower-case letters, digits, '_' or '-'")
    return target


@dataclass
class RunSummary:
    target: str
    seq_from: int | None
    seq_to: int | None
    seconds: float = 0.0
    checkpoint: int | None = None  # the checkpoint (batch) the replay started from, if any
    run_id: str = ""  # recorded in every commit's userMetadata


def new_run_id() -> str:
    return uuid.uuid4().hex[:16]


def policy_hash(policy: Policy) -> str:
    """A short fingerprint of the policy (canonical JSON), recorded with each commit."""
    return hashlib.sha256(json.dumps(policy.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def _interrupt_point(name: str) -> None:
    """Fault injection for the tests: RETRACE_INTERRUPT_AT=<table> sends this process a Ctrl-C (SIGINT)
    right after that table's commit."""
    if os.environ.get("RETRACE_INTERRUPT_AT") == name:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the signal is delivered here


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


def run(spark: SparkSession, lake: str, policy: Policy, target: str = "production", start: str | None = None,
        end: str | None = None, store: TableStore | None = None, checkpoints_of: str | None = None,
        run_id: str | None = None, job: Job | None = None) -> RunSummary:
    """Replay the journal (or the arrival range [start, end)) into LAKE/outputs/<target>/. A range replay
    starts from the latest checkpoint before `start` of target `checkpoints_of` (default: `target`).
    Holds the target's lock: one writer at a time. Every commit records `run_id` (default: a new one) in its
    userMetadata, so a target whose tables come from different runs (an interrupted run) can be told apart
    (`replay.io.runs`). `job`: a user's job (its policy replaces `policy`); its outputs are under
    LAKE/jobs/<job>/outputs/<target>/ (`jobs.job_root`)."""
    if job is not None:
        policy = job.policy
        job_sql.check(spark, job)
    root = job_root(lake, job)
    with locks.hold(locks.target_lock(root, check_target(target)), "run"):
        return _run(spark, lake, policy, target, start, end, store or default_store(), checkpoints_of,
                    run_id or new_run_id(), job)


def _run(spark, lake, policy, target, start, end, store, checkpoints_of, run_id, job) -> RunSummary:
    began = time.perf_counter()
    root, custom = job_root(lake, job), job is not None and not job.is_spec
    rows = journal.read(spark, lake, store)
    if custom and job.fields:
        journal.require_payloads(rows, lake)
    lo, hi = seq_bounds(rows, start, end)
    if hi is not None:
        rows = rows.where(F.col("seq") < hi)
    cp = _checkpoint_before(spark, root, checkpoints_of or target, signature(policy, job), lo, store)
    history = None
    if cp is not None:
        history = rows.where(F.col("seq") <= cp.state.seq)  # where earlier copies of a (partition, offset) are
        rows = rows.where(F.col("seq") > cp.state.seq)
    partial = lo is not None or hi is not None
    meta = lambda table: {"job": "replay run", "retrace_job": job.name if job else "default", "target": target, "table": table, "policy": policy_hash(policy),  # noqa: E731
                          "seq_from": lo, "seq_to": hi, "run": run_id}
    scratch = os.path.join(root, "outputs", target, f"_scratch-{uuid.uuid4().hex}")
    decisions = output_path(root, target, "decisions")
    # A whole replay's decisions are the table itself; a range's cover rows outside the range (from the
    # checkpoint on), so they are kept aside and only the range is written.
    materialize = ((lambda df: _materialize(df, scratch)) if partial
                   else (lambda df: _written(store, df, decisions, meta("decisions"))))
    with progress(spark, "replay") as step, _removed(scratch):
        step("decisions")
        out = engine.replay(rows, policy, flush=hi is None, since_seq=lo, materialize=materialize,
                            state=cp and cp.state, partitions=journal.declared_partitions(spark, lake, store),
                            history=history, job=job)
        for name in ("decisions", "windows", "dead_letters", "watermarks"):
            if name != "decisions" or partial:
                step(name)
                _write(store, out.tables()[name], output_path(root, target, name), name, lo, hi, partial, meta(name))
            _interrupt_point(name)
        step("metrics")
        # metrics cover the whole target: a range replay's are recomputed from its tables (cheap to scan); a
        # whole replay's tables are the ones just computed, whose decisions and dead letters are at hand
        hourly = target_metrics(spark, store, root, target) if partial else out.metrics
        store.write(hourly, output_path(root, target, "metrics"), mode="overwrite", metadata=meta("metrics"))
    out.unpersist()
    return RunSummary(target, lo, hi, seconds=time.perf_counter() - began, checkpoint=cp and cp.batch, run_id=run_id)


def target_metrics(spark: SparkSession, store: TableStore, root: str, target: str) -> DataFrame:
    """The hourly metrics of a target's whole `decisions` and `dead_letters` tables, read back: for when the
    rows at hand cover only part of the target (a range replay, a live batch)."""
    return metrics.hourly(*(store.read(spark, output_path(root, target, n)) for n in ("decisions", "dead_letters")))


def signature(policy: Policy, job: Job | None = None) -> str:
    """What a checkpoint's state depends on, as canonical JSON: the policy, and a user job's definition
    (its open windows hold members with the job's columns)."""
    if job is None or job.is_spec:
        return json.dumps(policy.to_dict(), sort_keys=True)
    return json.dumps({**job.fingerprint(), "policy": policy.to_dict()}, sort_keys=True)


def _checkpoint_before(spark, lake, target, signed, lo, store):
    """The target's latest checkpoint before seq `lo`, if it was made with this policy (and job): a replay
    from `lo` starts there instead of at the start of the journal."""
    if lo is None:
        return None
    cp = checkpoints.load(spark, lake, target, store, before_seq=lo)
    return cp if cp is not None and cp.policy == signed else None


def _materialize(df: DataFrame, folder: str) -> DataFrame:
    """Per-row results, read by every output, kept as Parquet: cheaper than Spark's cache at this size."""
    df.write.parquet(folder)
    return df.sparkSession.read.schema(df.schema).parquet(spark_path(folder))  # the lake path may hold `[`


def _written(store: TableStore, df: DataFrame, path: str, metadata: dict) -> DataFrame:
    """The decisions, written once as the table every other output then reads: from the files the overwrite
    added, where it can (no state rebuild for each of the queries that read them)."""
    version = store.write(df, path, mode="overwrite", metadata=metadata)
    added = store.read_commit(df.sparkSession, path, version) if version is not None else None
    return added if added is not None else store.read(df.sparkSession, path)


@contextmanager
def _removed(folder: str):
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _write(store, df, path, name, lo, hi, partial, metadata) -> None:
    if not partial or not store.exists(path):
        store.write(df, path, mode="overwrite", metadata=metadata)
        return
    column = "emitted_at" if name == "windows" else "seq"
    store.write(df, path, replace=Replace(column, lo or 0, hi, nulls=hi is None), metadata=metadata)


def summarize(spark: SparkSession, lake: str, target: str = "production", store: TableStore | None = None) -> dict:
    """What a target holds: events by action and reason, windows emitted, dead letters by reason."""
    store = store or default_store()
    decisions, windows, dead_letters = (store.read(spark, output_path(lake, target, n))
                                        for n in ("decisions", "windows", "dead_letters"))
    by_action = {r["action"]: r["n"] for r in decisions.where("kind = 'event'").groupBy("action")
                 .agg(F.count("*").alias("n")).collect()}
    by_reason = {r["reason"]: r["n"] for r in decisions.select(F.explode("reasons").alias("reason"))
                 .groupBy("reason").agg(F.count("*").alias("n")).collect()}
    letters = {r["reason"]: r["n"] for r in dead_letters.groupBy("reason").agg(F.count("*").alias("n")).collect()}
    windowed = F.sum("count") if "count" in windows.columns else F.lit(None)  # a user job has its own aggregates
    w = windows.agg(F.count("*").alias("windows"), windowed.alias("windowed"),
                    F.count(F.when(F.col("emitted_at").isNull(), 1)).alias("flushed")).first()
    return {
        "events": sum(by_action.values()),
        "clock_rows": decisions.where("kind = 'clock'").count(),
        "by_action": dict(sorted(by_action.items())),
        "by_reason": dict(sorted(by_reason.items())),
        "windows": w["windows"], "windowed_events": w["windowed"] or 0, "flushed_windows": w["flushed"],
        "dead_letters": dict(sorted(letters.items())),
    }
