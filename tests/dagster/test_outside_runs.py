"""Replays made outside Dagster (`replay run` in a shell) appear in Dagster: the sensor reports the hourly
partitions a run wrote as materializations of the job's output assets, once, and leaves Dagster's own runs out."""
from __future__ import annotations

import dagster as dg
import pytest

from orchestration.outside_runs import materializations, outside_runs_sensor
from orchestration.resources import RetraceResource
from replay.cli import main as cli
from replay.io.journal import ingest
from replay.io.lake import OUTPUT_TABLES
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.generate import StreamSpec, generate
from replay.ops.run import WRITER
from tests.support import POLICY_FILE

SPEC = Job.spec(Policy.from_yaml(POLICY_FILE))


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    """600 events over about 100 minutes of arrivals from 2024-01-01T00:00: the hours 00:00 and 01:00."""
    root = tmp_path_factory.mktemp("outside-runs")
    landing, lake = str(root / "landing"), str(root / "lake")
    generate(landing, StreamSpec(600, partitions=2, keys=10, files=2, seed=4, rate=0.1))
    ingest(spark, landing, lake)
    return lake


def _evaluate(lake, cursor=None) -> dg.SensorResult:
    context = dg.build_sensor_context(cursor=cursor, resources={
        "retrace": RetraceResource(lake=lake, landing=lake, policy_file=POLICY_FILE)})
    return outside_runs_sensor([SPEC])(context)


def test_a_cli_replay_of_a_range_is_reported_as_materializations_of_exactly_its_hours(lake, capsys):
    assert cli.main(["run", "--lake", lake, "--policy", POLICY_FILE, "--from", "2024-01-01T01:00:00Z",
                     "--to", "2024-01-01T02:00:00Z"]) == 0, capsys.readouterr().err
    result = _evaluate(lake)
    instance = dg.DagsterInstance.ephemeral()
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    for table in OUTPUT_TABLES:
        assert instance.get_materialized_partitions(dg.AssetKey(["default", table])) == {"2024-01-01-01:00"}


def test_a_run_already_reported_is_not_reported_again(lake, capsys):
    assert cli.main(["run", "--lake", lake, "--policy", POLICY_FILE]) == 0, capsys.readouterr().err
    first = _evaluate(lake)
    assert {e.partition for e in first.asset_events} == {"2024-01-01-00:00", "2024-01-01-01:00"}
    assert _evaluate(lake, cursor=first.cursor).asset_events == []


def test_a_replay_dagster_made_is_left_to_its_own_materializations():
    meta = {"writer": WRITER, "run": "dagster-0123456789ab", "hours": ["2024-01-01T00:00:00Z"] * 2}
    assert materializations(SPEC, meta) == []
    assert len(materializations(SPEC, {**meta, "run": "0123456789abcdef"})) == len(OUTPUT_TABLES)
