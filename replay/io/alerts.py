"""Alerts and where they go, without Dagster: a value naming what failed (asset, partition, check, severity,
numbers), and three sinks: a webhook posting Slack-compatible JSON, email over SMTP, a JSON-lines log file.
A sink with nothing configured (no URL, no host, no path) is off. `replay stream` delivers the live job's
diagnostics through them; the Dagster code location wraps them as resources (`orchestration.resources`).

Configured from the environment (`sinks_from_env`): RETRACE_ALERT_WEBHOOK_URL; RETRACE_ALERT_SMTP_HOST, _PORT,
_USER, _PASSWORD, _STARTTLS (1/0), RETRACE_ALERT_EMAIL_FROM, RETRACE_ALERT_EMAIL_TO (comma-separated);
RETRACE_ALERT_LOG (default: the lake's alert log, LAKE/alerts.jsonl).

Secrets (the webhook's URL path, the SMTP password) never reach an alert, an error or a log line: every text
leaving here goes through `replay.io.secrets.redact`.
"""
from __future__ import annotations

import fcntl
import json
import os
import smtplib
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from email.message import EmailMessage
from typing import Protocol

from replay.io import lake_fs, secrets
from replay.io.lake import Lake

SEVERITIES = ("WARN", "ERROR")


@dataclass(frozen=True)
class Alert:
    """One failed check evaluation, failed run or live diagnostic. `numbers` are the counts behind it;
    `check` is None for a failed run."""

    asset: str
    partition: str
    check: str | None
    severity: str
    message: str
    numbers: dict = field(default_factory=dict)
    run_id: str | None = None
    diagnostic: bool = False  # `check` names a diagnostic of the live job (jobs.live.diagnostics), not a check

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"alert severity: {self.severity!r} must be one of {', '.join(SEVERITIES)}")

    @property
    def title(self) -> str:
        what = (self.check.replace("_", " ") if self.diagnostic else f"check {self.check} failed" if self.check
                else "run failed")
        return f"[Retrace {self.severity}] {what} on {self.asset}, partition {self.partition}"

    def text(self) -> str:
        """Plain text: the title, the message and every number on its own line."""
        lines = [self.title, self.message]
        lines += [f"{k}: {v}" for k, v in self.numbers.items()]
        if self.run_id:
            lines.append(f"run: {self.run_id}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return asdict(self)

    def redacted(self) -> "Alert":
        """The alert with every secret hidden (a failed run's message may quote one)."""
        hide = secrets.redact
        return replace(self, asset=hide(self.asset), partition=hide(self.partition), message=hide(self.message),
                       check=self.check and hide(self.check))

    def slack(self) -> dict:
        """Slack's incoming-webhook shape: `text` (the fallback) and Block Kit `blocks`."""
        facts = [("Asset", self.asset), ("Partition", self.partition), ("Check", self.check or "(run)"),
                 ("Severity", self.severity)]
        blocks = [
            {"type": "header", "text": {"type": "plain_text", "text": self.title[:150]}},
            {"type": "section", "fields": [{"type": "mrkdwn", "text": f"*{k}*\n{v}"} for k, v in facts]},
            {"type": "section", "text": {"type": "mrkdwn", "text": self.message[:2900] or "-"}},
        ]
        if self.numbers:
            table = "\n".join(f"{k}: {v}" for k, v in self.numbers.items())
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"```{table[:2900]}```"}})
        if self.run_id:
            blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"run `{self.run_id}`"}]})
        return {"text": self.text(), "blocks": blocks}


class Sink(Protocol):
    """Something that delivers an alert; `enabled` says whether it is configured."""

    @property
    def enabled(self) -> bool: ...

    def send(self, alert: Alert) -> None: ...


@dataclass(frozen=True)
class Webhook:
    """POSTs the alert as Slack-compatible JSON (`text` + `blocks`) to `url`; any non-2xx answer is an error."""

    url: str = field(default="", repr=False)
    timeout_s: float = 10.0

    def __post_init__(self):
        secrets.register(self.url)

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    def send(self, alert: Alert) -> None:
        request = urllib.request.Request(self.url, data=json.dumps(alert.slack()).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        shown = secrets.redact_url(self.url)  # the path and query of a webhook URL are its token
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"webhook {shown} answered {e.code} {secrets.redact(str(e.reason))}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise RuntimeError(f"webhook {shown} unreachable: {secrets.redact(str(reason))}") from None


@dataclass(frozen=True)
class Email:
    """Sends the alert as a plain-text email over SMTP (STARTTLS and login when configured)."""

    host: str = ""
    port: int = 25
    sender: str = "retrace@localhost"
    recipients: tuple[str, ...] = ()
    username: str = ""
    password: str = field(default="", repr=False)
    starttls: bool = False
    timeout_s: float = 10.0

    def __post_init__(self):
        secrets.register(self.password)

    @property
    def enabled(self) -> bool:
        return bool(self.host and self.recipients)

    def send(self, alert: Alert) -> None:
        message = EmailMessage()
        message["Subject"] = alert.title
        message["From"] = self.sender
        message["To"] = ", ".join(self.recipients)
        message.set_content(alert.text() + "\n\n" + json.dumps(alert.to_dict(), indent=2, default=str))
        try:
            with smtplib.SMTP(self.host, self.port, timeout=self.timeout_s) as smtp:
                if self.starttls:
                    smtp.starttls()
                if self.username:
                    smtp.login(self.username, self.password)
                smtp.send_message(message)
        except (smtplib.SMTPException, OSError) as e:  # a server's reply may echo what it was sent
            raise RuntimeError(f"email via {self.host}:{self.port} not sent: "
                               f"{secrets.redact(str(e) or type(e).__name__, [self.password])}") from None


@dataclass(frozen=True)
class LogFile:
    """Appends the alert as one JSON line to `path` (under a file lock: senders may run concurrently)."""

    path: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.path)

    def send(self, alert: Alert) -> None:
        if lake_fs.is_uri(self.path):  # the default, in a lake on object storage
            raise ValueError(f"the alert log {self.path} is on object storage, where a log cannot be appended to; set "
                             f"RETRACE_ALERT_LOG to a local file")
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        line = json.dumps(alert.to_dict(), sort_keys=True, default=str) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(line)
            f.flush()


def sinks_from_env(lake: str, environ=None) -> dict[str, Sink]:
    """The three sinks as the RETRACE_ALERT_* variables configure them (unset: that sink is off; the log file's
    default is the lake's alert log)."""
    env = (os.environ if environ is None else environ).get
    return {
        "alert_webhook": Webhook(url=env("RETRACE_ALERT_WEBHOOK_URL", "")),
        "alert_email": Email(
            host=env("RETRACE_ALERT_SMTP_HOST", ""), port=_port(env("RETRACE_ALERT_SMTP_PORT", "25")),
            sender=env("RETRACE_ALERT_EMAIL_FROM", "retrace@localhost"),
            recipients=tuple(a.strip() for a in env("RETRACE_ALERT_EMAIL_TO", "").split(",") if a.strip()),
            username=env("RETRACE_ALERT_SMTP_USER", ""), password=env("RETRACE_ALERT_SMTP_PASSWORD", ""),
            starttls=env("RETRACE_ALERT_SMTP_STARTTLS", "0") == "1"),
        "alert_log": LogFile(path=env("RETRACE_ALERT_LOG", "") or Lake(lake).alert_log),
    }


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise ValueError(f"RETRACE_ALERT_SMTP_PORT: {text!r} is not a port number (1-65535)")
    return port


def deliver(alert: Alert, sinks: list[Sink], warn: Callable[[str], None] | None = None) -> list[str]:
    """Send `alert` (its secrets hidden) to every enabled sink; return the names of those that took it. Each
    failing sink is reported through `warn` (default: a line on stderr), redacted, and does not stop the
    others; if every enabled sink fails, raise (a sensor's tick then fails and retries)."""
    warn = warn or (lambda line: print(line, file=sys.stderr, flush=True))
    alert, delivered, errors = alert.redacted(), [], []
    for sink in sinks:
        if not sink.enabled:
            continue
        name = type(sink).__name__
        try:
            sink.send(alert)
            delivered.append(name)
        except Exception as e:  # noqa: BLE001 - one sink's failure is reported, the others still deliver
            error = secrets.redact(f"{name}: {e}")
            errors.append(error)
            warn(f"alert {alert.title!r} not delivered by {error}")
    if errors and not delivered:
        raise RuntimeError(f"no alert sink delivered {alert.title!r}: " + "; ".join(errors))
    return delivered
