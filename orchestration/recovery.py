"""Daily recovery of every job: verify each hour of the last day against a fresh replay, repair the hours that
differ.

One scratch replay covers the whole range (history before it still counts); its rows are compared with the
target hour by hour of arrival, and each differing hour is replayed into the target (`replay.ops.run.run` over
that hour replaces exactly its rows). The diff before and the verification after go in the run's metadata.

`job_recovery(job, partitions)` makes, for any job (the spec's job `default` included), the Dagster job `<job>_recovery`
(op `<job>_recover_recent_hours`) and its daily schedule `<job>_recovery_schedule`, verifying and repairing
LAKE/jobs/<job>/outputs/<target>/.
"""

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Optional

import dagster as dg
from pydantic import Field

from assets.partitions import DAGSTER_RUN, KEY_FORMAT
from orchestration.resources import RetraceResource
from replay.io.lake import OUTPUT_TABLES
from replay.model.jobs import Job

HOUR = timedelta(hours=1)


class RecoveryConfig(dg.Config):
    end: Optional[str] = Field(default=None, description="ISO arrival time the verified range ends at "
                               "(exclusive); default: the start of the current hour, UTC")
    hours: int = Field(default=24, description="how many hours before `end` to verify")
    target: str = Field(default="production", description="the target to verify and repair")
    repair: bool = Field(default=True, description="replay the hours that differ into the target")


def floor_hour(d: datetime) -> datetime:
    return d.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def iso(d: datetime) -> str:
    return d.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def recovery_range(config: RecoveryConfig, now: datetime | None = None) -> tuple[str, str]:
    if config.hours < 1:
        raise ValueError(f"hours: {config.hours} must be at least 1")
    if config.end is None:
        end = floor_hour(now or datetime.now(timezone.utc))
    else:
        from replay.model.durations import parse_instant

        end = datetime.fromtimestamp(parse_instant(config.end, "end") / 1e6, tz=timezone.utc)
    return iso(end - config.hours * HOUR), iso(end)


def recover(context, config: RecoveryConfig, retrace: RetraceResource, job: Job,
            partitions: dg.PartitionsDefinition):
    """The recovery op's work for `job` (its policy, its tables under LAKE/jobs/<job>); a repaired hour that is one
    of `partitions` is materialized."""
    from replay.ops.run import run
    from replay.ops.verify import verify

    label = f"{job.name}/{config.target}"
    start, end = recovery_range(config)
    spark = retrace.spark()
    before = verify(spark, retrace.lake, job, start=start, end=end, target=config.target)
    context.log.info(before.text())
    repaired = []
    if config.repair:
        for hour in before.hours:
            hour_end = iso(datetime.fromisoformat(hour.replace("Z", "+00:00")) + HOUR)
            context.log.info(f"repairing {label} for arrivals [{hour}, {hour_end})")
            run(spark, retrace.lake, job, target=config.target, start=hour, end=hour_end,
                run_id=f"{DAGSTER_RUN}{context.run.run_id[:12]}")  # materialized below: no sensor reports it again
            repaired.append(hour)
            if config.target == "production":
                yield from _materializations(hour, job, partitions)
    after = verify(spark, retrace.lake, job, start=start, end=end, target=config.target) if repaired else before
    metadata = {
        "from": start, "to": end, "target": config.target, "job": job.name,
        "differing_hours": dg.MetadataValue.json(before.hours),
        "repaired_hours": dg.MetadataValue.json(repaired),
        "diff": dg.MetadataValue.json(before.to_dict()),
        "diff_report": dg.MetadataValue.md(f"```\n{before.text()}\n```"),
        "verified_after_repair": after.identical,
        "report_after": dg.MetadataValue.md(f"```\n{after.text()}\n```"),
    }
    context.instance.add_run_tags(context.run_id, {
        "retrace/differing_hours": str(len(before.hours)), "retrace/repaired_hours": str(len(repaired)),
        "retrace/verified": str(after.identical).lower()})
    if not after.identical:  # differences left (or not repaired): a failed run, which alerts
        raise dg.Failure(description=f"{label} still differs after repair:\n{after.text()}", metadata=metadata)
    yield dg.Output(json.dumps(before.to_dict()), metadata=metadata)


def _materializations(hour: str, job: Job, partitions: dg.PartitionsDefinition):
    """The repaired hour's partition of each output asset, so the asset graph shows the repair (none for an hour
    before the partitions' start: it has no partition)."""
    key = datetime.fromisoformat(hour.replace("Z", "+00:00")).strftime(KEY_FORMAT)
    if not partitions.has_partition_key(key):
        return
    for name in OUTPUT_TABLES:
        yield dg.AssetMaterialization(asset_key=[job.name, name], partition=key, metadata={"repaired_by": "recovery"})


def _daily_request(context: dg.ScheduleEvaluationContext, op: str) -> dg.RunRequest:
    end = iso(floor_hour(context.scheduled_execution_time))
    return dg.RunRequest(run_config={"ops": {op: {"config": {"end": end, "hours": 24}}}},
                         tags={"retrace/recovery_end": end})


@dataclass(frozen=True)
class JobRecovery:
    """A job's recovery: the Dagster job and its daily schedule."""

    job: dg.JobDefinition
    schedule: dg.ScheduleDefinition


def job_recovery(job: Job, partitions: dg.PartitionsDefinition) -> JobRecovery:
    """`<job>_recovery` (op `<job>_recover_recent_hours`, config `RecoveryConfig`) and its daily schedule
    `<job>_recovery_schedule` (00:30 UTC): verify the last 24 hours of the job's production and repair what
    differs."""
    op_name = f"{job.name}_recover_recent_hours"

    @dg.op(name=op_name, description=f"Verify the last hours of job {job.name}'s target ({job.origin}) against a "
                                     f"fresh replay and repair the hours that differ.")
    def _recover(context: dg.OpExecutionContext, config: RecoveryConfig, retrace: RetraceResource):
        yield from recover(context, config, retrace, job, partitions)

    @dg.job(name=f"{job.name}_recovery", tags={"retrace/kind": "recovery", "retrace/job": job.name},
            description=f"Verify the last 24 hours of job {job.name}'s production and repair the hours that differ.")
    def _job():
        _recover()

    @dg.schedule(job=_job, name=f"{job.name}_recovery_schedule", cron_schedule="30 0 * * *",
                 execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING,
                 description=f"Daily at 00:30 UTC: verify and repair job {job.name}'s 24 hours of arrivals "
                             f"before 00:00.")
    def _schedule(context: dg.ScheduleEvaluationContext):
        return _daily_request(context, op_name)

    return JobRecovery(_job, _schedule)
