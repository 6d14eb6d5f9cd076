"""The daily recovery: its job, run on a production with one tampered hour, repairs exactly that hour, puts
the diff in the run's metadata, and `replay verify` passes afterwards; its schedule covers the day before."""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import dagster as dg
import pytest
from pyspark.sql import functions as F

from orchestration.recovery import recovery_job, recovery_schedule
from orchestration.resources import RetraceResource
from replay.cli.generate import generate
from replay.cli.runner import output_path, run
from replay.cli.verify import verify
from replay.io.journal import ingest
from replay.io.store import default_store
from replay.model.policy import Policy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICY_FILE = os.path.join(ROOT, "infra", "policies", "production.yaml")
TAMPERED_HOUR = "2024-01-01T01:00:00Z"


@pytest.fixture(scope="module")
def tampered(spark, tmp_path_factory):
    """1500 events over ~1h25 of arrivals replayed into production; then one window emitted in the second
    hour gets count + 1, as a bad write would leave it."""
    root = tmp_path_factory.mktemp("recovery")
    landing, lake = str(root / "landing"), str(root / "lake")
    generate(landing, 1500, partitions=3, keys=30, files=3, seed=5, rate=0.3)
    ingest(spark, landing, lake)
    run(spark, lake, Policy.from_yaml(POLICY_FILE))
    store = default_store()
    path = output_path(lake, "production", "windows")
    windows = store.read(spark, path)
    arrivals = store.read(spark, output_path(lake, "production", "decisions")).select(
        F.col("seq").alias("emitted_at"), "arrival_time")
    victim = (windows.join(arrivals, "emitted_at").where(F.col("arrival_time") >= F.lit(TAMPERED_HOUR).cast("timestamp"))
              .orderBy("emitted_at", "key").first())
    one = (F.col("window_start") == F.lit(victim["window_start"])) & (F.col("key") == F.lit(victim["key"]))
    store.write(windows.withColumn("count", F.when(one, F.col("count") + 1).otherwise(F.col("count"))), path,
                mode="overwrite")
    return {"lake": lake, "landing": landing, "one": one, "count": victim["count"]}


@pytest.fixture(scope="module")
def recovered(tampered):
    instance = dg.DagsterInstance.ephemeral()
    result = recovery_job.execute_in_process(
        run_config={"ops": {"recover_recent_hours": {"config": {"end": "2024-01-01T02:00:00Z", "hours": 24}}}},
        resources={"retrace": RetraceResource(lake=tampered["lake"], landing=tampered["landing"],
                                              policy_file=POLICY_FILE)},
        instance=instance)
    return result, instance


def _output_metadata(result) -> dict:
    [event] = [e for e in result.all_node_events if e.event_type_value == "STEP_OUTPUT"]
    return {k: v.value for k, v in event.step_output_data.metadata.items()}


def test_the_tampered_hour_is_found_and_repaired(recovered):
    result, _ = recovered
    assert result.success
    metadata = _output_metadata(result)
    assert metadata["differing_hours"] == [TAMPERED_HOUR]
    assert metadata["repaired_hours"] == [TAMPERED_HOUR]
    assert metadata["verified_after_repair"] is True


def test_the_diff_is_in_the_run_metadata(recovered):
    result, instance = recovered
    diff = _output_metadata(result)["diff"]
    assert diff["identical"] is False
    assert diff["tables"]["windows"]["only_in_target"] == 1 and diff["tables"]["windows"]["only_in_replay"] == 1
    assert diff["tables"]["decisions"]["only_in_target"] == 0
    assert json.loads(result.output_for_node("recover_recent_hours")) == diff
    tags = instance.get_run_by_id(result.run_id).tags
    assert (tags["retrace/differing_hours"], tags["retrace/repaired_hours"], tags["retrace/verified"]) == (
        "1", "1", "true")


def test_the_repaired_partitions_are_materialized(recovered):
    result, _ = recovered
    events = result.asset_materializations_for_node("recover_recent_hours")
    assert sorted((m.asset_key.to_user_string(), m.partition) for m in events) == sorted(
        (name, "2024-01-01-01:00") for name in ("decisions", "windows", "dead_letters", "watermarks", "metrics"))


def test_verify_passes_after_recovery(spark, tampered, recovered):
    report = verify(spark, tampered["lake"], Policy.from_yaml(POLICY_FILE))
    assert report.identical, report.text()
    windows = default_store().read(spark, output_path(tampered["lake"], "production", "windows"))
    assert windows.where(tampered["one"]).first()["count"] == tampered["count"]


def test_the_schedule_verifies_the_24_hours_before_midnight():
    tick = datetime(2024, 3, 5, 0, 30, tzinfo=timezone.utc)
    with dg.build_schedule_context(scheduled_execution_time=tick) as context:
        request = recovery_schedule.evaluate_tick(context).run_requests[0]
    assert request.run_config == {"ops": {"recover_recent_hours": {"config": {"end": "2024-03-05T00:00:00Z",
                                                                              "hours": 24}}}}
    assert recovery_schedule.cron_schedule == "30 0 * * *"
    assert recovery_schedule.execution_timezone == "UTC"
