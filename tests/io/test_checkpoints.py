"""A checkpoint is one commit to one table: its scalars, open windows and keys, read back as they were saved; a
checkpoint of the former layout (open windows and keys in tables of their own) is read, then replaced."""
from __future__ import annotations

import os

from pyspark.sql import functions as F

from replay.io import checkpoints
from replay.io.checkpoints import Checkpoint, SourcePartition
from replay.io.spark import driver_rows
from replay.io.store import DeltaStore
from replay.model.state import KEYS_SCHEMA, WINDOWS_SCHEMA, PartitionState, ScopeState, State
from tests.support import target_dir

POLICY = '{"policy": "p"}'


def _state(spark, seq: int, windows: int) -> State:
    open_windows = spark.createDataFrame([(0, f"k{i}", i, i + 1, None) for i in range(windows)], WINDOWS_SCHEMA)
    keys = spark.createDataFrame([(0, "a", 7), (1, "b", 9)], KEYS_SCHEMA)
    return State(seq=seq, partitions={0: PartitionState(1, 2, 3, 4, 5)}, scopes={0: ScopeState(6, 7, 8)},
                 windows=open_windows, keys=keys)


def _rows(df):
    return sorted(tuple(r) for r in df.collect())


def _commits(path: str) -> int:
    return sum(1 for n in os.listdir(os.path.join(path, "_delta_log")) if n.endswith(".json"))


def test_a_checkpoint_with_open_windows_and_keys_is_one_commit_and_reads_back_as_saved(spark, tmp_path):
    where = target_dir(str(tmp_path / "lake"), "live")
    for batch in range(3):
        state = _state(spark, 10 * batch, windows=batch + 1)
        checkpoints.save(spark, where, Checkpoint(batch, state, {0: SourcePartition(11, 12, 13)}, POLICY))
    assert _commits(where.table("checkpoints")) == 3
    assert not os.path.exists(where.table("checkpoint_windows")) and not os.path.exists(where.table("checkpoint_keys"))
    cp = checkpoints.load(spark, where, policy=POLICY)
    assert (cp.batch, cp.state.seq, cp.policy) == (2, 20, POLICY)
    assert cp.state.partitions == state.partitions and cp.state.scopes == state.scopes
    assert cp.source == {0: SourcePartition(11, 12, 13)}
    assert cp.state.windows.columns == state.windows.columns and _rows(cp.state.windows) == _rows(state.windows)
    assert _rows(cp.state.keys) == _rows(state.keys)
    assert checkpoints.load(spark, where, before_seq=15).state.windows.count() == 2  # batch 1's


def test_a_checkpoint_saved_again_by_a_retried_batch_is_not_added_twice(spark, tmp_path):
    where = target_dir(str(tmp_path / "lake"), "live")
    made = Checkpoint(0, _state(spark, 5, windows=2), {}, POLICY)
    assert checkpoints.save(spark, where, made) is not None
    assert checkpoints.save(spark, where, made) is None
    assert checkpoints.load(spark, where).state.windows.count() == 2


def test_a_checkpoint_of_the_former_layout_is_read_and_the_next_one_replaces_it(spark, tmp_path):
    """A lake written before kept open windows and keys in tables of their own: the live job resumes from them,
    and its next checkpoint is the table's only one (the former tables are no longer read)."""
    where = target_dir(str(tmp_path / "lake"), "live")
    store, old = DeltaStore(), _state(spark, 30, windows=3)
    unset = (None,) * (len(checkpoints.SCALAR_NAMES) - 5)  # floor ... last_offset
    scalars = [(4, 30, POLICY, "batch", None, *unset), (4, 30, None, "partition", 0, *unset)]
    store.write(driver_rows(spark, scalars, checkpoints.SCALARS), where.table("checkpoints"))
    store.write(old.windows.select(F.lit(4).cast("long").alias("batch"), "*"), where.table("checkpoint_windows"))
    store.write(old.keys.select(F.lit(4).cast("long").alias("batch"), "*"), where.table("checkpoint_keys"))

    resumed = checkpoints.load(spark, where, policy=POLICY)
    assert resumed.batch == 4 and _rows(resumed.state.windows) == _rows(old.windows)
    assert _rows(resumed.state.keys) == _rows(old.keys)

    checkpoints.save(spark, where, Checkpoint(5, _state(spark, 40, windows=1), {}, POLICY))
    table = spark.read.format("delta").load(where.table("checkpoints"))
    assert {r["batch"] for r in table.select("batch").distinct().collect()} == {5}
    after = checkpoints.load(spark, where, policy=POLICY)
    assert after.batch == 5 and after.state.windows.count() == 1 and after.state.keys.count() == 2


def test_open_windows_keeping_fewer_columns_than_the_table_are_saved_in_its_struct_with_nulls(spark, tmp_path):
    """A lake written before kept every column of a user job's window members; a checkpoint keeping fewer is
    appended in the table's struct (the same schema: a plain append), the columns it no longer keeps null."""
    where = target_dir(str(tmp_path / "lake"), "live")
    wide = spark.createDataFrame([(0, 7, 1, "eu", "x")], "scope int, k long, seq long, region string, note string")
    checkpoints.save(spark, where, Checkpoint(0, State(seq=1, windows=wide), {}, POLICY))
    narrow = spark.createDataFrame([(0, 8, "sa")], "scope int, k long, region string")
    sc = spark.sparkContext
    sc.setJobGroup("narrow-checkpoint", "a checkpoint keeping fewer columns")
    try:
        checkpoints.save(spark, where, Checkpoint(1, State(seq=2, windows=narrow), {}, POLICY))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert len(sc.statusTracker().getJobIdsForGroup("narrow-checkpoint")) == 1  # the writer's path rebuilds the state
    table = spark.read.format("delta").load(where.table("checkpoints"))
    assert table.schema[checkpoints.WINDOW].dataType.fieldNames() == ["scope", "k", "seq", "region", "note"]
    resumed = checkpoints.load(spark, where, policy=POLICY)
    assert _rows(resumed.state.windows) == [(0, 8, None, "sa", None)]


def _members(spark, *ks: int):
    return spark.createDataFrame([(0, k, f"d{k}") for k in ks], "scope int, k long, device string")


def _adding(spark, batch: int, previous: Checkpoint, held: tuple, added: tuple) -> Checkpoint:
    """The checkpoint of `batch` after `previous`, holding the open windows' members `held`, `added` of them new."""
    state = State(seq=batch, windows=_members(spark, *held), windows_added=_members(spark, *added))
    return Checkpoint(batch, state, {}, POLICY, checkpoints.windows_from(previous, batch, state))


def test_a_checkpoint_after_a_whole_save_saves_only_the_open_windows_members_its_batch_added(spark, tmp_path):
    where = target_dir(str(tmp_path / "lake"), "live")
    first = _adding(spark, 0, Checkpoint(-1, State()), held=(1, 2), added=(1, 2))
    assert not first.adds_windows  # no whole save to build on yet
    checkpoints.save(spark, where, first)
    previous = checkpoints.load(spark, where)
    second = _adding(spark, 1, previous, held=(1, 2, 3), added=(3,))
    assert second.adds_windows and second.windows_from == 0
    checkpoints.save(spark, where, second)
    table = spark.read.format("delta").load(where.table("checkpoints"))
    saved = table.where((F.col("batch") == 1) & (F.col("entity") == checkpoints.WINDOW))
    assert [r["k"] for r in saved.select(f"{checkpoints.WINDOW}.k").collect()] == [3]
    resumed = checkpoints.load(spark, where)
    assert resumed.windows_from == 0 and _rows(resumed.state.windows) == _rows(_members(spark, 1, 2, 3))
    assert _rows(checkpoints.load(spark, where, before_seq=1).state.windows) == _rows(_members(spark, 1, 2))


def test_the_open_windows_are_saved_whole_again_every_whole_every_batches(spark):
    cp = Checkpoint(-1, State())
    whole = []
    for batch in range(checkpoints.WHOLE_EVERY + 2):
        cp = _adding(spark, batch, cp, held=(batch,), added=(batch,))
        whole += [batch] if not cp.adds_windows else []
    assert whole == [0, checkpoints.WHOLE_EVERY]


def test_a_checkpoint_after_one_of_the_former_layout_saves_the_open_windows_whole(spark, tmp_path):
    where = target_dir(str(tmp_path / "lake"), "live")
    store, old = DeltaStore(), _state(spark, 30, windows=3)
    unset = (None,) * (len(checkpoints.SCALAR_NAMES) - 5)
    store.write(driver_rows(spark, [(4, 30, POLICY, "batch", None, *unset)], checkpoints.SCALARS),
                where.table("checkpoints"))
    store.write(old.windows.select(F.lit(4).cast("long").alias("batch"), "*"), where.table("checkpoint_windows"))
    resumed = checkpoints.load(spark, where, policy=POLICY)
    assert resumed.windows_from is None
    assert not _adding(spark, 5, resumed, held=(1,), added=(1,)).adds_windows
