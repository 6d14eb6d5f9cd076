"""The engine continued from its state gives the same outputs as one replay of the whole journal: the
property that lets the live job run in micro-batches and a replay start from a checkpoint."""
from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.conformance import SHAPES, _rows, case_job
from replay.engine import pipeline as engine
from replay.io import journal
from replay.model.jobs import Job
from tests.support.examples import examples
from tests.support.journals import journals, policies


def _outputs(out: engine.Outputs) -> dict:
    return {name: _rows(getattr(out, name), fields) for name, fields in SHAPES.items()}


def _in_pieces(spark, job: Job, rows: list[dict], cuts: list[int]) -> dict:
    """Replays rows[0:c1], rows[c1:c2], ... each from the state the one before left (and the rows before
    it, where repeated (partition, offset) are found); flushes at the end."""
    df = journal.from_rows(spark, rows).persist()
    partitions = sorted({r["partition"] for r in rows})
    state, result, outs = None, {name: [] for name in SHAPES}, []
    bounds = [0, *cuts, len(rows)]
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        last = i == len(bounds) - 2
        out = engine.replay(df.where(f"seq >= {lo} AND seq < {hi}"), job, flush=last,
                            partitions=partitions,
                            continuing=engine.Continuing(state, df.where(f"seq < {lo}"), keep_state=True))
        outs.append(out)  # a piece's state reads what the pieces before it cached: freed at the end
        for name, part in _outputs(out).items():
            result[name] += part
        state = out.state
    for out in outs:
        out.unpersist()
    df.unpersist()
    return {name: sorted(v, key=json.dumps) for name, v in result.items()}


def _whole(spark, job: Job, rows: list[dict]) -> dict:
    out = engine.replay(journal.from_rows(spark, rows), job)
    rows_of = _outputs(out)
    out.unpersist()
    return {name: sorted(v, key=json.dumps) for name, v in rows_of.items()}


@st.composite
def journals_with_cuts(draw):
    rows = draw(journals())
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(rows) - 1)), max_size=3))) if len(rows) > 1 else []
    return rows, cuts


@settings(max_examples=examples(8), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(policy=policies(), case=journals_with_cuts())
def test_replay_in_pieces_from_state_equals_one_replay(spark, policy, case):
    rows, cuts = case
    job = case_job({"policy": copy.deepcopy(policy), "journal": rows})  # substreams may name the payload's `device`
    assert _in_pieces(spark, job, rows, cuts) == _whole(spark, job, rows), json.dumps(
        {"policy": policy, "cuts": cuts, "journal": rows})


@settings(max_examples=examples(4), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(policy=policies(sessions=True), case=journals_with_cuts())
def test_session_windows_in_pieces_from_state_equal_one_replay(spark, policy, case):
    """Open sessions, and the bounds of closed ones, carried in the state continue exactly."""
    rows, cuts = case
    job = case_job({"policy": copy.deepcopy(policy), "journal": rows})
    assert _in_pieces(spark, job, rows, cuts) == _whole(spark, job, rows), json.dumps(
        {"policy": policy, "cuts": cuts, "journal": rows})
