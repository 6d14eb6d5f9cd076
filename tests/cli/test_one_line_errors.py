"""Failures a user causes are one line on stderr, and what the libraries say about them goes to the command's log
file (issue 50.8): an unknown column in a job (PySpark logs a ~10 KB JSON record of it), an S3 endpoint that does
not answer (botocore's trace). Real `replay` processes."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

from tests.support import ROOT
from tests.support.receivers import HttpReceiver

REPLAY = os.path.join(sys.prefix, "bin", "replay")


def replay(*args: str, cwd, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([REPLAY, *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": ROOT, "RETRACE_LOG_DIR": os.path.join(cwd, "logs"),
                               **(env or {})})


def test_an_unknown_column_in_a_job_is_one_line_and_sparks_error_record_goes_to_the_log_file(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "sources.yaml").write_text("readings:\n  event_time_field: event_time\n  key_field: key\n")
    (jobs / "typo.yaml").write_text("source: readings\npolicy: {window: {kind: tumbling, size: 1m}}\n"
                                    "where: \"no_such_column > 1\"\naggregates:\n  events: \"count(*)\"\n")
    r = replay("run", "--lake", "lake", "--job", "typo", "--jobs", str(jobs), cwd=str(tmp_path))
    assert r.returncode == 2, r.stderr[-3000:]
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and len(lines[0]) < 1000, r.stderr[:3000]
    assert lines[0].startswith("replay run: ") and "no_such_column" in lines[0], lines[0]
    assert "SQLQueryContextLogger" not in r.stderr  # PySpark's (JSON) record of the error ...
    log = glob.glob(str(tmp_path / "logs" / "replay-run-*.log"))[0]
    assert f"Spark's report in {log}" in lines[0], lines[0]
    assert "SQLQueryContextLogger: [UNRESOLVED_COLUMN" in open(log).read()  # ... is in the log file


def test_an_s3_endpoint_that_does_not_answer_is_one_line_naming_the_landing_and_the_variable(tmp_path):
    closed = HttpReceiver()
    closed.close()  # nothing listens on its port any more
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed.server.server_address[1]}", "AWS_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3cret-never-shown",
           "AWS_MAX_ATTEMPTS": "1"}
    r = replay("ingest", "--landing", "s3://bucket/landing", "--lake", "lake", cwd=str(tmp_path), env=env)
    assert r.returncode == 2, r.stderr[-3000:]
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr[:3000]
    assert "cannot reach the S3 endpoint for landing s3://bucket/landing" in lines[0], lines[0]
    assert "AWS_ENDPOINT_URL" in lines[0] and "s3cret-never-shown" not in r.stderr, lines[0]
