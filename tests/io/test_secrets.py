"""Secrets are hidden in any text Retrace writes (`replay.io.secrets`): a webhook URL's path and query, the values of
secret variables, what a sink was configured with, and secrets recognizable by their form."""
from __future__ import annotations

from replay.io import alerts, secrets
from replay.io.secrets import redact

WEBHOOK = "https://hooks.slack.invalid/services/T0/B0/tok3n-abcdef?sig=s1gn4ture"


def test_a_webhook_url_is_shown_with_its_host_only():
    assert secrets.redact_url(WEBHOOK) == "https://hooks.slack.invalid/***"
    assert secrets.redact_url("http://127.0.0.1:8025/") == "http://127.0.0.1:8025/"


def test_the_values_of_secret_variables_are_hidden_wherever_they_appear():
    env = {"RETRACE_ALERT_WEBHOOK_URL": WEBHOOK, "RETRACE_ALERT_SMTP_PASSWORD": "smtp-pa55word",
           "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG", "AWS_SESSION_TOKEN": "FwoGZXIvYXdzEBY",
           "MY_API_TOKEN": "api-t0ken-value", "RETRACE_LAKE": "/data/lake"}
    text = (f"webhook {WEBHOOK} unreachable; POST /services/T0/B0/tok3n-abcdef?sig=s1gn4ture; login smtp-pa55word; "
            "key wJalrXUtnFEMI/K7MDENG token FwoGZXIvYXdzEBY api-t0ken-value in /data/lake")
    shown = redact(text, environ=env)
    for name, value in env.items():
        if name != "RETRACE_LAKE":
            assert value not in shown, (name, shown)
    assert "tok3n-abcdef" not in shown and "s1gn4ture" not in shown
    assert "https://hooks.slack.invalid/***" in shown and "/data/lake" in shown  # where, not what


def test_a_secret_a_sink_was_configured_with_is_hidden_once_the_sink_exists():
    alerts.Webhook(url="https://hooks.example.invalid/T9/only-in-config")
    alerts.Email(host="smtp.example.invalid", password="c0nfigured-pa55")
    shown = redact("failed: https://hooks.example.invalid/T9/only-in-config with c0nfigured-pa55", environ={})
    assert shown == "failed: https://hooks.example.invalid/*** with ***"
    assert "c0nfigured-pa55" not in repr(alerts.Email(password="c0nfigured-pa55"))


def test_url_passwords_aws_key_ids_and_signatures_are_hidden_by_their_form():
    shown = redact("s3a://ops:hunter2x@minio:9000/b AKIAIOSFODNN7EXAMPLE ?X-Amz-Signature=abc123&part=1", environ={})
    assert shown == "s3a://ops:***@minio:9000/b AKIA*** ?X-Amz-Signature=***&part=1"
