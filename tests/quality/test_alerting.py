"""Alert sinks deliver to real local receivers (HTTP, SMTP, a file), as Dagster resources and without Dagster;
the failed-run sensor alerts on a failed run; the failed-check sensor keeps its cursor when no sink could take an
alert."""
from __future__ import annotations

import json
import re

import dagster as dg
import pytest

from orchestration.alerting import RESOURCES, SENSORS, check_failure_alert, run_failure_alert
from orchestration.resources import EmailAlertSink, LogFileAlertSink, WebhookAlertSink
from replay.io import alerts
from replay.io.alerts import Alert, deliver
from tests.support.quality_location import CHECKS, JOURNAL, OUTPUTS, definitions
from tests.support.receivers import HttpReceiver

ALERT = Alert(asset="windows", partition="2024-01-01-00:00...2024-01-01-01:00", check="window_rows_unique",
              severity="ERROR", message="duplicates: windows with more than one row: 1 unexpected rows",
              numbers={"windows_in_range": 812, "duplicated_windows": 1}, run_id="run-123")


def test_webhook_posts_slack_compatible_json(http_receiver):
    WebhookAlertSink(url=http_receiver.url).send(ALERT)
    post = http_receiver.take()
    assert post["path"] == "/hooks/retrace" and post["content_type"] == "application/json"
    body = post["json"]
    assert body["text"].startswith("[Retrace ERROR] check window_rows_unique failed on windows, partition "
                                   "2024-01-01-00:00...2024-01-01-01:00")
    assert "duplicated_windows: 1" in body["text"]
    assert body["blocks"][0] == {"type": "header", "text": {"type": "plain_text", "text": ALERT.title}}
    fields = [f["text"] for f in body["blocks"][1]["fields"]]
    assert fields == ["*Asset*\nwindows", "*Partition*\n2024-01-01-00:00...2024-01-01-01:00",
                      "*Check*\nwindow_rows_unique", "*Severity*\nERROR"]


def test_webhook_error_names_the_urls_host_and_the_status_but_not_its_path_the_token():
    receiver = HttpReceiver(status=500)
    host = receiver.url.split("/hooks/")[0]
    try:
        with pytest.raises(RuntimeError, match=re.escape(f"webhook {host}/*** answered 500")):
            WebhookAlertSink(url=receiver.url).send(ALERT)
    finally:
        receiver.close()


def test_email_goes_over_smtp_with_the_alert_in_subject_and_body(smtp_receiver):
    sink = EmailAlertSink(host="127.0.0.1", port=smtp_receiver.port, sender="retrace@example.test",
                          recipients=["oncall@example.test", "data@example.test"])
    sink.send(ALERT)
    mail = smtp_receiver.take()
    assert mail["to"] == ["oncall@example.test", "data@example.test"]
    message = mail["message"]
    assert message["Subject"] == ALERT.title and message["From"] == "retrace@example.test"
    body = message.get_content()
    assert "duplicated_windows: 1" in body and "windows_in_range: 812" in body and '"run_id": "run-123"' in body


def test_log_file_gets_one_json_line_per_alert(tmp_path):
    path = tmp_path / "logs" / "alerts.jsonl"
    sink = LogFileAlertSink(path=str(path))
    sink.send(ALERT)
    sink.send(Alert(asset="metrics", partition="all", check="late_events", severity="WARN", message="late",
                    numbers={"late": 7}))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(x["asset"], x["check"], x["severity"]) for x in lines] == [
        ("windows", "window_rows_unique", "ERROR"), ("metrics", "late_events", "WARN")]
    assert lines[0]["numbers"] == {"windows_in_range": 812, "duplicated_windows": 1}


def test_unconfigured_sinks_are_off_and_a_failing_sink_does_not_stop_the_others(tmp_path):
    dead = HttpReceiver()
    dead.close()  # nothing listens on its port any more
    log = LogFileAlertSink(path=str(tmp_path / "a.jsonl"))
    assert deliver(ALERT, [WebhookAlertSink(), EmailAlertSink(), WebhookAlertSink(url=dead.url), log]) == [
        "LogFileAlertSink"]
    assert len((tmp_path / "a.jsonl").read_text().splitlines()) == 1
    with pytest.raises(RuntimeError, match="no alert sink delivered"):
        deliver(ALERT, [WebhookAlertSink(url=dead.url)])


def test_the_sinks_deliver_without_dagster_as_the_environment_configures_them(http_receiver, tmp_path):
    sinks = alerts.sinks_from_env(str(tmp_path / "lake"), {"RETRACE_ALERT_WEBHOOK_URL": http_receiver.url,
                                                           "RETRACE_ALERT_LOG": str(tmp_path / "alerts.jsonl")})
    assert not sinks["alert_email"].enabled  # no SMTP host: off
    assert deliver(ALERT, list(sinks.values())) == ["Webhook", "LogFile"]
    assert http_receiver.take()["json"]["text"] == ALERT.slack()["text"]
    assert json.loads((tmp_path / "alerts.jsonl").read_text())["check"] == "window_rows_unique"


def test_alert_severity_must_be_warn_or_error():
    with pytest.raises(ValueError, match="alert severity: 'FATAL' must be one of WARN, ERROR"):
        Alert(asset="a", partition="all", check=None, severity="FATAL", message="m")


def test_checks_sensors_and_resources_load_as_one_code_location():
    defs = dg.Definitions(assets=[JOURNAL, OUTPUTS], asset_checks=CHECKS, sensors=SENSORS,
                          resources={**RESOURCES, "retrace": dg.ResourceDefinition.none_resource()})
    dg.Definitions.validate_loadable(defs)
    assert {s.name for s in SENSORS} == {"retrace_run_failure_alert", "retrace_check_failure_alert"}
    assert set(RESOURCES) == {"alert_webhook", "alert_email", "alert_log"}


@dg.asset(partitions_def=dg.HourlyPartitionsDefinition(start_date="2024-01-01-00:00"))
def unreadable_landing():
    raise ValueError("landing folder /data/landing is unreadable")


def test_the_run_failure_sensor_alerts_on_a_failed_run(sinks, http_receiver, tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([unreadable_landing], instance=instance, partition_key="2024-01-01-03:00",
                            raise_on_error=False)
    assert not result.success
    context = dg.build_run_status_sensor_context(
        sensor_name="retrace_run_failure_alert", dagster_instance=instance, dagster_run=result.dagster_run,
        dagster_event=result.get_run_failure_event(), resources=sinks).for_run_failure()
    run_failure_alert(context)
    body = http_receiver.take()["json"]
    assert body["text"].startswith("[Retrace ERROR] run failed on unreadable_landing, partition 2024-01-01-03:00")
    assert "landing folder /data/landing is unreadable" in body["text"] and "failed_steps: 1" in body["text"]
    logged = json.loads((tmp_path / "alerts.jsonl").read_text())
    assert logged["run_id"] == result.run_id and logged["check"] is None


def test_the_check_sensor_keeps_its_cursor_when_no_sink_takes_the_alert(late, http_receiver, tmp_path):
    dead = HttpReceiver()
    dead.close()
    failing = {"alert_webhook": WebhookAlertSink(url=dead.url), "alert_email": EmailAlertSink(),
               "alert_log": LogFileAlertSink()}
    defs = definitions(late.retrace, failing)
    context = dg.build_sensor_context(instance=late.instance, resources=failing, definitions=defs)
    check_failure_alert(context)
    stopped_at = json.loads(context.cursor)
    failed_id = late.instance.get_latest_asset_check_evaluation_record(
        dg.AssetCheckKey(dg.AssetKey(["default", "metrics"]), "late_events")).id
    assert stopped_at["low"] < failed_id and failed_id not in stopped_at["alerted"]
    working = {**failing, "alert_webhook": WebhookAlertSink(url=http_receiver.url)}
    context = dg.build_sensor_context(instance=late.instance, cursor=context.cursor, resources=working,
                                      definitions=definitions(late.retrace, working))
    check_failure_alert(context)
    assert json.loads(context.cursor)["low"] >= failed_id
    assert [p for p in http_receiver.drain() if "late_events" in p["json"]["text"]]


SECRET_TOKEN, SMTP_PASSWORD, AWS_SECRET = "xoxb-t0ken-9f8e7d", "smtp-pa55-4c3b", "aws-s3cret-2a1b0c"


@dg.asset(partitions_def=dg.HourlyPartitionsDefinition(start_date="2024-01-01-00:00"))
def leaky_landing():
    import os

    raise PermissionError(f"landing denied with key {os.environ['AWS_SECRET_ACCESS_KEY']}")


def test_the_run_failure_sensor_reports_each_failing_sink_and_never_shows_a_secret(monkeypatch, capfd, caplog,
                                                                                     tmp_path):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    dead, mail = HttpReceiver(), HttpReceiver()
    dead.close()
    mail.close()  # nothing listens on either port any more
    webhook = f"http://127.0.0.1:{dead.server.server_address[1]}/services/T0/B0/{SECRET_TOKEN}?sig={SECRET_TOKEN}"
    sinks = {"alert_webhook": WebhookAlertSink(url=webhook),
             "alert_email": EmailAlertSink(host="127.0.0.1", port=mail.server.server_address[1], username="ops",
                                           password=SMTP_PASSWORD, recipients=["oncall@example.test"]),
             "alert_log": LogFileAlertSink(path=str(tmp_path / "alerts.jsonl"))}
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([leaky_landing], instance=instance, partition_key="2024-01-01-03:00", raise_on_error=False)
    context = dg.build_run_status_sensor_context(
        sensor_name="retrace_run_failure_alert", dagster_instance=instance, dagster_run=result.dagster_run,
        dagster_event=result.get_run_failure_event(), resources=sinks).for_run_failure()
    capfd.readouterr()
    caplog.clear()
    run_failure_alert(context)
    captured = capfd.readouterr()
    outputs = {"stdout": captured.out, "stderr": captured.err, "logs": caplog.text,
               "alert log": (tmp_path / "alerts.jsonl").read_text()}
    for where, text in outputs.items():
        for secret in (SECRET_TOKEN, SMTP_PASSWORD, AWS_SECRET):
            assert secret not in text, (where, secret, text[-2000:])
    warned = [line for line in (captured.err + caplog.text).splitlines() if "not delivered by" in line]  # its log
    assert any("Webhook" in w and f"127.0.0.1:{dead.server.server_address[1]}/***" in w for w in warned), warned
    assert any("Email" in w and "not sent" in w for w in warned), warned
    logged = json.loads(outputs["alert log"])
    assert "landing denied with key ***" in logged["message"]  # the run's error, its secret hidden


def test_the_check_sensor_never_shows_a_secret_when_no_sink_delivers(late, capfd, caplog):
    dead = HttpReceiver()
    dead.close()
    failing = {"alert_webhook": WebhookAlertSink(url=f"{dead.url}/{SECRET_TOKEN}"), "alert_email": EmailAlertSink(),
               "alert_log": LogFileAlertSink()}
    context = dg.build_sensor_context(instance=late.instance, resources=failing,
                                      definitions=definitions(late.retrace, failing))
    capfd.readouterr()
    skipped = check_failure_alert(context)
    captured = capfd.readouterr()
    assert "not delivered" in skipped.skip_message
    for where, text in {"skip reason": skipped.skip_message, "stdout": captured.out, "stderr": captured.err,
                        "logs": caplog.text}.items():
        assert SECRET_TOKEN not in text and "/hooks/retrace" not in text, (where, text[-2000:])
