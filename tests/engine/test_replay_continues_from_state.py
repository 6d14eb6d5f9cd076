"""The engine continued from its state gives the same outputs as one replay of the whole journal: the
property that lets the live job run in micro-batches and a replay start from a checkpoint."""
from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.conformance import SHAPES, _rows, case_job
from replay.engine import one_pass
from replay.engine import pipeline as engine
from replay.io import journal
from replay.model.jobs import Job
from tests.support.examples import examples
from tests.support.journals import journals, policies


def _outputs(out: engine.Outputs) -> dict:
    return {name: _rows(getattr(out, name), fields) for name, fields in SHAPES.items()}


def _counted(rows: list[dict], lo: int, hi: int) -> engine.Counted:
    """What a live batch's reads count of rows[lo:hi] (`jobs.live.lag.reads`), here from the rows themselves."""
    piece = [(r["partition"], r.get("offset"), r.get("kind", "event")) for r in rows[lo:hi]]
    records = [(p, o) for p, o, kind in piece if kind in ("event", "punctuation")]
    acted_on = {p for p, _, kind in piece if kind in ("event", "clock", "punctuation")}
    return engine.Counted(len(set(records)) == len(records), tuple(sorted(acted_on)), (lo, hi - 1))


def _earlier(df, rows: list[dict], lo: int):
    """The journal rows before rows[lo:], or None where a live job's bound on earlier offsets clears them: no record
    from lo on repeats an earlier (partition, offset)."""
    def records(piece):
        return {(r["partition"], r.get("offset")) for r in piece if r.get("kind", "event") in ("event", "punctuation")}
    return df.where(f"seq < {lo}") if lo == 0 or records(rows[:lo]) & records(rows[lo:]) else None


def _in_pieces(spark, job: Job, rows: list[dict], cuts: list[int], counted: bool = False) -> dict:
    """Replays rows[0:c1], rows[c1:c2], ... each from the state the one before left (and the rows before
    it, where repeated (partition, offset) are found); flushes at the end. `counted`: each piece comes as a live
    batch does, with what its reads counted (`engine.Counted`) and no earlier rows where none can repeat."""
    df = journal.from_rows(spark, rows).persist()
    partitions = sorted({r["partition"] for r in rows})
    state, result, outs = None, {name: [] for name in SHAPES}, []
    bounds = [0, *cuts, len(rows)]
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        last = i == len(bounds) - 2
        if counted:
            continuing = engine.Continuing(state, _earlier(df, rows, lo), True, _counted(rows, lo, hi))
        else:
            continuing = engine.Continuing(state, df.where(f"seq < {lo}"), keep_state=True)
        out = engine.replay(df.where(f"seq >= {lo} AND seq < {hi}"), job, flush=last, partitions=partitions,
                            continuing=continuing)
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


def _one_pass_policy(policy: dict) -> dict:
    """`policy` as the one pass decides it (`one_pass.applies`): no substreams, idle timeout, punctuated watermark or
    session window."""
    policy = {k: v for k, v in copy.deepcopy(policy).items() if k not in ("substream_by", "idle_timeout")}
    if (policy.get("watermark") or {}).get("strategy") == "punctuated":
        policy["watermark"] = {"strategy": "bounded"}
    if (policy.get("window") or {}).get("kind") == "session":
        del policy["window"]
    return policy


@settings(max_examples=examples(8), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(policy=policies().map(_one_pass_policy), case=journals_with_cuts())
def test_pieces_with_what_their_reads_counted_equal_one_replay(spark, policy, case):
    """A live batch skips the duplicate check where its reads found no repeat, and the watermark terms' maxima where
    its rows lie in one chunk (the one pass then finds the state after them): the outputs stay those of one replay."""
    rows, cuts = case
    job = case_job({"policy": copy.deepcopy(policy), "journal": rows})
    assert one_pass.applies(job.policy)
    assert _in_pieces(spark, job, rows, cuts, counted=True) == _whole(spark, job, rows), json.dumps(
        {"policy": policy, "cuts": cuts, "journal": rows})
