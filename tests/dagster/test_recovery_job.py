"""The daily recovery of the spec's job (the factory's `default_recovery`, as every job's): run on a production
with one tampered hour, it repairs exactly that hour, puts the diff in the run's metadata, and `replay verify`
passes afterwards; its schedule covers the day before."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import dagster as dg
import pytest
from pyspark.sql import functions as F

from orchestration.recovery import job_recovery
from orchestration.resources import RetraceResource
from replay.io.journal import ingest
from replay.io.store import default_store
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.generate import StreamSpec, generate
from replay.ops.run import run
from replay.ops.verify import verify
from tests.support import POLICY_FILE, hours_from, target_dir
from replay.ops import outputs

TAMPERED_HOUR = "2024-01-01T01:00:00Z"
SPEC = Job.spec(Policy.from_yaml(POLICY_FILE))
# partitions that start at the tampered hour: the verified day begins before them, the repaired hour is one
RECOVERY = job_recovery(SPEC, hours_from(TAMPERED_HOUR))
OP = "default_recover_recent_hours"


@pytest.fixture(scope="module")
def tampered(spark, tmp_path_factory):
    """1500 events over ~1h25 of arrivals replayed into production; then one window emitted in the second
    hour gets count + 1, as a bad write would leave it."""
    root = tmp_path_factory.mktemp("recovery")
    landing, lake = str(root / "landing"), str(root / "lake")
    generate(landing, StreamSpec(1500, partitions=3, keys=30, files=3, seed=5, rate=0.3))
    ingest(spark, landing, lake)
    run(spark, lake, SPEC)
    store = default_store()
    path = target_dir(lake, "production").table("windows")
    windows = store.read(spark, path)
    arrivals = outputs.read(spark, target_dir(lake, "production"), "decisions").select(
        F.col("seq").alias("emitted_at"), "arrival_time")
    in_hour = F.col("arrival_time") >= F.lit(TAMPERED_HOUR).cast("timestamp")
    victim = (windows.join(arrivals, "emitted_at").where(in_hour)
              .orderBy("emitted_at", "key").first())
    one = (F.col("window_start") == F.lit(victim["window_start"])) & (F.col("key") == F.lit(victim["key"]))
    store.write(windows.withColumn("count", F.when(one, F.col("count") + 1).otherwise(F.col("count"))), path,
                mode="overwrite")
    return {"lake": lake, "landing": landing, "one": one, "count": victim["count"]}


@pytest.fixture(scope="module")
def recovered(tampered):
    instance = dg.DagsterInstance.ephemeral()
    result = RECOVERY.job.execute_in_process(
        run_config={"ops": {OP: {"config": {"end": "2024-01-01T02:00:00Z", "hours": 24}}}},
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
    assert json.loads(result.output_for_node(OP)) == diff
    tags = instance.get_run_by_id(result.run_id).tags
    assert (tags["retrace/differing_hours"], tags["retrace/repaired_hours"], tags["retrace/verified"]) == (
        "1", "1", "true")


def test_the_repaired_partitions_are_materialized(recovered):
    result, _ = recovered
    events = result.asset_materializations_for_node(OP)
    assert sorted((m.asset_key.to_user_string(), m.partition) for m in events) == sorted(
        (f"default/{name}", "2024-01-01-01:00") for name in ("decisions", "windows", "dead_letters", "watermarks",
                                                             "metrics"))


def test_verify_passes_after_recovery(spark, tampered, recovered):
    report = verify(spark, tampered["lake"], SPEC)
    assert report.identical, report.text()
    windows = default_store().read(spark, target_dir(tampered["lake"], "production").table("windows"))
    assert windows.where(tampered["one"]).first()["count"] == tampered["count"]


def test_the_schedule_verifies_the_24_hours_before_midnight():
    tick = datetime(2024, 3, 5, 0, 30, tzinfo=timezone.utc)
    with dg.build_schedule_context(scheduled_execution_time=tick) as context:
        request = RECOVERY.schedule.evaluate_tick(context).run_requests[0]
    assert request.run_config == {"ops": {OP: {"config": {"end": "2024-03-05T00:00:00Z", "hours": 24}}}}
    assert RECOVERY.schedule.cron_schedule == "30 0 * * *"
    assert RECOVERY.schedule.execution_timezone == "UTC"
