"""Every job of the jobs folder as a group of assets: an asset factory over `replay.model.jobs.Job`.

For a job `<job>` (a file of the jobs folder, `jobs.catalog.folder()`), `job_outputs(job)` is one multi-asset
`<job>_outputs` with the keys `[<job>, decisions]`, `[<job>, windows]`, `[<job>, dead_letters]`,
`[<job>, watermarks]`, `[<job>, metrics]` in group `<job>`, downstream of the shared `journal`, with the hourly
partitions and single-run backfill policy of the spec's job (`assets.outputs.replay_outputs`): a backfill of a
range is one `replay.cli.runner.run(..., job=job)` that writes LAKE/jobs/<job>/outputs/<target>/.

No `from __future__ import annotations` here: Dagster reads the config classes from the annotations.
"""
import dataclasses
from typing import Any

import dagster as dg
from pydantic import Field

from assets.outputs import OUTPUTS, diff_metadata, iso
from assets.partitions import HOURLY
from orchestration.resources import RetraceResource
from replay.model.jobs import Job, JobError
from replay.model.policy import Policy, PolicyError

# Dagster names the spec's job's definitions take; a job whose own names would collide is refused.
TAKEN_GROUPS = {"retrace", "default"}
TAKEN_OPS = {"replay_outputs"}


class JobReplayConfig(dg.Config):
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


def check_names(job: Job) -> None:
    """A job's Dagster names must not be those of the spec's job's definitions."""
    if job.name in TAKEN_GROUPS or f"{job.name}_outputs" in TAKEN_OPS:
        raise JobError(f"{job.origin}: name: {job.name!r} clashes with the Dagster definitions of the spec's job "
                       f"(group {sorted(TAKEN_GROUPS)}, op {sorted(TAKEN_OPS)}); rename the job")


def job_outputs(job: Job) -> dg.AssetsDefinition:
    """The multi-asset `<job>_outputs`: a partition range is one replay of the job over its arrivals."""
    check_names(job)
    descriptions = table_descriptions(job)
    meta = {"job": job.name, "origin": job.origin, "source": job.source}

    @dg.multi_asset(
        specs=[dg.AssetSpec([job.name, name], deps=["journal"], description=descriptions[name], group_name=job.name,
                            kinds={"spark", "delta"}, metadata=meta)
               for name in OUTPUTS],
        partitions_def=HOURLY,
        backfill_policy=dg.BackfillPolicy.single_run(),
        can_subset=False,
        name=f"{job.name}_outputs",
        description=f"Replay the journal's arrivals in the partition range into LAKE/jobs/{job.name}/outputs/"
                    f"<target>/.\n\n{job_summary(job)}",
    )
    def _outputs(context: dg.AssetExecutionContext, config: JobReplayConfig, retrace: RetraceResource):
        from replay.cli.hashing import target_hash
        from replay.cli.runner import check_target, output_path, run
        from replay.cli.verify import in_range
        from replay.io.store import default_store
        from replay.model.jobs import job_root

        target = check_target(config.target)
        this = with_override(job, config.policy_override)
        window = context.partition_time_window
        start, end = iso(window.start), iso(window.end)
        root = job_root(retrace.lake, this)
        context.log.info(f"replaying {this.describe()} over arrivals [{start}, {end}) into target {target!r}")
        spark = retrace.spark()
        summary = run(spark, retrace.lake, this.policy, target=target, start=start, end=end, job=this)
        store = default_store()
        common = {"job": job.name, "origin": job.origin, "target": target, "from": start, "to": end,
                  "seq_from": summary.seq_from if summary.seq_from is not None else 0,
                  "seq_to": summary.seq_to if summary.seq_to is not None else -1,
                  "policy": dg.MetadataValue.json(this.policy.to_dict()),
                  "policy_override": dg.MetadataValue.json(config.policy_override or {}),
                  "seconds": round(summary.seconds, 2)}
        for name in OUTPUTS:
            path = output_path(root, target, name)
            df = store.read(spark, path)
            # metrics are recomputed over the whole target; the other tables count the rows of the range
            rows = df.count() if name == "metrics" else in_range(df, name, summary.seq_from, summary.seq_to).count()
            extra = ({"target_hash": target_hash(spark, root, target),
                      **diff_metadata(spark, retrace.lake, target, start, end, this)} if name == "decisions" else {})
            yield dg.MaterializeResult(asset_key=[job.name, name], metadata={
                **common, "rows": rows, **extra, "path": dg.MetadataValue.path(path)})

    return _outputs
