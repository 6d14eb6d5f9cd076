"""`replay stream` delivers its alerts without Dagster: each failing sink is reported on stderr, the alert still
reaches the lake's alert log, and no secret (the webhook's token, the SMTP password, AWS keys) is in any output."""
from __future__ import annotations

import os
import subprocess
import sys

from replay.io.lake import Lake
from replay.ops.generate import StreamSpec, generate
from tests.support import POLICY_FILE, ROOT
from tests.support.receivers import HttpReceiver

SECRETS = {"token": "xoxb-t0ken-5e6f7a", "sig": "s1gnature-8b9c", "smtp": "smtp-pa55-1d2e", "aws": "aws-s3cret-3f4a",
           "session": "aws-sess10n-5b6c"}


def closed_port() -> int:
    """A local port nothing listens on."""
    receiver = HttpReceiver()
    receiver.close()
    return receiver.server.server_address[1]


def test_the_live_job_reports_each_failing_alert_sink_and_never_prints_a_secret(tmp_path):
    landing, lake, tmp = str(tmp_path / "landing"), str(tmp_path / "lake"), tmp_path / "tmp"
    generate(landing, StreamSpec(1500, partitions=4, keys=20, files=3, seed=5, rate=20.0))  # has late events
    install_log = os.path.join(ROOT, ".retrace", "alerts.jsonl")  # where alerts went before they had the lake's
    install_log_before = _size(install_log)
    tmp.mkdir()
    webhook_port, smtp_port = closed_port(), closed_port()
    env = {**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp),
           "RETRACE_ALERT_WEBHOOK_URL": f"http://127.0.0.1:{webhook_port}/services/T0/B0/{SECRETS['token']}"
                                        f"?sig={SECRETS['sig']}",
           "RETRACE_ALERT_SMTP_HOST": "127.0.0.1", "RETRACE_ALERT_SMTP_PORT": str(smtp_port),
           "RETRACE_ALERT_SMTP_USER": "ops", "RETRACE_ALERT_SMTP_PASSWORD": SECRETS["smtp"],
           "RETRACE_ALERT_EMAIL_TO": "oncall@example.test",
           "AWS_SECRET_ACCESS_KEY": SECRETS["aws"], "AWS_SESSION_TOKEN": SECRETS["session"]}
    env.pop("RETRACE_ALERT_LOG", None)  # the default: the lake's alert log
    r = subprocess.run([sys.executable, "-m", "replay.cli", "stream", "--landing", landing, "--lake", lake,
                        "--policy", POLICY_FILE, "--until-idle", "--partitions", "4", "--clock", "simulated"],
                       env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]

    alert_log = Lake(lake).alert_log
    assert os.path.isfile(alert_log) and "late_input_events" in open(alert_log).read()
    assert _size(install_log) == install_log_before  # nothing went to the install folder's log
    failed = [line for line in r.stderr.splitlines() if "not delivered by" in line]
    assert any(f"Webhook: webhook http://127.0.0.1:{webhook_port}/*** unreachable" in line for line in failed), failed
    assert any(f"Email: email via 127.0.0.1:{smtp_port} not sent" in line for line in failed), failed

    outputs = {"stdout": r.stdout, "stderr": r.stderr}
    for folder in (lake, str(tmp)):  # the alert log, lock files, failure logs: every file written
        for root, _, names in os.walk(folder):
            for name in names:
                with open(os.path.join(root, name), "rb") as f:
                    outputs[os.path.join(root, name)] = f.read().decode("utf-8", "replace")
    for where, text in outputs.items():
        for secret in SECRETS.values():
            assert secret not in text, (where, secret)


def _size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0
