"""The Dagster code location of Retrace: one `Definitions` (`workspace.yaml` loads this file).

Every job, the spec's count/sum job (`default`, on the resource's policy) and each job of the jobs folder
(`replay.ops.catalog.folder()`: RETRACE_JOBS, else jobs/examples), is a group of assets of its own: its outputs
(hourly partitions by arrival from the journal's first arrival, or RETRACE_PARTITIONS_START; backfill a range from
the asset graph: one Spark run per range), their checks and its advice (`assets`), with its daily recovery. The
shared `journal` asset ingests the landing. The live job runs on new landing data; the maintenance schedule compacts
and vacuums the Delta tables; the alert sensors report failed runs and checks; `retrace_outside_runs` reports what
`replay run` and the live job wrote. A job file that does not load fails the code location with the loader's
one-line message naming the file.
"""
from __future__ import annotations

import dagster as dg

from assets.advice import advice_asset
from assets.checks import job_checks
from assets.journal import journal_asset
from assets.outputs import job_outputs
from assets.partitions import hourly, partitions_start
from orchestration.advice import advice_schedule
from orchestration.alerting import RESOURCES, SENSORS
from orchestration.live import landing_sensor, live_job
from orchestration.live_tables import live_table_specs, live_tables_sensor
from orchestration.maintenance import maintenance_job, maintenance_schedule
from orchestration.outside_runs import outside_runs_sensor
from orchestration.recovery import job_recovery
from orchestration.resources import RetraceResource
from replay.ops.catalog import catalog

RETRACE = RetraceResource.from_env()
# the spec's job leads the live job (its target holds the lag and diagnostics tables)
JOBS = [RETRACE.spec_job(), *catalog().jobs.values()]  # a JobError here names the file: the location fails with it
# every asset's hours, from RETRACE_PARTITIONS_START, else the journal's first arrival, else this hour (empty lake)
PARTITIONS = hourly(partitions_start(RETRACE.lake, RETRACE.partitions_start))
RECOVERIES = [job_recovery(job, PARTITIONS) for job in JOBS]
ADVICE = [advice_asset(job) for job in JOBS]
ADVICE_JOB, ADVICE_SCHEDULE = advice_schedule(ADVICE)

defs = dg.Definitions(
    assets=[journal_asset(PARTITIONS), *(job_outputs(job, PARTITIONS) for job in JOBS), *ADVICE,
            *live_table_specs(JOBS[0])],
    asset_checks=[check for job in JOBS for check in job_checks(job)],
    jobs=[live_job, maintenance_job, *(r.job for r in RECOVERIES), ADVICE_JOB],
    schedules=[maintenance_schedule, *(r.schedule for r in RECOVERIES), ADVICE_SCHEDULE],
    sensors=[landing_sensor, outside_runs_sensor(JOBS, PARTITIONS), live_tables_sensor(JOBS[0]), *SENSORS],
    resources={"retrace": RETRACE, **RESOURCES},
    # one Spark session per run: steps run in the run's process, not one process (and JVM) per step
    executor=dg.in_process_executor,
)
