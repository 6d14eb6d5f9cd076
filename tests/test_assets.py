"""The assets in process: materializing `journal` ingests the landing folder exactly once, and a replay
launched with a shadow target and a policy override writes there with that policy, leaving production alone."""
from __future__ import annotations

import os

import dagster as dg
import pytest

from assets.journal import journal
from assets.outputs import OUTPUTS, replay_outputs
from orchestration.resources import RetraceResource
from replay.generate import generate
from replay.policy import Policy
from replay.runner import output_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICY_FILE = os.path.join(ROOT, "infra", "policies", "production.yaml")
HOUR = "2024-01-01-00:00"


@pytest.fixture(scope="module")
def retrace(tmp_path_factory):
    root = tmp_path_factory.mktemp("assets")
    generate(str(root / "landing"), 600, partitions=2, keys=10, files=2, seed=9, rate=0.5)
    return RetraceResource(lake=str(root / "lake"), landing=str(root / "landing"), policy_file=POLICY_FILE)


def _metadata(result, key):
    node = "journal" if key == "journal" else "replay_outputs"
    [m] = [m for m in result.asset_materializations_for_node(node) if m.asset_key.to_user_string() == key]
    return {k: v.value for k, v in m.metadata.items()}


def test_materializing_the_journal_ingests_the_landing_files_once(spark, retrace):
    first = dg.materialize([journal], partition_key=HOUR, resources={"retrace": retrace})
    assert first.success
    m = _metadata(first, "journal")
    assert (m["files_ingested"], m["rows_ingested"]) == (2, 600)
    assert 0 < m["rows_in_range"] <= 600

    again = _metadata(dg.materialize([journal], partition_key=HOUR, resources={"retrace": retrace}), "journal")
    assert (again["files_ingested"], again["files_already_journaled"], again["rows_ingested"]) == (0, 2, 0)


def test_a_shadow_target_with_a_policy_override_leaves_production_alone(spark, retrace):
    dg.materialize([journal], partition_key=HOUR, resources={"retrace": retrace})
    override = {"late_arrival_tolerance": "30s", "window": {"kind": "tumbling", "size": "5m"}}
    result = dg.materialize(
        [replay_outputs], partition_key=HOUR, resources={"retrace": retrace},
        selection=list(OUTPUTS),
        run_config={"ops": {"replay_outputs": {"config": {"target": "shadow-what-if", "policy_override": override}}}})
    assert result.success
    m = _metadata(result, "windows")
    expected = Policy.from_dict({**Policy.from_yaml(POLICY_FILE).to_dict(), **override}).to_dict()
    assert m["target"] == "shadow-what-if" and m["policy"] == expected and m["rows"] > 0
    assert {mat.asset_key.to_user_string() for mat in result.asset_materializations_for_node("replay_outputs")} == \
        set(OUTPUTS)
    assert all(os.path.isdir(output_path(retrace.lake, "shadow-what-if", t)) for t in OUTPUTS)
    assert not os.path.exists(output_path(retrace.lake, "production", "decisions"))
