"""Replays made outside Dagster (`replay run` from a shell) and the live job's batches shown in Dagster: a sensor reads
each job's production target's newest commits from the Delta log (no Spark) and reports the hourly partitions they
wrote as materializations of the job's output assets, so the asset graph says what the lake holds.

Each commit is read once (the cursor keeps the last version read per job), and the hours read in one evaluation are
reported once each, however many batches wrote them. An hour whose partition does not exist yet (it has not ended:
an arrival hour is complete once it is over, since later rows arrive later) waits in the cursor and is reported when
it ends; an hour before the partitions' start has no partition and is left out."""
from __future__ import annotations

import json
from datetime import timedelta

import dagster as dg

from assets.partitions import DAGSTER_RUN, END_OF_JOURNAL, KEY_FORMAT, hour_key, hour_window
from jobs.live.commit import WRITER as LIVE
from orchestration.resources import RetraceResource
from replay.io.lake import OUTPUT_TABLES, Lake
from replay.io.store import commits_after
from replay.model.durations import parse_instant
from replay.model.jobs import Job
from replay.ops.run import WRITER as RUN

DESCRIBED = {RUN: "written outside Dagster by `replay run`", LIVE: "written by the live job (`replay stream`)"}


def outside_runs_sensor(jobs: list[Job], partitions: dg.TimeWindowPartitionsDefinition) -> dg.SensorDefinition:
    """One sensor for every job; its cursor: the last commit of each job's production metrics table it read, and
    the hours read but not reported yet (not ended)."""

    @dg.sensor(name="retrace_outside_runs", minimum_interval_seconds=60,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description="Reports replays made outside Dagster (the replay CLI) and the live job's batches as "
                           "materializations of the hourly partitions they wrote.")
    def _sensor(context: dg.SensorEvaluationContext, retrace: RetraceResource):
        read, waiting = _cursor(context.cursor)
        events = []
        for job in jobs:
            metrics = Lake(retrace.lake).target(job.name, "production").table("metrics")
            hours = dict(waiting.get(job.name, {}))
            for version, meta in commits_after(metrics, read.get(job.name, -1)):
                read[job.name] = version
                for key, said in written(meta).items():
                    hours[key] = merged(hours.get(key), said)
            ready, later, before = _split(hours, partitions)
            if before:
                context.log.info(f"{job.name}: hours {before[0]} to {before[-1]} are before the partitions' start "
                                 f"{partitions.start.isoformat()}: not reported")
            waiting[job.name] = later
            events += materializations(job, ready)
        cursor = {"read": read, "waiting": {k: v for k, v in waiting.items() if v}}
        return dg.SensorResult(asset_events=events, cursor=json.dumps(cursor, sort_keys=True))

    return _sensor


def _cursor(text: str | None) -> tuple[dict, dict]:
    """The versions read per job and the hours waiting per job (a cursor of an older Retrace: versions only)."""
    found = json.loads(text) if text else {}
    if "read" not in found:
        return found, {}
    return found["read"], found.get("waiting", {})


def _split(hours: dict, partitions: dg.TimeWindowPartitionsDefinition) -> tuple[dict, dict, list[str]]:
    """Hours that are partitions (reported now), hours not ended yet (waiting) and hours before the start."""
    ready, later, before = {}, {}, []
    for key in sorted(hours):
        if partitions.has_partition_key(key):
            ready[key] = hours[key]
        elif hour_window(key)[0] < partitions.start:
            before.append(key)
        else:
            later[key] = hours[key]
    return ready, later, before


def written(meta: dict) -> dict[str, dict]:
    """The hours (partition keys) a commit of `replay run` or of a live batch wrote, each with what to say of it;
    none for a run Dagster made (it materializes its own), another writer, or a commit that records no hours."""
    hours = meta.get("hours")
    if meta.get("writer") not in DESCRIBED or not hours or str(meta.get("run", "")).startswith(DAGSTER_RUN):
        return {}
    first, last = (parse_instant(h, "hours") for h in hours)
    said = {"writer": meta["writer"], "run": str(meta.get("run")), "commits": 1, "seq_from": meta.get("seq_from") or 0,
            "seq_to": meta.get("seq_to") if meta.get("seq_to") is not None else END_OF_JOURNAL}
    hour, out = hour_window(hour_key(first))[0], {}
    while hour <= hour_window(hour_key(last))[0]:
        out[hour.strftime(KEY_FORMAT)] = dict(said)
        hour += timedelta(hours=1)
    return out


def merged(before: dict | None, said: dict) -> dict:
    """What two commits that wrote the same hour say together: the latest run, the commits, the seq range."""
    if before is None:
        return said
    ends = (before["seq_to"], said["seq_to"])
    return {"writer": ", ".join(sorted({*before["writer"].split(", "), said["writer"]})), "run": said["run"],
            "commits": before["commits"] + said["commits"], "seq_from": min(before["seq_from"], said["seq_from"]),
            "seq_to": END_OF_JOURNAL if END_OF_JOURNAL in ends else max(ends)}


def materializations(job: Job, hours: dict[str, dict]) -> list[dg.AssetMaterialization]:
    """Every output table of `job` materialized for each of `hours` (partition keys)."""
    return [dg.AssetMaterialization(asset_key=[job.name, table], partition=key, metadata=said,
                                    description="; ".join(DESCRIBED.get(w, w) for w in said["writer"].split(", ")))
            for key, said in hours.items() for table in OUTPUT_TABLES]

