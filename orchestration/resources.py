"""The code location's resources: where Retrace's data lives and how Spark runs (`RetraceResource`), and the alert
sinks of `replay.io.alerts` as configurable resources (webhook, email, log file)."""
from __future__ import annotations

import os

import dagster as dg

from replay.io import alerts
from replay.ops.catalog import ROOT
from replay.ops.demo import DEFAULT_POLICY

ENV = {"lake": "RETRACE_LAKE", "landing": "RETRACE_LANDING", "policy_file": "RETRACE_POLICY",
       "spark_conf_file": "RETRACE_SPARK_CONF", "partitions": "RETRACE_PARTITIONS", "source": "RETRACE_SOURCE",
       "partitions_start": "RETRACE_PARTITIONS_START"}


class RetraceResource(dg.ConfigurableResource):
    """The lake, the landing source and the production policy of the spec's job; Spark is the shared local or
    cluster session."""

    lake: str = os.path.join(ROOT, ".retrace", "lake")
    landing: str = os.path.join(ROOT, ".retrace", "landing")
    policy_file: str = DEFAULT_POLICY
    spark_conf_file: str = ""  # a spark-defaults style file (e.g. infra/spark/cluster.conf); empty = local
    partitions: int = 8  # the landing source's partition count, for the live job (the generator makes 8)
    source: str = ""  # the landing's source in the jobs folder (its payload fields; the live job runs its jobs)
    partitions_start: str = ""  # ISO time of the first hourly partition; empty = the journal's first arrival

    @classmethod
    def from_env(cls, environ=None) -> "RetraceResource":
        """The defaults, overridden by RETRACE_LAKE, RETRACE_LANDING, RETRACE_POLICY, RETRACE_SPARK_CONF,
        RETRACE_PARTITIONS, RETRACE_SOURCE, RETRACE_PARTITIONS_START (read when the code location loads, so a test
        or a deployment points it at its own folders)."""
        environ = os.environ if environ is None else environ
        return cls(**{field: environ[var] for field, var in ENV.items() if environ.get(var)})

    def spark(self):
        from replay.io.spark import get_spark

        return get_spark("retrace-dagster", conf_file=self.spark_conf_file or None)

    def policy(self, override: dict | None = None):
        """The production policy, or a what-if policy: the file's fields updated with `override`."""
        from replay.model.policy import Policy

        base = Policy.from_yaml(self.policy_file)
        return base if not override else Policy.from_dict({**base.to_dict(), **override})

    def spec_job(self):
        """The spec's count/sum job on the production policy (the job named `default`)."""
        from replay.model.jobs import Job

        return Job.spec(self.policy())

    def source_fields(self):
        """Which payload fields hold the event time and the key: the source's, else the spec's names."""
        from replay.io.journal import SourceFields
        from replay.ops.catalog import catalog

        if not self.source:
            return SourceFields()
        src = catalog().sources.get(self.source)
        if src is None:
            raise ValueError(f"RETRACE_SOURCE: {self.source!r} is not a source of the jobs folder")
        return SourceFields.of(src)

    def live_jobs(self) -> tuple:
        """What the live job runs: the spec's job, then the jobs of the jobs folder that read the landing's source."""
        from replay.ops.catalog import catalog

        return (self.spec_job(), *(catalog().reading(self.source) if self.source else ()))


class WebhookAlertSink(dg.ConfigurableResource):
    """`replay.io.alerts.Webhook` as a resource: Slack-compatible JSON POSTed to `url` (empty: off)."""

    url: str = ""
    timeout_s: float = 10.0

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    def send(self, alert: alerts.Alert) -> None:
        alerts.Webhook(self.url, self.timeout_s).send(alert)


class EmailAlertSink(dg.ConfigurableResource):
    """`replay.io.alerts.Email` as a resource: a plain-text email over SMTP (no host or recipients: off)."""

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

    def send(self, alert: alerts.Alert) -> None:
        alerts.Email(self.host, self.port, self.sender, tuple(self.recipients), self.username, self.password,
                     self.starttls, self.timeout_s).send(alert)


class LogFileAlertSink(dg.ConfigurableResource):
    """`replay.io.alerts.LogFile` as a resource: one JSON line per alert appended to `path` (empty: off)."""

    path: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.path)

    def send(self, alert: alerts.Alert) -> None:
        alerts.LogFile(self.path).send(alert)


def alert_resources(lake: str, environ=None) -> dict[str, dg.ConfigurableResource]:
    """The three sinks as the RETRACE_ALERT_* variables configure them (`replay.io.alerts.sinks_from_env`; the
    log file defaults to `lake`'s alert log); the webhook URL (its path is a token) and the SMTP password are read
    as Dagster EnvVars, so the UI shows the variables' names, not their values."""
    found = alerts.sinks_from_env(lake, environ)
    web, mail, log = found["alert_webhook"], found["alert_email"], found["alert_log"]
    url = dg.EnvVar("RETRACE_ALERT_WEBHOOK_URL") if web.url else ""
    password = dg.EnvVar("RETRACE_ALERT_SMTP_PASSWORD") if mail.password else ""
    return {
        "alert_webhook": WebhookAlertSink(url=url),
        "alert_email": EmailAlertSink(host=mail.host, port=mail.port, sender=mail.sender,
                                      recipients=list(mail.recipients), username=mail.username, password=password,
                                      starttls=mail.starttls),
        "alert_log": LogFileAlertSink(path=log.path),
    }
