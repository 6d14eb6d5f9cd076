"""The Delta store: a commit tagged with an application transaction lands at most once."""
from __future__ import annotations

import pytest

from replay.store import AppTransaction, DeltaRsStore


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
