"""The daily refresh of every job's tolerance advice (`assets.advice`): one Dagster job over the advice assets and
its schedule, at 04:00 UTC over the day before."""
from datetime import timedelta, timezone

import dagster as dg


def advice_schedule(assets: list[dg.AssetsDefinition]) -> tuple[dg.JobDefinition, dg.ScheduleDefinition]:
    """One job refreshing every advice asset, daily at 04:00 UTC over the day before."""
    keys = [key for a in assets for key in a.keys]
    job = dg.define_asset_job("advice_daily", selection=dg.AssetSelection.assets(*keys),
                              description="Refresh the tolerance advice of every job (replay advise).",
                              tags={"retrace/kind": "advice"})

    @dg.schedule(job=job, cron_schedule="0 4 * * *", execution_timezone="UTC", name="advice_schedule",
                 default_status=dg.DefaultScheduleStatus.RUNNING,
                 description="Daily at 04:00 UTC: the advice of every job over the last 24 hours of arrivals.")
    def _schedule(context: dg.ScheduleEvaluationContext):
        day = context.scheduled_execution_time.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)
        end = (day - timedelta(hours=day.hour)).strftime("%Y-%m-%dT%H:%M:%SZ")
        config = {"config": {"end": end, "hours": 24}}
        return dg.RunRequest(run_config={"ops": {a.op.name: config for a in assets}})

    return job, _schedule
