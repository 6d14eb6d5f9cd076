"""The Delta store (delta-spark): a commit tagged with an application transaction lands at most once; an
overwrite replaces the rows and the schema; a range replace keeps the rows outside the range (and replaces
null rows when asked); each commit carries its userMetadata."""
from __future__ import annotations

import json

import pytest
from delta.tables import DeltaTable

from replay.io.store import AppTransaction, DeltaStore, Replace, commit_metadata


def test_a_commit_for_a_transaction_already_made_is_not_made_again(spark, tmp_path):
    store, path, version = DeltaStore(), str(tmp_path / "t"), 3
    df = spark.createDataFrame([(1,), (2,)], "seq long")
    txn = AppTransaction("retrace-test", version)
    assert store.write(df, path, txn=txn) is not None
    assert store.write(df, path, txn=txn) is None
    assert store.write(df, path, txn=AppTransaction("retrace-test", version - 1)) is None
    assert store.read(spark, path).count() == 2
    assert store.transaction_version(path, "retrace-test") == version
    assert store.transaction_version(path, "another-app") is None


def test_appends_tagged_with_transactions_land_once_each_with_their_metadata(spark, tmp_path):
    store, path = DeltaStore(), str(tmp_path / "t")
    for batch in (0, 1, 2, 1):  # batch 1 again: a retry after a crash
        df = spark.createDataFrame([(batch, i) for i in range(3)], "batch long, i long")
        store.write(df, path, txn=AppTransaction("retrace-test", batch), metadata={"batch": batch})
    assert sorted(tuple(r) for r in store.read(spark, path).collect()) == [(b, i) for b in range(3) for i in range(3)]
    history = DeltaTable.forPath(spark, path).history().orderBy("version").collect()
    assert [(h["operation"], json.loads(h["userMetadata"])["batch"]) for h in history] == [("WRITE", b) for b in range(3)]
    assert store.transaction_version(path, "retrace-test") == 2
    assert commit_metadata(spark, path) == {"batch": 2}


def test_an_append_tagged_with_a_transaction_runs_one_spark_job_not_a_rebuild_of_the_table_state(spark, tmp_path):
    """The transactions are read from the table's checksum file; the writer's path rebuilds the state (3 jobs)."""
    store, path, sc = DeltaStore(), str(tmp_path / "t"), spark.sparkContext
    batch = lambda b: spark.createDataFrame([(b,)], "batch long")  # noqa: E731
    for b in (0, 1):
        store.write(batch(b), path, txn=AppTransaction("retrace-test", b))
    sc.setJobGroup("append-under-test", "one idempotent append")
    try:
        store.write(batch(2), path, txn=AppTransaction("retrace-test", 2))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert len(sc.statusTracker().getJobIdsForGroup("append-under-test")) == 1
    assert store.transaction_version(path, "retrace-test") == 2


def test_an_append_tagged_with_a_transaction_is_refused_when_its_schema_differs(spark, tmp_path):
    store, path = DeltaStore(), str(tmp_path / "t")
    store.write(spark.createDataFrame([(1,)], "seq long"), path, txn=AppTransaction("retrace-test", 0))
    with pytest.raises(Exception, match="(?i)schema"):
        store.write(spark.createDataFrame([(2, "x")], "seq long, key string"), path,
                    txn=AppTransaction("retrace-test", 1))
    assert [r["seq"] for r in store.read(spark, path).collect()] == [1]


def test_an_overwrite_replaces_the_rows_and_takes_the_new_schema(spark, tmp_path):
    store, path = DeltaStore(), str(tmp_path / "t")
    store.write(spark.createDataFrame([(1,), (2,)], "seq long"), path)
    store.write(spark.createDataFrame([(3, "x")], "seq long, key string"), path, mode="overwrite")
    table = store.read(spark, path)
    assert table.columns == ["seq", "key"]
    assert [tuple(r) for r in table.collect()] == [(3, "x")]


def test_a_range_replace_keeps_the_rows_outside_the_range(spark, tmp_path):
    store, path = DeltaStore(), str(tmp_path / "t")
    store.write(spark.createDataFrame([(s,) for s in range(6)], "seq long"), path)
    store.write(spark.createDataFrame([(3,)], "seq long"), path, replace=Replace("seq", 2, 4))
    assert sorted(r["seq"] for r in store.read(spark, path).collect()) == [0, 1, 3, 4, 5]


def test_a_range_replace_with_nulls_replaces_the_null_rows_too(spark, tmp_path):
    store, path = DeltaStore(), str(tmp_path / "t")
    rows = [(1, 1), (2, 5), (3, None), (4, 9)]
    store.write(spark.createDataFrame(rows, "id long, emitted_at long"), path)
    store.write(spark.createDataFrame([(5, 6), (6, None)], "id long, emitted_at long"), path,
                replace=Replace("emitted_at", 5, None, nulls=True))
    assert sorted(r["id"] for r in store.read(spark, path).collect()) == [1, 5, 6]


def test_each_commit_records_its_user_metadata(spark, tmp_path):
    store, path = DeltaStore(), str(tmp_path / "t")
    store.write(spark.createDataFrame([(1,)], "seq long"), path, metadata={"run": "a", "table": "t"})
    store.write(spark.createDataFrame([(2,)], "seq long"), path, metadata={"run": "b", "table": "t"})
    DeltaTable.forPath(spark, path).optimize().executeCompaction()  # a commit without userMetadata
    history = DeltaTable.forPath(spark, path).history().orderBy("version").collect()
    assert [json.loads(h["userMetadata"])["run"] if h["userMetadata"] else None for h in history] == ["a", "b", None]
    assert commit_metadata(spark, path) == {"run": "b", "table": "t"}


def test_overwrite_and_a_range_replace_together_are_refused(spark, tmp_path):
    df = spark.createDataFrame([(1,)], "seq long")
    with pytest.raises(ValueError, match="replace"):
        DeltaStore().write(df, str(tmp_path / "t"), mode="overwrite", replace=Replace("seq", 0))
