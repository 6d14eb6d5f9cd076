"""One writer at a time: ingests, replays and the live job into one journal or target take an OS file lock.

The lock is decided before Spark starts, so the refusals here cost a Python start each; the lock is held
from the test process (as a running writer would hold it). Two tests start two real writers at once.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys

from pyspark.sql import functions as F

from replay.io import journal, locks
from replay.io.journal import ingest
from replay.io.lake import Lake
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.generate import StreamSpec, generate
from replay.ops.hashing import target_hash
from replay.ops.run import run
from tests.support import ROOT, target_dir
from replay.ops import outputs

REPLAY = os.path.join(sys.prefix, "bin", "replay")
POLICY_FILE = os.path.join(ROOT, "infra", "policies", "production.yaml")


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([REPLAY, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(p: subprocess.Popen) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=600)
    return p.returncode, out, err


def _assert_refusal(code: int, err: str, lock: str, command: str) -> None:
    assert code == 3, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    line = err.strip().splitlines()[-1]
    assert lock in line and f"pid {os.getpid()}" in line and socket.gethostname() in line, line
    assert command in line and "since" in line, line


def _landing_lines(landing: str) -> set[tuple[str, int]]:
    out = set()
    for name in sorted(os.listdir(landing)):
        with open(os.path.join(landing, name)) as f:
            out |= {(name, i) for i, line in enumerate(f.read().split("\n"), start=1) if line.strip()}
    return out


def _assert_journaled_once(spark, lake: str, landing: str) -> None:
    rows = journal.read(spark, lake)
    lines = [(r["source"], r["source_line"]) for r in rows.select("source", "source_line").collect()]
    assert len(lines) == len(set(lines)), "a landing line journaled twice"
    assert set(lines) == _landing_lines(landing)
    seqs = sorted(r["seq"] for r in rows.select("seq").collect())
    assert seqs == list(range(len(seqs))), "seq not unique and contiguous"


def test_a_held_journal_lock_refuses_ten_ingests_into_a_new_lake_naming_the_holder(tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    generate(landing, StreamSpec(50, partitions=2, keys=5, files=2, seed=1))
    lock = Lake(lake).journal_lock
    with locks.hold(lock, "a test holding the journal"):
        for _ in range(10):
            code, _, err = _finish(_start("ingest", "--landing", landing, "--lake", lake))
            _assert_refusal(code, err, lock, "a test holding the journal")
    assert not os.path.exists(Lake(lake).journal)


def test_a_held_target_lock_refuses_ten_range_replays_and_the_live_job(tmp_path):
    lake = str(tmp_path / "lake")
    lock = target_dir(lake).lock
    with locks.hold(lock, "a test holding the target"):
        for _ in range(10):
            code, _, err = _finish(_start("run", "--lake", lake, "--policy", POLICY_FILE,
                                          "--from", "2024-01-01T00:00:02Z"))
            _assert_refusal(code, err, lock, "a test holding the target")
    os.makedirs(tmp_path / "landing")
    with locks.hold(Lake(lake).journal_lock, "a test holding the journal"):
        code, _, err = _finish(_start("stream", "--landing", str(tmp_path / "landing"), "--lake", lake, "--policy",
                                      POLICY_FILE))
        _assert_refusal(code, err, Lake(lake).journal_lock, "a test holding the journal")


def test_a_writer_waits_for_the_lock_when_asked_then_names_the_holder(tmp_path):
    lake = str(tmp_path / "lake")
    lock = target_dir(lake).lock
    with locks.hold(lock, "a slow writer"):
        code, _, err = _finish(_start("run", "--lake", lake, "--policy", POLICY_FILE, "--wait", "1"))
    assert f"waiting up to 1s for {lock}" in err, err
    _assert_refusal(code, err, lock, "a slow writer")
    assert "after waiting 1s" in err


def test_the_lock_is_released_when_its_holder_is_killed(tmp_path):
    lock = str(tmp_path / "lake" / "journal.lock")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom replay.io import locks\n"
                               f"with locks.hold({lock!r}, 'doomed'):\n"
                               f"    print('held', flush=True)\n    time.sleep(600)"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()  # SIGKILL: no clean-up runs
    holder.wait()
    with locks.hold(lock, "after the kill", wait=5):
        pass


def test_a_released_lock_names_no_finished_writer(tmp_path):
    lock = str(tmp_path / "journal.lock")
    with locks.hold(lock, "finished long ago"):
        pass
    assert open(lock).read() == ""


def test_a_refusal_waits_for_a_holder_that_has_just_taken_the_lock_to_say_who_it_is(tmp_path):
    lock = str(tmp_path / "journal.lock")
    taker = subprocess.Popen([sys.executable, "-c", "import fcntl, json, os, sys, time\n"
                              f"fd = os.open({lock!r}, os.O_RDWR | os.O_CREAT)\n"
                              "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('taken', flush=True)\ntime.sleep(0.5)\n"
                              "os.pwrite(fd, json.dumps({'pid': os.getpid(), 'host': 'h', 'command': 'slow to say',"
                              " 'since': 'now'}).encode(), 0)\ntime.sleep(600)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert taker.stdout.readline().strip() == "taken"
        assert locks.holder(lock) == f"pid {taker.pid} on h ('slow to say', since now)"
    finally:
        taker.kill()
        taker.wait()


def test_two_ingests_at_once_journal_every_new_line_once(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    generate(landing, StreamSpec(300, partitions=2, keys=5, files=2, seed=1))
    ingest(spark, landing, lake)
    generate(str(tmp_path / "more"), StreamSpec(300, partitions=2, keys=5, files=2, seed=2))
    for name in os.listdir(tmp_path / "more"):
        os.rename(tmp_path / "more" / name, os.path.join(landing, "z-" + name))
    first, second = (_start("ingest", "--landing", landing, "--lake", lake) for _ in range(2))
    results = [_finish(first), _finish(second)]
    codes = sorted(code for code, _, _ in results)
    assert codes in ([0, 0], [0, 3]), results
    for code, _, err in results:
        if code == 3:
            assert "is locked by pid" in err and "Traceback" not in err, err[-2000:]
    _assert_journaled_once(spark, lake, landing)


def test_two_range_replays_at_once_leave_the_target_equal_to_one_replay(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    generate(landing, StreamSpec(2500, partitions=2, keys=20, files=2, seed=5))
    ingest(spark, landing, lake)
    policy = Policy.from_yaml(POLICY_FILE)
    run(spark, lake, Job.spec(policy))
    run(spark, lake, Job.spec(policy), target="reference")
    runs = [_start("run", "--lake", lake, "--policy", POLICY_FILE, "--from", "2024-01-01T00:00:01Z")
            for _ in range(2)]
    results = [_finish(p) for p in runs]
    assert sorted(code for code, _, _ in results) in ([0, 0], [0, 3]), [r[2][-2000:] for r in results]
    rows = outputs.read(spark, target_dir(lake), "decisions")
    assert rows.count() == rows.select("seq").distinct().count() == journal.read(spark, lake).where(
        F.col("kind").isin("event", "clock")).count()
    assert target_hash(spark, target_dir(lake, "production")) == target_hash(spark, target_dir(lake, "reference"))
