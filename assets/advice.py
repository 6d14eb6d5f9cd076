"""Tolerance advice as an asset per job, refreshed daily: `advice` for the spec's job, `[<job>, advice]` for each
job of the jobs folder (`replay.cli.advise`). The metadata shows the sweeps as Markdown tables, the policy snippet,
the path of the HTML report with its plots, and the run config that replays the advice into a shadow target,
whose run metadata then holds the diff against production (`assets.outputs.diff_metadata`).

No `from __future__ import annotations` here: Dagster reads the config classes from the annotations.
"""
import os
from datetime import timedelta, timezone
from typing import List, Optional

import dagster as dg
from pydantic import Field

from orchestration.resources import RetraceResource
from replay.cli.advise import LATE_GRID, OUT_OF_ORDER_GRID
from replay.model.jobs import Job


class AdviceConfig(dg.Config):
    end: Optional[str] = Field(default=None, description="ISO arrival time the profiled range ends at (exclusive); "
                               "default: the whole journal")
    hours: int = Field(default=0, description="how many hours before `end` to profile (0: everything before it)")
    completeness: float = Field(default=0.999, description="the share of events a tolerance must keep untouched")
    late_grid: List[str] = Field(default=list(LATE_GRID), description="candidate late arrival tolerances; each "
                                 "is one replay by the engine")
    out_of_order_grid: List[str] = Field(default=list(OUT_OF_ORDER_GRID), description="candidate out-of-order "
                                         "tolerances")


def advice_range(config: AdviceConfig) -> tuple[Optional[str], Optional[str]]:
    if config.hours < 0:
        raise ValueError(f"hours: {config.hours} must be 0 (everything) or more")
    if config.end is None or config.hours == 0:
        return None, config.end
    from replay.model.durations import format_instant, parse_instant

    end = parse_instant(config.end, "end")
    return format_instant(end - config.hours * 3_600_000_000), format_instant(end)


def advice_asset(job: Optional[Job] = None) -> dg.AssetsDefinition:
    """The advice of `job` (default: the spec's job on the production policy)."""
    name = job.name if job is not None else "retrace"

    @dg.asset(key=[job.name, "advice"] if job is not None else "advice", deps=["journal"],
              group_name=name, kinds={"spark"},
              description=f"Lateness profile of the journal and the tolerances that keep the completeness target "
                          f"(each candidate replayed by the engine), for {'job ' + job.name if job else 'the spec job'}.")
    def _advice(context: dg.AssetExecutionContext, config: AdviceConfig, retrace: RetraceResource):
        from replay.cli import advice_report
        from replay.cli.advise import NoEvents, advise
        from replay.model.jobs import job_root

        start, end = advice_range(config)
        policy = job.policy if job is not None else retrace.policy()
        try:
            advice = advise(retrace.spark(), retrace.lake, policy, job=job, start=start, end=end,
                            completeness=config.completeness, late_grid=config.late_grid,
                            out_of_order_grid=config.out_of_order_grid, log=context.log.info)
        except NoEvents as e:  # a quiet day is not a failure: the previous advice stays
            context.log.warning(str(e))
            return dg.MaterializeResult(metadata={"events": 0, "note": str(e)})
        paths = advice_report.write(advice, os.path.join(job_root(retrace.lake, job), "advice"), with_html=True)
        return dg.MaterializeResult(metadata={
            "events": advice["events"], "completeness": config.completeness,
            **advice["recommended"],
            "predicted_adjusted_share": advice["predicted"]["adjusted_share"],
            "snippet": dg.MetadataValue.md(f"```yaml\n{advice['snippet']}\n```"),
            "sweeps": dg.MetadataValue.md(advice_report.markdown(advice)),
            "what_if_run_config": dg.MetadataValue.json(advice["run_config"]),
            "report": dg.MetadataValue.path(paths["html"]),
            "report_url": dg.MetadataValue.url("file://" + os.path.abspath(paths["html"])),
            "plots": dg.MetadataValue.json({k: paths[k] for k in advice_report.PLOTS}),
        })

    return _advice


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
