"""The code location: `dagster definitions validate` accepts it, and it holds the assets, partitions, backfill
policy, checks, jobs, schedules, sensors and resources that Retrace's users see in the UI: the shared journal, and
a group of assets for every job, made by one factory: the spec's job (`default`) and each job of the jobs folder
(the two examples)."""
from __future__ import annotations

import os
import runpy
import subprocess
import sys
from datetime import datetime, timezone

import dagster as dg
import pytest
import yaml

from assets.checks import CHECKS
from assets.partitions import partitions_start
from orchestration.alerting import RESOURCES, SENSORS
from orchestration.definitions import PARTITIONS, RETRACE, defs
from orchestration.resources import RetraceResource
from replay.io.spark import spark_conf
from replay.model.jobs import JobError
from replay.ops.catalog import DEFAULT_FOLDER
from tests.support import ROOT

OUTPUTS = {"decisions", "windows", "dead_letters", "watermarks", "metrics"}
JOBS = ("default", "device_minute", "region_alarms")  # the spec's job and the jobs of jobs/examples
JOB_ASSETS = {f"{job}/{table}" for job in JOBS for table in OUTPUTS}
ADVICE = {f"{job}/advice" for job in JOBS}
LIVE_TABLES = {"default/lag", "default/diagnostics"}  # the lead job's, observed by a sensor


def _graph():
    return defs.resolve_asset_graph()


def test_validate_command_accepts_the_workspace(tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "RETRACE_JOBS": DEFAULT_FOLDER}  # the two example jobs
    # Dagster 1.13 says `dg check defs` supersedes this command; `dg` is another package (dagster-dg-cli), and this
    # one still validates the workspace: its FutureWarning is not an error here even when PYTHONWARNINGS makes it one
    superseded = "ignore:Function `definitions_validate_command` is superseded:FutureWarning"
    env["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), superseded]))
    r = subprocess.run([os.path.join(sys.prefix, "bin", "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "Validation successful for code location" in r.stdout + r.stderr


def test_workspace_loads_the_definitions_file():
    with open(os.path.join(ROOT, "workspace.yaml")) as f:
        workspace = yaml.safe_load(f)
    assert workspace == {"load_from": [{"python_file": {"relative_path": "orchestration/definitions.py",
                                                        "working_directory": "."}}]}


def test_the_assets_are_the_journal_and_five_outputs_and_the_advice_of_every_job():
    keys = {k.to_user_string() for k in _graph().get_all_asset_keys()}
    assert keys == {"journal"} | JOB_ASSETS | ADVICE | LIVE_TABLES


def test_every_asset_but_the_advice_and_the_live_tables_is_hourly_by_arrival_with_a_single_run_backfill_policy():
    graph = _graph()
    for key in graph.get_all_asset_keys():
        if key.to_user_string() in ADVICE | LIVE_TABLES:
            continue
        node = graph.get(key)
        assert node.partitions_def == PARTITIONS, key
        assert node.backfill_policy == dg.BackfillPolicy.single_run(), key
    # where they start: test_outside_runs.py (the journal's first arrival, a configured time, this hour); `now` is
    # the load's hour, so an hour that ends during the test does not move an empty lake's start
    start = partitions_start(RETRACE.lake, RETRACE.partitions_start, now=PARTITIONS.start)
    assert PARTITIONS.timezone == "UTC" and PARTITIONS.start == start


def test_the_journal_is_the_retrace_group_upstream_of_every_job():
    node = _graph().get(dg.AssetKey("journal"))
    assert node.group_name == "retrace" and not node.parent_keys
    assert {k.to_user_string() for k in node.child_keys} == JOB_ASSETS | ADVICE


def test_each_job_the_spec_jobs_included_is_a_group_of_one_multi_asset_downstream_of_the_journal():
    graph = _graph()
    for job in JOBS:
        for table in OUTPUTS:
            node = graph.get(dg.AssetKey([job, table]))
            assert node.group_name == job, (job, table)
            assert node.parent_keys == {dg.AssetKey("journal")}, (job, table)
            assert node.assets_def.node_def.name == f"{job}_outputs", (job, table)
            assert not node.assets_def.can_subset
            assert f"Job `{job}`" in node.description, node.description
    windows = graph.get(dg.AssetKey(["device_minute", "windows"])).description
    assert "device" in windows and "avg_temperature" in windows and "p95_pressure" in windows
    assert "count, sum" in graph.get(dg.AssetKey(["default", "windows"])).description


def test_a_broken_job_file_fails_the_code_location_naming_the_file(tmp_path, monkeypatch):
    for name in ("sources.yaml", "device_minute.yaml"):
        (tmp_path / name).write_text(open(os.path.join(DEFAULT_FOLDER, name)).read())
    (tmp_path / "broken.yaml").write_text("source: sensors\npolicy: {window: {kind: tumbling, size: 1m}}\n"
                                          "aggregates: {readings: 'count(*)', late: }\n")
    monkeypatch.setenv("RETRACE_JOBS", str(tmp_path))
    with pytest.raises(JobError, match=r"broken\.yaml: job broken: aggregates\.late: None must be a Spark SQL"):
        runpy.run_path(os.path.join(ROOT, "orchestration", "definitions.py"))


def test_every_job_has_the_checks_it_allows_and_only_the_spec_job_conservation():
    keys = {(*k.asset_key.path, k.name) for k in _graph().asset_check_keys}
    every = {(job, table, check) for job in JOBS for table, check, _, _ in CHECKS if check != "conservation"}
    # the examples filter test readings out of their windows (`where`): spec 7's balance is not theirs
    assert keys == every | {("default", "decisions", "conservation")}
    assert {check for _, check, _, _ in CHECKS} == {"late_events", "conservation", "windows_emitted_once",
                                                    "window_rows_unique", "dead_letters_match", "watermark_delay"}


def test_jobs_schedules_and_sensors():
    repo = defs.get_repository_def()
    assert {"live", "maintenance", *(f"{job}_recovery" for job in JOBS)} <= {j.name for j in repo.get_all_jobs()}
    assert {s.name: s.job_name for s in repo.schedule_defs} == {
        "maintenance_schedule": "maintenance", "advice_schedule": "advice_daily",
        **{f"{job}_recovery_schedule": f"{job}_recovery" for job in JOBS}}
    sensors = {s.name for s in repo.sensor_defs}
    assert sensors == {"landing_sensor", "retrace_outside_runs", "retrace_live_tables", *(s.name for s in SENSORS)}
    assert repo.get_sensor_def("landing_sensor").job_name == "live"
    schedule = repo.get_schedule_def("default_recovery_schedule")
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING


def test_the_advice_of_every_job_is_refreshed_daily_over_the_day_before():
    graph, repo = _graph(), defs.get_repository_def()
    for key in ADVICE:
        node = graph.get(dg.AssetKey.from_user_string(key))
        assert node.partitions_def is None and node.parent_keys == {dg.AssetKey("journal")}, key
        assert node.group_name == key.split("/")[0], key
    schedule = repo.get_schedule_def("advice_schedule")
    assert (schedule.cron_schedule, schedule.execution_timezone) == ("0 4 * * *", "UTC")
    with dg.build_schedule_context(scheduled_execution_time=datetime(2024, 3, 5, 4, 0, tzinfo=timezone.utc)) as c:
        request = schedule.evaluate_tick(c).run_requests[0]
    day = {"config": {"end": "2024-03-05T00:00:00Z", "hours": 24}}
    assert request.run_config == {"ops": {f"{job}__advice": day for job in JOBS}}


def test_each_job_is_recovered_daily_by_its_own_recovery_job():
    repo = defs.get_repository_def()
    tick = datetime(2024, 3, 5, 0, 30, tzinfo=timezone.utc)
    for job in JOBS:
        recovery = repo.get_job(f"{job}_recovery")
        assert [n.name for n in recovery.nodes] == [f"{job}_recover_recent_hours"]
        assert recovery.tags["retrace/job"] == job
        schedule = repo.get_schedule_def(f"{job}_recovery_schedule")
        assert (schedule.cron_schedule, schedule.execution_timezone) == ("30 0 * * *", "UTC")
        with dg.build_schedule_context(scheduled_execution_time=tick) as context:
            request = schedule.evaluate_tick(context).run_requests[0]
        assert request.run_config == {"ops": {f"{job}_recover_recent_hours": {
            "config": {"end": "2024-03-05T00:00:00Z", "hours": 24}}}}


def test_resources_are_retrace_and_the_alert_resources():
    resources = defs.resources or {}
    assert set(resources) == {"retrace", *RESOURCES}
    assert isinstance(resources["retrace"], RetraceResource)


def test_the_resource_takes_its_folders_from_the_environment():
    r = RetraceResource.from_env({"RETRACE_LAKE": "/data/lake", "RETRACE_LANDING": "/data/landing",
                                  "RETRACE_POLICY": "/etc/retrace/policy.yaml"})
    assert (r.lake, r.landing, r.policy_file) == ("/data/lake", "/data/landing", "/etc/retrace/policy.yaml")
    default = RetraceResource.from_env({})
    assert default.lake == os.path.join(ROOT, ".retrace", "lake")


def test_a_policy_override_replaces_only_its_fields():
    r = RetraceResource(policy_file=os.path.join(ROOT, "infra", "policies", "production.yaml"))
    base, what_if = r.policy(), r.policy({"late_arrival_tolerance": "30s"})
    late = what_if.to_dict()["late_arrival_tolerance"]
    assert what_if.to_dict() == {**base.to_dict(), "late_arrival_tolerance": late}
    assert what_if.to_dict()["late_arrival_tolerance"] != base.to_dict()["late_arrival_tolerance"]


def test_the_cluster_spark_settings_parse():
    conf = spark_conf(os.path.join(ROOT, "infra", "spark", "cluster.conf"))
    assert conf["spark.master"].startswith("spark://")
    assert conf["spark.sql.shuffle.partitions"] == "64"


def test_the_instance_files_are_valid_dagster_instance_config(monkeypatch):
    from dagster._core.instance.config import dagster_instance_config

    for var in ("DAGSTER_PG_HOST", "DAGSTER_PG_DB", "DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD"):
        monkeypatch.setenv(var, "x")
    monkeypatch.setenv("DAGSTER_PG_PORT", "5432")
    monkeypatch.setenv("DAGSTER_COMPUTE_LOG_DIR", "/tmp/dagster-logs")
    production, _ = dagster_instance_config(os.path.join(ROOT, "infra"), "dagster.yaml")
    assert "postgres" in production["storage"]
    local, _ = dagster_instance_config(os.path.join(ROOT, "infra"), "dagster.local.yaml")
    assert "storage" not in local  # SQLite under DAGSTER_HOME
