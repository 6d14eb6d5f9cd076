"""The Spark replay engine agrees with the pure-Python reference model on random journals and policies (the
engine alone: the conformance cases take the same engine through `replay run` and its Delta tables)."""
from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from pyspark.sql import functions as F

from replay.conformance import case_job, diff, engine_case
from replay.engine import pipeline, watermarks
from replay.io import journal as journal_io
from replay.model.policy import Policy
from tests.model import run_model
from tests.support.examples import examples
from tests.support.journals import journals, policies


def _settings(n: int):
    return settings(max_examples=examples(n), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _assert_engine_matches_model(spark, policy, journal) -> None:
    case = {"name": "random", "policy": policy, "journal": journal}
    expected = run_model(copy.deepcopy(policy), copy.deepcopy(journal))
    actual = engine_case(spark, copy.deepcopy(case))
    problems = diff(expected, actual)
    assert problems == [], "engine differs from model:\n" + "\n".join(problems) + "\ncase: " + json.dumps(case)


@_settings(18)
@given(policy=policies(), journal=journals())
def test_engine_matches_model(spark, policy, journal):
    _assert_engine_matches_model(spark, policy, journal)


@_settings(10)
@given(policy=policies(sessions=True), journal=journals())
def test_engine_matches_model_with_session_windows(spark, policy, journal):
    _assert_engine_matches_model(spark, policy, journal)


@_settings(12)
@given(policy=policies(), journal=journals(max_partitions=12))
def test_engine_matches_model_across_chunks_of_many_partitions(spark, monkeypatch, policy, journal):
    """Chunks of 4 rows: every chunk starts from the maxima of the chunks before it, and the merged output
    watermark of up to 12 partitions (most without rows in a given chunk) is found per chunk."""
    monkeypatch.setattr(watermarks, "CHUNK_ROWS", 4)
    _assert_engine_matches_model(spark, policy, journal)


@_settings(10)
@given(policy=policies(), journal=journals(max_partitions=6))
def test_a_whole_journals_first_pass_finds_the_chunk_maxima_the_aggregation_finds(spark, policy, journal):
    """The pass that sorts each stretch's offsets also takes the watermark terms' maxima, so the watermark pass
    needs no aggregation of its own; chunks of 4 rows, the engine's columns (`watermarks.contributions`)."""
    job = case_job({"policy": policy, "journal": journal})
    policy = job.policy
    prepared = pipeline.prepare(journal_io.from_rows(spark, journal), whole=True, policy=policy,
                                substream=pipeline.substream_column(job))
    rows = prepared.rows.withColumn("chunk", watermarks.chunk_column(4))
    aggregated = sorted((r[0], r[1], r[2], r[3] if r[3] is not None else watermarks.NEG)
                        for r in watermarks.contributions(rows, policy).groupBy("chunk", "partition")
                        .agg(F.max("floor_c"), F.max("event_c")).collect())
    maxima = pipeline.first_pass(prepared.rows, policy, chunk_rows=4).maxima
    if policy.punctuated:
        assert maxima is None
    elif prepared.maxima is not None:  # else something repeats: the aggregation runs on the duplicates found
        assert maxima == aggregated


@_settings(10)
@given(policy=policies(), journal=journals(max_partitions=6))
def test_a_whole_journals_first_pass_finds_the_same_whatever_task_holds_each_row(spark, policy, journal):
    """The first pass takes rows where they lie and cuts each task's into stretches of consecutive seq: one task
    holding every row, and five tasks holding scattered rows (stretches of one row), find the same offset steps
    and chunk maxima."""
    job = case_job({"policy": policy, "journal": journal})  # substreams over a payload field read it
    policy = job.policy
    rows = pipeline.prepare(journal_io.from_rows(spark, journal), substream=pipeline.substream_column(job)).rows
    together = pipeline.first_pass(rows.coalesce(1), policy, chunk_rows=4)
    scattered = pipeline.first_pass(rows.repartition(5), policy, chunk_rows=4)
    assert (scattered.steps, scattered.maxima) == (together.steps, together.maxima)


@_settings(5)
@given(policy=policies(), journal=journals(max_partitions=6))
def test_a_whole_replays_watermark_pass_decides_the_same_whatever_task_holds_each_row(spark, monkeypatch, policy,
                                                                                       journal):
    """The watermark pass takes the rows where the first pass found them, each stretch from its own start values:
    one task holding every row, and five tasks holding scattered rows (stretches of one row), give the same
    decisions; chunks of 4 rows."""
    monkeypatch.setattr(watermarks, "CHUNK_ROWS", 4)
    job = case_job({"policy": policy, "journal": journal})  # substreams over a payload field read it
    journal = journal_io.from_rows(spark, journal)

    def decisions(layout):
        out = pipeline.replay(layout, job).decisions.orderBy("seq").collect()
        return [r.asDict() for r in out]

    # scattered by seq's hash, not round-robin: a round-robin exchange sorts each task's rows by their bytes first,
    # so two passes that read different columns of the journal would get the rows split differently
    assert decisions(journal.repartition(5, "seq")) == decisions(journal.coalesce(1))


def test_the_watermark_pass_stops_when_a_task_holds_part_of_a_stretch(spark):
    """Start values hold for a stretch only when one task holds all its rows: rows split otherwise than in the
    first pass stop the replay, rather than decide from the wrong start values."""
    policy = Policy.from_dict({"out_of_order_tolerance": "5s"})
    journal = journal_io.from_rows(spark, [
        {"partition": 0, "offset": i, "arrival_time": f"2024-01-01T00:00:{i:02d}Z",
         "event_time": f"2024-01-01T00:00:{i:02d}Z"} for i in range(10)])
    prepared = pipeline.prepare(journal.coalesce(1), whole=True, policy=policy)
    assert len(prepared.lying.stretches.first) == 1  # one task held all ten rows
    split = watermarks.AsTheyLie(prepared.lying.rows.repartition(2), prepared.lying.stretches)
    d = watermarks.decide(prepared.rows, policy, maxima=prepared.maxima, lying=split)
    with pytest.raises(Exception, match="split differently"):
        d.rows.collect()
