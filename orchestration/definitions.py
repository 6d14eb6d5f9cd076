"""The Dagster code location of Retrace: one `Definitions` (`workspace.yaml` loads this file).

Assets replay arrival hours (backfill a range from the asset graph: one Spark run per range); the live
job runs on new landing data; the recovery schedule verifies and repairs the last day; the maintenance
schedule compacts and vacuums the Delta tables; the advice schedule refreshes each job's tolerance advice
(`assets.advice`); the data-quality
checks and alert sensors come from `assets.checks` and `orchestration.alerting`.

Every job of the jobs folder (`jobs.catalog.folder()`: RETRACE_JOBS, else jobs/examples) is a group of
assets of its own (`assets.job_assets`), with its checks and its daily recovery. A job file that does not
load fails the code location with the loader's one-line message naming the file.
"""
from __future__ import annotations

import dagster as dg

from assets.advice import advice_asset, advice_schedule
from assets.checks import CHECKS, job_checks
from assets.job_assets import job_outputs
from assets.journal import journal
from assets.outputs import replay_outputs
from jobs.catalog import folder
from orchestration.alerting import RESOURCES, SENSORS
from orchestration.live import landing_sensor, live_job
from orchestration.maintenance import maintenance_job, maintenance_schedule
from orchestration.recovery import job_recovery, recovery_job, recovery_schedule
from orchestration.resources import RetraceResource
from replay.model.jobs import load_folder

JOBS = list(load_folder(folder()).jobs.values())  # a JobError here names the file: the location fails with it
RECOVERIES = [job_recovery(job) for job in JOBS]
ADVICE = [advice_asset(), *(advice_asset(job) for job in JOBS)]
ADVICE_JOB, ADVICE_SCHEDULE = advice_schedule(ADVICE)

defs = dg.Definitions(
    assets=[journal, replay_outputs, *(job_outputs(job) for job in JOBS), *ADVICE],
    asset_checks=[*CHECKS, *(check for job in JOBS for check in job_checks(job))],
    jobs=[live_job, recovery_job, maintenance_job, *(r.job for r in RECOVERIES), ADVICE_JOB],
    schedules=[recovery_schedule, maintenance_schedule, *(r.schedule for r in RECOVERIES), ADVICE_SCHEDULE],
    sensors=[landing_sensor, *SENSORS],
    resources={"retrace": RetraceResource.from_env(), **RESOURCES},
    # one Spark session per run: steps run in the run's process, not one process (and JVM) per step
    executor=dg.in_process_executor,
)
