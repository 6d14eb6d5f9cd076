"""A target's output tables are read through one module (`replay.ops.outputs`): a table the target lacks is refused
naming the target, the job, the table and the command that makes it; the decisions are stored as their exceptions
and read as every row, the same rows the engine decided (golden: computed in memory by `pipeline.replay`)."""
from __future__ import annotations

import os

import pytest
from pyspark.sql import functions as F

from replay.engine import pipeline
from replay.io import journal
from replay.io.journal import ingest
from replay.io.lake import Lake
from replay.io.store import default_store
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops import outputs
from replay.ops.generate import StreamSpec, generate
from replay.ops.hashing import table_digest
from replay.ops.run import run
from tests.support import ROOT


@pytest.mark.parametrize("job, how", [("default", "--policy POLICY_FILE"), ("region_alarms", "--job region_alarms")])
def test_a_missing_table_is_named_with_the_command_that_makes_it(spark, lake, job, how):
    where = Lake(lake).target(job, "whatif")
    with pytest.raises(FileNotFoundError) as refused:
        outputs.require(where, ["windows", "decisions"])
    message = str(refused.value)
    assert f"target 'whatif' of job '{job}' has no windows table at {where.table('windows')}" in message
    assert f"`replay run --target whatif --lake {where.lake} {how}`" in message


# --- the decisions: stored as exceptions, read as every row (issue 46 item 1) ---

POLICY_FILE = os.path.join(ROOT, "infra", "policies", "production.yaml")
SECOND_HOUR = "2024-01-01T01:00:00Z"


@pytest.fixture(scope="module")
def decided(spark, tmp_path_factory):
    """A journal replayed whole into `production` and from its second hour into `range`, with the decisions the
    engine computes for it in memory: what a target stored before it stored only exceptions."""
    root = tmp_path_factory.mktemp("outputs")
    landing, lake = str(root / "landing"), str(root / "lake")
    generate(landing, StreamSpec(1500, partitions=3, keys=20, files=3, seed=5, rate=0.3))
    ingest(spark, landing, lake)
    job = Job.spec(Policy.from_yaml(POLICY_FILE))
    run(spark, lake, job)
    ranged = run(spark, lake, job, target="range", start=SECOND_HOUR)
    out = pipeline.replay(journal.read(spark, lake), job, partitions=journal.declared_partitions(spark, lake))
    every = spark.createDataFrame(out.decisions.collect(), out.decisions.schema)
    out.unpersist()
    return {"lake": lake, "every": every, "range_from": ranged.seq_from}


def test_a_target_stores_only_the_exceptions_among_its_decisions(spark, decided):
    stored = default_store().read(spark, Lake(decided["lake"]).target("default", "production").table("decisions"))
    exceptions = pipeline.exceptions(decided["every"])
    assert 0 < exceptions.count() < decided["every"].count() / 2
    assert table_digest(stored) == table_digest(exceptions)


def test_the_decisions_read_are_every_row_the_engine_decided(spark, decided):
    view = outputs.read(spark, Lake(decided["lake"]).target("default", "production"), "decisions")
    assert table_digest(view) == table_digest(decided["every"])


def test_a_range_target_reads_the_decisions_of_its_range_only(spark, decided):
    lo = decided["range_from"]
    view = outputs.read(spark, Lake(decided["lake"]).target("default", "range"), "decisions")
    assert lo > 0
    assert table_digest(view) == table_digest(decided["every"].where(F.col("seq") >= lo))


def test_a_seq_range_of_the_decisions_is_that_range_of_every_row(spark, decided):
    where = Lake(decided["lake"]).target("default", "production")
    view = outputs.decisions(spark, where, lo=400, hi=900)
    assert table_digest(view) == table_digest(decided["every"].where(F.col("seq").between(400, 899)))


def test_a_decisions_table_that_says_nothing_of_what_it_stores_is_read_as_it_is(spark, decided):
    """A table an older Retrace wrote holds every row: it is read as it is, nothing derived twice."""
    where = Lake(decided["lake"]).target("default", "older")
    default_store().write(decided["every"], where.table("decisions"), mode="overwrite")
    assert table_digest(outputs.read(spark, where, "decisions")) == table_digest(decided["every"])


@pytest.mark.parametrize("substream_by", ["key", "region"])
def test_the_job_a_commit_records_decides_as_the_job_did(substream_by):
    """What the view derives with (`decided_by`): the policy and fields, a substream over `key` or a field too."""
    job = Job.define("sensors", {"window": {"kind": "tumbling", "size": "1m"}, "substream_by": substream_by},
                     fields={"region": "payload:region::string"}, aggregates={"n": "count(*)"})
    [how] = outputs.decided_ranges(outputs.stored_metadata(job, None, None, 0, 10))
    again = outputs.decided_by(job.name, how)
    assert (again.policy, again.fields) == (job.policy, job.fields)


def test_a_range_decided_otherwise_keeps_the_earlier_ranges_as_they_were_decided():
    job = Job.spec(Policy.from_yaml(POLICY_FILE))
    whole = outputs.stored_metadata(job, [0, 1], None, 0, 100)
    declared = outputs.stored_metadata(job, [0, 1, 2], whole, 40, 60)  # a partition declared, then [40, 60) again
    assert [(g["covers"], g["partitions"]) for g in outputs.decided_ranges(declared)] == \
        [([[0, 40], [60, 100]], [0, 1]), ([[40, 60]], [0, 1, 2])]
    again = outputs.stored_metadata(job, [0, 1], declared, 30, 70)
    assert [(g["covers"], g["partitions"]) for g in outputs.decided_ranges(again)] == [([[0, 100]], [0, 1])]
    assert again["covers"] == [[0, 100]]


def test_a_range_replayed_with_another_policy_reads_as_each_run_decided_it(spark, decided):
    """A what-if over the second hour into a target replayed whole: the first hour as the first policy decided it."""
    lake, lo = decided["lake"], decided["range_from"]
    other = Job.spec(Policy.from_dict({**Policy.from_yaml(POLICY_FILE).to_dict(), "late_arrival_tolerance": "0s",
                                       "out_of_order_tolerance": "0s"}))
    run(spark, lake, Job.spec(Policy.from_yaml(POLICY_FILE)), target="mixed")
    run(spark, lake, other, target="mixed", start=SECOND_HOUR)
    out = pipeline.replay(journal.read(spark, lake), other, partitions=journal.declared_partitions(spark, lake))
    theirs = spark.createDataFrame(out.decisions.collect(), out.decisions.schema)
    out.unpersist()
    ours = decided["every"]
    assert pipeline.exceptions(theirs.where(F.col("seq") < lo)).count() != \
        pipeline.exceptions(ours.where(F.col("seq") < lo)).count()  # the policies decide the first hour otherwise
    view = outputs.read(spark, Lake(lake).target("default", "mixed"), "decisions")
    each = ours.where(F.col("seq") < lo).unionByName(theirs.where(F.col("seq") >= lo))
    assert table_digest(view) == table_digest(each)


def test_covered_ranges_merge_into_the_fewest():
    assert outputs.merged([[10, 20], [0, 5], [5, 8], [19, 30], [40, 40]]) == [[0, 8], [10, 30]]
