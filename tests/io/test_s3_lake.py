"""The lake on S3-compatible object storage (issue 47, items 3 and 4), on the tests' real S3 server (S3Proxy,
tests/support/s3_server.py), configured as a user would: AWS_ENDPOINT_URL, AWS_REGION and the keys in the environment.

One small landing is ingested and replayed into an s3a:// lake and into a local one, once for the module, and streamed
by the live job into another s3a:// lake; one writer
at a time is a lease the server arbitrates with conditional puts (replay.io.leases), tried by real processes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from replay.io import journal, lake_fs, lake_marker, leases, locks
from replay.io.lake import Lake
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.doctor import lake_locks
from replay.ops.generate import StreamSpec, generate
from replay.ops.hashing import target_hash
from replay.ops.run import run
from replay.ops.verify import verify
from tests.support import POLICY_FILE, ROOT, target_dir
from tests.support.live import stream_files
from tests.support.s3_server import REGION


@pytest.fixture(scope="module")
def aws(s3_server):
    """The AWS_* settings of the server, for this module only (and the processes it starts)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in [k for k in os.environ if k.startswith("AWS_")]:
            mp.delenv(name)
        mp.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
        mp.setenv("AWS_REGION", REGION)
        mp.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
        mp.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
        mp.setenv("PYTHONPATH", ROOT)
        yield s3_server


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    """400 events on 2 partitions in 3 local landing files."""
    folder = str(tmp_path_factory.mktemp("s3landing"))
    generate(folder, StreamSpec(400, partitions=2, keys=10, files=3, seed=3))
    return folder


@pytest.fixture(scope="module")
def lakes(spark, aws, landing, tmp_path_factory):
    """(s3a lake, local lake): the same 400 events ingested and replayed by the spec's job into each."""
    job = Job.spec(Policy.from_yaml(POLICY_FILE))
    pair = (f"s3a://{aws.bucket}/lakes/one", str(tmp_path_factory.mktemp("s3lake") / "lake"))
    for lake in pair:
        journal.ingest(spark, landing, lake)
        run(spark, lake, job)
    return pair


def keys(server, prefix: str) -> list[str]:
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=server.bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_a_replay_on_an_s3_lake_hashes_as_the_same_replay_on_a_local_lake(spark, lakes):
    s3, local = lakes
    assert target_hash(spark, target_dir(s3)) == target_hash(spark, target_dir(local))


def test_verify_replays_a_target_of_an_s3_lake_identical_and_removes_its_scratch(spark, lakes, aws):
    report = verify(spark, lakes[0], Job.spec(Policy.from_yaml(POLICY_FILE)))
    assert all(t.identical for t in report.tables) and report.tables[0].rows_compared == 400, report.text()
    assert not report.journal_violations
    assert not [k for k in keys(aws, "lakes/one/jobs/default/outputs/") if "/_verify-" in k]


def test_an_s3_lake_carries_its_marker_and_no_lease_once_its_writers_are_done(lakes, aws):
    found = keys(aws, "lakes/one/")
    assert json.loads(aws.client().get_object(Bucket=aws.bucket, Key="lakes/one/.retrace-lake")["Body"].read()) == {
        "retrace": "lake", "layout": 1}
    assert not [k for k in found if k.endswith(".lock")], found
    s3, local = (Lake(lake) for lake in lakes)  # the tables it lists are the local lake's
    assert [s3.relative(t) for t in s3.tables()] == [local.relative(t) for t in local.tables()]
    assert "jobs/default/outputs/production/decisions" in [s3.relative(t) for t in s3.tables()]


def test_a_prefix_holding_other_objects_and_no_marker_is_refused_as_a_lake_naming_them(aws):
    aws.client().put_object(Bucket=aws.bucket, Key="theirs/report.csv", Body=b"a,b\n")
    with pytest.raises(lake_marker.NotALake, match=r"s3a://.*/theirs is not a Retrace lake: .*\(report\.csv\)"):
        lake_marker.check(f"s3a://{aws.bucket}/theirs")


def _replay(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replay.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_a_live_run_on_an_s3_lake_hashes_as_a_replay_on_a_local_lake_and_gives_its_leases_back(spark, landing, lakes,
                                                                                               aws, monkeypatch):
    """Three micro-batches of one landing file each, under leases shorter than the run (renewed while it runs). The
    landing declares partitions, offsets and arrivals, so the live journal is the local lake's ingested one."""
    monkeypatch.setenv(leases.LEASE_SECONDS, "3")
    lake, prefix = f"s3a://{aws.bucket}/lakes/live", "lakes/live/"
    policy = Policy.from_yaml(POLICY_FILE)
    held = []

    def leased(_):  # after each batch: the leases in the lake, and whether each is renewed (not expired)
        found = sorted(k for k in keys(aws, prefix) if k.endswith(".lock"))
        held.append([(k, _unexpired(aws, k)) for k in found])

    summary = stream_files(spark, landing, lake, policy, max_files_per_batch=1, until_idle=True, clock="simulated",
                           partitions=2, on_batch=leased)
    assert (summary.batches, summary.rows) == (3, 400)
    assert held == [[(f"{prefix}jobs/default/outputs/production.lock", True), (f"{prefix}journal.lock", True)]] * 3
    assert not [k for k in keys(aws, prefix) if k.endswith(".lock")]
    assert target_hash(spark, target_dir(lake)) == target_hash(spark, target_dir(lakes[1]))


def _unexpired(server, key: str) -> bool:
    lease = json.loads(server.client().get_object(Bucket=server.bucket, Key=key)["Body"].read())
    return datetime.strptime(lease["expires"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc) > \
        datetime.now(timezone.utc)


def test_a_second_writer_of_an_s3_lake_is_refused_in_one_line_naming_the_first(lakes):
    lease = target_dir(lakes[0]).lock
    with locks.hold(lease, "a test writing the target"):
        done = _replay("run", "--lake", lakes[0], "--policy", POLICY_FILE)
    assert done.returncode == 3, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert line.startswith(f"replay run: {lease} is leased by pid {os.getpid()} "), line
    assert "'a test writing the target'" in line and "since" in line and "expires" in line, line
    assert not lake_fs.of(lease).exists(lease)  # the lease is given back


HOLDER = """
import sys
from replay.io import leases
print("ready", flush=True)
sys.stdin.readline()  # all racers start at once
try:
    leases.acquire(sys.argv[1], "racer", wait=0)
except leases.LeaseBusy as e:
    print("refused", e, flush=True)
    sys.exit(3)
print("held", flush=True)
sys.stdin.readline()  # holds until told, or killed
"""


def _holder(path: str) -> subprocess.Popen:
    """A writer process that takes the lease at `path` when it reads a line, and holds it until the next."""
    racer = subprocess.Popen([sys.executable, "-c", HOLDER, path], cwd=ROOT, text=True, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    assert racer.stdout.readline().strip() == "ready"
    return racer


def _go(racer: subprocess.Popen) -> None:
    racer.stdin.write("go\n")
    racer.stdin.flush()


def test_of_four_writers_racing_for_one_s3_lease_exactly_one_holds_it(aws):
    racers = [_holder(f"s3a://{aws.bucket}/race/journal.lock") for _ in range(4)]
    for racer in racers:
        _go(racer)
    said = [racer.stdout.readline() for racer in racers]
    for racer in racers:
        racer.stdin.close()
    codes = [racer.wait(timeout=60) for racer in racers]
    assert sorted(codes) == [0, 3, 3, 3] and sorted(line.split()[0] for line in said) == ["held"] + ["refused"] * 3
    assert all("is leased by pid" in line for line in said if line.startswith("refused")), said


def test_the_lease_of_a_killed_writer_is_taken_over_once_it_expires(aws, monkeypatch):
    monkeypatch.setenv(leases.LEASE_SECONDS, "5")
    path = f"s3a://{aws.bucket}/killed/journal.lock"
    doomed = _holder(path)
    _go(doomed)
    assert doomed.stdout.readline().strip() == "held"
    doomed.kill()  # SIGKILL: its lease stays until it expires
    doomed.wait()
    with pytest.raises(locks.LockBusy, match=f"is leased by pid {doomed.pid} "):
        locks.check_free(path, wait=0)
    with locks.hold(path, "after the kill", wait=30):
        assert json.loads(lake_fs.of(path).read(path)[0])["pid"] == os.getpid()
    assert not lake_fs.of(path).exists(path)


def test_doctor_finds_that_the_s3_server_refuses_a_second_put_if_absent(aws):
    check = lake_locks(f"s3a://{aws.bucket}/lakes/doctor")
    assert (check.verdict, check.text) == ("ok", f"the store of s3a://{aws.bucket}/lakes/doctor refuses a second "
                                                f"put-if-absent: leases exclude writers"), check
