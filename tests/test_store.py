"""The Delta store: a commit tagged with an application transaction lands at most once; an overwrite
replaces the rows and the schema; a range replace keeps the rows outside the range."""
from __future__ import annotations

import pytest

from replay.store import AppTransaction, DeltaRsStore, Replace


@pytest.mark.parametrize("version", [0, 3])
def test_a_commit_for_a_transaction_already_made_is_not_made_again(spark, tmp_path, version):
    store, path = DeltaRsStore(), str(tmp_path / "t")
    df = spark.createDataFrame([(1,), (2,)], "seq long")
    txn = AppTransaction("retrace-test", version)
    assert store.write(df, path, txn=txn) is not None
    assert store.write(df, path, txn=txn) is None
    assert store.write(df, path, txn=AppTransaction("retrace-test", version - 1)) is None
    assert store.read(spark, path).count() == 2
    assert store.transaction_version(path, "retrace-test") == version


def test_an_overwrite_replaces_the_rows_and_takes_the_new_schema(spark, tmp_path):
    store, path = DeltaRsStore(), str(tmp_path / "t")
    store.write(spark.createDataFrame([(1,), (2,)], "seq long"), path)
    store.write(spark.createDataFrame([(3, "x")], "seq long, key string"), path, mode="overwrite")
    table = store.read(spark, path)
    assert table.columns == ["seq", "key"]
    assert [tuple(r) for r in table.collect()] == [(3, "x")]


def test_a_range_replace_keeps_the_rows_outside_the_range(spark, tmp_path):
    store, path = DeltaRsStore(), str(tmp_path / "t")
    store.write(spark.createDataFrame([(s,) for s in range(6)], "seq long"), path, stats_columns=("seq",))
    store.write(spark.createDataFrame([(30,)], "seq long"), path, replace=Replace("seq", 2, 4))
    assert sorted(r["seq"] for r in store.read(spark, path).collect()) == [0, 1, 4, 5, 30]


def test_overwrite_and_a_range_replace_together_are_refused(spark, tmp_path):
    df = spark.createDataFrame([(1,)], "seq long")
    with pytest.raises(ValueError, match="replace"):
        DeltaRsStore().write(df, str(tmp_path / "t"), mode="overwrite", replace=Replace("seq", 0))
