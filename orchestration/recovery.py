"""Daily recovery: verify each hour of the last day against a fresh replay, repair the hours that differ.

One scratch replay covers the whole range (history before it still counts); its rows are compared with the
target hour by hour of arrival, and each differing hour is replayed into the target (`runner.run` over
that hour replaces exactly its rows). The diff before and the verification after go in the run's metadata.
"""

import json
from datetime import datetime, timedelta, timezone
from typing import Optional

import dagster as dg
from pydantic import Field

from assets.outputs import OUTPUTS
from assets.partitions import HOURLY
from orchestration.resources import RetraceResource

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
        from replay.durations import parse_instant

        end = datetime.fromtimestamp(parse_instant(config.end, "end") / 1e6, tz=timezone.utc)
    return iso(end - config.hours * HOUR), iso(end)


@dg.op(description="Verify the last hours of a target against a fresh replay and repair the hours that differ.")
def recover_recent_hours(context: dg.OpExecutionContext, config: RecoveryConfig, retrace: RetraceResource):
    from replay.runner import check_target, run
    from replay.verify import verify

    target = check_target(config.target)
    start, end = recovery_range(config)
    spark, policy = retrace.spark(), retrace.policy()
    before = verify(spark, retrace.lake, policy, start=start, end=end, target=target)
    context.log.info(before.text())
    repaired = []
    if config.repair:
        for hour in before.hours:
            hour_end = iso(datetime.fromisoformat(hour.replace("Z", "+00:00")) + HOUR)
            context.log.info(f"repairing {target} for arrivals [{hour}, {hour_end})")
            run(spark, retrace.lake, policy, target=target, start=hour, end=hour_end)
            repaired.append(hour)
            if target == "production":
                yield from _materializations(hour)
    after = verify(spark, retrace.lake, policy, start=start, end=end, target=target) if repaired else before
    metadata = {
        "from": start, "to": end, "target": target,
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
        raise dg.Failure(description=f"{target} still differs after repair:\n{after.text()}", metadata=metadata)
    yield dg.Output(json.dumps(before.to_dict()), metadata=metadata)


def _materializations(hour: str):
    """The repaired hour's partition of each output asset, so the asset graph shows the repair."""
    d = datetime.fromisoformat(hour.replace("Z", "+00:00"))
    if d < HOURLY.start:
        return
    key = d.strftime(HOURLY.fmt)
    for name in OUTPUTS:
        yield dg.AssetMaterialization(asset_key=name, partition=key, metadata={"repaired_by": "recovery"})


@dg.job(name="recovery", description="Verify the last 24 hours of production and repair the hours that differ.",
        tags={"retrace/kind": "recovery"})
def recovery_job():
    recover_recent_hours()


@dg.schedule(job=recovery_job, cron_schedule="30 0 * * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.RUNNING,
             description="Daily at 00:30 UTC: verify and repair the 24 hours of arrivals before 00:00.")
def recovery_schedule(context: dg.ScheduleEvaluationContext):
    end = iso(floor_hour(context.scheduled_execution_time))
    return dg.RunRequest(run_config={"ops": {"recover_recent_hours": {"config": {"end": end, "hours": 24}}}},
                         tags={"retrace/recovery_end": end})
