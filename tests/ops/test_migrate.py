"""A lake written before jobs (the spec's job's outputs under LAKE/outputs/<target>) is moved once by
`replay migrate`: its tables read the same afterwards, its checkpoints still continue, and until then every
command that needs its outputs refuses in one line naming `replay migrate`."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from replay.cli import main as cli
from replay.io import checkpoints
from replay.io.checkpoints import Checkpoint
from replay.io.lake import Lake, OldLayout
from replay.io.runs import writer
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.model.state import State
from replay.ops.hashing import target_hash
from replay.ops.migrate import migrate
from tests.support import POLICY_FILE, target_dir
from tests.support.lakes import replayed_lake


def _as_before_jobs(lake: str) -> None:
    """Put the spec's job's targets where the code before jobs wrote them: LAKE/outputs/<target>, in a lake
    without a marker (the code before jobs wrote none)."""
    os.rename(os.path.join(lake, "jobs", "default", "outputs"), os.path.join(lake, "outputs"))
    shutil.rmtree(os.path.join(lake, "jobs"))
    os.remove(Lake(lake).marker)


@pytest.fixture(scope="module")
def old_lake(spark, tmp_path_factory):
    """A replayed lake, its target's hash, and a checkpoint made as the live job made them before jobs (its
    `policy` the policy's canonical JSON), all in the old layout."""
    lake = replayed_lake(spark, tmp_path_factory.mktemp("migrate"), seed=4)
    digest = target_hash(spark, target_dir(lake))
    policy = json.dumps(Policy.from_yaml(POLICY_FILE).to_dict(), sort_keys=True)
    checkpoints.save(spark, target_dir(lake, "live"), Checkpoint(3, State(seq=99), {}, policy))
    _as_before_jobs(lake)
    return {"lake": lake, "hash": digest}


def test_a_command_on_a_lake_in_the_old_layout_refuses_naming_replay_migrate(old_lake, capsys):
    lake = old_lake["lake"]
    assert cli.main(["hash", "--lake", lake]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("replay hash: ") and f"`replay migrate --lake {lake}`" in err
    with pytest.raises(OldLayout):
        Lake(lake).target("default", "production")


def test_migrate_moves_the_spec_jobs_targets_and_they_read_as_before(spark, old_lake):
    lake = old_lake["lake"]
    said = migrate(lake)
    assert said.startswith(f"moved outputs/live, outputs/production of {lake} to jobs/default/"), said
    assert not os.path.exists(os.path.join(lake, "outputs"))
    assert target_hash(spark, target_dir(lake)) == old_lake["hash"]
    assert migrate(lake) == f"{lake} is in today's layout: nothing to move"


def test_a_checkpoint_made_before_jobs_continues_for_the_spec_job(spark, old_lake):
    migrate(old_lake["lake"])  # (again: a no-op when the test above ran first)
    spec = Job.spec(Policy.from_yaml(POLICY_FILE))
    cp = checkpoints.load(spark, target_dir(old_lake["lake"], "live"), policy=spec.signature())
    assert (cp.batch, cp.state.seq) == (3, 99)


def test_migrate_refuses_when_a_place_is_taken(spark, tmp_path):
    lake = replayed_lake(spark, tmp_path, seed=5)
    shutil.copytree(os.path.join(lake, "jobs", "default", "outputs"), os.path.join(lake, "outputs"))
    os.remove(Lake(lake).marker)  # a lake from before markers, in both layouts
    with pytest.raises(ValueError, match=r"production exists already; move it aside, then run `replay migrate"):
        migrate(lake)


def test_a_commit_from_before_jobs_names_its_writer_under_job():
    assert writer({"job": "replay stream", "batch": 3}) == "replay stream"  # before jobs: `job` was the writer
    assert writer({"writer": "replay run", "job": "device_minute"}) == "replay run"
