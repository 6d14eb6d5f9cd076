"""The one pass (`replay.engine.one_pass`: the JVM's `Decide`) agrees with the reference model, continues from its
state as one replay, and sends back partial aggregates that give exactly what every decided row gives: the hourly
metrics, the watermark timeline and the exceptions."""
from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings

from replay.conformance import case_job, diff, engine_case
from replay.engine import metrics, one_pass, pipeline, watermarks, windows
from replay.io import journal as journal_io
from replay.model.policy import Policy
from replay.model.state import State
from tests.engine.test_replay_continues_from_state import _in_pieces, _whole, journals_with_cuts
from tests.model import run_model
from tests.support.examples import examples
from tests.support.journals import journals, one_pass_policies


def _settings(n: int):
    return settings(max_examples=examples(n), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _matches_model(spark, policy, journal) -> None:
    assert one_pass.applies(case_job({"policy": policy, "journal": journal}).policy)
    expected = run_model(copy.deepcopy(policy), copy.deepcopy(journal))
    problems = diff(expected, engine_case(spark, {"name": "random", "policy": policy, "journal": journal}))
    assert problems == [], "\n".join(problems) + "\ncase: " + json.dumps({"policy": policy, "journal": journal})


@_settings(8)
@given(policy=one_pass_policies(), journal=journals())
def test_the_one_pass_matches_the_model(spark, policy, journal):
    _matches_model(spark, policy, journal)


@_settings(5)
@given(policy=one_pass_policies(), journal=journals(max_partitions=12))
def test_the_one_pass_matches_the_model_across_chunks_of_many_partitions(spark, monkeypatch, policy, journal):
    """Chunks of 4 rows: each stretch starts from the maxima before it, most of up to 12 partitions without rows."""
    monkeypatch.setattr(watermarks, "CHUNK_ROWS", 4)
    _matches_model(spark, policy, journal)


@_settings(5)
@given(policy=one_pass_policies(), case=journals_with_cuts())
def test_the_one_pass_in_pieces_from_state_equals_one_replay(spark, policy, case):
    """A live job's micro-batches (and a replay from a checkpoint): each piece from the state the one before left."""
    rows, cuts = case
    job = case_job({"policy": copy.deepcopy(policy), "journal": rows})
    assert _in_pieces(spark, job, rows, cuts) == _whole(spark, job, rows), json.dumps(
        {"policy": policy, "cuts": cuts, "journal": rows})


def _sorted(df):
    return sorted((tuple(r) for r in df.collect()), key=repr)


@_settings(6)
@given(policy=one_pass_policies(), journal=journals())
def test_the_one_pass_partials_give_what_every_decided_row_gives(spark, policy, journal):
    """The metrics from the pass's counts per task, the timeline from its first row per step and task, and the
    exceptions it sends back equal those computed from every decided row (`Outputs.decisions`)."""
    job = case_job({"policy": policy, "journal": journal})
    out = pipeline.replay(journal_io.from_rows(spark, journal), job)
    rows = out.decisions.cache()
    letters = out.dead_letters.select("seq", "partition", "reason", "arrival_time")
    assert _sorted(out.metrics) == _sorted(metrics.hourly(rows, letters)), json.dumps(policy)
    steps = watermarks.timeline(pipeline.engine_rows(rows))
    assert _sorted(out.watermarks) == _sorted(pipeline.timeline_rows(steps)), json.dumps(policy)
    assert _sorted(out.exceptions) == _sorted(pipeline.exceptions(rows)), json.dumps(policy)
    rows.unpersist()
    out.unpersist()


RAN = "tag int, s int, x long, y long, z long, counts array<long>"  # the decide run's columns `scope_ends` reads


def test_the_held_windows_index_range_comes_with_the_decide_runs_ends(spark):
    """A state's open windows bound the close points: their least and greatest index come back in the job that
    collects the decide run's ends, not in one of their own."""
    ran = spark.createDataFrame([(one_pass.SCOPE, 0, None, None, None, [7, 100, -(2**63), 1, 0])], RAN)
    held = spark.createDataFrame([(0, 5), (0, 3), (1, 9)], "scope int, k long")
    assert one_pass.scope_ends(ran, held=held).held_range == (3, 9)
    assert one_pass.scope_ends(ran, held=held.where("k > 9")).held_range == (None, None)
    assert one_pass.scope_ends(ran).held_range is None


def test_close_points_bounded_by_a_given_range_run_no_job_and_equal_those_found_by_one(spark):
    """The held windows' index range given (`scope_ends` found it), the close points take no Spark job of their own."""
    policy = Policy.from_dict({"window": {"kind": "tumbling", "size": "1m"}})
    held = spark.createDataFrame([(-1, None, 3, 1, 1.0), (-1, None, 6, 2, 2.0)],
                                 "scope int, group_key string, k long, count long, sum double")
    firsts = spark.createDataFrame([(-1, 4, 11), (-1, 8, 12)], "scope int, reached long, close_seq long")
    sc = spark.sparkContext

    def closes(group: str, given):
        sc.setJobGroup(group, "close points")
        try:
            rows = windows.closes_of(firsts, (None, None), policy, State(windows=held), given)
            return rows, len(sc.statusTracker().getJobIdsForGroup(group))
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)

    (found, jobs_found), (given, jobs_given) = closes("closes-found", None), closes("closes-given", (3, 6))
    assert (jobs_found, jobs_given) == (1, 0)
    assert sorted(map(tuple, given.collect())) == sorted(map(tuple, found.collect())) == [
        (-1, 11, 3), (-1, 11, 4), (-1, 12, 5), (-1, 12, 6)]
