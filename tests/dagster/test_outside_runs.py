"""Replays made outside Dagster (`replay run` in a shell) appear in Dagster: the sensor reports the hourly
partitions a run wrote as materializations of the job's output assets, once, and leaves Dagster's own runs out;
the code location's partitions start at the journal's first arrival (or a configured time)."""
from __future__ import annotations

import json
import os
import runpy
from datetime import datetime, timezone

import dagster as dg
import pytest

from assets.partitions import partitions_start
from orchestration.outside_runs import outside_runs_sensor, written
from orchestration.resources import RetraceResource
from replay.cli import main as cli
from replay.io.journal import ingest
from replay.io.lake import OUTPUT_TABLES, Lake
from replay.io.store import least_value
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.catalog import DEFAULT_FOLDER
from replay.ops.generate import StreamSpec, generate
from replay.ops.run import WRITER
from tests.support import POLICY_FILE, ROOT, hours_from

SPEC = Job.spec(Policy.from_yaml(POLICY_FILE))
START = "2025-03-04T05:00:00Z"  # the generated arrivals' start: a lake of 2025, not of the old fixed 2024-01-01
HOURS = hours_from(START)


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    """600 events over about 100 minutes of arrivals from 2025-03-04T05:00: the hours 05:00 and 06:00."""
    root = tmp_path_factory.mktemp("outside-runs")
    landing, lake = str(root / "landing"), str(root / "lake")
    generate(landing, StreamSpec(600, partitions=2, keys=10, files=2, seed=4, rate=0.1, start=START))
    ingest(spark, landing, lake)
    return lake


def _evaluate(lake, cursor=None, partitions=HOURS) -> dg.SensorResult:
    context = dg.build_sensor_context(cursor=cursor, resources={
        "retrace": RetraceResource(lake=lake, landing=lake, policy_file=POLICY_FILE)})
    return outside_runs_sensor([SPEC], partitions)(context)


def test_a_cli_replay_of_a_range_is_reported_as_materializations_of_exactly_its_hours(lake, capsys):
    assert cli.main(["run", "--lake", lake, "--policy", POLICY_FILE, "--from", "2025-03-04T06:00:00Z",
                     "--to", "2025-03-04T07:00:00Z"]) == 0, capsys.readouterr().err
    result = _evaluate(lake)
    instance = dg.DagsterInstance.ephemeral()
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    for table in OUTPUT_TABLES:
        assert instance.get_materialized_partitions(dg.AssetKey(["default", table])) == {"2025-03-04-06:00"}


def test_a_run_already_reported_is_not_reported_again(lake, capsys):
    assert cli.main(["run", "--lake", lake, "--policy", POLICY_FILE]) == 0, capsys.readouterr().err
    first = _evaluate(lake)
    assert {e.partition for e in first.asset_events} == {"2025-03-04-05:00", "2025-03-04-06:00"}
    assert _evaluate(lake, cursor=first.cursor).asset_events == []


def test_hours_before_the_partitions_start_are_left_out(lake):
    reported = _evaluate(lake, partitions=hours_from("2025-03-04T06:00:00Z")).asset_events
    assert {e.partition for e in reported} == {"2025-03-04-06:00"}


def test_an_hour_not_ended_waits_in_the_cursor_and_is_reported_once_it_has(lake):
    said = {"writer": WRITER, "run": "r", "commits": 1, "seq_from": 0, "seq_to": 10}
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d-%H:00")  # this hour: not a partition until it ends
    read = json.loads(_evaluate(lake).cursor)["read"]
    waiting = {"default": {"2025-03-04-06:00": said, now: said}}
    result = _evaluate(lake, cursor=json.dumps({"read": read, "waiting": waiting}))
    assert {(e.partition, e.metadata["seq_to"].value) for e in result.asset_events} == {("2025-03-04-06:00", 10)}
    assert json.loads(result.cursor)["waiting"] == {"default": {now: said}}


def test_a_replay_dagster_made_is_left_to_its_own_materializations():
    meta = {"writer": WRITER, "run": "dagster-0123456789ab", "hours": ["2025-03-04T05:00:00Z", "2025-03-04T06:00:00Z"]}
    assert written(meta) == {}
    assert set(written({**meta, "run": "0123456789abcdef"})) == {"2025-03-04-05:00", "2025-03-04-06:00"}


def test_the_code_locations_partitions_start_at_the_hour_of_the_journals_first_arrival(lake, monkeypatch):
    monkeypatch.setenv("RETRACE_LAKE", lake)
    monkeypatch.setenv("RETRACE_JOBS", DEFAULT_FOLDER)
    defs = runpy.run_path(os.path.join(ROOT, "orchestration", "definitions.py"))["defs"]
    graph = defs.resolve_asset_graph()
    starts = {graph.get(k).partitions_def.start for k in graph.get_all_asset_keys() if graph.get(k).partitions_def}
    assert starts == {datetime(2025, 3, 4, 5, tzinfo=timezone.utc)}
    assert least_value(Lake(lake).journal, "arrival_time").startswith("2025-03-04T05:")


def test_the_start_read_from_a_checkpoint_is_the_same(spark, lake):
    from replay.io.store import _delta_log

    path = Lake(lake).journal
    before = least_value(path, "arrival_time")
    _delta_log(spark, path).checkpoint()
    assert any(n.endswith(".checkpoint.parquet") for n in os.listdir(os.path.join(path, "_delta_log")))
    assert least_value(path, "arrival_time") == before


def test_a_configured_start_wins_and_an_empty_lake_starts_at_the_current_hour(lake, tmp_path):
    assert partitions_start(lake, "2025-03-04T07:30:00Z") == datetime(2025, 3, 4, 7, tzinfo=timezone.utc)
    now = datetime(2026, 11, 28, 9, 41, tzinfo=timezone.utc)
    assert partitions_start(str(tmp_path), now=now) == datetime(2026, 11, 28, 9, tzinfo=timezone.utc)
    with pytest.raises(ValueError, match=r"^RETRACE_PARTITIONS_START: 'soon' is not an ISO-8601 time"):
        partitions_start(lake, "soon")
