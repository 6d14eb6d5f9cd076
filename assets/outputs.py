"""Every job's output tables as one multi-asset: an asset factory over `replay.model.jobs.Job`, the spec's
count/sum job (`default`) included.

For a job `<job>`, `job_outputs(job, partitions)` is the multi-asset `<job>_outputs` with the keys `[<job>, decisions]`,
`[<job>, windows]`, `[<job>, dead_letters]`, `[<job>, watermarks]`, `[<job>, metrics]` in group `<job>`,
downstream of the shared `journal`, hourly partitions by arrival and a single-run backfill policy: a backfill of
a range is one `replay.ops.run.run` over its arrival-time window that writes LAKE/jobs/<job>/outputs/<target>/.
Its run config names the target and a what-if policy; a shadow target's run shows its diff with production.

No `from __future__ import annotations` here: Dagster reads the config classes from the annotations.
"""
import dataclasses
from datetime import timezone
from typing import Any

import dagster as dg
from pydantic import Field

from assets.partitions import DAGSTER_RUN, END_OF_JOURNAL
from replay.io.lake import OUTPUT_TABLES
from replay.model.jobs import Job, JobError
from replay.model.policy import Policy, PolicyError

TAKEN_GROUPS = {"retrace"}  # the journal's group; a job of that name is refused


class ReplayConfig(dg.Config):
    """Launch-dialog run config of a job's outputs: where they go and a what-if policy."""

    target: str = Field(default="production", description="output target: 'production', or a shadow "
                        "target (lower-case letters, digits, '_' or '-') under LAKE/jobs/<job>/outputs/<target>/")
    policy_override: dict[str, Any] = Field(default={}, description="policy fields (spec names) that replace "
                                            "the job's policy's, e.g. {late_arrival_tolerance: 30s}")


def with_override(job: Job, override: dict | None) -> Job:
    """The job with its policy's fields replaced by `override` (a what-if run); the job itself without one."""
    if not override:
        return job
    try:
        policy = Policy.from_dict({**job.policy.to_dict(), **override})
    except PolicyError as e:
        raise JobError(f"{job.describe()}: policy_override: {e}") from None
    return dataclasses.replace(job, policy=policy)


def iso(d) -> str:
    return d.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_summary(job: Job) -> str:
    """A job in a few markdown lines: its file, source, window, fields, filter, grouping and aggregates."""
    window = job.policy.window.to_dict() if job.policy.window is not None else None
    lines = [f"Job `{job.name}` from `{job.origin}`, reading source `{job.source}`; windows {window}."]
    if job.fields:
        lines.append("Fields: " + ", ".join(f"`{n}` = `{e}`" for n, e in job.fields) + ".")
    if job.where is not None:
        lines.append(f"Where: `{job.where}`.")
    if job.transform is not None:
        lines.append("Transform: a Python function of the decided events.")
    lines.append("Grouped by: " + (", ".join(f"`{g}`" for g in job.grouping) or "nothing (one group)") + ".")
    lines.append("Aggregates: " + ", ".join(f"`{n}` = `{e}`" for n, e in job.aggregates) + ".")
    return "\n\n".join(lines)


def table_descriptions(job: Job) -> dict[str, str]:
    """What each output table of `job` holds (the asset descriptions)."""
    groups = ", ".join(job.grouping) or "the whole stream"
    aggregates = ", ".join(n for n, _ in job.aggregates)
    fields = ", ".join(n for n, _ in job.fields)
    where = f"Job `{job.name}` ({job.origin}): "
    return {
        "decisions": where + "per-row decisions (spec section 3): action, reasons, timestamp, watermarks"
                     + (f", and the job's fields {fields}." if fields else "."),
        "windows": where + f"window results per window and {groups}: {aggregates}, with the seq that emitted them.",
        "dead_letters": where + "dropped, quarantined, malformed and window-closed events, with their reason.",
        "watermarks": where + "the watermark timeline: partition and output watermarks after each row.",
        "metrics": where + "hourly metrics per partition (spec section 8), recomputed over the whole target.",
    }


def job_outputs(job: Job, partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    """The multi-asset `<job>_outputs` on the code location's hourly `partitions`: a partition range is one replay
    of the job over its arrivals."""
    if job.name in TAKEN_GROUPS:
        raise JobError(f"{job.origin}: name: {job.name!r} is the group of the shared journal asset; rename the job")
    descriptions = table_descriptions(job)

    @dg.multi_asset(
        specs=[dg.AssetSpec([job.name, name], deps=["journal"], description=descriptions[name], group_name=job.name,
                            kinds={"spark", "delta"}, metadata={"job": job.name, "origin": job.origin,
                                                                "source": job.source})
               for name in OUTPUT_TABLES],
        partitions_def=partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        can_subset=False,
        name=f"{job.name}_outputs",
        required_resource_keys={"retrace"},
        description=f"Replay the journal's arrivals in the partition range into LAKE/jobs/{job.name}/outputs/"
                    f"<target>/.\n\n{job_summary(job)}",
    )
    def _outputs(context: dg.AssetExecutionContext, config: ReplayConfig):
        yield from _replayed(context, config, job)

    return _outputs


def _replayed(context: dg.AssetExecutionContext, config: ReplayConfig, job: Job):
    """Replay the run's partition window for `job` (with the run's override) and materialize every table."""
    from replay.io.lake import Lake
    from replay.ops import outputs
    from replay.ops.hashing import target_hash
    from replay.ops.run import run
    from replay.ops.verify import in_range

    retrace, this = context.resources.retrace, with_override(job, config.policy_override)
    where = Lake(retrace.lake).target(job.name, config.target)
    window = context.partition_time_window
    start, end = iso(window.start), iso(window.end)
    context.log.info(f"replaying {this.describe()} over arrivals [{start}, {end}) into target {where.target!r}")
    spark = retrace.spark()
    summary = run(spark, retrace.lake, this, target=where.target, start=start, end=end,
                  run_id=f"{DAGSTER_RUN}{context.run.run_id[:12]}")  # materialized here: no sensor reports it again
    common = {"job": job.name, "origin": job.origin, "target": where.target, "from": start, "to": end,
              "seq_from": summary.seq_from if summary.seq_from is not None else 0,
              "seq_to": summary.seq_to if summary.seq_to is not None else END_OF_JOURNAL,
              "journal_version": summary.journal_version,
              "policy": dg.MetadataValue.json(this.policy.to_dict()),
              "policy_override": dg.MetadataValue.json(config.policy_override or {}),
              "seconds": round(summary.seconds, 2)}
    tables = {name: outputs.read(spark, where, name) for name in OUTPUT_TABLES}  # the decisions: every row
    span = lambda df, name: in_range(df, name, summary.seq_from, summary.seq_to)  # noqa: E731
    for name, df in tables.items():
        # metrics are recomputed over the whole target; the other tables count the rows of the range
        rows = df.count() if name == "metrics" else span(df, name).count()
        extra = ({"target_hash": target_hash(spark, where, tables),
                  "exceptions": span(outputs.exceptions(spark, where), name).count(),
                  **diff_metadata(spark, retrace.lake, this, where.target, (start, end))}
                 if name == "decisions" else {})
        yield dg.MaterializeResult(asset_key=[job.name, name], metadata={
            **common, "rows": rows, **extra, "path": dg.MetadataValue.path(where.table(name))})


def diff_metadata(spark, lake: str, job: Job, target: str, span: tuple) -> dict:
    """A shadow target's run shows how it differs from production over the same range (`replay diff`):
    the decided-differently count, a Markdown table and the whole report. Nothing for production itself, or
    when production has not been replayed."""
    from replay.io.lake import Lake
    from replay.io.store import default_store
    from replay.ops.diff import diff, markdown

    production = Lake(lake).target(job.name, "production")
    if target == "production" or not default_store().exists(production.table("decisions")):
        return {}
    report = diff(spark, lake, job, "production", target, start=span[0], end=span[1])
    return {"decided_differently": report.changed, "identical_to_production": report.identical,
            "diff_vs_production": dg.MetadataValue.md(markdown(report)),
            "diff": dg.MetadataValue.json(report.to_dict())}
