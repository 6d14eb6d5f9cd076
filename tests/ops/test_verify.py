"""`replay verify`: a fresh replay of a range matches an untouched target, and a tampered row is named.

One generated stream (2000 events, ~1h50 of arrivals) is replayed once into `production`; tampering is
done on copies of it, so every test sees the same untouched production.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pyspark.sql import functions as F

from replay.io.journal import ingest
from replay.io.lake import OUTPUT_TABLES as TABLES
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.generate import StreamSpec, generate
from replay.ops.run import run
from replay.ops.verify import verify
from replay.engine.pipeline import exceptional
from replay.io.store import default_store
from replay.ops import outputs
from tests.support import ROOT, copy_table, target_dir

POLICY_FILE = os.path.join(ROOT, "infra", "policies", "production.yaml")
SECOND_HOUR = "2024-01-01T01:00:00Z"


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("verify")
    landing, lake = str(root / "landing"), str(root / "lake")
    generate(landing, StreamSpec(2000, partitions=3, keys=30, files=4, seed=3, rate=0.3))
    ingest(spark, landing, lake)
    run(spark, lake, Job.spec(Policy.from_yaml(POLICY_FILE)))
    return lake


@pytest.fixture(scope="module")
def policy():
    return Policy.from_yaml(POLICY_FILE)


def _read(spark, lake, target, table):
    return outputs.read(spark, target_dir(lake, target), table)


def _copy_with(spark, lake, name, table, change):
    """A copy of production as target `name`, with `change(df)` applied to one stored table."""
    for t in TABLES:
        copy_table(spark, target_dir(lake, "production").table(t), target_dir(lake, name).table(t),
                   change if t == table else None)


def test_untouched_production_verifies_identical(spark, lake, policy):
    report = verify(spark, lake, Job.spec(policy))
    assert report.identical, report.text()
    assert report.hours == []
    assert {t.table: t.rows_compared > 0 for t in report.tables} == {name: True for name in TABLES}


def test_a_range_compares_only_the_rows_of_that_range(spark, lake, policy):
    report = verify(spark, lake, Job.spec(policy), start=SECOND_HOUR)
    decisions = _read(spark, lake, "production", "decisions")
    first = decisions.where(F.col("arrival_time") >= F.lit(SECOND_HOUR).cast("timestamp")).agg(F.min("seq")).first()[0]
    assert report.identical, report.text()
    assert report.seq_from == first > 0
    compared = {t.table: t.rows_compared for t in report.tables}
    assert compared["decisions"] == decisions.where(F.col("seq") >= first).count()
    assert not [t for t in os.listdir(os.path.join(lake, "jobs", "default", "outputs")) if t.startswith("_verify-")], \
        "the scratch target is removed afterwards"


def test_a_tampered_window_count_is_named_with_its_seq_and_hour(spark, lake, policy):
    windows = _read(spark, lake, "production", "windows")
    victim = (windows.where(F.col("emitted_at").isNotNull()).join(
        _read(spark, lake, "production", "decisions").select(F.col("seq").alias("emitted_at"), "arrival_time"),
        "emitted_at").where(F.col("arrival_time") >= F.lit(SECOND_HOUR).cast("timestamp"))
        .orderBy("emitted_at", "key").first())
    one = (F.col("window_start") == F.lit(victim["window_start"])) & (F.col("key") == F.lit(victim["key"]))
    _copy_with(spark, lake, "tampered-window", "windows",
               lambda df: df.withColumn("count", F.when(one, F.col("count") + 1).otherwise(F.col("count"))))

    report = verify(spark, lake, Job.spec(policy), target="tampered-window")

    assert not report.identical
    by = {t.table: t for t in report.tables}
    assert by["decisions"].identical and by["dead_letters"].identical
    w = by["windows"]
    assert (w.only_in_target, w.only_in_replay, w.first_seq) == (1, 1, victim["emitted_at"])
    assert report.hours == [SECOND_HOUR]
    assert f"first differing seq {victim['emitted_at']}" in report.text()
    assert f"key={victim['key']}" in report.text()


def test_a_deleted_dead_letter_is_only_in_the_replay(spark, lake, policy):
    first = _read(spark, lake, "production", "dead_letters").agg(F.min("seq")).first()[0]
    _copy_with(spark, lake, "lost-letter", "dead_letters", lambda df: df.where(F.col("seq") != first))

    report = verify(spark, lake, Job.spec(policy), target="lost-letter")

    letters = {t.table: t for t in report.tables}["dead_letters"]
    assert (letters.only_in_target, letters.only_in_replay, letters.first_seq) == (0, 1, first)


def test_a_deleted_watermark_row_is_only_in_the_replay(spark, lake, policy):
    last = _read(spark, lake, "production", "watermarks").agg(F.max("seq")).first()[0]
    _copy_with(spark, lake, "lost-watermark", "watermarks", lambda df: df.where(F.col("seq") != last))

    report = verify(spark, lake, Job.spec(policy), target="lost-watermark")

    steps = {t.table: t for t in report.tables}["watermarks"]
    assert (steps.only_in_target, steps.only_in_replay, steps.first_seq) == (0, 1, last)


def test_a_tampered_metric_in_a_verified_range_is_named_with_its_hour(spark, lake, policy):
    hour = F.col("hour") == F.lit(SECOND_HOUR).cast("timestamp")
    _copy_with(spark, lake, "tampered-metric", "metrics", lambda df: df.withColumn(
        "events", F.when(hour & (F.col("partition") == 0), F.col("events") + 1).otherwise(F.col("events"))))

    report = verify(spark, lake, Job.spec(policy), start=SECOND_HOUR, target="tampered-metric")

    by = {t.table: t for t in report.tables}
    assert [t for t in by if not by[t].identical] == ["metrics"], report.text()
    assert (by["metrics"].only_in_target, by["metrics"].only_in_replay) == (1, 1)
    assert report.hours == [SECOND_HOUR]


def _replay_cli(*args):
    return subprocess.run([sys.executable, "-m", "replay.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_cli_exits_0_on_the_untouched_production(lake, capsys):
    from replay.cli.main import main  # the command's code path in this process (its Spark session is running)

    assert main(["verify", "--lake", lake, "--policy", POLICY_FILE, "--from", SECOND_HOUR]) == 0
    assert "identical" in capsys.readouterr().out


def test_cli_exits_1_naming_the_difference_on_a_tampered_decision(spark, lake):
    stored = default_store().read(spark, target_dir(lake, "production").table("decisions"))  # its exceptions
    seq = stored.where("action != 'dropped'").agg(F.max("seq")).first()[0]
    _copy_with(spark, lake, "tampered-decision", "decisions", lambda df: df.withColumn(
        "action", F.when(F.col("seq") == seq, F.lit("dropped")).otherwise(F.col("action"))))

    bad = _replay_cli("verify", "--lake", lake, "--policy", POLICY_FILE, "--target", "tampered-decision")

    assert bad.returncode == 1, bad.stdout + bad.stderr[-2000:]
    assert "DIFFERENT" in bad.stdout
    assert f"decisions: 1 rows only in tampered-decision, 1 rows only in the replay; first differing seq {seq}" \
        in bad.stdout


def test_cli_exits_2_when_from_is_not_before_to(tmp_path):
    r = _replay_cli("verify", "--lake", str(tmp_path), "--policy", POLICY_FILE,
                    "--from", "2024-01-01T02:00:00Z", "--to", "2024-01-01T01:00:00Z")
    assert r.returncode == 2
    assert "--from 2024-01-01T02:00:00Z must be before --to 2024-01-01T01:00:00Z" in r.stderr
    assert "Traceback" not in r.stderr


def test_hash_and_verify_read_deletion_vectors(spark, lake, policy):
    """Rows deleted through a deletion vector (files unchanged, rows masked) are gone for hash and verify;
    a reader of the table's Parquet files would still see them."""
    from delta.tables import DeltaTable

    from replay.ops.hashing import table_digest, target_hash

    _copy_with(spark, lake, "dv", None, lambda df: df)
    path = target_dir(lake, "dv").table("decisions")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)")
    table = DeltaTable.forPath(spark, path)
    table.optimize().executeCompaction()
    stored = default_store().read(spark, path)  # the exceptions
    victims = [r["seq"] for r in stored.where(F.col("seq") % 3 == 0).select("seq").collect()]
    gone = F.col("seq").isin(victims)
    deleted = len(victims)
    table.delete(gone)
    table.optimize().executeCompaction()
    delete = table.history().where("operation = 'DELETE'").first()
    assert int(delete["operationMetrics"]["numDeletionVectorsAdded"]) > 0
    assert deleted > 0
    kept = _read(spark, lake, "production", "decisions").where(~(gone & exceptional()))
    assert table_digest(_read(spark, lake, "dv", "decisions")) == table_digest(kept)
    assert target_hash(spark, target_dir(lake, "dv")) != target_hash(spark, target_dir(lake, "production"))
    report = verify(spark, lake, Job.spec(policy), target="dv")
    by_table = {t.table: t for t in report.tables}
    assert (by_table["decisions"].only_in_target, by_table["decisions"].only_in_replay) == (0, deleted)
    assert all(t.only_in_target == t.only_in_replay == 0 for t in report.tables if t.table != "decisions")
