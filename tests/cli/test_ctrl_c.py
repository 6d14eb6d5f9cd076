"""Ctrl-C during a command (issue 50.8): one line saying what the command left, exit 130, and none of the py4j
tracebacks PySpark's own handler prints. Real `replay` processes, each in a session of its own as a terminal starts
it; the SIGINT comes from the command's fault-injection point (RETRACE_INTERRUPT_AT=<point>+<seconds>: a timer, so
it lands inside the Spark work that runs then) and goes to the whole process group, as a terminal's Ctrl-C does."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from replay.ops.generate import StreamSpec, generate
from tests.support import POLICY_FILE, ROOT

REPLAY = os.path.join(sys.prefix, "bin", "replay")
PROGRESS = re.compile(r"^(\[ingest\] |\[replay [^]]+\] )")  # Retrace's own progress lines


def replay(*args: str, cwd, interrupt_at: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT, "RETRACE_LOG_DIR": os.path.join(cwd, "logs")}
    env.pop("RETRACE_INTERRUPT_AT", None)
    if interrupt_at:
        env["RETRACE_INTERRUPT_AT"] = interrupt_at
    return subprocess.run([REPLAY, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                          start_new_session=True)


def said(r: subprocess.CompletedProcess) -> list[str]:
    """stderr without the progress lines."""
    return [line for line in r.stderr.splitlines() if line.strip() and not PROGRESS.match(line)]


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    work = tmp_path_factory.mktemp("ctrl-c")
    generate(str(work / "landing"), StreamSpec(60_000, partitions=4, keys=200, files=40, seed=3))
    return str(work)


def test_ctrl_c_during_ingest_says_in_one_line_that_the_journal_is_untouched_and_why(landing):
    r = replay("ingest", "--landing", "landing", "--lake", "lake", cwd=landing, interrupt_at="ingest+1")
    lines = said(r)
    assert r.returncode == 130, r.stderr[-3000:]
    assert len(lines) == 1, lines[:20]
    assert lines[0].startswith("replay ingest: interrupted (Ctrl-C); the journal is untouched"), lines[0]
    assert "adds its rows in one commit at its end" in lines[0] and "`replay ingest --landing landing" in lines[0]
    assert not os.path.exists(os.path.join(landing, "lake", "journal", "_delta_log")) or not any(
        n.endswith(".json") for n in os.listdir(os.path.join(landing, "lake", "journal", "_delta_log")))


def test_ctrl_c_during_a_run_prints_its_one_line_and_nothing_before_it(landing):
    done = replay("ingest", "--landing", "landing", "--lake", "lake", cwd=landing)
    assert done.returncode == 0, done.stderr[-3000:]
    r = replay("run", "--lake", "lake", "--policy", POLICY_FILE, cwd=landing, interrupt_at="replay+1")
    lines = said(r)
    assert r.returncode == 130, r.stderr[-3000:]
    assert len(lines) == 1, lines[:20]
    assert lines[0].startswith("replay run: interrupted (Ctrl-C); "), lines[0]
    assert "target 'production' is unchanged (no table was committed by this run)" in lines[0], lines[0]
