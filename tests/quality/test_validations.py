"""The GX validations as plain functions over a lake, a target and an hour range: thresholds are a
validated value, Data Docs land in the lake, and each validation sees the tampering it is for."""
from __future__ import annotations

import os

import pytest
from pyspark.sql import functions as F

from assets import quality
from assets.quality_tables import Target
from replay.io.lake import OUTPUT_TABLES as TABLES
from replay.io.store import default_store
from replay.model.jobs import Job
from replay.model.policy import Policy
from tests.support import copy_table, target_dir
from tests.support.quality_location import POLICY_FILE

SPEC = Job.spec(Policy.from_yaml(POLICY_FILE))

HOUR_0 = ("2024-01-01T00:00:00Z", "2024-01-01T01:00:00Z")
HOUR_1 = ("2024-01-01T01:00:00Z", "2024-01-01T02:00:00Z")


def test_thresholds_name_the_bad_field_and_value():
    with pytest.raises(ValueError, match=r"thresholds.late_max_fraction: 1.5 must be a number from 0 to 1"):
        quality.Thresholds.from_flat({"late_max_fraction": 1.5})
    with pytest.raises(ValueError, match=r"thresholds.dead_letters_max_count: -1 must be a whole number >= 0"):
        quality.Thresholds.from_flat({"dead_letters_max_count": -1})
    with pytest.raises(ValueError, match=r"max_watermark_delay: '5 minutes' is not a duration"):
        quality.Thresholds.from_flat({"max_watermark_delay": "5 minutes"})
    with pytest.raises(ValueError, match=r"thresholds: unknown setting 'lateness_max_fraction'"):
        quality.Thresholds.from_flat({"lateness_max_fraction": 0.1})


def test_thresholds_are_frozen_with_defaults_for_what_is_not_set():
    t = quality.Thresholds.from_flat({"late_max_count": 10, "max_watermark_delay": "2m"})
    assert t.late == quality.Limit(max_fraction=0.10, max_count=10)
    assert t.max_watermark_delay == 120_000_000 and t.early == quality.Thresholds().early
    with pytest.raises(AttributeError):
        t.min_events = 1


def test_a_range_must_not_be_empty(spark, tmp_path):
    with pytest.raises(ValueError, match="start: 2024-01-01T01:00:00Z must be before end: 2024-01-01T00:00:00Z"):
        Target(spark, str(tmp_path), "production", SPEC, *reversed(HOUR_0))


def test_data_docs_site_is_built_into_the_lake(clean):
    index = quality.docs_index(clean.lake)
    assert index.startswith(os.path.join(clean.lake, "quality")) and os.path.exists(index)
    site = os.path.dirname(index)
    with open(index) as f:
        listing = f.read()
    for name in quality.VALIDATIONS:  # suite `<check>.<job>.<target>`: a page per suite and per validation
        assert os.path.exists(os.path.join(site, "expectations", name, "default", "production.html"))
        assert os.listdir(os.path.join(site, "validations", name, "default", "production"))
        assert f"validations/{name}/default/production/" in listing


def test_conservation_is_stated_for_tumbling_windows_only(spark, clean):
    hopping = Policy.from_dict({**Policy.from_yaml(POLICY_FILE).to_dict(),
                                "window": {"kind": "hopping", "size": "2m", "hop": "1m"}})
    outcome = quality.conservation(Target(spark, clean.lake, "production", Job.spec(hopping)))
    assert outcome.passed and not outcome.applicable and "tumbling" in outcome.failures[0]


def test_conservation_and_window_counts_hold_for_a_users_job_whose_kept_events_all_reach_its_windows(spark, clean):
    from replay.ops.run import run

    job = Job.define("plain", Policy.from_yaml(POLICY_FILE), aggregates={"readings": "count(*)", "top": "max(value)"})
    run(spark, clean.lake, job)
    t = Target(spark, clean.lake, "production", job)
    outcomes = {name: quality.VALIDATIONS[name](t) for name in ("conservation", "windows_emitted_once")}
    assert {name: o.failures for name, o in outcomes.items() if not o.passed} == {}
    assert outcomes["conservation"].applicable and outcomes["conservation"].counts["windowed"] > 0
    filtered = Job.define("filtered", job.policy, where="value > 0", aggregates={"readings": "count(*)"})
    assert not quality.conservation(Target(spark, clean.lake, "production", filtered)).applicable


def test_every_validation_passes_on_the_second_hour_alone(spark, clean):
    t = Target(spark, clean.lake, "production", SPEC, *HOUR_1)
    outcomes = {name: validate(t) for name, validate in quality.VALIDATIONS.items()}
    assert {name: o.failures for name, o in outcomes.items() if not o.passed} == {}
    windows = outcomes["windows_emitted_once"].counts
    assert windows["seq_from"] > 0 and windows["windows_due"] == windows["windows_in_range"] > 0
    assert outcomes["conservation"].counts["hours"] == 1


@pytest.fixture(scope="module")
def copies(spark, clean):
    """Two copies of the clean run's outputs: `recount` with one window's count raised by one, `no-letter`
    with one early dead letter deleted."""
    store = default_store()
    read = lambda target, name: store.read(spark, target_dir(clean.lake, target).table(name))  # noqa: E731
    for target in ("recount", "no-letter"):
        for name in TABLES:
            copy_table(spark, target_dir(clean.lake, "production").table(name),
                       target_dir(clean.lake, target).table(name))
    windows = read("production", "windows")
    first = windows.where(F.col("emitted_at").isNotNull()).orderBy("emitted_at", "key").first()
    one = (F.col("window_start") == F.lit(first["window_start"])) & (F.col("key") == F.lit(first["key"]))
    store.write(windows.withColumn("count", F.when(one, F.col("count") + 1).otherwise(F.col("count"))),
                target_dir(clean.lake, "recount").table("windows"), mode="overwrite")
    letters = read("production", "dead_letters")
    victim = letters.where("reason = 'early'").agg(F.min("seq")).first()[0]
    store.write(letters.where(F.col("seq") != victim), target_dir(clean.lake, "no-letter").table("dead_letters"),
                mode="overwrite")
    return clean


def _target(spark, stream, target, start=None, end=None) -> Target:
    return Target(spark, stream.lake, target, SPEC, start, end)


def test_a_changed_window_count_fails_windows_emitted_once_only(spark, copies):
    t = _target(spark, copies, "recount", *HOUR_0)
    outcome = quality.windows_emitted_once(t)
    assert not outcome.passed
    assert outcome.counts["miscounted_windows"] == 1 and outcome.counts["missing_windows"] == 0
    assert outcome.counts["events_in_range_windows"] == outcome.counts["events_due"] + 1
    assert any(f.startswith("miscounted") for f in outcome.failures)
    assert quality.conservation(t).passed  # events are placed by their windows' rows, not by the count


def test_a_deleted_dead_letter_fails_dead_letters_match(spark, copies):
    outcome = quality.dead_letters_match(_target(spark, copies, "no-letter"))
    assert not outcome.passed
    assert outcome.counts["lost_without_letter"] == 1 and outcome.counts["letters_without_event"] == 0
    assert outcome.counts["dead_letters"] == outcome.counts["lost_events"] - 1
