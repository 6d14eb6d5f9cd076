"""The Dagster `live` job runs the live streaming job: it drains the landing folder into production
outputs equal to a replay of its journal, with the batches and their lag in the run's metadata and on the
journal asset, and alerts diagnostics through the alert sinks."""
from __future__ import annotations

from orchestration.live import live_job
from orchestration.resources import EmailAlertSink, LogFileAlertSink, RetraceResource, WebhookAlertSink
from replay.model.jobs import Job
from replay.ops.generate import StreamSpec, generate
from replay.ops.hashing import target_hash
from replay.ops.run import run
from tests.support import target_dir
from tests.support.receivers import HttpReceiver


def test_the_live_job_drains_the_landing_into_outputs_equal_to_a_replay(spark, tmp_path):
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
