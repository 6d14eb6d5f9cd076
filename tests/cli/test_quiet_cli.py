"""A `replay` command prints its own lines only: Spark's, Hadoop's and the JVM's lines, and Python's warnings, go
to the command's log file (replay/io/driver_logs.py), whose path `--verbose` prints.

One small lake, made once by real `replay` processes (generate; ingest; run with --verbose): two Spark drivers.
"""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import pytest

REPLAY = os.path.join(sys.prefix, "bin", "replay")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POLICY_FILE = os.path.join(ROOT, "infra", "policies", "production.yaml")

# Retrace's own stderr lines: progress of generate, ingest and run, and the path --verbose prints
OWN_LINE = re.compile(r"^(generate: |\[ingest\] |\[replay [^]]+\] |replay run: log file )")


@pytest.fixture(scope="module")
def commands(tmp_path_factory):
    """{command: finished process} of generate, ingest and run (--verbose) in a fresh folder, and the folder."""
    work = tmp_path_factory.mktemp("quiet")
    env = {k: v for k, v in os.environ.items() if k != "RETRACE_LOG_DIR"}  # the default: .retrace/logs
    runs = {}
    for name, args in (("generate", ["--out", "landing", "--events", "400", "--partitions", "2", "--keys", "10",
                                     "--files", "2", "--seed", "1"]),
                       ("ingest", ["--landing", "landing", "--lake", "lake"]),
                       ("run", ["--lake", "lake", "--policy", POLICY_FILE, "--target", "quiet", "--verbose"])):
        runs[name] = subprocess.run([REPLAY, name, *args], cwd=work, env=env, capture_output=True, text=True,
                                    timeout=600)
        assert runs[name].returncode == 0, runs[name].stderr[-3000:]
    return runs, work


def log_file(work, command: str) -> str:
    found = glob.glob(os.path.join(work, ".retrace", "logs", f"replay-{command}-*.log"))
    assert len(found) == 1, found
    return found[0]


def test_stderr_holds_no_line_from_log4j_spark_hadoop_or_python_warnings(commands):
    runs, _ = commands
    foreign = {name: [ln for ln in r.stderr.splitlines() if not OWN_LINE.match(ln)] for name, r in runs.items()}
    assert foreign == {"generate": [], "ingest": [], "run": []}, foreign


def test_the_log_file_of_a_spark_command_holds_sparks_lines(commands):
    _, work = commands
    for command in ("ingest", "run"):
        text = open(log_file(work, command)).read()
        assert re.search(r"^\S+ \S+ INFO SparkContext: Running Spark version 4\.2\.0$", text, re.M), text[:3000]
        assert "WARNING: Using incubator modules" in text  # and what the JVM itself writes to stderr


def test_verbose_prints_the_path_of_the_commands_log_file(commands):
    runs, work = commands
    assert f"replay run: log file {log_file(work, 'run')}\n" in runs["run"].stderr
    assert "log file" not in runs["ingest"].stderr
