"""The live job's observations of processing time, the `lag` and `diagnostics` tables of its lead job's target, as
assets in Dagster: external assets (Dagster does not make them, the live job appends a batch's rows) that a sensor
observes when they change, with their row count and latest values read from the Delta log's statistics (no Spark)."""
from __future__ import annotations

import json

import dagster as dg

from orchestration.resources import RetraceResource
from replay.io.lake import Lake
from replay.io.store import commits_after, log_stats
from replay.model.jobs import Job

DESCRIPTIONS = {
    "lag": "The live job's processing lag per micro-batch and partition: rows and bytes read, input waiting, and the "
           "watermark delay against processing time and against the latest arrival (jobs/live/lag.py).",
    "diagnostics": "What the live job noticed of its source: partitions not progressing, late input events, each "
                   "alerted as it starts (jobs/live/diagnostics.py).",
}
# what each table's observation says: metadata name -> the column whose greatest value it is
LATEST = {
    "lag": {"last_batch": "batch", "last_committed_at": "committed_at", "max_processing_delay_s": "processing_delay_s",
            "max_arrival_delay_s": "arrival_delay_s", "max_backlog": "backlog"},
    "diagnostics": {"last_batch": "batch", "last_observed_at": "at", "max_late_events_in_a_batch": "count"},
}

def live_table_specs(lead: Job) -> list[dg.AssetSpec]:
    """`[<lead>, lag]` and `[<lead>, diagnostics]`, in the lead job's group: external assets, observed only."""
    return [dg.AssetSpec([lead.name, name], description=DESCRIPTIONS[name], group_name=lead.name, kinds={"delta"},
                         metadata={"written_by": "the live job (replay stream)", "job": lead.name})
            for name in DESCRIPTIONS]


def live_tables_sensor(lead: Job) -> dg.SensorDefinition:
    """Observes the lead job's production `lag` and `diagnostics` tables when a commit has changed them (its cursor:
    the last version read of each)."""

    @dg.sensor(name="retrace_live_tables", minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
               description="Observes the live job's lag and diagnostics tables (row count, latest values) when the "
                           "live job has appended to them.")
    def _sensor(context: dg.SensorEvaluationContext, retrace: RetraceResource):
        read = json.loads(context.cursor) if context.cursor else {}
        events = []
        for name in DESCRIPTIONS:
            path = Lake(retrace.lake).target(lead.name, "production").table(name)
            new = commits_after(path, read.get(name, -1))
            if new:
                read[name] = new[-1][0]
                events.append(observation(lead, name, path, new[-1][0]))
        return dg.SensorResult(asset_events=events, cursor=json.dumps(read, sort_keys=True))

    return _sensor


def observation(lead: Job, name: str, path: str, version: int) -> dg.AssetObservation:
    """The table as its Delta log describes it now: rows, the table version, and the latest values of LATEST."""
    stats = log_stats(path)
    latest = {said: stats.high.get(column) for said, column in LATEST[name].items()}
    return dg.AssetObservation(asset_key=[lead.name, name], metadata={
        "rows": stats.rows, "table_version": version, "path": dg.MetadataValue.path(path),
        **{k: v for k, v in latest.items() if v is not None}})
