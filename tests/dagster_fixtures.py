"""Session fixtures shared by the webserver tests (tests/conftest.py imports them): one real
`dagster-webserver` + `dagster-daemon` on a temp DAGSTER_HOME and a temp lake (3000 generated events over
~2h20 of arrivals, ingested before the servers start), and one partition-range backfill launched through
GraphQL `launchPartitionBackfill` and waited for. Session-scoped so the backfill and UI tests share them."""
from __future__ import annotations

import os
import time

import pytest

from replay.generate import generate
from replay.journal import ingest
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


@pytest.fixture(scope="session")
def dagster_stack(spark, tmp_path_factory):
    work = tmp_path_factory.mktemp("backfill")
    landing, lake = str(work / "landing"), str(work / "lake")
    generate(landing, 3000, partitions=3, keys=30, files=6, seed=7, rate=0.35)
    ingest(spark, landing, lake)
    env = {"RETRACE_LAKE": lake, "RETRACE_LANDING": landing, "RETRACE_POLICY": POLICY_FILE}
    with dagster_server(str(work), env, daemon=True) as server:
        yield {"server": server, "lake": lake}


@pytest.fixture(scope="session")
def range_backfill(dagster_stack):
    server = dagster_stack["server"]
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
            return {**state, "id": backfill_id}
        time.sleep(3)
    pytest.fail(f"backfill {backfill_id} not done after 480 s: {state}\n{server.log_tail()}")
