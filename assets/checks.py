"""Dagster asset checks on every job's outputs: the validations of `assets.quality` over the arrival range
of the run that materialized the outputs (its partition time window; the whole target when the run
has no partition), with configurable thresholds and severities; the counts go into check metadata.

`job_checks(job)` makes them on the job's assets `[<job>, ...]`: late events, windows emitted once, window rows
unique, dead letters match and watermark delay, and conservation (spec 7) where the job allows it
(`Job.conserves`: no `where`, no transform, and an aggregate that counts members, as the spec's job has).

No `from __future__ import annotations` here: Dagster reads the config classes from the annotations.
"""
import json
from typing import Optional

import dagster as dg

from assets import quality
from assets.outputs import with_override
from assets.partitions import RANGE_TAGS, hour_window, partition_label
from assets.quality_tables import Target
from replay.model.jobs import Job

DEFAULTS = quality.Thresholds()


class CheckConfig(dg.Config):
    """`target`: the outputs checked; by default the target of this run's replay (a `target` in the op
    config of the run), else `production`. `severity`: WARN or ERROR when the check fails."""

    target: Optional[str] = None
    severity: str = "ERROR"


class LateEventsConfig(CheckConfig):
    """Limits per hour of arrival: fractions of the hour's events (judged in hours with at least
    `min_events` events) and counts; null disables a limit."""

    severity: str = "WARN"
    early_max_fraction: Optional[float] = DEFAULTS.early.max_fraction
    early_max_count: Optional[int] = DEFAULTS.early.max_count
    late_max_fraction: Optional[float] = DEFAULTS.late.max_fraction
    late_max_count: Optional[int] = DEFAULTS.late.max_count
    out_of_order_max_fraction: Optional[float] = DEFAULTS.out_of_order.max_fraction
    out_of_order_max_count: Optional[int] = DEFAULTS.out_of_order.max_count
    dropped_max_fraction: Optional[float] = DEFAULTS.dropped.max_fraction
    dropped_max_count: Optional[int] = DEFAULTS.dropped.max_count
    dead_letters_max_fraction: Optional[float] = DEFAULTS.dead_letters.max_fraction
    dead_letters_max_count: Optional[int] = DEFAULTS.dead_letters.max_count
    min_events: int = DEFAULTS.min_events


class WatermarkDelayConfig(CheckConfig):
    """`max_watermark_delay`: the largest allowed arrival - output watermark, a duration like '15m'."""

    severity: str = "WARN"
    max_watermark_delay: str = "15m"


def _thresholds(config: dg.Config) -> quality.Thresholds:
    settings = {k: v for k, v in config.model_dump().items() if k not in ("target", "severity")}
    return quality.Thresholds.from_flat(settings)


def _severity(config: CheckConfig) -> dg.AssetCheckSeverity:
    value = str(config.severity).upper()
    if value not in ("WARN", "ERROR"):
        raise ValueError(f"severity: {config.severity!r} must be WARN or ERROR")
    return dg.AssetCheckSeverity[value]


def _replay_op_config(context) -> dict:
    """The settings of this run's replay op: the first op config of the run holding a `target`."""
    for op in ((context.run.run_config or {}).get("ops") or {}).values():
        settings = op.get("config") if isinstance(op, dict) else None
        if isinstance(settings, dict) and isinstance(settings.get("target"), str):
            return settings
    return {}


def _window(context) -> tuple[Optional[str], Optional[str]]:
    """The run's partition time window as ISO instants [start, end), or the whole target. A run of checks
    alone has partition tags but no partitioned asset, so the window is then read from the tags with the
    shared hourly partitions."""
    tags = context.run.tags
    if tags.get("dagster/partition"):
        first = last = tags["dagster/partition"]
    elif all(tags.get(t) for t in RANGE_TAGS):
        first, last = (tags[t] for t in RANGE_TAGS)
    else:
        return None, None
    try:
        window = context.partition_time_window
        return window.start.isoformat(), window.end.isoformat()
    except dg.DagsterInvariantViolationError:
        return hour_window(first)[0].isoformat(), hour_window(last)[1].isoformat()


def _evaluate(context, config: CheckConfig, job: Job, check: str, **kwargs) -> dg.AssetCheckResult:
    """Run validation `check` on `job`'s target of this run's replay (with the run's policy override)."""
    retrace, severity = context.resources.retrace, _severity(config)
    replay = _replay_op_config(context)
    target = config.target or replay.get("target") or "production"
    override = replay.get("policy_override") if isinstance(replay.get("policy_override"), dict) else None
    start, end = _window(context)
    t = Target(retrace.spark(), retrace.lake, target, with_override(job, override), start, end)
    outcome = quality.VALIDATIONS[check](t, **kwargs)
    partition = partition_label(context.run.tags)
    metadata: dict = {k: _count(v) for k, v in outcome.counts.items()}
    metadata.update({
        "partition": dg.MetadataValue.text(partition),
        "target": dg.MetadataValue.text(target),
        "job": dg.MetadataValue.text(job.name),
        "range": dg.MetadataValue.text(f"[{start or '-inf'}, {end or '+inf'})"),
        "applicable": dg.MetadataValue.bool(outcome.applicable),
    })
    if outcome.hours:
        metadata["hours"] = dg.MetadataValue.json(json.loads(json.dumps(list(outcome.hours), default=str)))
    if outcome.failures:
        metadata["failures"] = dg.MetadataValue.md("\n".join(f"- {f}" for f in outcome.failures))
    if outcome.docs:
        metadata["data_docs"] = dg.MetadataValue.path(outcome.docs)
    description = "; ".join(outcome.failures) if not outcome.passed else f"{check} passed"
    context.log.info(f"{check} on {t.label} {partition}: {'passed' if outcome.passed else description}")
    return dg.AssetCheckResult(passed=outcome.passed, severity=severity, metadata=metadata,
                               description=description[:2000])


# The checks: (asset table, check, its config, description); conservation only where the job allows it.
CHECKS = (
    ("metrics", "late_events", LateEventsConfig,
     "Early, late, out-of-order, dropped events and dead letters per hour within thresholds"),
    ("decisions", "conservation", CheckConfig,
     "Per hour: events = windowed + dropped + quarantined + window_closed + unwindowed (+ open windows) (spec 7)"),
    ("windows", "windows_emitted_once", CheckConfig,
     "Every (window, group) with counted events closed in range is emitted once, with its count"),
    ("windows", "window_rows_unique", CheckConfig, "No (window, group) has two rows"),
    ("dead_letters", "dead_letters_match", CheckConfig,
     "Dropped and quarantined events are dead letters with their reason, once"),
    ("watermarks", "watermark_delay", WatermarkDelayConfig, "Arrival - output watermark within a bound, every hour"),
)


def job_checks(job: Job) -> list[dg.AssetChecksDefinition]:
    """The checks of `CHECKS` on the assets `[<job>, <table>]`, over the job's tables in
    LAKE/jobs/<job>/outputs/<target>/ and its policy (with the run's policy_override)."""
    return [_job_check(job, table, check, config_type, description)
            for table, check, config_type, description in CHECKS
            if check != "conservation" or job.conserves]


def _job_check(job: Job, table: str, check: str, config_type: type, description: str) -> dg.AssetChecksDefinition:
    with_thresholds = config_type is not CheckConfig

    @dg.asset_check(asset=dg.AssetKey([job.name, table]), name=check, required_resource_keys={"retrace"},
                    description=f"{description} (job {job.name})")
    def _check(context: dg.AssetCheckExecutionContext, config: config_type) -> dg.AssetCheckResult:
        extra = {"thresholds": _thresholds(config)} if with_thresholds else {}
        return _evaluate(context, config, job, check, **extra)

    return _check


def _count(v) -> dg.MetadataValue:
    """A check's count as metadata: a number, or a text such as `seq_to`'s "end of journal"."""
    if isinstance(v, str):
        return dg.MetadataValue.text(v)
    return dg.MetadataValue.float(float(v)) if isinstance(v, float) else dg.MetadataValue.int(int(v))
