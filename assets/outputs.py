"""The replay's output tables as one multi-asset: a partition range is one `replay.cli.runner.run` over its
arrival-time window, so a backfill of a range (single-run policy) is one Spark run that replays it."""

from datetime import timezone
from typing import Any

import dagster as dg
from pydantic import Field

from assets.partitions import HOURLY
from orchestration.resources import RetraceResource

OUTPUTS = {
    "decisions": "Per-row decisions (spec section 3): action, reasons, timestamp, watermarks.",
    "windows": "Window results (count, sum per key and window), with the seq that emitted them.",
    "dead_letters": "Dropped, quarantined, malformed and window-closed events, with their reason.",
    "watermarks": "The watermark timeline: partition and output watermarks after each row.",
    "metrics": "Hourly metrics per partition (spec section 8), recomputed over the whole target.",
}


class ReplayConfig(dg.Config):
    """Launch-dialog run config: where the outputs go and a what-if policy."""

    target: str = Field(default="production", description="output target: 'production', or a shadow "
                        "target (lower-case letters, digits, '_' or '-') under LAKE/outputs/<target>/")
    policy_override: dict[str, Any] = Field(default={}, description="policy fields (spec names) that replace "
                                            "the production policy's, e.g. {late_arrival_tolerance: 30s}")


def diff_metadata(spark, lake: str, target: str, start: str, end: str, job=None) -> dict:
    """A shadow target's run shows how it differs from production over the same range (`replay diff`):
    the decided-differently count, a Markdown table and the whole report. Nothing for production itself, or
    when production has not been replayed."""
    from replay.cli.diff import diff, markdown
    from replay.cli.runner import output_path
    from replay.io.store import default_store
    from replay.model.jobs import job_root

    if target == "production" or not default_store().exists(output_path(job_root(lake, job), "production",
                                                                         "decisions")):
        return {}
    report = diff(spark, lake, "production", target, start=start, end=end, job=job)
    return {"decided_differently": report.changed, "identical_to_production": report.identical,
            "diff_vs_production": dg.MetadataValue.md(markdown(report)),
            "diff": dg.MetadataValue.json(report.to_dict())}


def iso(d) -> str:
    return d.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dg.multi_asset(
    specs=[dg.AssetSpec(name, deps=["journal"], description=text, group_name="retrace", kinds={"spark", "delta"})
           for name, text in OUTPUTS.items()],
    partitions_def=HOURLY,
    backfill_policy=dg.BackfillPolicy.single_run(),
    can_subset=False,
    name="replay_outputs",
)
def replay_outputs(context: dg.AssetExecutionContext, config: ReplayConfig, retrace: RetraceResource):
    """Replay the journal's arrivals in [window start, window end) into LAKE/outputs/<target>/."""
    from replay.cli.hashing import target_hash
    from replay.cli.runner import check_target, output_path, run
    from replay.cli.verify import in_range
    from replay.io.store import default_store

    target = check_target(config.target)
    policy = retrace.policy(config.policy_override or None)
    window = context.partition_time_window
    start, end = iso(window.start), iso(window.end)
    context.log.info(f"replaying arrivals [{start}, {end}) into target {target!r}")
    spark = retrace.spark()
    summary = run(spark, retrace.lake, policy, target=target, start=start, end=end)
    store = default_store()
    common = {"target": target, "from": start, "to": end,
              "seq_from": summary.seq_from if summary.seq_from is not None else 0,
              "seq_to": summary.seq_to if summary.seq_to is not None else -1,
              "policy": dg.MetadataValue.json(policy.to_dict()),
              "policy_override": dg.MetadataValue.json(config.policy_override or {}),
              "seconds": round(summary.seconds, 2)}
    for name in OUTPUTS:
        df = store.read(spark, output_path(retrace.lake, target, name))
        # metrics are recomputed over the whole target; the other tables count the rows of the range
        rows = df.count() if name == "metrics" else in_range(df, name, summary.seq_from, summary.seq_to).count()
        extra = ({"target_hash": target_hash(spark, retrace.lake, target),
                  **diff_metadata(spark, retrace.lake, target, start, end)} if name == "decisions" else {})
        yield dg.MaterializeResult(asset_key=name, metadata={**common, "rows": rows, **extra,
                                                             "path": dg.MetadataValue.path(
                                                                 output_path(retrace.lake, target, name))})
