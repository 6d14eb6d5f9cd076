"""Tolerance advice as an asset per job, refreshed daily: `[<job>, advice]` (`replay.ops.advise`). The metadata
shows the sweeps as Markdown tables, the policy snippet, the path of the HTML report with its plots, and the run
config that replays the advice into a shadow target, whose run metadata then holds the diff against production
(`assets.outputs.diff_metadata`).

No `from __future__ import annotations` here: Dagster reads the config classes from the annotations.
"""
import os
from typing import List, Optional

import dagster as dg
from pydantic import Field

from replay.model.jobs import Job
from replay.ops.advise import LATE_GRID, OUT_OF_ORDER_GRID


class AdviceConfig(dg.Config):
    end: Optional[str] = Field(default=None, description="ISO arrival time the profiled range ends at (exclusive); "
                               "default: the whole journal")
    hours: int = Field(default=0, description="how many hours before `end` to profile (0: everything before it)")
    completeness: float = Field(default=0.999, description="the share of events a tolerance must keep untouched")
    late_grid: List[str] = Field(default=list(LATE_GRID), description="candidate late arrival tolerances; each "
                                 "is one replay by the engine")
    out_of_order_grid: List[str] = Field(default=list(OUT_OF_ORDER_GRID), description="candidate out-of-order "
                                         "tolerances")
    latency_budget: Optional[str] = Field(default=None, description="a duration, e.g. 30s: recommend the most "
                                          "complete candidates whose windows are emitted within it (p99); default: "
                                          "the smallest candidates that meet `completeness`")


def advice_range(config: AdviceConfig) -> tuple[Optional[str], Optional[str]]:
    if config.hours < 0:
        raise ValueError(f"hours: {config.hours} must be 0 (everything) or more")
    if config.end is None or config.hours == 0:
        return None, config.end
    from replay.model.durations import format_instant, parse_instant

    end = parse_instant(config.end, "end")
    return format_instant(end - config.hours * 3_600_000_000), format_instant(end)


def advice_asset(job: Job) -> dg.AssetsDefinition:
    """The advice of `job`: `[<job>, advice]` in the job's group."""

    @dg.asset(key=[job.name, "advice"], deps=["journal"], group_name=job.name, kinds={"spark"},
              required_resource_keys={"retrace"},
              description=f"Lateness profile of the journal and the tolerances that keep the completeness target "
                          f"(each candidate replayed by the engine), for job {job.name}.")
    def _advice(context: dg.AssetExecutionContext, config: AdviceConfig):
        return _advised(context, config, job)

    return _advice


def _advised(context: dg.AssetExecutionContext, config: AdviceConfig, job: Job) -> dg.MaterializeResult:
    from replay.io.lake import Lake
    from replay.ops import advice_report
    from replay.ops.advise import NoEvents, Sweep, advise

    retrace = context.resources.retrace
    start, end = advice_range(config)
    sweep = Sweep(config.completeness, tuple(config.late_grid), tuple(config.out_of_order_grid),
                  config.latency_budget)
    try:
        advice = advise(retrace.spark(), retrace.lake, job, start=start, end=end, sweep=sweep, log=context.log.info)
    except NoEvents as e:  # a quiet day is not a failure: the previous advice stays
        context.log.warning(str(e))
        return dg.MaterializeResult(metadata={"events": 0, "note": str(e)})
    paths = advice_report.write(advice, Lake(retrace.lake).advice(job.name), with_html=True)
    return dg.MaterializeResult(metadata={
        "verdict": advice["verdict"], "events": advice["events"], "completeness": config.completeness,
        **({"latency_budget": config.latency_budget} if config.latency_budget else {}),
        **advice["recommended"],
        "predicted_adjusted_share": advice["predicted"]["adjusted_share"],
        "snippet": dg.MetadataValue.md(f"```yaml\n{advice['snippet']}\n```"),
        "sweeps": dg.MetadataValue.md(advice_report.markdown(advice)),
        "what_if_run_config": dg.MetadataValue.json(advice["run_config"]),
        "report": dg.MetadataValue.path(paths["html"]),
        "report_url": dg.MetadataValue.url("file://" + os.path.abspath(paths["html"])),
        "plots": dg.MetadataValue.json({k: paths[k] for k in advice_report.PLOTS}),
    })
