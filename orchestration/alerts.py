"""Alerts and where they go: a value naming what failed (asset, partition, check, severity, numbers), and
three sinks as Dagster resources: a webhook posting Slack-compatible JSON, email over SMTP, a JSON-lines
log file. A sink with nothing configured (no URL, no host, no path) is off."""
from __future__ import annotations

import fcntl
import json
import os
import smtplib
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from email.message import EmailMessage

import dagster as dg

SEVERITIES = ("WARN", "ERROR")
RANGE_TAGS = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")


def partition_label(tags: dict) -> str:
    """How a run names its partitions: one key, a range `start...end`, or `all` (no partition)."""
    if tags.get("dagster/partition"):
        return tags["dagster/partition"]
    if all(tags.get(t) for t in RANGE_TAGS):
        return "...".join(tags[t] for t in RANGE_TAGS)
    return "all"


@dataclass(frozen=True)
class Alert:
    """One failed check evaluation or failed run. `numbers` are the counts behind it (check metadata);
    `check` is None for a failed run."""

    asset: str
    partition: str
    check: str | None
    severity: str
    message: str
    numbers: dict = field(default_factory=dict)
    run_id: str | None = None
    diagnostic: bool = False  # `check` names a diagnostic of the live job (jobs.diagnostics), not a check


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


def diagnostic_alert(d) -> Alert:
    """The alert for a diagnostic of the live job (a jobs.diagnostics.Diagnostic) as it starts."""
    numbers = {k: v for k, v in (("batch", d.batch), ("late_events", d.count)) if v is not None}
    return Alert(asset="live", partition="all" if d.partition is None else str(d.partition), check=d.kind,
                 severity="WARN", message=d.message, numbers=numbers, diagnostic=True)


class AlertSink(dg.ConfigurableResource):
    """Something that delivers an alert; `enabled` says whether it is configured."""

    @property
    def enabled(self) -> bool:
        raise NotImplementedError

    def send(self, alert: Alert) -> None:
        raise NotImplementedError


class WebhookAlertSink(AlertSink):
    """POSTs the alert as Slack-compatible JSON (`text` + `blocks`) to `url` (a Slack incoming webhook or
    anything that accepts that shape); any non-2xx answer is an error."""

    url: str = ""
    timeout_s: float = 10.0

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    def send(self, alert: Alert) -> None:
        body = json.dumps(alert.slack()).encode()
        request = urllib.request.Request(self.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"webhook {self.url} answered {e.code} {e.reason}") from None
        except urllib.error.URLError as e:
            raise RuntimeError(f"webhook {self.url} unreachable: {e.reason}") from None


class EmailAlertSink(AlertSink):
    """Sends the alert as a plain-text email over SMTP (STARTTLS and login when configured)."""

    host: str = ""
    port: int = 25
    sender: str = "retrace@localhost"
    recipients: list[str] = []
    username: str = ""
    password: str = ""
    starttls: bool = False
    timeout_s: float = 10.0

    @property
    def enabled(self) -> bool:
        return bool(self.host and self.recipients)

    def send(self, alert: Alert) -> None:
        message = EmailMessage()
        message["Subject"] = alert.title
        message["From"] = self.sender
        message["To"] = ", ".join(self.recipients)
        message.set_content(alert.text() + "\n\n" + json.dumps(alert.to_dict(), indent=2, default=str))
        with smtplib.SMTP(self.host, self.port, timeout=self.timeout_s) as smtp:
            if self.starttls:
                smtp.starttls()
            if self.username:
                smtp.login(self.username, self.password)
            smtp.send_message(message)


class LogFileAlertSink(AlertSink):
    """Appends the alert as one JSON line to `path` (under a file lock: sensors may run concurrently)."""

    path: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.path)

    def send(self, alert: Alert) -> None:
        folder = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(folder, exist_ok=True)
        line = json.dumps(alert.to_dict(), sort_keys=True, default=str) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(line)
            f.flush()


def deliver(alert: Alert, sinks: list[AlertSink], log=None) -> list[str]:
    """Send `alert` to every enabled sink; return the names of those that took it. A failing sink does
    not stop the others; if every enabled sink fails, raise (the sensor tick fails and retries)."""
    delivered, errors = [], []
    for sink in sinks:
        if not sink.enabled:
            continue
        try:
            sink.send(alert)
            delivered.append(type(sink).__name__)
        except Exception as e:  # noqa: BLE001 - one sink's failure is reported, the others still deliver
            errors.append(f"{type(sink).__name__}: {e}")
            if log is not None:
                log.warning(f"alert not delivered by {type(sink).__name__}: {e}")
    if errors and not delivered:
        raise RuntimeError(f"no alert sink delivered {alert.title!r}: " + "; ".join(errors))
    return delivered
