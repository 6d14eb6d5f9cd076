"""The Delta store (delta-spark): a commit tagged with an application transaction lands at most once; an
overwrite replaces the rows and the schema; a range replace keeps the rows outside the range (and replaces
null rows when asked); each commit carries its userMetadata."""
from __future__ import annotations

import glob
import json
import os
import uuid
from datetime import datetime

import pytest
from delta.tables import DeltaTable

from replay.io.store import (LOG_CHECKPOINT_EVERY, NULLS, AppTransaction, DeltaStore, Replace, commit_metadata,
                             replaced_by)


def _jobs_of(spark, write) -> int:
    """The Spark jobs `write()` runs (in a job group of its own: a group keeps the jobs of every earlier use)."""
    sc, group = spark.sparkContext, f"write-under-test-{uuid.uuid4()}"
    sc.setJobGroup(group, "one commit")
    try:
        write()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return len(sc.statusTracker().getJobIdsForGroup(group))


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
    assert [(h["operation"], json.loads(h["userMetadata"])["batch"]) for h in history] == [
        ("WRITE", b) for b in range(3)]
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


def test_an_append_without_a_transaction_runs_one_spark_job_and_keeps_its_metadata(spark, tmp_path):
    """The journal's and the landing manifest's appends: files written and committed, as the writer would."""
    store, path = DeltaStore(), str(tmp_path / "t")
    rows = lambda b: spark.createDataFrame([(b,)], "batch long")  # noqa: E731
    first = store.write(rows(0), path, metadata={"batch": 0})
    assert _jobs_of(spark, lambda: store.write(rows(1), path, metadata={"batch": 1})) == 1
    assert sorted(r["batch"] for r in store.read(spark, path).collect()) == [0, 1]
    history = DeltaTable.forPath(spark, path).history().orderBy("version").collect()
    assert [(h["version"], h["operation"], h["operationParameters"]["mode"], json.loads(h["userMetadata"]))
            for h in history] == [(first, "WRITE", "Append", {"batch": 0}),
                                  (first + 1, "WRITE", "Append", {"batch": 1})]


def test_a_new_table_checkpoints_its_log_every_50_commits_not_every_10(spark, tmp_path):
    """A live batch commits to seven tables: with Delta's default of 10, all seven wrote a log checkpoint in the same
    batch, every 10th (the live p95)."""
    store, path = DeltaStore(), str(tmp_path / "t")
    for b in range(11):
        store.write(spark.createDataFrame([(b,)], "batch long"), path, txn=AppTransaction("retrace-test", b))
    assert DeltaTable.forPath(spark, path).detail().first()["properties"]["delta.checkpointInterval"] == "50"
    assert not [n for n in os.listdir(os.path.join(path, "_delta_log")) if ".checkpoint." in n]


def test_the_tables_a_live_batch_commits_to_every_batch_write_their_log_checkpoints_in_different_batches(spark,
                                                                                                     tmp_path):
    """With one interval for all, every 50th live batch wrote a log checkpoint of each of them (the spec's job's batch
    11 s instead of 2)."""
    store, every = DeltaStore(), {}
    for name in LOG_CHECKPOINT_EVERY:
        path = str(tmp_path / name)
        for b in range(44 if name == "dead_letters" else 1):
            store.write(spark.createDataFrame([(b,)], "batch long"), path, txn=AppTransaction("retrace-test", b))
        every[name] = int(DeltaTable.forPath(spark, path).detail().first()["properties"]["delta.checkpointInterval"])
    together = [(x, y, v) for x in every for y in every if x < y for v in range(1, 2000)
                if v % every[x] == 0 and v % every[y] == 0]
    assert not together, together  # (table, table, the version both checkpoint at)
    assert os.path.exists(tmp_path / "dead_letters" / "_delta_log" / f"{every['dead_letters']:020d}.checkpoint.parquet")


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


def test_an_overwrite_of_a_table_whose_checksum_lists_its_files_runs_one_spark_job(spark, tmp_path):
    """Delta lists a small table's files in its checksum: the overwrite removes them without rebuilding the
    table's state (the writer's path: 5 jobs)."""
    store, path = DeltaStore(), str(tmp_path / "t")
    for first in (0, 10):
        store.write(spark.createDataFrame([(first,), (first + 1,)], "seq long"), path)
    fresh = spark.createDataFrame([(7,)], "seq long").coalesce(1)
    assert _jobs_of(spark, lambda: store.write(fresh, path, mode="overwrite", metadata={"run": "o"})) == 1
    assert [r["seq"] for r in store.read(spark, path).collect()] == [7]
    last = DeltaTable.forPath(spark, path).history(1).first()
    assert (last["operation"], last["operationParameters"]["mode"]) == ("WRITE", "Overwrite")
    assert json.loads(last["userMetadata"]) == {"run": "o"}


def test_a_range_replace_of_whole_files_runs_a_spark_job_per_kind_of_row_and_keeps_the_files_outside_it(spark,
                                                                                                         tmp_path):
    """A replace that takes the nulls writes its null rows and its values apart: a job each."""
    store, path = DeltaStore(), str(tmp_path / "t")
    for rows in ([(1, 1), (2, 4)], [(3, 5), (4, None)]):  # a file before the range, a file in it
        store.write(spark.createDataFrame(rows, "id long, emitted_at long").coalesce(1), path)
    fresh = spark.createDataFrame([(5, 6), (6, None)], "id long, emitted_at long").coalesce(1)
    replace = Replace("emitted_at", 5, None, nulls=True)
    assert _jobs_of(spark, lambda: store.write(fresh, path, replace=replace, txn=AppTransaction("a", 1))) == 2
    assert sorted(r["id"] for r in store.read(spark, path).collect()) == [1, 2, 5, 6]
    assert DeltaTable.forPath(spark, path).history(1).first()["operationParameters"]["predicate"] == \
        replace.predicate()
    assert store.write(fresh, path, replace=replace, txn=AppTransaction("a", 1)) is None  # a retry: no commit
    assert store.read(spark, path).count() == 4


def _null_counts(spark, path: str) -> list[tuple[int, int]]:
    """(rows, null emitted_at) of each of the table's files."""
    files = spark.read.format("delta").load(path).inputFiles()
    return sorted((t.count(), t.where("emitted_at IS NULL").count()) for t in (spark.read.parquet(f) for f in files))


def test_a_range_replace_with_nulls_writes_its_nulls_and_its_values_to_separate_files(spark, tmp_path):
    store, path = DeltaStore(), str(tmp_path / "t")
    store.write(spark.createDataFrame([(1, 1)], "id long, emitted_at long").coalesce(1), path)
    fresh = spark.createDataFrame([(5, 6), (6, None), (7, 8)], "id long, emitted_at long").coalesce(1)
    store.write(fresh, path, replace=Replace("emitted_at", 5, None, nulls=True))
    assert _null_counts(spark, path) == [(1, 0), (1, 1), (2, 0)]


def test_a_range_replace_with_nulls_rewrites_a_file_of_values_before_it_and_nulls_keeping_its_values(spark, tmp_path):
    """Such a file (the writer's first, or a compaction's) is rewritten without the writer (5 or more jobs):
    its values join the new values' file, its nulls are gone, and the next replace removes whole files."""
    store, path = DeltaStore(), str(tmp_path / "t")
    store.write(spark.createDataFrame([(1, 1), (2, None), (3, 4)], "id long, emitted_at long").coalesce(1), path)
    fresh = spark.createDataFrame([(5, 6), (6, None)], "id long, emitted_at long").coalesce(1)
    replace = Replace("emitted_at", 5, None, nulls=True)
    assert _jobs_of(spark, lambda: store.write(fresh, path, replace=replace)) == 2
    assert sorted(r["id"] for r in store.read(spark, path).collect()) == [1, 3, 5, 6]
    assert all(nulls in (0, rows) for rows, nulls in _null_counts(spark, path))  # each file: nulls or values
    nulls_file = [f for f in spark.read.format("delta").load(path).inputFiles()
                  if spark.read.parquet(f).where("emitted_at IS NULL").count()]
    store.write(spark.createDataFrame([(7, None)], "id long, emitted_at long"), path,
                replace=Replace("emitted_at", 9, None, nulls=True))
    assert sorted(r["id"] for r in store.read(spark, path).collect()) == [1, 3, 5, 7]
    assert not set(nulls_file) & set(spark.read.format("delta").load(path).inputFiles())


def test_a_range_replace_through_a_file_with_rows_on_both_sides_keeps_that_files_rows_outside(spark, tmp_path):
    store, path = DeltaStore(), str(tmp_path / "t")
    store.write(spark.createDataFrame([(s,) for s in range(6)], "seq long").coalesce(1), path)
    store.write(spark.createDataFrame([(3,)], "seq long"), path, replace=Replace("seq", 2, 4))
    assert sorted(r["seq"] for r in store.read(spark, path).collect()) == [0, 1, 3, 4, 5]


@pytest.mark.parametrize("stats, verdict", [
    ({"numRecords": 2, "minValues": {"c": 5}, "maxValues": {"c": 9}, "nullCount": {"c": 0}}, True),
    ({"numRecords": 2, "minValues": {"c": 1}, "maxValues": {"c": 4}, "nullCount": {"c": 0}}, False),
    ({"numRecords": 2, "minValues": {"c": 4}, "maxValues": {"c": 5}, "nullCount": {"c": 0}}, None),
    ({"numRecords": 2, "minValues": {"c": 10}, "maxValues": {"c": 12}, "nullCount": {"c": 0}}, False),
    ({"numRecords": 2, "minValues": {"c": 5}, "maxValues": {"c": 5}, "nullCount": {"c": 1}}, None),
    ({"numRecords": 2, "nullCount": {"c": 2}}, False),
    ({"numRecords": 2, "minValues": {"c": 1}, "maxValues": {"c": 1}, "nullCount": {"c": 1}}, False),
    ({"numRecords": 0, "nullCount": {"c": 0}}, True),
    ({"numRecords": 2}, None),
    (None, None),
])
def test_a_files_statistics_tell_whether_a_range_replace_removes_all_none_or_some_of_its_rows(stats, verdict):
    assert replaced_by(Replace("c", 5, 10), stats and json.dumps(stats)) is verdict


def test_a_file_of_values_before_a_replace_with_nulls_and_of_nulls_has_only_its_nulls_replaced():
    stats = {"numRecords": 3, "minValues": {"c": 1}, "maxValues": {"c": 4}, "nullCount": {"c": 1}}
    assert replaced_by(Replace("c", 5, None, nulls=True), json.dumps(stats)) is NULLS


def test_a_range_replace_with_nulls_replaces_the_null_rows_too(spark, tmp_path):
    store, path = DeltaStore(), str(tmp_path / "t")
    rows = [(1, 1), (2, 5), (3, None), (4, 9)]
    store.write(spark.createDataFrame(rows, "id long, emitted_at long"), path)
    store.write(spark.createDataFrame([(5, 6), (6, None)], "id long, emitted_at long"), path,
                replace=Replace("emitted_at", 5, None, nulls=True))
    assert sorted(r["id"] for r in store.read(spark, path).collect()) == [1, 5, 6]


def test_the_rows_a_commit_added_are_read_from_its_files_without_rebuilding_the_table_state(spark, tmp_path):
    store, path = DeltaStore(), str(tmp_path / "a [b]")  # glob characters in the path name that folder only
    versions = [store.write(spark.createDataFrame([(b, b * 10)], "batch long, v long"), path,
                            txn=AppTransaction("a", b)) for b in range(3)]
    rows = []
    assert _jobs_of(spark, lambda: rows.extend(store.read_commit(spark, path, versions[1]).collect())) == 1
    assert [tuple(r) for r in rows] == [(1, 10)]


def test_a_commit_that_removed_some_rows_is_not_read_as_its_added_files(spark, tmp_path):
    store, path = DeltaStore(), str(tmp_path / "t")
    store.write(spark.createDataFrame([(1,), (5,)], "seq long").repartition(2, "seq"), path)
    version = store.write(spark.createDataFrame([(6,)], "seq long"), path, replace=Replace("seq", 5))
    assert store.read_commit(spark, path, version) is None


def test_an_overwrite_is_read_from_its_added_files_as_the_whole_table(spark, tmp_path):
    store, path = DeltaStore(), str(tmp_path / "t")
    store.write(spark.createDataFrame([(1,)], "seq long"), path)
    version = store.write(spark.createDataFrame([(2,), (3,)], "seq long"), path, mode="overwrite")
    rows = []
    assert _jobs_of(spark, lambda: rows.extend(store.read_commit(spark, path, version).collect())) == 1
    assert sorted(r["seq"] for r in rows) == [2, 3]


def test_a_table_whose_latest_commit_overwrote_it_is_read_from_that_commits_files(spark, tmp_path):
    """The metrics table, rewritten at every live batch, is read without a rebuild of its state."""
    store, path = DeltaStore(), str(tmp_path / "t")
    for rows in ([(1,)], [(2,), (3,)]):
        store.write(spark.createDataFrame(rows, "seq long"), path, mode="overwrite")
    rows = []
    assert _jobs_of(spark, lambda: rows.extend(store.read_current(spark, path).collect())) == 1
    assert sorted(r["seq"] for r in rows) == [2, 3]


def test_a_table_is_read_as_it_is_now_from_the_files_its_checksum_lists_without_rebuilding_its_state(spark,
                                                                                                        tmp_path):
    """Appends and a range replace, then the output tables' read: the latest version's rows, in one Spark job (Delta's
    reader rebuilds the state first)."""
    store, path = DeltaStore(), str(tmp_path / "t")
    store.write(spark.createDataFrame([(1,), (5,)], "seq long").repartition(2, "seq"), path)
    store.write(spark.createDataFrame([(2,)], "seq long"), path)
    store.write(spark.createDataFrame([(6,)], "seq long"), path, replace=Replace("seq", 5))
    rows = []
    assert _jobs_of(spark, lambda: rows.extend(store.read_current(spark, path).collect())) == 1
    assert sorted(r["seq"] for r in rows) == sorted(r["seq"] for r in store.read(spark, path).collect()) == [1, 2, 6]


def test_a_table_whose_latest_commit_appended_is_read_whole(spark, tmp_path):
    store, path = DeltaStore(), str(tmp_path / "t")
    store.write(spark.createDataFrame([(1,)], "seq long"), path, mode="overwrite")
    store.write(spark.createDataFrame([(2,)], "seq long"), path)
    assert sorted(r["seq"] for r in store.read_current(spark, path).collect()) == [1, 2]


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


def _stats_columns(path: str) -> list[set[str]]:
    """Per file the table added, in commit order: the columns its statistics give a minimum for."""
    found = []
    for log in sorted(glob.glob(os.path.join(path, "_delta_log", "*.json"))):
        for line in open(log):
            add = json.loads(line).get("add")
            if add is not None:
                found.append(set(json.loads(add["stats"])["minValues"]))
    return found


DECISION_ROWS = ("seq long, partition int, offset long, kind string, timestamp timestamp, arrival_time timestamp, "
                 "key string, reasons array<string>")


def _decision(seq: int):
    return (seq, 0, seq, "event", datetime(2026, 1, 1), datetime(2026, 1, 1), "k", ["late"])


def test_a_new_decisions_table_keeps_statistics_only_on_the_columns_reads_filter_on(spark, tmp_path):
    """The keys, kinds and reasons cost a fifth of a decisions write and no read filters on them; `seq` is kept,
    so a range replace still removes whole files from their statistics, without rebuilding the table's state."""
    store, path = DeltaStore(), str(tmp_path / "lake" / "decisions")
    rows = lambda seq: spark.createDataFrame([_decision(seq)], DECISION_ROWS).coalesce(1)  # noqa: E731
    store.write(rows(0), path)  # created by the writer
    store.write(rows(1), path)  # appended through the transaction API
    assert _jobs_of(spark, lambda: store.write(rows(1), path, replace=Replace("seq", 1, 2))) == 1
    assert _stats_columns(path) == [{"seq", "partition", "offset", "timestamp", "arrival_time"}] * 3
    assert sorted(r["seq"] for r in store.read(spark, path).collect()) == [0, 1]


def test_a_table_not_named_for_it_or_without_those_columns_keeps_statistics_on_every_column(spark, tmp_path):
    store = DeltaStore()
    for table, schema in (("windows", DECISION_ROWS), ("decisions", "seq long, key string")):
        path = str(tmp_path / "lake" / table)
        df = spark.createDataFrame([_decision(0) if table == "windows" else (0, "k")], schema).coalesce(1)
        store.write(df, path)
        assert _stats_columns(path) == [set(df.columns) - {"reasons"}]  # an array has no minimum
