"""The `replay` console script as a user runs it: errors exit 2 with a message, the happy path end to end.

Each subprocess that needs Spark starts its own (~10 s), so this file makes four such runs in all:
`ingest` with a missing folder, and `ingest`, `run`, `hash` on a tiny stream.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.support import ROOT

REPLAY = os.path.join(sys.prefix, "bin", "replay")
POLICY_FILE = os.path.join(ROOT, "infra", "policies", "production.yaml")


def replay(*args: str, cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run([REPLAY, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_console_script_is_installed():
    assert os.access(REPLAY, os.X_OK), REPLAY


def test_run_with_a_bad_duration_exits_2_naming_field_and_value(tmp_path):
    policy = tmp_path / "bad.yaml"
    policy.write_text("late_arrival_tolerance: 5x\nwindow: {kind: tumbling, size: 1m}\n")
    r = replay("run", "--lake", str(tmp_path / "lake"), "--policy", str(policy), cwd=str(tmp_path))
    assert r.returncode == 2, r.stderr[-2000:]
    assert "late_arrival_tolerance" in r.stderr and "5x" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "lake").exists()


def test_ingest_with_a_missing_landing_folder_exits_2_naming_it(tmp_path):
    missing = str(tmp_path / "no-such-landing")
    r = replay("ingest", "--landing", missing, "--lake", str(tmp_path / "lake"), cwd=str(tmp_path))
    assert r.returncode == 2, r.stderr[-2000:]
    assert missing in r.stderr
    assert "Traceback" not in r.stderr


def test_generate_ingest_run_hash_end_to_end(tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    cwd = str(tmp_path)

    g = replay("generate", "--out", landing, "--events", "500", "--partitions", "2", "--keys", "20",
               "--files", "3", "--seed", "4", cwd=cwd)
    assert g.returncode == 0, g.stderr[-2000:]
    generated = json.loads(g.stdout)
    assert generated["events"] == 500 and generated["files"] == 3
    assert sorted(os.listdir(landing)) == [f"part-{i:05d}.jsonl" for i in range(3)]

    i = replay("ingest", "--landing", landing, "--lake", lake, cwd=cwd)
    assert i.returncode == 0, i.stderr[-2000:]
    assert "ingested 3 files" in i.stdout and "500 rows" in i.stdout, i.stdout
    progress = [ln for ln in i.stderr.splitlines() if ln.startswith("[ingest]")]
    assert "3 landing files listed" in progress[0] and progress[-1].endswith("done"), i.stderr[-2000:]

    r = replay("run", "--lake", lake, "--policy", POLICY_FILE, "--target", "cli", cwd=cwd)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout)
    assert summary["target"] == "cli"
    assert "by_action" in summary
    assert sum(summary["by_action"].values()) == summary["events"]
    assert summary["events"] == 500 - generated["malformed_by_kind"]["broken_line"]
    assert summary["by_action"].get("accepted", 0) > 0

    h = replay("hash", "--lake", lake, "--target", "cli", cwd=cwd)
    assert h.returncode == 0, h.stderr[-2000:]
    assert re.fullmatch(r"[0-9a-f]{64}", h.stdout.strip()), h.stdout
