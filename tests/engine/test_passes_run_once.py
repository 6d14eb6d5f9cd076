"""A replay runs its sequential passes once: every output reads the decided rows as the runner keeps them."""
from __future__ import annotations

from replay.engine import pipeline as engine
from replay.io import journal
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.demo import DEFAULT_POLICY

ROWS = [
    {"partition": 0, "offset": 0, "arrival_time": "2024-01-01T00:00:01Z", "event_time": "2024-01-01T00:00:00Z",
     "key": "a", "value": 1},
    {"partition": 0, "offset": 1, "kind": "punctuation", "arrival_time": "2024-01-01T00:00:02Z"},
    {"partition": 1, "offset": 0, "arrival_time": "2024-01-01T00:00:03Z", "event_time": "2024-01-01T00:03:00Z",
     "key": "b", "value": 2},
]


def test_the_dead_letters_read_the_kept_decisions_and_never_run_the_watermark_pass_again(spark, tmp_path):
    """A filter does not pass through `mapInArrow`: a dead letter taken from the decided rows' plan (as the untimed
    punctuations once were) runs the watermark pass's Python over every row a second time."""
    def kept(df):
        df.write.parquet(str(tmp_path / "decided"))
        return spark.read.parquet(str(tmp_path / "decided"))

    out = engine.replay(journal.from_rows(spark, ROWS), Job.spec(Policy.from_yaml(DEFAULT_POLICY)), materialize=kept)
    plan = out.dead_letters._jdf.queryExecution().optimizedPlan().toString()
    assert "MapInArrow" not in plan
    assert {r["reason"] for r in out.dead_letters.collect()} >= {"malformed"}  # the untimed punctuation
    out.unpersist()
