"""A partition-range backfill launched through the real webserver's GraphQL API runs, via the real daemon,
as a single run that replays that range, and writes what `replay run --from --to` writes for it; a backfill
of one job's assets (a job of jobs/examples) is one run that writes only that job's tables.

The webserver, daemon, lake and backfill are the session fixtures of tests/support/dagster_fixtures.py.
"""
from __future__ import annotations

import os

from replay.io.store import default_store
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.hashing import table_digest
from replay.ops.run import run
from tests.support import target_dir
from tests.support.dagster_fixtures import FIRST, FROM, LAST, OUTPUT_KEYS, PARTITION_STATS, POLICY_FILE, TO, backfill
from replay.ops import outputs


def test_the_backfill_succeeds(dagster_stack, range_backfill):
    assert range_backfill["status"] in ("COMPLETED_SUCCESS", "COMPLETED"), \
        f"{range_backfill}\n{dagster_stack['server'].log_tail()}"
    assert range_backfill["isAssetBackfill"] and range_backfill["numPartitions"] == 2


def test_a_range_backfill_is_one_run_over_the_whole_range(dagster_stack, range_backfill):
    [only] = range_backfill["runs"]
    assert only["status"] == "SUCCESS", _failures(dagster_stack["server"].home, only["runId"])
    tags = {t["key"]: t["value"] for t in only["tags"]}
    assert (tags["dagster/asset_partition_range_start"], tags["dagster/asset_partition_range_end"]) == (FIRST, LAST)


def test_every_output_asset_has_both_partitions_materialized(dagster_stack, range_backfill):
    for key in OUTPUT_KEYS:
        node = dagster_stack["server"].graphql(PARTITION_STATS, {"key": {"path": ["default", key]}})["assetNodeOrError"]
        assert node["partitionStats"] == {"numMaterialized": 2, "numFailed": 0}, key


def test_the_backfill_writes_what_replay_run_writes_over_the_same_range(spark, dagster_stack, range_backfill):
    lake = dagster_stack["lake"]
    # what `replay run --from FROM --to TO --target expected` runs, in this process's Spark session
    run(spark, lake, Job.spec(Policy.from_yaml(POLICY_FILE)), target="expected", start=FROM, end=TO)
    store = default_store()
    for table in ("decisions", "windows", "dead_letters", "watermarks"):
        backfilled = store.read(spark, target_dir(lake, "production").table(table))
        expected = store.read(spark, target_dir(lake, "expected").table(table))
        rows, _ = table_digest(expected)
        assert rows > 0 or table == "dead_letters", table
        assert table_digest(backfilled) == table_digest(expected), table
    late = outputs.read(spark, target_dir(lake, "production"), "decisions").where(f"arrival_time >= '{TO}'")
    assert late.count() == 0, "the range ends at 02:00"


def test_a_jobs_range_backfill_is_one_run_that_touches_only_that_jobs_tables(dagster_stack):
    import dagster as dg

    server, lake = dagster_stack["server"], dagster_stack["lake"]
    others = [target_dir(lake).folder, os.path.join(lake, "jobs", "region_alarms")]
    before = [_files(folder) for folder in others]
    done = backfill(server, [["device_minute", table] for table in OUTPUT_KEYS], timeout=600)
    assert done["status"] in ("COMPLETED_SUCCESS", "COMPLETED") and done["numPartitions"] == 2, \
        f"{done}\n{server.log_tail()}"
    [only] = done["runs"]
    assert only["status"] == "SUCCESS", _failures(server.home, only["runId"])
    tags = {t["key"]: t["value"] for t in only["tags"]}
    assert (tags["dagster/asset_partition_range_start"], tags["dagster/asset_partition_range_end"]) == (FIRST, LAST)
    for table in OUTPUT_KEYS:
        assert os.listdir(os.path.join(lake, "jobs", "device_minute", "outputs", "production", table, "_delta_log"))
        node = server.graphql(PARTITION_STATS, {"key": {"path": ["device_minute", table]}})["assetNodeOrError"]
        assert node["partitionStats"] == {"numMaterialized": 2, "numFailed": 0}, table
    # the spec's job's production and the other job are untouched (absent stays absent)
    assert [_files(folder) for folder in others] == before
    # the job's own checks ran in the same run, on its tables, and passed
    with dg.DagsterInstance.from_config(server.home) as instance:
        evaluations = [e.dagster_event.event_specific_data for e in instance.all_logs(only["runId"])
                       if e.dagster_event and e.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert {(e.asset_key.to_user_string(), e.check_name, e.passed) for e in evaluations} == {
        ("device_minute/metrics", "late_events", True), ("device_minute/windows", "windows_emitted_once", True),
        ("device_minute/windows", "window_rows_unique", True),
        ("device_minute/dead_letters", "dead_letters_match", True),
        ("device_minute/watermarks", "watermark_delay", True)}


def _files(folder: str) -> dict[str, tuple[int, int]]:
    """Every file under `folder` with its size and modification time (empty when there is no folder)."""
    out = {}
    for here, _, names in os.walk(folder):
        for name in names:
            st = os.stat(os.path.join(here, name))
            out[os.path.relpath(os.path.join(here, name), folder)] = (st.st_size, st.st_mtime_ns)
    return out


def _failures(home: str, run_id: str) -> str:
    """What went wrong in a run, from the instance's event log (for the assertion message)."""
    import dagster as dg

    with dg.DagsterInstance.from_config(home) as instance:
        events = instance.all_logs(run_id)
    return "\n".join(f"{e.step_key}: {e.dagster_event.event_type_value}: {e.message}\n"
                     f"{getattr(e.dagster_event.event_specific_data, 'error', '')}"
                     for e in events if e.dagster_event and e.dagster_event.is_failure)[-6000:]
