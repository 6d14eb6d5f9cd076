"""Alerting for the Retrace code location: the alert sinks as resources (`RESOURCES`, configured from the
environment when the code location loads: `replay.io.alerts`) and two sensors (`SENSORS`): one for failed runs,
one for failed asset checks. In open-source Dagster a failed check does not fail its run, so the second sensor
reads the instance's asset-check executions (not the event log: on the default SQLite storage, events are sharded
per run and their ids are not global) after a cursor: each failure alerts once.
"""
import json

import dagster as dg

from assets.partitions import partition_label
from orchestration.resources import (EmailAlertSink, LogFileAlertSink, RetraceResource, WebhookAlertSink,
                                     alert_resources)
from replay.io.alerts import Alert, deliver

PAGE = 100  # check executions read per query
RESOURCES = alert_resources(RetraceResource.from_env().lake)


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
    delivered = deliver(alert, [alert_webhook, alert_email, alert_log], context.log.warning)
    context.log.info(f"run {run.run_id} failed; alerted via {', '.join(delivered) or 'no sink'}")


def _executions_after(instance: dg.DagsterInstance, check_key: dg.AssetCheckKey, low: int) -> list:
    """The executions of one check with id > low (the history is read newest first, a page at a time)."""
    out, cursor = [], None
    while True:
        page = instance.event_log_storage.get_asset_check_execution_history(check_key, limit=PAGE, cursor=cursor)
        fresh = [r for r in page if r.id > low]
        out += fresh
        if len(page) < PAGE or len(fresh) < len(page):
            return out
        cursor = page[-1].id


def _resolved(instance: dg.DagsterInstance, record) -> bool:
    """An execution is done once it has a result, or once its run ended without one."""
    if record.status.value != "PLANNED":  # SUCCEEDED or FAILED (the enum is not public API)
        return True
    run = instance.get_run_by_id(record.run_id)
    return run is None or run.is_finished


@dg.sensor(name="retrace_check_failure_alert", minimum_interval_seconds=30,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Alerts once on every failed asset check execution (checks do not fail runs)")
def check_failure_alert(context: dg.SensorEvaluationContext, alert_webhook: WebhookAlertSink,
                        alert_email: EmailAlertSink, alert_log: LogFileAlertSink):
    """Reads the asset-check executions of this code location's checks (ids are global and assigned
    when a run plans its checks). The cursor is `low`, below which every execution is resolved, plus the
    ids above it already alerted: checks of one run finish in any order."""
    state = json.loads(context.cursor) if context.cursor else {"low": 0, "alerted": []}
    low, alerted = state["low"], set(state["alerted"])
    if context.repository_def is None:
        raise dg.DagsterInvariantViolationError("retrace_check_failure_alert needs its code location's checks")
    records = sorted((r for key in context.repository_def.asset_graph.asset_check_keys
                      for r in _executions_after(context.instance, key, low)), key=lambda r: r.id)
    sinks, sent, pending = [alert_webhook, alert_email, alert_log], 0, False
    for record in records:
        if not _resolved(context.instance, record):
            pending = True  # the low mark stays below it; later executions are still handled
            continue
        if record.status.value == "FAILED" and record.id not in alerted:
            run = context.instance.get_run_by_id(record.run_id)
            alert = check_alert(record.event.dagster_event.event_specific_data, run.tags if run else {}, record.run_id)
            try:
                deliver(alert, sinks, context.log.warning)
            except RuntimeError as e:  # every sink failed: stop here, the next tick retries
                context.update_cursor(json.dumps({"low": low, "alerted": sorted(alerted)}))
                return dg.SkipReason(f"alert for check execution {record.id} not delivered: {e}")
            alerted.add(record.id)
            sent += 1
        if not pending:
            low = record.id
    alerted = {i for i in alerted if i > low}
    context.update_cursor(json.dumps({"low": low, "alerted": sorted(alerted)}))
    return dg.SkipReason(f"{len(records)} check executions read, {sent} failures alerted")


SENSORS = [run_failure_alert, check_failure_alert]
