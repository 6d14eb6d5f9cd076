"""Session fixtures shared by the webserver tests (tests/conftest.py imports them): one real
`dagster-webserver` + `dagster-daemon` on a temp DAGSTER_HOME and a temp lake (3000 generated events over
~2h20 of arrivals, each also a sensor reading for the example jobs, ingested before the servers start), and
one partition-range backfill launched through GraphQL `launchPartitionBackfill` and waited for.
Session-scoped so the backfill and UI tests share them."""
from __future__ import annotations

import json
import os
import time

import pytest

from replay.io.journal import ingest
from replay.ops.catalog import DEFAULT_FOLDER as JOBS_FOLDER
from replay.ops.generate import StreamSpec, generate
from tests.support.dagster_server import ROOT, dagster_server

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


REGIONS = ("eu-west", "us-east", "ap-northeast")


def as_sensor_readings(landing: str) -> None:
    """Make every generated JSON line also a sensor reading (device = key, region, temperature, pressure,
    status ok/alarm/test) for the example jobs of jobs/examples, keeping partition, offset, times, key and
    value as generated, so the spec's job replays the same events. Deterministic; lines that are not JSON
    objects stay as they are. (A stand-in for `replay generate --shape sensors`.)"""
    for name in sorted(os.listdir(landing)):
        path = os.path.join(landing, name)
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        out = []
        for line in lines:
            try:
                row = json.loads(line)
            except ValueError:
                out.append(line)
                continue
            if not isinstance(row, dict) or not isinstance(row.get("key"), str):
                out.append(line)
                continue
            device, n = row["key"], row["partition"] * 7919 + row["offset"]
            row.update(device=device, region=REGIONS[int(device.lstrip("k") or 0) % len(REGIONS)],
                       temperature=round(18 + (n * 37 % 1200) / 100, 2), pressure=round(1000 + (n * 13 % 300) / 10, 1),
                       status="alarm" if n % 97 == 0 else "test" if n % 53 == 0 else "ok")
            out.append(json.dumps(row, separators=(",", ":")))
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(out) + "\n")


@pytest.fixture(scope="session")
def dagster_stack(spark, tmp_path_factory):
    work = tmp_path_factory.mktemp("backfill")
    landing, lake = str(work / "landing"), str(work / "lake")
    generate(landing, StreamSpec(3000, partitions=3, keys=30, files=6, seed=7, rate=0.35))
    as_sensor_readings(landing)  # the example jobs read device readings from the same journal
    ingest(spark, landing, lake)
    env = {"RETRACE_LAKE": lake, "RETRACE_LANDING": landing, "RETRACE_POLICY": POLICY_FILE, "RETRACE_JOBS": JOBS_FOLDER}
    with dagster_server(str(work), env, daemon=True) as server:
        yield {"server": server, "lake": lake}


@pytest.fixture(scope="session")
def range_backfill(dagster_stack):
    return backfill(dagster_stack["server"], [["default", key] for key in OUTPUT_KEYS])  # the spec's job's assets


def backfill(server, keys: list[list[str]], timeout: float = 480) -> dict:
    """Launch a backfill of the partitions FIRST..LAST of the assets `keys` (paths) and wait until it is done."""
    params = {"partitionsByAssets": [
        {"assetKey": {"path": key}, "partitions": {"range": {"start": FIRST, "end": LAST}}} for key in keys]}
    launched = server.graphql(LAUNCH, {"params": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    backfill_id = launched["backfillId"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = server.graphql(BACKFILL, {"id": backfill_id})["partitionBackfillOrError"]
        assert state["__typename"] == "PartitionBackfill", state
        if state["status"] in DONE:
            return {**state, "id": backfill_id}
        time.sleep(3)
    pytest.fail(f"backfill {backfill_id} not done after {timeout:.0f} s: {state}\n{server.log_tail()}")
