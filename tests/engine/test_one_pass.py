"""The one pass (`replay.engine.one_pass`: the JVM's `Decide`) agrees with the reference model, continues from its
state as one replay, and sends back partial aggregates that give exactly what every decided row gives: the hourly
metrics, the watermark timeline and the exceptions."""
from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings

from replay.conformance import case_job, diff, engine_case
from replay.engine import metrics, one_pass, pipeline, watermarks
from replay.io import journal as journal_io
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
