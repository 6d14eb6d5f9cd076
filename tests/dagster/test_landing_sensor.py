"""The landing sensor starts the live job when the landing folder changes, once per change, and never while
a live run is still in flight."""
from __future__ import annotations

import dagster as dg

from orchestration.live import landing_sensor
from orchestration.resources import RetraceResource
from replay.ops.generate import StreamSpec, generate


def _tick(instance, landing, cursor=None):
    with dg.build_sensor_context(instance=instance, cursor=cursor,
                                 resources={"retrace": RetraceResource(landing=str(landing))}) as context:
        result = landing_sensor.evaluate_tick(context)
    return result


def test_no_landing_files_is_a_skip(tmp_path):
    result = _tick(dg.DagsterInstance.ephemeral(), tmp_path / "empty")
    assert result.run_requests == [] and "no landing files" in result.skip_message


def test_new_landing_files_start_one_live_run_then_nothing_until_more_arrive(tmp_path):
    instance, landing = dg.DagsterInstance.ephemeral(), tmp_path / "landing"
    generate(str(landing), StreamSpec(100, partitions=2, keys=5, files=2, seed=1))
    first = _tick(instance, landing)
    [request] = first.run_requests
    assert request.job_name in (None, "live") and landing_sensor.job_name == "live"
    assert first.cursor and request.run_key == f"landing-{first.cursor}"

    again = _tick(instance, landing, cursor=first.cursor)
    assert again.run_requests == [] and again.skip_message == "no new landing data"

    generate(str(landing / "more"), StreamSpec(50, partitions=2, keys=5, files=1, seed=2))
    assert len(_tick(instance, landing, cursor=first.cursor).run_requests) == 1


def test_no_run_while_a_live_run_is_in_flight(tmp_path):
    instance, landing = dg.DagsterInstance.ephemeral(), tmp_path / "landing"
    generate(str(landing), StreamSpec(100, partitions=2, keys=5, files=2, seed=1))
    instance.add_run(dg.DagsterRun(job_name="live", run_id="in-flight", status=dg.DagsterRunStatus.STARTED))
    result = _tick(instance, landing)
    assert result.run_requests == [] and "in-flight" in result.skip_message
