"""A replay runs its sequential passes once per output that needs them: every output reads the decided rows as they
were kept, not the journal through the passes again."""
from __future__ import annotations

from replay.engine import pipeline as engine
from replay.io import journal
from replay.model.jobs import Job
from replay.model.policy import Policy

ROWS = [
    {"partition": 0, "offset": 0, "arrival_time": "2024-01-01T00:00:01Z", "event_time": "2024-01-01T00:00:00Z",
     "key": "a", "value": 1},
    {"partition": 0, "offset": 1, "kind": "punctuation", "arrival_time": "2024-01-01T00:00:02Z"},  # no time: malformed
    {"partition": 1, "offset": 0, "arrival_time": "2024-01-01T00:02:00Z", "event_time": "2024-01-01T00:02:00Z",
     "key": "b", "value": 2},
    {"partition": 0, "offset": 2, "arrival_time": "2024-01-01T00:02:01Z", "event_time": "2024-01-01T00:01:30Z",
     "key": "a", "value": 3},  # the output watermark passes 00:01: the first minute closes
    {"partition": 0, "offset": 3, "arrival_time": "2024-01-01T00:02:02Z", "event_time": "2024-01-01T00:00:30Z",
     "key": "a", "value": 4},  # out of order, accepted: its window closed before it
]
# out-of-order events accepted as they are, so one can miss its window; no late tolerance
POLICY = {"late_arrival_tolerance": None, "out_of_order_action": "accept", "window": {"kind": "tumbling", "size": "1m"}}


def _passes(df) -> int:
    """How many times the plan runs a JVM pass over the rows afresh: leaves of its optimized plan that are an
    operator's output (an RDD with the pass's columns), not the cached relation a persisted one becomes."""
    leaves = df._jdf.queryExecution().optimizedPlan().collectLeaves()
    found = [leaves.apply(i) for i in range(leaves.size())]
    return sum(1 for leaf in found if leaf.getClass().getSimpleName() == "LogicalRDD"
               and any(c in leaf.output().toString() for c in ("tag#", "w_before#")))


def test_the_spec_jobs_dead_letters_read_the_decide_run_as_it_was_kept(spark):
    """The spec's job takes every kept event into its windows: the decide run also finds its `window_closed` dead
    letters, so they (and the exceptions) read that run's persisted rows; the windows read the kept events in one
    run of their own."""
    out = engine.replay(journal.from_rows(spark, ROWS), Job.spec(Policy.from_dict(POLICY)))
    assert [_passes(df) for df in (out.exceptions, out.dead_letters, out.windows)] == [0, 0, 1]
    assert {r["reason"] for r in out.dead_letters.collect()} == {"malformed", "window_closed"}
    out.unpersist()


def test_a_filtered_jobs_windows_read_its_kept_events_in_a_run_of_their_own(spark):
    """A job with a filter aggregates what passes it with its own Spark SQL: the kept events come back in a run of
    their own; the exceptions and the dead letters (kept once, the windows missed among them) run none again."""
    job = Job.define("filtered", POLICY, where="value > 1", aggregates={"readings": "count(*)"})
    out = engine.replay(journal.from_rows(spark, ROWS), job)
    assert [_passes(df) for df in (out.exceptions, out.dead_letters, out.windows)] == [0, 0, 1]
    assert {r["reason"] for r in out.dead_letters.collect()} == {"malformed", "window_closed"}
    out.unpersist()


def test_the_dead_letters_of_an_idle_timeout_read_the_decided_rows_as_the_runner_keeps_them(spark, tmp_path):
    """A policy the one pass does not decide (an idle timeout) keeps the decided rows as the runner says, and every
    output reads them there: the dead letters run no pass over the journal again."""
    def kept(df):
        df.write.parquet(str(tmp_path / "decided"))
        return spark.read.parquet(str(tmp_path / "decided"))

    policy = Policy.from_dict({**POLICY, "idle_timeout": "1m"})
    out = engine.replay(journal.from_rows(spark, ROWS), Job.spec(policy), materialize=kept)
    assert _passes(out.dead_letters) == 0
    assert {r["reason"] for r in out.dead_letters.collect()} >= {"malformed"}  # the untimed punctuation
    out.unpersist()
