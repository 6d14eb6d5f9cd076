"""A partition-range backfill launched through the real webserver's GraphQL API runs, via the real daemon,
as a single run that replays that range, and writes what `replay run --from --to` writes for it.

One webserver + daemon for the module, on a temp DAGSTER_HOME and a temp lake (3000 generated events over
~2h20 of arrivals, ingested before the servers start).
"""
from __future__ import annotations

import os
import time

import pytest

from replay.generate import generate
from replay.hashing import table_digest
from replay.journal import ingest
from replay.policy import Policy
from replay.runner import output_path, run
from replay.store import default_store
from tests.dagster_server import ROOT, dagster_server

POLICY_FILE = os.path.join(ROOT, "infra", "policies", "production.yaml")
OUTPUT_KEYS = ("decisions", "windows", "dead_letters", "watermarks", "metrics")
FIRST, LAST = "2024-01-01-00:00", "2024-01-01-01:00"  # partition keys; the range covers [00:00, 02:00)
FROM, TO = "2024-01-01T00:00:00Z", "2024-01-01T02:00:00Z"
DONE = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}

LAUNCH = """
mutation Launch($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
  }
}
"""
BACKFILL = """
query Backfill($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill {
      status numPartitions isAssetBackfill
      runs { runId status tags { key value } }
      error { message }
    }
    ... on PythonError { message }
  }
}
"""
PARTITION_STATS = """
query Stats($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) { ... on AssetNode { partitionStats { numMaterialized numFailed } } }
}
"""


@pytest.fixture(scope="module")
def stack(spark, tmp_path_factory):
    work = tmp_path_factory.mktemp("backfill")
    landing, lake = str(work / "landing"), str(work / "lake")
    generate(landing, 3000, partitions=3, keys=30, files=6, seed=7, rate=0.35)
    ingest(spark, landing, lake)
    env = {"RETRACE_LAKE": lake, "RETRACE_LANDING": landing, "RETRACE_POLICY": POLICY_FILE}
    with dagster_server(str(work), env, daemon=True) as server:
        yield {"server": server, "lake": lake}


@pytest.fixture(scope="module")
def backfill(stack):
    server = stack["server"]
    params = {"partitionsByAssets": [
        {"assetKey": {"path": [key]}, "partitions": {"range": {"start": FIRST, "end": LAST}}} for key in OUTPUT_KEYS]}
    launched = server.graphql(LAUNCH, {"params": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    backfill_id = launched["backfillId"]
    deadline = time.monotonic() + 480
    while time.monotonic() < deadline:
        state = server.graphql(BACKFILL, {"id": backfill_id})["partitionBackfillOrError"]
        assert state["__typename"] == "PartitionBackfill", state
        if state["status"] in DONE:
            return state
        time.sleep(3)
    pytest.fail(f"backfill {backfill_id} not done after 480 s: {state}\n{server.log_tail()}")


def test_the_backfill_succeeds(stack, backfill):
    assert backfill["status"] in ("COMPLETED_SUCCESS", "COMPLETED"), f"{backfill}\n{stack['server'].log_tail()}"
    assert backfill["isAssetBackfill"] and backfill["numPartitions"] == 2


def test_a_range_backfill_is_one_run_over_the_whole_range(backfill):
    [run] = backfill["runs"]
    assert run["status"] == "SUCCESS"
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert (tags["dagster/asset_partition_range_start"], tags["dagster/asset_partition_range_end"]) == (FIRST, LAST)


def test_every_output_asset_has_both_partitions_materialized(stack, backfill):
    for key in OUTPUT_KEYS:
        node = stack["server"].graphql(PARTITION_STATS, {"key": {"path": [key]}})["assetNodeOrError"]
        assert node["partitionStats"] == {"numMaterialized": 2, "numFailed": 0}, key


def test_the_backfill_writes_what_replay_run_writes_over_the_same_range(spark, stack, backfill):
    lake = stack["lake"]
    # what `replay run --from FROM --to TO --target expected` runs, in this process's Spark session
    run(spark, lake, Policy.from_yaml(POLICY_FILE), target="expected", start=FROM, end=TO)
    store = default_store()
    for table in ("decisions", "windows", "dead_letters", "watermarks"):
        backfilled = store.read(spark, output_path(lake, "production", table))
        expected = store.read(spark, output_path(lake, "expected", table))
        rows, _ = table_digest(expected)
        assert rows > 0 or table == "dead_letters", table
        assert table_digest(backfilled) == table_digest(expected), table
    late = store.read(spark, output_path(lake, "production", "decisions")).where(f"arrival_time >= '{TO}'")
    assert late.count() == 0, "the range ends at 02:00"
