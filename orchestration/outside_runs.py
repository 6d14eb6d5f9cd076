"""Replays made outside Dagster (`replay run` from a shell) shown in Dagster: a sensor reads each job's production
target's newest commits from the Delta log (no Spark) and reports the hourly partitions a run wrote as
materializations of the job's output assets, so the asset graph says what the lake holds."""
from __future__ import annotations

import json

import dagster as dg

from assets.partitions import DAGSTER_RUN, HOURLY
from orchestration.resources import RetraceResource
from replay.io.lake import OUTPUT_TABLES, Lake
from replay.io.store import commits_after
from replay.model.durations import parse_instant
from replay.model.jobs import Job
from replay.ops.run import WRITER


def outside_runs_sensor(jobs: list[Job]) -> dg.SensorDefinition:
    """One sensor for every job; its cursor is the last commit of each job's production metrics table it read."""

    @dg.sensor(name="retrace_outside_runs", minimum_interval_seconds=60,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description="Reports replays made outside Dagster (the replay CLI) as materializations of the "
                           "hourly partitions they wrote.")
    def _sensor(context: dg.SensorEvaluationContext, retrace: RetraceResource):
        seen = json.loads(context.cursor) if context.cursor else {}
        events = []
        for job in jobs:
            metrics = Lake(retrace.lake).target(job.name, "production").table("metrics")
            for version, meta in commits_after(metrics, seen.get(job.name, -1)):
                seen[job.name] = version
                events += materializations(job, meta)
        return dg.SensorResult(asset_events=events, cursor=json.dumps(seen, sort_keys=True))

    return _sensor


def materializations(job: Job, meta: dict) -> list[dg.AssetMaterialization]:
    """A `replay run`'s last commit as materializations of every output table of `job`, one per hour it wrote
    (none for a run Dagster made, or a commit that records no hours)."""
    hours = meta.get("hours")
    if meta.get("writer") != WRITER or not hours or str(meta.get("run", "")).startswith(DAGSTER_RUN):
        return []
    first, last = (HOURLY.get_partition_key_for_timestamp(parse_instant(h, "hours") / 1e6) for h in hours)
    keys = HOURLY.get_partition_keys_in_range(dg.PartitionKeyRange(first, last))
    said = {"run": meta.get("run"), "writer": WRITER, "seq_from": meta.get("seq_from") or 0,
            **({"journal_version": meta["journal_version"]} if meta.get("journal_version") is not None else {})}
    return [dg.AssetMaterialization(asset_key=[job.name, table], partition=key, metadata=said,
                                    description="replayed outside Dagster (replay run)")
            for key in keys for table in OUTPUT_TABLES]
