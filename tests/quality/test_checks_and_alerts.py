"""The asset checks in Dagster runs over an hourly partition range, and the failed-check sensor: checks
pass on a clean generated stream; on a stream with many late events and on tampered outputs they fail
and an alert naming asset, partition, check and numbers reaches a local HTTP receiver, once."""
from __future__ import annotations

import json

import dagster as dg
import pytest
from pyspark.sql import functions as F

from orchestration.alerting import check_failure_alert
from replay.io.lake import OUTPUT_TABLES as TABLES
from replay.io.store import default_store
from tests.support import copy_table, target_dir
from tests.support.quality_location import CHECKS, FIRST_HOUR, LAST_HOUR, definitions, materialize

PARTITION = f"{FIRST_HOUR}...{LAST_HOUR}"
CHECK_NAMES = {key.name for check in CHECKS for key in check.check_keys}


def _tick(stream, sinks, cursor=None):
    """One evaluation of the failed-check sensor against the stream's instance; returns the new cursor."""
    defs = definitions(stream.retrace, sinks)
    context = dg.build_sensor_context(instance=stream.instance, cursor=cursor, resources=sinks, definitions=defs)
    check_failure_alert(context)
    return context.cursor


def test_every_check_runs_on_every_output_asset_of_the_spec_job(clean):
    assert set(clean.evaluations()) == CHECK_NAMES and "conservation" in CHECK_NAMES
    assert {e.asset_key.to_user_string() for e in clean.result.get_asset_check_evaluations()} == {
        "default/metrics", "default/decisions", "default/windows", "default/dead_letters", "default/watermarks"}


def test_checks_pass_on_a_clean_stream(clean):
    failed = {name: e.description for name, e in clean.evaluations().items() if not e.passed}
    assert failed == {}


def test_check_metadata_shows_the_counts_and_the_partition_range(clean):
    evaluations = clean.evaluations()
    late = evaluations["late_events"].metadata
    assert late["partition"].value == PARTITION
    assert late["range"].value == "[2024-01-01T00:00:00+00:00, 2024-01-01T02:00:00+00:00)"
    assert late["events"].value == clean.summary["events"]
    assert 0 < late["late"].value < clean.summary["events"] * 0.1
    conservation = evaluations["conservation"].metadata
    assert conservation["unaccounted"].value == 0
    assert conservation["events"].value == conservation["windowed"].value + conservation["dropped"].value + \
        conservation["quarantined"].value + conservation["window_closed"].value + conservation["unwindowed"].value
    assert evaluations["windows_emitted_once"].metadata["missing_windows"].value == 0
    assert evaluations["windows_emitted_once"].metadata["windows_due"].value > 0
    assert evaluations["watermark_delay"].metadata["max_delay_s"].value > 0


def test_no_alert_for_a_clean_stream(clean, sinks, http_receiver):
    cursor = _tick(clean, sinks)
    assert cursor is not None  # the evaluations were read...
    assert http_receiver.drain() == []  # ...and none alerted


def test_many_late_events_fail_the_late_events_check_with_counts(late):
    evaluation = late.evaluations()["late_events"]
    assert not evaluation.passed
    assert evaluation.severity == dg.AssetCheckSeverity.WARN
    assert evaluation.metadata["late"].value > 0.5 * evaluation.metadata["events"].value
    assert evaluation.metadata["late_max_fraction"].value > 0.5
    assert "late events are at most 0.1" in evaluation.description


def test_many_late_events_keep_the_outputs_complete(late):
    evaluations = late.evaluations()
    assert all(evaluations[n].passed for n in ("conservation", "windows_emitted_once", "window_rows_unique",
                                                "dead_letters_match"))


def test_a_failed_check_alerts_the_webhook_once_naming_asset_partition_check_and_numbers(late, sinks, http_receiver):
    cursor = _tick(late, sinks)
    posts = http_receiver.drain()
    alerts = [p["json"] for p in posts if "late_events" in p["json"]["text"]]
    assert len(alerts) == 1
    text = alerts[0]["text"]
    assert "metrics" in text and PARTITION in text and "late_events" in text
    late_count = late.evaluations()["late_events"].metadata["late"].value
    assert f"late: {late_count}" in text
    fields = " ".join(f["text"] for b in alerts[0]["blocks"] if b["type"] == "section" for f in b.get("fields", []))
    assert "*Asset*\ndefault/metrics" in fields and f"*Partition*\n{PARTITION}" in fields
    assert "*Check*\nlate_events" in fields
    assert _tick(late, sinks, cursor) == cursor  # a second tick finds nothing new...
    assert http_receiver.drain() == []  # ...and sends nothing


@pytest.fixture(scope="module")
def tampered(spark, clean):
    """Copies of the clean run's outputs: `dup-window` with one window row twice, `lost-decision` with
    one dropped event's decision row deleted."""
    production = target_dir(clean.lake, "production")
    for target in ("dup-window", "lost-decision"):
        for name in TABLES:
            copy_table(spark, production.table(name), target_dir(clean.lake, target).table(name))
    copy_table(spark, production.table("windows"), target_dir(clean.lake, "dup-window").table("windows"),
               lambda windows: windows.unionByName(windows.orderBy("window_start", "key").limit(1)))
    stored = default_store().read(spark, production.table("decisions"))  # a dropped event's is a stored row
    victim = stored.where("action = 'dropped'").agg(F.min("seq")).first()[0]
    copy_table(spark, production.table("decisions"), target_dir(clean.lake, "lost-decision").table("decisions"),
               lambda decisions: decisions.where(F.col("seq") != victim))
    return clean


def _evaluations(result):
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def _alerts_of(receiver, run_id: str) -> list[dict]:
    """The webhook posts about one run (the instance is shared with earlier tests)."""
    return [p["json"] for p in receiver.drain() if run_id in p["json"]["text"]]


def test_a_duplicated_window_row_fails_the_window_checks_and_alerts(tampered, sinks, http_receiver):
    result = materialize(tampered.retrace, tampered.instance, target="dup-window", checks_only=True)
    assert result.success
    evaluations = _evaluations(result)
    assert not evaluations["window_rows_unique"].passed
    assert evaluations["window_rows_unique"].metadata["duplicated_windows"].value == 1
    assert evaluations["window_rows_unique"].severity == dg.AssetCheckSeverity.ERROR
    assert not evaluations["windows_emitted_once"].passed
    assert not evaluations["conservation"].passed  # the duplicate counts its events twice
    assert evaluations["late_events"].passed and evaluations["dead_letters_match"].passed
    _tick(tampered, sinks)
    texts = [a["text"] for a in _alerts_of(http_receiver, result.run_id)]
    assert len(texts) == 3  # window_rows_unique, windows_emitted_once, conservation
    unique = [t for t in texts if "window_rows_unique" in t]
    assert len(unique) == 1
    assert "windows" in unique[0] and PARTITION in unique[0] and "duplicated_windows: 1" in unique[0]
    assert "target dup-window" in unique[0]


def test_a_deleted_decision_row_fails_conservation_and_dead_letters_and_alerts(tampered, sinks, http_receiver):
    result = materialize(tampered.retrace, tampered.instance, target="lost-decision", checks_only=True)
    evaluations = _evaluations(result)
    conservation = evaluations["conservation"]
    assert not conservation.passed
    assert conservation.metadata["unaccounted"].value == 1 and conservation.metadata["hours_unbalanced"].value == 1
    assert not evaluations["dead_letters_match"].passed
    assert evaluations["dead_letters_match"].metadata["letters_without_event"].value == 1
    assert evaluations["window_rows_unique"].passed and evaluations["windows_emitted_once"].passed
    _tick(tampered, sinks)
    alerts = [a for a in _alerts_of(http_receiver, result.run_id) if "conservation" in a["text"]]
    assert len(alerts) == 1
    assert "decisions" in alerts[0]["text"] and "unaccounted: 1" in alerts[0]["text"]


def test_checks_of_one_hourly_partition_cover_that_hour(clean):
    result = materialize(clean.retrace, clean.instance, checks_only=True, tags={"dagster/partition": FIRST_HOUR})
    evaluations = _evaluations(result)
    assert all(e.passed for e in evaluations.values()), {n: e.description for n, e in evaluations.items()}
    late = evaluations["late_events"].metadata
    assert late["partition"].value == FIRST_HOUR and late["hours"].value and len(late["hours"].value) == 1
    assert late["events"].value < clean.summary["events"]
    assert evaluations["windows_emitted_once"].metadata["seq_to"].value > 0  # the hour ends inside the journal


def test_thresholds_and_severity_come_from_run_config(clean):
    result = materialize(clean.retrace, clean.instance, checks_only=True, checks=("watermark_delay", "late_events"),
                         check_config={
        "watermark_delay": {"max_watermark_delay": "30s", "severity": "ERROR"},
        "late_events": {"late_max_count": 3}})
    evaluations = _evaluations(result)
    delay = evaluations["watermark_delay"]
    assert not delay.passed and delay.severity == dg.AssetCheckSeverity.ERROR
    assert delay.metadata["bound_s"].value == 30.0 and delay.metadata["hours_over_bound"].value >= 1
    assert not evaluations["late_events"].passed and "at most 3 late events per hour" in \
        evaluations["late_events"].description


def test_a_bad_threshold_fails_the_check_run_naming_the_field(clean):
    result = materialize(clean.retrace, clean.instance, checks_only=True, checks=("late_events",),
                         check_config={"late_events": {"late_max_fraction": 1.5}})
    assert not result.success
    failures = [e for e in result.all_events if e.is_step_failure]
    assert any("late_max_fraction: 1.5" in json.dumps(str(e.event_specific_data.error)) for e in failures)
