"""Daily table maintenance: compact every Delta table of the lake, keep the last checkpoints of each target,
vacuum files past the retention (`replay.ops.maintain`); what it did is the run's output metadata."""

import dagster as dg
from pydantic import Field

from orchestration.resources import RetraceResource
from replay.ops.maintain import DEFAULT_KEEP_CHECKPOINTS, DEFAULT_RETENTION


class MaintenanceConfig(dg.Config):
    retention: str = Field(default=DEFAULT_RETENTION, description="keep the files that any table version of this "
                           "age needs (time travel with versionAsOf); a duration such as 7d or 12h. Shorter than "
                           "7d overrides Delta's retentionDurationCheck")
    keep_checkpoints: int = Field(default=DEFAULT_KEEP_CHECKPOINTS, description="checkpoints kept per target (the "
                                  "latest); range replays before the oldest kept one start from the journal's start")


@dg.op(description="OPTIMIZE every Delta table of the lake, prune old checkpoints, VACUUM past the retention.")
def maintain_tables(context: dg.OpExecutionContext, config: MaintenanceConfig, retrace: RetraceResource):
    from replay.ops.maintain import maintain

    report = maintain(retrace.spark(), retrace.lake, retention=config.retention,
                      keep_checkpoints=config.keep_checkpoints)
    totals = report.totals()
    rows = "\n".join(f"| {t.table} | {t.version_before} -> {t.version_after} | {t.files_before} -> {t.files_after} | "
                     f"{t.bytes_before} -> {t.bytes_after} | {t.files_vacuumed} | {t.checkpoints_removed} |"
                     for t in report.tables)
    context.log.info(f"maintained {totals['tables']} tables: {totals}")
    yield dg.Output(None, metadata={
        **totals, "lake": report.lake, "retention": report.retention, "keep_checkpoints": report.keep_checkpoints,
        "tables_detail": dg.MetadataValue.json(report.to_dict()["tables"]),
        "report": dg.MetadataValue.md("| table | version | files | bytes | files vacuumed | checkpoints removed |\n"
                                      "| --- | --- | --- | --- | --- | --- |\n" + rows),
    })


@dg.job(name="maintenance", description="Compact, prune checkpoints and vacuum every Delta table of the lake.",
        tags={"retrace/kind": "maintenance"})
def maintenance_job():
    maintain_tables()


@dg.schedule(job=maintenance_job, cron_schedule="0 3 * * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.RUNNING,
             description="Daily at 03:00 UTC (after recovery): OPTIMIZE, prune checkpoints, VACUUM past 7 days.")
def maintenance_schedule(context: dg.ScheduleEvaluationContext):
    return dg.RunRequest(run_config={"ops": {"maintain_tables": {"config": {}}}})
