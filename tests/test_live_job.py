"""The Dagster `live` job runs the live streaming job: it drains the landing folder into production
outputs equal to a replay of its journal, with the batches in the run's metadata."""
from __future__ import annotations

from orchestration.live import live_job
from orchestration.resources import RetraceResource
from replay import runner
from replay.generate import generate
from replay.hashing import target_hash


def test_the_live_job_drains_the_landing_into_outputs_equal_to_a_replay(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    generate(landing, 1500, partitions=4, keys=20, files=3, seed=5, rate=20.0)
    retrace = RetraceResource(lake=lake, landing=landing, partitions=4)
    result = live_job.execute_in_process(resources={"retrace": retrace})
    assert result.success
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    assert output.event_specific_data.metadata["summary"].data["rows"] == 1500
    runner.run(spark, lake, retrace.policy(), target="replayed")
    assert target_hash(spark, lake, "production") == target_hash(spark, lake, "replayed")
