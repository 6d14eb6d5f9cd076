"""The Dagster `live` job runs the live streaming job: it drains the landing folder into production
outputs equal to a replay of its journal, with the batches and their lag in the run's metadata and on the
journal asset, and alerts diagnostics through the alert sinks; the sensors then report the hours its batches wrote
as materializations of the outputs, and observe its lag and diagnostics tables."""
from __future__ import annotations

import dagster as dg
import pytest

from orchestration.live import live_job
from orchestration.live_tables import live_tables_sensor
from orchestration.outside_runs import outside_runs_sensor
from orchestration.resources import EmailAlertSink, LogFileAlertSink, RetraceResource, WebhookAlertSink
from replay.model.jobs import Job
from replay.ops.generate import StreamSpec, generate
from replay.ops.hashing import target_hash
from replay.ops.run import run
from replay.io.lake import OUTPUT_TABLES
from tests.support import hours_from, target_dir
from tests.support.receivers import HttpReceiver


@pytest.fixture(scope="module")
def drained(spark, tmp_path_factory):
    """The Dagster live job's run over 1500 events arriving in 75 s from 2024-01-01T00:00, on 4 partitions."""
    tmp_path = tmp_path_factory.mktemp("live-dagster")
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    generate(landing, StreamSpec(1500, partitions=4, keys=20, files=3, seed=5, rate=20.0))
    retrace = RetraceResource(lake=lake, landing=landing, partitions=4)
    receiver = HttpReceiver()
    try:
        result = live_job.execute_in_process(resources={
            "retrace": retrace, "alert_webhook": WebhookAlertSink(url=receiver.url), "alert_email": EmailAlertSink(),
            "alert_log": LogFileAlertSink(path=str(tmp_path / "alerts.jsonl"))})
        posts = [p["json"]["text"] for p in receiver.drain()]
    finally:
        receiver.close()
    return result, posts, retrace


def test_the_live_job_drains_the_landing_into_outputs_equal_to_a_replay(spark, drained):
    result, posts, retrace = drained
    lake = retrace.lake
    assert result.success
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    metadata = output.event_specific_data.metadata
    assert metadata["summary"].data["rows"] == 1500
    assert metadata["backlog"].value == 0 and "| batch | trigger |" in metadata["lag"].value
    (observed,) = [e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]
    assert observed.asset_key.to_user_string() == "journal"
    assert sum("late input events" in p for p in posts) == 1, posts  # the generated stream has late events
    run(spark, lake, Job.spec(retrace.policy()), target="replayed")
    assert target_hash(spark, target_dir(lake, "production")) == target_hash(spark, target_dir(lake, "replayed"))


def _evaluate(sensor, retrace, cursor=None) -> dg.SensorResult:
    return sensor(dg.build_sensor_context(cursor=cursor, resources={"retrace": retrace}))


def _batches(result) -> int:
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    return output.event_specific_data.metadata["batches"].value


def test_the_hours_the_live_batches_wrote_are_reported_once_as_materializations(drained):
    result, _, retrace = drained
    sensor = outside_runs_sensor([Job.spec(retrace.policy())], hours_from())
    first = _evaluate(sensor, retrace)
    # every batch wrote the hour 00:00: one materialization of it per table, saying how many batches wrote it
    assert sorted((e.asset_key.path[-1], e.partition) for e in first.asset_events) == sorted(
        (table, "2024-01-01-00:00") for table in OUTPUT_TABLES)
    said = first.asset_events[0].metadata
    assert said["writer"].value == "replay stream" and said["commits"].value == _batches(result)
    assert "live job" in first.asset_events[0].description
    assert _evaluate(sensor, retrace, first.cursor).asset_events == []


def test_the_lag_and_diagnostics_tables_are_observed_with_their_rows_and_latest_values(drained):
    result, _, retrace = drained
    batches = _batches(result)
    observed = {e.asset_key.path[-1]: {k: v.value for k, v in e.metadata.items()}
                for e in _evaluate(live_tables_sensor(Job.spec(retrace.policy())), retrace).asset_events}
    lag, diagnostics = observed["lag"], observed["diagnostics"]
    assert (lag["rows"], lag["last_batch"]) == (4 * batches, batches - 1)  # a row per partition and batch (from 0)
    assert lag["max_processing_delay_s"] > 0 and lag["last_committed_at"].startswith("20")
    assert diagnostics["rows"] >= 1 and diagnostics["max_late_events_in_a_batch"] >= 1
