"""The live job killed with SIGKILL at any point (while journaling, between output commits, at random
times) and restarted: the final outputs equal a full replay of the final journal, and every landing row
is journaled exactly once."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from pyspark.sql import functions as F

from replay.io import journal, manifest
from replay.io.store import default_store
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.generate import StreamSpec, generate
from replay.ops.hashing import target_hash
from replay.ops.run import run
from tests.support import ROOT, target_dir
from replay.ops import outputs

POLICY = {"late_arrival_tolerance": "5s", "out_of_order_tolerance": "1s", "idle_timeout": "30s",
          "window": {"kind": "tumbling", "size": "10s"}}
# while journaling, then between the spec job's (`default`) commits: every job's commit steps are `<job>:<step>`;
# the metrics and the watermark timeline last, as they are written when a run's batches end (a kill before then
# leaves them to the next run)
CRASH_POINTS = ("journal", "journaled", *(f"default:{step}" for step in ("decisions", "dead_letters", "windows",
                                                                          "checkpoint", "metrics", "watermarks")))


def stream(landing, lake, policy_file, crash_at=None, kill_after=None) -> int:
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("RETRACE_CRASH_AT", None)
    if crash_at:
        env["RETRACE_CRASH_AT"] = crash_at
    cmd = [sys.executable, "-m", "replay.cli", "stream", "--landing", landing, "--lake", lake, "--policy",
           policy_file, "--max-files-per-batch", "2", "--clock", "simulated", "--until-idle", "--partitions", "4"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        if kill_after is not None:
            time.sleep(kill_after)
            os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if crash_at is None and kill_after is None:
        assert proc.returncode == 0, err[-3000:]
    return proc.returncode


@pytest.fixture(scope="module")
def crashed_lake(tmp_path_factory):
    """A landing stream journaled by a live job that was killed at every crash point and at a random time."""
    base = tmp_path_factory.mktemp("crashes")
    landing, lake = str(base / "landing"), str(base / "lake")
    generate(landing, StreamSpec(1300, partitions=4, keys=20, files=8, seed=3, rate=20.0))
    policy_file = str(base / "policy.yaml")
    with open(policy_file, "w") as f:
        import yaml

        yaml.safe_dump(POLICY, f)
    for point in CRASH_POINTS:
        assert stream(landing, lake, policy_file, crash_at=point) == -signal.SIGKILL
    rng = random.Random(11)
    stream(landing, lake, policy_file, kill_after=rng.uniform(12, 25))
    stream(landing, lake, policy_file)  # to the end, no crash
    return landing, lake


@pytest.fixture(scope="module")
def replayed(spark, crashed_lake):
    """`replay run` of the final journal into target `replayed`, which the outputs and metrics tests compare to."""
    _, lake = crashed_lake
    run(spark, lake, Job.spec(Policy.from_dict(POLICY)), target="replayed")
    return lake


def test_outputs_after_crashes_equal_a_full_replay_of_the_final_journal(spark, replayed):
    lake = replayed
    assert target_hash(spark, target_dir(lake, "production")) == target_hash(spark, target_dir(lake, "replayed"))


def test_metrics_after_crashes_equal_a_full_replays(spark, replayed):
    """A batch retried after a crash between its metrics commit and its checkpoint does not count its rows twice."""
    lake = replayed
    metrics = lambda target: sorted(  # noqa: E731
        tuple(r) for r in default_store().read(spark, target_dir(lake, target).table("metrics")).collect())
    assert metrics("production") == metrics("replayed")


def test_every_landing_row_is_journaled_exactly_once_despite_crashes(spark, crashed_lake):
    landing, lake = crashed_lake
    rows = journal.read(spark, lake).where(F.col("source").isNotNull())
    expected = sum(1 for f in journal.landing_files(landing)
                   for line in open(os.path.join(landing, f)) if line.strip())
    assert rows.count() == expected
    assert rows.select("source", "source_line").distinct().count() == expected


def test_every_journaled_landing_file_has_its_manifest_row_despite_crashes(spark, crashed_lake):
    """A batch's files' manifest rows wait for the next flush; a kill before it (after the journal's commit, or at
    a flush) leaves them to the next start, which records them: every journaled file is checked for changes."""
    landing, lake = crashed_lake
    journaled = journal.journaled_sources(spark, lake)
    recorded = manifest.load(spark, lake)
    assert set(recorded) == journaled
    assert all(recorded[f].size == os.path.getsize(os.path.join(landing, f)) for f in journaled)


def test_each_batch_lands_once_in_every_table_despite_crashes_between_table_commits(spark, crashed_lake):
    """Batches retried after a SIGKILL between two table commits: each table's Delta history has exactly one
    commit per batch (the retry skipped what had landed), and no seq is decided twice."""
    import json

    from delta.tables import DeltaTable

    _, lake = crashed_lake
    store = default_store()
    batches = None
    for table in ("decisions", "dead_letters", "windows", "checkpoints"):
        path = target_dir(lake, "production").table(table)
        history = DeltaTable.forPath(spark, path).history().where("userMetadata IS NOT NULL").collect()
        per_batch = [json.loads(h["userMetadata"])["batch"] for h in history]
        assert sorted(per_batch) == sorted(set(per_batch)), (table, sorted(per_batch))
        assert store.transaction_version(path, f"retrace-production-{table}") == max(per_batch)
        batches = batches or sorted(per_batch)
        assert sorted(per_batch) == batches == list(range(len(batches))), table
    decisions = outputs.read(spark, target_dir(lake, "production"), "decisions")
    assert decisions.count() == decisions.select("seq").distinct().count() == journal.read(spark, lake).count()


def test_the_watermark_timeline_is_written_by_flushes_that_continue_one_another(spark, crashed_lake):
    """The timeline is not a batch's commit (issue 46): each flush appends the steps of the rows after the last
    one's, so flushes killed before or after their commit leave every step once."""
    import json

    from delta.tables import DeltaTable

    _, lake = crashed_lake
    path = target_dir(lake, "production").table("watermarks")
    history = DeltaTable.forPath(spark, path).history().where("userMetadata IS NOT NULL").orderBy("version").collect()
    spans = [(m["seq_from"], m["seq_to"]) for m in (json.loads(h["userMetadata"]) for h in history)]
    batches = DeltaTable.forPath(spark, target_dir(lake, "production").table("checkpoints")).history().count()
    assert len(spans) < batches, (spans, batches)
    assert all(a_to <= b_from for (_, a_to), (b_from, _) in zip(spans, spans[1:])), spans
    steps = default_store().read(spark, path)
    assert steps.count() == steps.select("partition", "seq").distinct().count()
