"""Replays are a pure function of the journal and the policy: same hash on re-runs, shuffle settings and
replay ranges; conservation of events (spec section 7); the hash sees tampering. The decisions table, which
every other output is computed from, carries each journal row's key, value and arrival."""
from __future__ import annotations

import os

import pytest
from pyspark.sql import functions as F

from replay.io import journal
from replay.io.journal import ingest
from replay.io.lake import OUTPUT_TABLES
from replay.io.store import default_store
from replay.model.durations import format_instant
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.generate import StreamSpec, generate
from replay.ops.hashing import HASHED, table_digest, target_hash
from replay.ops.run import run
from replay.ops import outputs
from tests.support import ROOT, target_dir
from tests.support.session_settings import production_settings

POLICY_FILE = os.path.join(ROOT, "infra", "policies", "production.yaml")


@pytest.fixture(scope="module")
def stream(spark, tmp_path_factory):
    """3000 generated events over 4 partitions and 5 minutes of arrivals, ingested once; the production policy."""
    root = tmp_path_factory.mktemp("determinism")
    landing, lake = str(root / "landing"), str(root / "lake")
    summary = generate(landing, StreamSpec(3000, partitions=4, keys=40, files=4, seed=11, fmt="jsonl", rate=10.0))
    ingest(spark, landing, lake)
    return {"lake": lake, "policy": Policy.from_yaml(POLICY_FILE), "summary": summary}


@pytest.fixture(scope="module")
def full(spark, stream):
    """The whole journal replayed into target `full` (with the session's 2 shuffle partitions); its hash."""
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    run(spark, stream["lake"], Job.spec(stream["policy"]), target="full")
    return target_hash(spark, target_dir(stream["lake"], "full"))


@pytest.fixture(scope="module")
def again(spark, stream, full):
    """The same replay run a second time, into target `again`, asked for its hash (`replay run --hash`)."""
    return run(spark, stream["lake"], Job.spec(stream["policy"]), target="again", hashed=True)


def test_a_replay_asked_for_its_hash_gives_the_hash_of_its_target(spark, stream, again):
    assert again.output_hash == target_hash(spark, target_dir(stream["lake"], "again"))


def test_a_range_replay_asked_for_its_hash_gives_the_hash_of_its_target(spark, stream):
    """A range replay hashes its target as `replay hash` does (no decided rows at hand stand for the whole target)."""
    middle = journal.read(spark, stream["lake"]).agg(F.percentile_approx(F.unix_micros("arrival_time"), 0.5)).first()[0]
    ranged = run(spark, stream["lake"], Job.spec(stream["policy"]), target="range-hashed", hashed=True,
                 start=format_instant(middle))
    assert ranged.seq_from and ranged.output_hash == target_hash(spark, target_dir(stream["lake"], "range-hashed"))


def _read(spark, lake, target, table):
    return outputs.read(spark, target_dir(lake, target), table)


def test_each_decision_carries_its_journal_rows_arrival_key_and_value(spark, stream, full):
    decisions = _read(spark, stream["lake"], "full", "decisions")
    rows = journal.read(spark, stream["lake"]).where(F.col("kind").isin("event", "clock"))
    joined = decisions.alias("d").join(rows.alias("j"), "seq")
    assert joined.count() == decisions.count() == rows.count()
    for c in ("partition", "offset", "arrival_time", "key", "value"):
        assert joined.where(~F.col(f"d.{c}").eqNullSafe(F.col(f"j.{c}"))).count() == 0, c


def test_without_substreams_the_partition_watermark_is_the_scope_watermark(spark, stream, full):
    assert not stream["policy"].substream_by
    decisions = _read(spark, stream["lake"], "full", "decisions")
    assert decisions.where(F.col("partition_watermark").isNotNull()).count() > 0
    assert decisions.where(~F.col("watermark").eqNullSafe(F.col("partition_watermark"))).count() == 0


def test_hash_is_64_hex_chars(full):
    assert len(full) == 64 and all(c in "0123456789abcdef" for c in full)


def test_running_twice_gives_the_same_hash(spark, stream, full, again):
    assert again.output_hash == full  # `full` was the first run


def test_generated_code_and_adaptive_plans_do_not_change_the_hash(spark, stream, full):
    """The test session runs interpreted, without adaptive plans (tests/support/session_settings.py); a local driver
    runs with both, and gives the same hash."""
    with production_settings(spark):
        assert spark.conf.get("spark.sql.adaptive.enabled") == "true"
        run(spark, stream["lake"], Job.spec(stream["policy"]), target="production_settings")
    assert target_hash(spark, target_dir(stream["lake"], "production_settings")) == full


def test_shuffle_partitions_do_not_change_the_hash(spark, stream, full):
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "7")
    try:
        run(spark, stream["lake"], Job.spec(stream["policy"]), target="shuffle7")
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    assert target_hash(spark, target_dir(stream["lake"], "shuffle7")) == full


def test_events_are_conserved(spark, stream, full):
    lake, policy = stream["lake"], stream["policy"]
    assert policy.window is not None and policy.window.kind == "tumbling"
    decisions = _read(spark, lake, "full", "decisions")
    windows = _read(spark, lake, "full", "windows")
    dead = _read(spark, lake, "full", "dead_letters")
    journal_events = journal.read(spark, lake).where("kind = 'event'").count()
    d = decisions.where("kind = 'event'").agg(
        F.count("*").alias("events"),
        F.count(F.when(F.col("action") == "dropped", 1)).alias("dropped"),
        F.count(F.when(F.col("action") == "quarantined", 1)).alias("quarantined"),
    ).first()
    windowed = windows.agg(F.sum("count")).first()[0]
    window_closed = dead.where("reason = 'window_closed'").count()
    # kept events whose timestamp falls in no window (none with tumbling windows, counted all the same)
    w = policy.window
    ts = F.unix_micros("timestamp") - F.lit(w.offset)
    unwindowed = decisions.where(F.col("timestamp").isNotNull() & (F.pmod(ts, F.lit(w.hop)) >= w.size)).count()
    assert d["events"] == journal_events == stream["summary"]["events"] - stream["summary"]["malformed_by_kind"][
        "broken_line"]
    assert d["dropped"] > 0, "the stream should have early events for the policy to drop"
    assert d["events"] == windowed + d["dropped"] + d["quarantined"] + window_closed + unwindowed


def test_dead_letters_are_the_dropped_and_quarantined_events(spark, stream, full):
    lake = stream["lake"]
    decisions = _read(spark, lake, "full", "decisions")
    dead = _read(spark, lake, "full", "dead_letters")
    lost = {(r["seq"], r["partition"], r["offset"]) for r in
            decisions.where(F.col("action").isin("dropped", "quarantined")).collect()}
    letters = {(r["seq"], r["partition"], r["offset"]) for r in
               dead.where(F.col("reason").isin("early", "late", "out_of_order", "invalid_event_time")).collect()}
    assert lost and letters == lost


def test_replaying_ranges_rewrites_the_same_outputs(spark, stream, full):
    """A bounded range, then one to the end: every table (watermarks and metrics too) as the whole replay's."""
    lake, policy = stream["lake"], stream["policy"]
    bounds = journal.read(spark, lake).agg(F.min(F.unix_micros("arrival_time")).alias("lo"),
                                           F.max(F.unix_micros("arrival_time")).alias("hi")).first()
    third = (bounds["hi"] - bounds["lo"]) // 3
    run(spark, lake, Job.spec(policy), target="ranged")
    bounded = run(spark, lake, Job.spec(policy), target="ranged", start=format_instant(bounds["lo"] + third),
                  end=format_instant(bounds["lo"] + 2 * third))
    assert bounded.seq_from > 0 and bounded.seq_to is not None
    rest = run(spark, lake, Job.spec(policy), target="ranged", start=format_instant(bounds["lo"] + 2 * third))
    assert rest.seq_from == bounded.seq_to and rest.seq_to is None
    assert _digests(spark, lake, "ranged") == _digests(spark, lake, "full")
    assert target_hash(spark, target_dir(lake, "ranged")) == full


def _digests(spark, lake, target):
    """Every output table's digest (watermarks and metrics included): what a target holds, row for row."""
    return {name: table_digest(_read(spark, lake, target, name)) for name in OUTPUT_TABLES}


def test_the_hash_covers_every_output_table():
    assert set(HASHED) == set(OUTPUT_TABLES)


def test_tampering_with_one_window_changes_the_hash(spark, stream, full):
    lake, store = stream["lake"], default_store()
    for name in HASHED:  # an exact copy of the full run's outputs hashes the same...
        store.write(_read(spark, lake, "full", name), target_dir(lake, "tampered").table(name), mode="overwrite")
    assert target_hash(spark, target_dir(lake, "tampered")) == full
    windows = _read(spark, lake, "full", "windows")
    first = windows.orderBy("window_start", "key").first()
    one = (F.col("window_start") == F.lit(first["window_start"])) & F.col("key").eqNullSafe(F.lit(first["key"]))
    assert windows.where(one).count() == 1
    store.write(windows.withColumn("count", F.when(one, F.col("count") + 1).otherwise(F.col("count"))),
                target_dir(lake, "tampered").table("windows"), mode="overwrite")
    tampered = _read(spark, lake, "tampered", "windows")
    assert tampered.count() == windows.count()
    assert tampered.agg(F.sum("count")).first()[0] == windows.agg(F.sum("count")).first()[0] + 1
    assert target_hash(spark, target_dir(lake, "tampered")) != full  # ...and one changed count does not
