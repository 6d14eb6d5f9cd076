"""The live job fans out: it journals a source once per micro-batch, then runs every job on that source from
its own checkpoint. Killed in the middle of a job's commit and restarted with a job added, every job's live
outputs equal `replay run --job` on the final journal."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest
import yaml
from pyspark.sql import functions as F

from replay.io import checkpoints, journal
from replay.io.lake import Lake
from replay.model.jobs import Job, load_folder
from replay.model.policy import Policy
from replay.ops.catalog import DEFAULT_FOLDER
from replay.ops.generate import StreamSpec, generate
from replay.ops.hashing import target_hash
from replay.ops.run import run
from tests.support import ROOT, target_dir

POLICY = {"late_arrival_tolerance": "5s", "window": {"kind": "tumbling", "size": "1m"}}
CATALOG = load_folder(DEFAULT_FOLDER)


def stream(landing, lake, policy_file, jobs_folder, *, per_batch, max_batches=None, crash_at=None):
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("RETRACE_CRASH_AT", None)
    if crash_at:
        env["RETRACE_CRASH_AT"] = crash_at
    cmd = [sys.executable, "-m", "replay.cli", "stream", "--landing", landing, "--lake", lake, "--policy", policy_file,
           "--source", "sensors", "--jobs", jobs_folder, "--max-files-per-batch", str(per_batch),
           "--clock", "simulated", "--partitions", "2"]
    cmd += ["--max-batches", str(max_batches)] if max_batches else ["--until-idle"]
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if crash_at is None:
        assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def fanned_lake(tmp_path_factory):
    """4 sensor landing files: batch 1 (one file) with only `device_minute`, killed in the middle of that job's
    commit; then, `region_alarms` added, batches of 7 files (all the rest)."""
    base = tmp_path_factory.mktemp("fan-out")
    landing, lake, only_one = str(base / "landing"), str(base / "lake"), base / "one-job"
    generate(landing, StreamSpec(240, partitions=2, keys=6, files=4, seed=5, rate=2.0, shape="sensors"))
    policy_file = str(base / "policy.yaml")
    with open(policy_file, "w") as f:
        yaml.safe_dump(POLICY, f)
    only_one.mkdir()
    for name in ("sources.yaml", "device_minute.yaml"):
        shutil.copy(os.path.join(DEFAULT_FOLDER, name), only_one / name)
    crashed = stream(landing, lake, policy_file, str(only_one), per_batch=1, crash_at="device_minute:windows")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    stream(landing, lake, policy_file, DEFAULT_FOLDER, per_batch=7)
    return lake


@pytest.mark.parametrize("name", sorted(CATALOG.jobs))
def test_a_jobs_live_outputs_equal_replay_run_of_the_final_journal(spark, fanned_lake, name):
    job = CATALOG.job(name)
    run(spark, fanned_lake, job, target="replayed")
    assert (target_hash(spark, target_dir(fanned_lake, "production", job=name))
            == target_hash(spark, target_dir(fanned_lake, "replayed", job=name)))


def test_the_spec_job_beside_them_equals_its_replay(spark, fanned_lake):
    run(spark, fanned_lake, Job.spec(Policy.from_dict(POLICY)), target="replayed")
    assert target_hash(spark, target_dir(fanned_lake, "production")) == target_hash(spark, target_dir(fanned_lake,
                                                                                                      "replayed"))


def test_a_run_stopped_after_max_batches_ends_with_every_job_caught_up(spark, tmp_path):
    """`--max-batches` stops the query after the last batch of every job, not after the first job's commit (which
    interrupted the other jobs' Spark jobs: their batch waited for the next run)."""
    landing, lake, policy_file = str(tmp_path / "landing"), str(tmp_path / "lake"), str(tmp_path / "policy.yaml")
    generate(landing, StreamSpec(60, partitions=2, keys=3, files=1, seed=6, rate=2.0, shape="sensors"))
    with open(policy_file, "w") as f:
        yaml.safe_dump(POLICY, f)
    r = stream(landing, lake, policy_file, DEFAULT_FOLDER, per_batch=1, max_batches=1)
    assert "failed on journal seq" not in r.stderr, r.stderr[-3000:]
    last = journal.read(spark, lake).agg(F.max("seq")).first()[0]
    for name in ("default", *sorted(CATALOG.jobs)):
        assert checkpoints.load(spark, Lake(lake).target(name, "production")).state.seq == last, name


def test_a_job_failing_beside_the_others_leaves_their_batches_committed(spark, tmp_path):
    """The jobs on a source decide each batch side by side: one that fails is reported and retried at the next
    batch, while the spec's job and the other jobs commit every batch."""
    landing, lake, policy_file = str(tmp_path / "landing"), str(tmp_path / "lake"), str(tmp_path / "policy.yaml")
    generate(landing, StreamSpec(60, partitions=2, keys=3, files=2, seed=6, rate=2.0, shape="sensors"))
    with open(policy_file, "w") as f:
        yaml.safe_dump(POLICY, f)
    folder = tmp_path / "jobs"
    folder.mkdir()
    for name in ("sources.yaml", "device_minute.yaml"):
        shutil.copy(os.path.join(DEFAULT_FOLDER, name), folder / name)
    with open(os.path.join(DEFAULT_FOLDER, "device_minute.yaml")) as f:
        failing = yaml.safe_load(f)
    failing["where"] = "raise_error(concat('no reading of ', device, ' is wanted')) IS NULL"  # fails on any event
    with open(folder / "broken.yaml", "w") as f:
        yaml.safe_dump(failing, f)
    r = stream(landing, lake, policy_file, str(folder), per_batch=1)
    assert r.stderr.count("job broken") >= 2 and "failed on journal seq" in r.stderr, r.stderr[-3000:]
    last = journal.read(spark, lake).agg(F.max("seq")).first()[0]
    for name in ("default", "device_minute"):
        assert checkpoints.load(spark, Lake(lake).target(name, "production")).state.seq == last, name
    assert checkpoints.load(spark, Lake(lake).target("broken", "production")) is None
