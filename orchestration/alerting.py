"""Alerting for the Retrace code location: the alert sinks as resources (`RESOURCES`) and two sensors
(`SENSORS`): one for failed runs, one for failed asset checks. In open-source Dagster a failed check
does not fail its run, so the second sensor reads check evaluations from the instance's event log
after a cursor (the last storage id it handled): each failure alerts once.

Sinks are configured from the environment when the code location loads: RETRACE_ALERT_WEBHOOK_URL;
RETRACE_ALERT_SMTP_HOST, _PORT, _USER, _PASSWORD (read as a Dagster EnvVar), _STARTTLS (1/0),
RETRACE_ALERT_EMAIL_FROM, RETRACE_ALERT_EMAIL_TO (comma-separated); RETRACE_ALERT_LOG (default
.retrace/alerts.jsonl). Unset webhook or SMTP settings leave those sinks off.
"""
import os

import dagster as dg

from orchestration.alerts import (Alert, EmailAlertSink, LogFileAlertSink, WebhookAlertSink, deliver,
                                  partition_label)
from orchestration.resources import ROOT

CHECK_BATCH = 100  # evaluations read per tick; the rest wait for the next tick


def _env_resources() -> dict:
    env = os.environ.get
    password = dg.EnvVar("RETRACE_ALERT_SMTP_PASSWORD") if env("RETRACE_ALERT_SMTP_PASSWORD") else ""
    return {
        "alert_webhook": WebhookAlertSink(url=env("RETRACE_ALERT_WEBHOOK_URL", "")),
        "alert_email": EmailAlertSink(
            host=env("RETRACE_ALERT_SMTP_HOST", ""), port=int(env("RETRACE_ALERT_SMTP_PORT", "25")),
            sender=env("RETRACE_ALERT_EMAIL_FROM", "retrace@localhost"),
            recipients=[a.strip() for a in env("RETRACE_ALERT_EMAIL_TO", "").split(",") if a.strip()],
            username=env("RETRACE_ALERT_SMTP_USER", ""), password=password,
            starttls=env("RETRACE_ALERT_SMTP_STARTTLS", "0") == "1"),
        "alert_log": LogFileAlertSink(path=env("RETRACE_ALERT_LOG", os.path.join(ROOT, ".retrace", "alerts.jsonl"))),
    }


RESOURCES = _env_resources()


def _numbers(metadata: dict) -> dict:
    """The numeric metadata of a check evaluation (its counts)."""
    out = {}
    for key, value in metadata.items():
        raw = getattr(value, "value", value)
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            out[key] = raw
    return out


def check_alert(evaluation, tags: dict, run_id: str | None) -> Alert:
    """The alert for one failed check evaluation (`dg.AssetCheckEvaluation`)."""
    metadata = dict(evaluation.metadata or {})
    partition = getattr(metadata.get("partition"), "value", None) or evaluation.partition or partition_label(tags)
    failures = getattr(metadata.get("failures"), "value", None)
    message = evaluation.description or failures or "check failed"
    target = getattr(metadata.get("target"), "value", None)
    if target:
        message = f"target {target}: {message}"
    return Alert(asset=evaluation.asset_key.to_user_string(), partition=str(partition), check=evaluation.check_name,
                 severity=evaluation.severity.value, message=message, numbers=_numbers(metadata), run_id=run_id)


def run_alert(run: dg.DagsterRun, assets: list[str], failure_message: str, failed_steps: list[str]) -> Alert:
    """The alert for a failed run: the assets it was materializing (or its job), its partition."""
    return Alert(asset=", ".join(assets) or run.job_name, partition=partition_label(run.tags), check=None,
                 severity="ERROR", message=failure_message or "run failed",
                 numbers={"failed_steps": len(failed_steps)}, run_id=run.run_id)


def planned_assets(instance: dg.DagsterInstance, run: dg.DagsterRun) -> list[str]:
    """The assets (or, in a run of checks alone, the checked assets) a run was going to materialize."""
    keys = set(run.asset_selection or ())
    if not keys:
        for record in instance.get_records_for_run(
                run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED).records:
            keys.add(record.event_log_entry.dagster_event.asset_key)
    if not keys:
        keys = {k.asset_key for k in (run.asset_check_selection or ())}
    return sorted(k.to_user_string() for k in keys)


def _root_message(error) -> str:
    """The innermost cause of a step error: the user's exception, not Dagster's wrapper."""
    while error is not None and error.cause is not None:
        error = error.cause
    return "" if error is None else error.message.strip()


@dg.run_failure_sensor(name="retrace_run_failure_alert", default_status=dg.DefaultSensorStatus.RUNNING,
                       description="Alerts on every failed run of this code location")
def run_failure_alert(context: dg.RunFailureSensorContext, alert_webhook: WebhookAlertSink,
                      alert_email: EmailAlertSink, alert_log: LogFileAlertSink):
    steps = context.get_step_failure_events()
    errors = [f"{e.step_key}: {_root_message(e.step_failure_data.error)}" for e in steps]
    message = "\n".join([context.failure_event.message or "run failed", *errors])
    run = context.dagster_run
    alert = run_alert(run, planned_assets(context.instance, run), message, [e.step_key for e in steps])
    delivered = deliver(alert, [alert_webhook, alert_email, alert_log], context.log)
    context.log.info(f"run {run.run_id} failed; alerted via {', '.join(delivered) or 'no sink'}")


@dg.sensor(name="retrace_check_failure_alert", minimum_interval_seconds=30,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Alerts once on every failed asset check evaluation (checks do not fail runs)")
def check_failure_alert(context: dg.SensorEvaluationContext, alert_webhook: WebhookAlertSink,
                        alert_email: EmailAlertSink, alert_log: LogFileAlertSink):
    cursor = int(context.cursor) if context.cursor else None
    records = context.instance.event_log_storage.get_event_records(
        dg.EventRecordsFilter(event_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION, after_cursor=cursor),
        limit=CHECK_BATCH, ascending=True)
    alerted = 0
    for record in records:
        evaluation = record.event_log_entry.dagster_event.event_specific_data
        if not evaluation.passed:
            run = context.instance.get_run_by_id(record.run_id)
            alert = check_alert(evaluation, run.tags if run else {}, record.run_id)
            try:
                deliver(alert, [alert_webhook, alert_email, alert_log], context.log)
            except RuntimeError as e:  # every sink failed: keep the cursor here and retry next tick
                return dg.SkipReason(f"stopped at storage id {record.storage_id}: {e}")
            alerted += 1
        context.update_cursor(str(record.storage_id))
    return dg.SkipReason(f"{len(records)} check evaluations read, {alerted} failures alerted")


SENSORS = [run_failure_alert, check_failure_alert]
