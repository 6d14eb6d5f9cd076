"""Checkpoints: the engine's state (and the live source's) after a batch, kept in Delta next to the outputs.

One table in a job's target (`replay.io.lake`), `checkpoints`, one commit per batch: a row per partition and output
scope, the open windows (a struct column, `open_window`) and the substream maxima (`key`), each row tagged with its
batch. Why one: a live batch paid a Delta commit for each of three tables (0.1-0.2 s each). Every commit carries the
transaction (app, batch), so a batch retried after a crash never adds a checkpoint twice.

A job's open windows hold their members, and saving all of them every batch cost more each batch while its windows
stayed open. So a checkpoint may save only the members its batch added (`State.windows_added`), building on the
checkpoints since the last whole save, whose batch its `batch` row names in `id`; every `WHOLE_EVERY` batches it saves
them whole again (which drops the members of windows closed since). The engine leaves out the rows of closed windows
that a checkpoint built this way still holds (`windows.without_closed`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from replay.io.lake import TargetDir
from replay.io.spark import driver_rows
from replay.io.store import AppTransaction, TableStore, default_store
from replay.jvm import once_per_jvm
from replay.model.state import PartitionState, ScopeState, State

SCALARS = (
    "batch long, seq long, policy string, entity string, id int, floor long, events long, wp long, counted long, "
    "ref long, owm long, raised long, last_event long, last_arrival long, seen_at long, last_offset long"
)
SCALAR_NAMES = [c.split()[0] for c in SCALARS.split(", ")]
WINDOW, KEY = "open_window", "key"  # the entities (and struct columns) of the state's open windows and keys
FORMER = {WINDOW: "checkpoint_windows", KEY: "checkpoint_keys"}  # where a lake written before kept them
# the open windows are saved whole at least every this many batches (not a multiple of the live flush's 10: a whole
# save and a flush seldom fall in the same batch)
WHOLE_EVERY = 13


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
    # the batch whose checkpoint saved the open windows whole, which this one's build on (`adds_windows`); None:
    # unknown, so the next checkpoint saves them whole
    windows_from: int | None = None

    @property
    def adds_windows(self) -> bool:
        """Whether this checkpoint saves only the open windows' rows its batch added."""
        return (self.windows_from is not None and self.windows_from < self.batch
                and self.state.windows_added is not None)


def windows_from(previous: Checkpoint, batch: int, state: State) -> int:
    """Where the open windows of `batch`'s checkpoint build on, after `previous`: its whole save's batch while that is
    fewer than WHOLE_EVERY batches back and the engine told the batch's new rows apart, else `batch` (saved whole)."""
    base = previous.windows_from
    if state.windows_added is None or previous.state.windows is None or base is None or batch - base >= WHOLE_EVERY:
        return batch
    return base


class CheckpointMismatch(ValueError):
    """A checkpoint made with another policy cannot be continued with this one."""


def save(spark: SparkSession, where: TargetDir, cp: Checkpoint, store: TableStore | None = None,
         metadata: dict | None = None) -> int | None:
    """Commit the checkpoint, its open windows (only the rows its batch added, when `cp.adds_windows`) and keys with
    it, in one commit; returns the table's new version (None: an earlier attempt committed it). A table of the former
    layout (state in tables of their own) is replaced by this batch's checkpoint: the live job's next load reads this
    one."""
    store = store or default_store()
    s = cp.state
    adds = cp.adds_windows
    rows = [dict(entity="batch", id=cp.windows_from if adds else None, policy=cp.policy)]
    for p, v in sorted(s.partitions.items()):
        src = cp.source.get(p)
        rows.append(dict(entity="partition", id=p, floor=v.floor, events=v.events, wp=v.wp, counted=v.counted,
                         ref=v.ref, last_arrival=src and src.last_arrival, seen_at=src and src.seen_at,
                         last_offset=src and src.last_offset))
    for sc, v in sorted(s.scopes.items()):
        rows.append(dict(entity="scope", id=sc, owm=v.owm, raised=v.raised, last_event=v.last_event))
    table = [tuple({"batch": cp.batch, "seq": s.seq, **r}.get(n) for n in SCALAR_NAMES) for r in rows]
    every = driver_rows(spark, table, SCALARS)
    nested = {entity: df for entity, df in ((WINDOW, s.windows_added if adds else s.windows), (KEY, s.keys))
              if df is not None}
    path = where.table("checkpoints")
    existing = store.read(spark, path) if nested and store.exists(path) else None
    former = existing is not None and not set(nested) <= set(existing.columns)
    if former and adds:
        raise ValueError(f"target {where.label!r}: a checkpoint that adds to the open windows of batch "
                         f"{cp.windows_from} cannot replace a checkpoints table of the former layout")
    tag = [F.lit(cp.batch).cast("long").alias("batch"), F.lit(s.seq).cast("long").alias("seq")]
    for entity, df in nested.items():  # a struct column each; the other entities' rows hold a null there
        struct = _as_kept(df, existing.schema[entity].dataType if existing is not None and not former else None)
        part = df.select(*tag, F.lit(entity).alias("entity"), struct.alias(entity))
        every = every.unionByName(part, allowMissingColumns=True)
    # at most a file per core: the open windows are the last ones and the batch's, and their files (the next
    # batch's tasks) grew by one a batch
    every = every.select(*_scalar_columns(), *nested).coalesce(spark.sparkContext.defaultParallelism)
    return store.write(every, path, mode="overwrite" if former else "append",
                       txn=AppTransaction(f"retrace-{where.target}-checkpoints", cp.batch), metadata=metadata)


@once_per_jvm
def _scalar_columns() -> list[Column]:
    return [F.col(n) for n in SCALAR_NAMES]


def _as_kept(df: DataFrame, kept: StructType | None) -> Column:
    """`df`'s rows as the table's struct `kept` holds them: a field `df` lacks is null (an earlier version kept every
    column of a window's members; the same struct keeps the commit a plain append), in the table's order."""
    if kept is None or not set(df.columns) <= set(kept.fieldNames()) or df.columns == kept.fieldNames():
        return F.struct(*df.columns)
    return F.struct(*[(F.col(f.name) if f.name in df.columns else F.lit(None).cast(f.dataType)).alias(f.name)
                      for f in kept.fields])


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
    rows = scalars.where((F.col("batch") == last) & ~F.col("entity").isin(WINDOW, KEY)).select(*SCALAR_NAMES).collect()
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
    base = last if mark["id"] is None else mark["id"]  # the whole save the open windows build on
    windows, whole = _nested(spark, where, store, scalars, WINDOW, last, base)
    keys, _ = _nested(spark, where, store, scalars, KEY, last)
    state = State(seq=seq, partitions=partitions, scopes=scopes, windows=windows, keys=keys)
    return Checkpoint(last, state, source, mark["policy"], base if whole else None)


def state_rows(table: DataFrame, entity: str, batch: int, since: int | None = None) -> DataFrame | None:
    """The open windows (`WINDOW`) or keys (`KEY`) of a batch's checkpoint in `table` (the checkpoints table,
    or the rows of its commit); with `since`, the rows of the checkpoints from that batch to `batch` (the open
    windows of a checkpoint that adds to those since its whole save). None when the table keeps none."""
    if entity not in table.columns:
        return None
    batches = F.col("batch") == batch if since is None or since == batch else F.col("batch").between(since, batch)
    return table.where(batches & (F.col("entity") == entity)).select(f"{entity}.*")


def _nested(spark: SparkSession, where: TargetDir, store: TableStore, table: DataFrame, entity: str, batch: int,
            since: int | None = None) -> tuple[DataFrame | None, bool]:
    """The state's open windows or keys at `batch` (from `since`: `state_rows`), and whether the checkpoints table
    held them: else they come from the table of their own a lake written before kept them in (until the next
    checkpoint replaces that layout: `save`)."""
    found = state_rows(table, entity, batch, since)
    if found is not None:
        return found, True
    former = where.table(FORMER[entity])
    if not store.exists(former):
        return None, True
    return store.read(spark, former).where(F.col("batch") == batch).drop("batch"), False
