"""The assets in process: materializing `journal` ingests the landing folder exactly once, and a replay
launched with a shadow target and a policy override writes there with that policy, leaving production alone,
and shows how it differs from production; the advice asset's run config is such a launch."""
from __future__ import annotations

import os

import dagster as dg
import pytest

from assets.advice import advice_asset
from assets.journal import journal_asset
from assets.outputs import job_outputs
from orchestration.resources import RetraceResource
from replay.io.lake import OUTPUT_TABLES, Lake
from replay.io.store import default_store
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.generate import StreamSpec, generate
from tests.support import POLICY_FILE, hours_from, target_dir
from replay.ops import outputs

HOUR = "2024-01-01-00:00"
SPEC = Job.spec(Policy.from_yaml(POLICY_FILE))
HOURS = hours_from()  # the generated arrivals' hours
OUTPUTS = job_outputs(SPEC, HOURS)  # the op `default_outputs`, as in the code location
journal = journal_asset(HOURS)
KEYS = [f"default/{table}" for table in OUTPUT_TABLES]


@pytest.fixture(scope="module")
def retrace(tmp_path_factory):
    root = tmp_path_factory.mktemp("assets")
    generate(str(root / "landing"), StreamSpec(600, partitions=2, keys=10, files=2, seed=9, rate=0.5))
    return RetraceResource(lake=str(root / "lake"), landing=str(root / "landing"), policy_file=POLICY_FILE)


def _metadata(result, key):
    node = "journal" if key == "journal" else OUTPUTS.op.name
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
    assert _no_placeholder(again)  # nothing ingested: no journal version rather than -1


OVERRIDE = {"late_arrival_tolerance": "30s", "window": {"kind": "tumbling", "size": "5m"}}


@pytest.fixture(scope="module")
def shadow(spark, retrace):
    """The hour replayed into a shadow target with a policy override."""
    dg.materialize([journal], partition_key=HOUR, resources={"retrace": retrace})
    return dg.materialize(
        [OUTPUTS], partition_key=HOUR, resources={"retrace": retrace},
        run_config={"ops": {OUTPUTS.op.name: {"config": {"target": "shadow-what-if", "policy_override": OVERRIDE}}}})


def test_a_shadow_target_with_a_policy_override_leaves_production_alone(spark, retrace, shadow):
    result, override = shadow, OVERRIDE
    assert result.success
    m = _metadata(result, "default/windows")
    expected = Policy.from_dict({**Policy.from_yaml(POLICY_FILE).to_dict(), **override}).to_dict()
    assert m["target"] == "shadow-what-if" and m["policy"] == expected and m["rows"] > 0
    # the hour holds the whole journal: its seq range runs to the end, said so (not a seq of -1)
    assert (m["seq_from"], m["seq_to"]) == (0, "end of journal")
    assert _no_placeholder(m) and m["seconds"] > 0
    assert m["journal_version"] == default_store().version(Lake(retrace.lake).journal)  # the version the run read
    assert {mat.asset_key.to_user_string() for mat in result.asset_materializations_for_node(OUTPUTS.op.name)} == \
        set(KEYS)
    assert all(os.path.isdir(target_dir(retrace.lake, "shadow-what-if").table(t)) for t in OUTPUT_TABLES)
    assert not os.path.exists(target_dir(retrace.lake, "production").table("decisions"))


def test_a_replays_decisions_count_every_decision_of_its_range_and_its_exceptions(spark, retrace, shadow):
    m, where = _metadata(shadow, "default/decisions"), target_dir(retrace.lake, "shadow-what-if")
    assert m["rows"] == outputs.read(spark, where, "decisions").count() > m["exceptions"]
    assert m["exceptions"] == outputs.exceptions(spark, where).count() > 0


def _no_placeholder(metadata: dict) -> dict:
    """The metadata has no value standing for "none" (an empty text, -1), which the UI would show as a value."""
    placeholders = {k: v for k, v in metadata.items() if v == "" or v == -1}
    assert not placeholders, placeholders
    return metadata


def _decided(spark, lake, target):
    from pyspark.sql import functions as F

    rows = (outputs.read(spark, target_dir(lake, target), "decisions").where(F.col("kind") == "event")
            .select("seq", "action", "reasons", "timestamp").collect())
    return {r["seq"]: (r["action"], list(r["reasons"]), r["timestamp"]) for r in rows}


def test_the_advice_run_config_replays_a_shadow_target_whose_metadata_is_the_diff_with_production(spark, retrace):
    dg.materialize([journal], partition_key=HOUR, resources={"retrace": retrace})
    production = dg.materialize([OUTPUTS], partition_key=HOUR, resources={"retrace": retrace})
    assert production.success and "decided_differently" not in _metadata(production, "default/decisions")

    grids = {"late_grid": ["5s", "10m", "30m"], "out_of_order_grid": ["0s", "5s"]}
    advice = advice_asset(SPEC)
    advised = dg.materialize([advice], resources={"retrace": retrace}, run_config={
        "ops": {advice.op.name: {"config": {"completeness": 0.99, **grids}}}})
    assert advised.success
    [m] = advised.asset_materializations_for_node(advice.op.name)
    meta = {k: v.value for k, v in m.metadata.items()}
    assert meta["late_arrival_tolerance"] in grids["late_grid"] and os.path.isfile(meta["report"])
    assert "| late_arrival_tolerance |" in meta["sweeps"]

    shadow = dg.materialize([OUTPUTS], partition_key=HOUR, resources={"retrace": retrace},
                            run_config=meta["what_if_run_config"])
    assert shadow.success
    m = _metadata(shadow, "default/decisions")
    a, b = _decided(spark, retrace.lake, "production"), _decided(spark, retrace.lake, "advice")
    assert set(a) == set(b)
    assert m["decided_differently"] == sum(a[seq] != b[seq] for seq in a) > 0
    assert "decided differently" in m["diff_vs_production"]
