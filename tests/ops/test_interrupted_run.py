"""An interrupted `replay run` (Ctrl-C between two table commits) leaves a target whose tables come from two
runs: it says so in one line, `replay hash` and `replay verify` refuse the target, and the next `replay run`
makes it whole. The command runs in this process (its Spark session is the tests'), Ctrl-C is a real SIGINT."""
from __future__ import annotations

import os

import pytest

from replay.cli import main as cli
from tests.support.lakes import POLICY_FILE, replayed_lake


@pytest.fixture(scope="module")
def small_lake(spark, tmp_path_factory):
    return replayed_lake(spark, tmp_path_factory.mktemp("interrupted"), seed=5)


def test_an_interrupted_run_says_in_one_line_what_is_half_written_and_hash_and_verify_refuse_it(
        spark, small_lake, monkeypatch, capfd):
    lake = small_lake
    assert cli.main(["hash", "--lake", lake]) == 0
    whole = capfd.readouterr().out.strip()

    monkeypatch.setenv("RETRACE_INTERRUPT_AT", "windows")  # Ctrl-C right after the windows commit
    assert cli.main(["run", "--lake", lake, "--policy", POLICY_FILE]) == 130
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("replay run")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert "half-written" in lines[0] and "dead_letters, watermarks, metrics from run" in lines[0], lines[0]
    assert f"replay run --lake {lake} --policy {POLICY_FILE}" in lines[0]

    monkeypatch.delenv("RETRACE_INTERRUPT_AT")
    assert cli.main(["hash", "--lake", lake]) == 2
    assert "half-written" in capfd.readouterr().err
    assert cli.main(["verify", "--lake", lake, "--policy", POLICY_FILE]) == 2
    assert "half-written" in capfd.readouterr().err

    assert cli.main(["run", "--lake", lake, "--policy", POLICY_FILE]) == 0  # finishes the set
    capfd.readouterr()
    assert cli.main(["hash", "--lake", lake]) == 0
    assert capfd.readouterr().out.strip() == whole


def test_a_run_removes_the_scratch_folder_a_killed_range_run_left(spark, small_lake, capfd):
    """A range run keeps its decisions in a scratch folder of the target until it commits; killed, it leaves the
    folder behind. The next run, holding the target's lock, removes it."""
    from tests.support import target_dir

    left = target_dir(small_lake, "production").table("_scratch-0123456789abcdef")
    os.makedirs(os.path.join(left, "_delta_log"))
    assert cli.main(["run", "--lake", small_lake, "--policy", POLICY_FILE, "--from", "2024-01-01T00:10:00Z"]) == 0
    capfd.readouterr()
    assert not os.path.exists(left)
    assert target_dir(small_lake, "production").scratch_folders() == []
