"""Checkpoints: the engine's state (and the live source's) after a batch, kept in Delta next to the outputs.

Three tables in a job's target (`replay.io.lake`): `checkpoints` (one row per partition and output scope, small),
`checkpoint_windows` (open windows) and `checkpoint_keys` (substream maxima), each row tagged with its
batch. Every commit carries the transaction (app, batch), so a batch retried after a crash never adds
a checkpoint twice; `checkpoints` is written last, and a batch without its rows there has no checkpoint.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from replay.io.lake import TargetDir
from replay.io.spark import driver_rows
from replay.io.store import AppTransaction, TableStore, default_store
from replay.model.state import KEYS_SCHEMA, WINDOWS_SCHEMA, PartitionState, ScopeState, State

SCALARS = (
    "batch long, seq long, policy string, entity string, id int, floor long, events long, wp long, counted long, "
    "ref long, owm long, raised long, last_event long, last_arrival long, seen_at long, last_offset long"
)


@dataclass(frozen=True)
class SourcePartition:
    """A partition of the live source as the job last saw it (for estimated arrival times)."""

    last_arrival: int  # arrival time of its latest event (microseconds)
    seen_at: int       # processing time when that event was seen
    last_offset: int


@dataclass(frozen=True)
class Checkpoint:
    batch: int
    state: State
    source: dict[int, SourcePartition] = field(default_factory=dict)
    policy: str = ""  # what the state was computed with: the job's signature (`Job.signature`)


class CheckpointMismatch(ValueError):
    """A checkpoint made with another policy cannot be continued with this one."""


def save(spark: SparkSession, where: TargetDir, cp: Checkpoint, store: TableStore | None = None,
         metadata: dict | None = None) -> dict[str, int | None]:
    """Commit the checkpoint; returns each table's new version (None: an earlier attempt committed it)."""
    store = store or default_store()
    meta = lambda table: metadata and {**metadata, "table": table}  # noqa: E731
    s = cp.state
    txn = lambda table: AppTransaction(f"retrace-{where.target}-{table}", cp.batch)  # noqa: E731
    tag = [F.lit(cp.batch).cast("long").alias("batch")]
    versions = {}
    if s.windows is not None:
        versions["checkpoint_windows"] = store.write(
            s.windows.select(*tag, "*"), where.table("checkpoint_windows"), txn=txn("checkpoint_windows"),
            metadata=meta("checkpoint_windows"))
    if s.keys is not None:
        versions["checkpoint_keys"] = store.write(
            s.keys.select(*tag, "*"), where.table("checkpoint_keys"), txn=txn("checkpoint_keys"),
            metadata=meta("checkpoint_keys"))
    rows = [dict(entity="batch", id=None, policy=cp.policy)]
    for p, v in sorted(s.partitions.items()):
        src = cp.source.get(p)
        rows.append(dict(entity="partition", id=p, floor=v.floor, events=v.events, wp=v.wp, counted=v.counted,
                         ref=v.ref, last_arrival=src and src.last_arrival, seen_at=src and src.seen_at,
                         last_offset=src and src.last_offset))
    for sc, v in sorted(s.scopes.items()):
        rows.append(dict(entity="scope", id=sc, owm=v.owm, raised=v.raised, last_event=v.last_event))
    names = [c.split()[0] for c in SCALARS.split(", ")]
    table = [tuple({"batch": cp.batch, "seq": s.seq, **r}.get(n) for n in names) for r in rows]
    versions["checkpoints"] = store.write(driver_rows(spark, table, SCALARS),
                                          where.table("checkpoints"), txn=txn("checkpoints"),
                                          metadata=meta("checkpoints"))
    return versions


def load(spark: SparkSession, where: TargetDir, store: TableStore | None = None, *,
         before_seq: int | None = None, policy: str | None = None) -> Checkpoint | None:
    """The latest checkpoint (or the latest one covering only rows before `before_seq`); None if there is none.
    With `policy` (a job's signature), a checkpoint made for another is an error (its state would not apply)."""
    store = store or default_store()
    path = where.table("checkpoints")
    if not store.exists(path):
        return None
    scalars = store.read(spark, path)
    marks = scalars.where(F.col("entity") == "batch")
    if before_seq is not None:
        marks = marks.where(F.col("seq") < before_seq)
    last = marks.agg(F.max_by("batch", "seq").alias("batch")).first()["batch"]
    if last is None:
        return None
    rows = scalars.where(F.col("batch") == last).collect()
    mark = next(r for r in rows if r["entity"] == "batch")
    if policy is not None and mark["policy"] != policy:
        raise CheckpointMismatch(
            f"target {where.label!r}: its checkpoint (batch {last}) was made with another policy or definition of "
            f"job {where.job}; replay it from the start (`replay run` without --from) or write to another --target")
    seq = mark["seq"]
    partitions, scopes, source = {}, {}, {}
    for r in rows:
        if r["entity"] == "partition":
            partitions[r["id"]] = PartitionState(r["floor"], r["events"], r["wp"], r["counted"], r["ref"])
            if r["last_arrival"] is not None:
                source[r["id"]] = SourcePartition(r["last_arrival"], r["seen_at"], r["last_offset"])
        elif r["entity"] == "scope":
            scopes[r["id"]] = ScopeState(r["owm"], r["raised"], r["last_event"])

    def tagged(table: str, schema: str):
        p = where.table(table)
        if not store.exists(p):
            return None
        df = store.read(spark, p).where(F.col("batch") == last)
        if table == "checkpoint_windows" and "count" not in df.columns:  # a user job's: open windows' members
            return df.drop("batch")
        return df.select(*[c.split()[0] for c in schema.split(", ")])

    state = State(seq=seq, partitions=partitions, scopes=scopes, windows=tagged("checkpoint_windows", WINDOWS_SCHEMA),
                  keys=tagged("checkpoint_keys", KEYS_SCHEMA))
    return Checkpoint(last, state, source, mark["policy"])
