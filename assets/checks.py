"""Dagster asset checks on Retrace's outputs: the validations of `assets.quality` over the arrival range
of the run that materialized the outputs (its partition time window; the whole target when the run
has no partition), with configurable thresholds and severities; the counts go into check metadata.

`CHECKS` are the spec's job's; `job_checks(job)` makes those that hold for any job of the jobs folder on its
assets `[<job>, ...]`: late events, windows emitted once, window rows unique, dead letters match and
watermark delay (not conservation: a job's filter keeps kept events out of its windows).

No `from __future__ import annotations` here: Dagster reads the config classes from the annotations.
"""
import json
from typing import Optional

import dagster as dg

from assets import quality
from assets.partitions import HOURLY
from assets.quality_tables import Target
from replay.model.jobs import Job
from orchestration.alerts import RANGE_TAGS, partition_label
from orchestration.resources import RetraceResource

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
        return (HOURLY.time_window_for_partition_key(first).start.isoformat(),
                HOURLY.time_window_for_partition_key(last).end.isoformat())


def _evaluate(context, config: CheckConfig, retrace: RetraceResource, check: str, job: Optional[Job] = None,
              **kwargs) -> dg.AssetCheckResult:
    """Run validation `check` on the target of this run's replay: the spec's job's, or `job`'s."""
    from assets.job_assets import with_override

    severity = _severity(config)
    replay = _replay_op_config(context)
    target = config.target or replay.get("target") or "production"
    override = replay.get("policy_override") if isinstance(replay.get("policy_override"), dict) else None
    start, end = _window(context)
    if job is None:
        t = Target(retrace.spark(), retrace.lake, target, retrace.policy(override), start, end)
    else:
        this = with_override(job, override)
        t = Target(retrace.spark(), retrace.lake, target, this.policy, start, end, job=this)
    outcome = quality.VALIDATIONS[check](t, **kwargs)
    partition = partition_label(context.run.tags)
    metadata: dict = {k: (dg.MetadataValue.float(float(v)) if isinstance(v, float) else dg.MetadataValue.int(int(v)))
                      for k, v in outcome.counts.items()}
    metadata.update({
        "partition": dg.MetadataValue.text(partition),
        "target": dg.MetadataValue.text(target),
        **({"job": dg.MetadataValue.text(job.name)} if job is not None else {}),
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


@dg.asset_check(asset="metrics", name="late_events",
                description="Early, late, out-of-order, dropped events and dead letters per hour within thresholds")
def late_events(context: dg.AssetCheckExecutionContext, config: LateEventsConfig,
                retrace: RetraceResource) -> dg.AssetCheckResult:
    return _evaluate(context, config, retrace, "late_events", thresholds=_thresholds(config))


@dg.asset_check(asset="decisions", name="conservation",
                description="Per hour: events = windowed + dropped + quarantined + window_closed + unwindowed "
                            "(+ open windows) (spec 7)")
def conservation(context: dg.AssetCheckExecutionContext, config: CheckConfig,
                 retrace: RetraceResource) -> dg.AssetCheckResult:
    return _evaluate(context, config, retrace, "conservation")


@dg.asset_check(asset="windows", name="windows_emitted_once",
                description="Every window with counted events closed in range is emitted, with its count")
def windows_emitted_once(context: dg.AssetCheckExecutionContext, config: CheckConfig,
                         retrace: RetraceResource) -> dg.AssetCheckResult:
    return _evaluate(context, config, retrace, "windows_emitted_once")


@dg.asset_check(asset="windows", name="window_rows_unique",
                description="No window has two rows")
def window_rows_unique(context: dg.AssetCheckExecutionContext, config: CheckConfig,
                       retrace: RetraceResource) -> dg.AssetCheckResult:
    return _evaluate(context, config, retrace, "window_rows_unique")


@dg.asset_check(asset="dead_letters", name="dead_letters_match",
                description="Dropped and quarantined events are dead letters with their reason, once")
def dead_letters_match(context: dg.AssetCheckExecutionContext, config: CheckConfig,
                       retrace: RetraceResource) -> dg.AssetCheckResult:
    return _evaluate(context, config, retrace, "dead_letters_match")


@dg.asset_check(asset="watermarks", name="watermark_delay",
                description="Arrival - output watermark within a bound, every hour")
def watermark_delay(context: dg.AssetCheckExecutionContext, config: WatermarkDelayConfig,
                    retrace: RetraceResource) -> dg.AssetCheckResult:
    return _evaluate(context, config, retrace, "watermark_delay", thresholds=_thresholds(config))


CHECKS = [late_events, conservation, windows_emitted_once, window_rows_unique, dead_letters_match, watermark_delay]


# The checks that hold for any job: (asset table, check, its config, description).
JOB_CHECKS = (
    ("metrics", "late_events", LateEventsConfig,
     "Early, late, out-of-order, dropped events and dead letters per hour within thresholds"),
    ("windows", "windows_emitted_once", CheckConfig,
     "Every (window, group) with counted events closed in range is emitted once, with its count(*) aggregate"),
    ("windows", "window_rows_unique", CheckConfig, "No (window, group) has two rows"),
    ("dead_letters", "dead_letters_match", CheckConfig,
     "Dropped and quarantined events are dead letters with their reason, once"),
    ("watermarks", "watermark_delay", WatermarkDelayConfig, "Arrival - output watermark within a bound, every hour"),
)


def job_checks(job: Job) -> list[dg.AssetChecksDefinition]:
    """The checks of `JOB_CHECKS` on the assets `[<job>, <table>]` of a job of the jobs folder, over its
    tables in LAKE/jobs/<job>/outputs/<target>/ and its policy (with the run's policy_override)."""
    return [_job_check(job, table, check, config_type, description)
            for table, check, config_type, description in JOB_CHECKS]


def _job_check(job: Job, table: str, check: str, config_type: type, description: str) -> dg.AssetChecksDefinition:
    with_thresholds = config_type is not CheckConfig

    @dg.asset_check(asset=dg.AssetKey([job.name, table]), name=check,
                    description=f"{description} (job {job.name})")
    def _check(context: dg.AssetCheckExecutionContext, config: config_type,  # the class, read by Dagster
               retrace: RetraceResource) -> dg.AssetCheckResult:
        extra = {"thresholds": _thresholds(config)} if with_thresholds else {}
        return _evaluate(context, config, retrace, check, job=job, **extra)

    return _check
