"""The spec's job's assets (`OUTPUTS`) and checks (`CHECKS`) and the alert SENSORS with test resources (the sinks
point at local receivers), and the streams the tests feed them. (No `from __future__ import annotations`:
Dagster reads config classes from annotations.)"""
import os
from typing import Optional

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from assets.checks import job_checks
from assets.journal import journal_asset
from assets.outputs import job_outputs
from orchestration.alerting import SENSORS
from orchestration.resources import RetraceResource
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.generate import StreamSpec, generate
from tests.support import POLICY_FILE, hours_from

SPEC = Job.spec(Policy.from_yaml(POLICY_FILE))
HOURS = hours_from()  # the generated arrivals' hours
OUTPUTS = job_outputs(SPEC, HOURS)  # the op `default_outputs`, assets [default, <table>]
JOURNAL = journal_asset(HOURS)
CHECKS = job_checks(SPEC)
# the generated streams start at 2024-01-01T00:00Z and last a little over an hour: two hourly partitions
FIRST_HOUR, LAST_HOUR = "2024-01-01-00:00", "2024-01-01-01:00"
RANGE_TAGS = {"dagster/asset_partition_range_start": FIRST_HOUR, "dagster/asset_partition_range_end": LAST_HOUR}


def definitions(retrace: RetraceResource, sinks: dict) -> dg.Definitions:
    return dg.Definitions(assets=[JOURNAL, OUTPUTS], asset_checks=CHECKS, sensors=SENSORS,
                          resources={"retrace": retrace, **sinks})


def materialize(retrace: RetraceResource, instance: dg.DagsterInstance, target: str = "production",
                tags: Optional[dict] = None, checks_only: bool = False, check_config: Optional[dict] = None,
                checks: tuple = ()):
    """One run over both hours (as a single-run backfill makes it): ingest, replay and every check; with
    `checks_only`, the checks alone (or those named in `checks`) over the outputs already in the lake."""
    selection = None
    if checks_only:
        keys = [k for c in CHECKS for k in c.check_keys if not checks or k.name in checks]
        selection = dg.AssetSelection.checks(*keys)
    ops = {} if checks_only else {OUTPUTS.op.name: {"config": {"target": target}}}
    for check in CHECKS:
        (key,) = check.check_keys
        if checks_only and checks and key.name not in checks:
            continue
        settings = dict((check_config or {}).get(key.name, {}))
        if checks_only:
            settings["target"] = target  # no replay op in the run to take the target from
        if settings:
            ops[check.node_def.name] = {"config": settings}
    return dg.materialize([JOURNAL, OUTPUTS, *CHECKS], instance=instance, selection=selection,
                          resources={"retrace": retrace}, tags=tags or RANGE_TAGS, run_config={"ops": ops},
                          raise_on_error=False)


def clean_landing(folder: str) -> dict:
    """2000 generated events over 4 partitions, arriving over 67 minutes from 2024-01-01T00:00Z."""
    return generate(folder, StreamSpec(2000, partitions=4, keys=40, files=4, seed=11, fmt="parquet", rate=0.5))


def late_landing(folder: str, fraction: float = 0.8, lag_s: tuple[int, int] = (120, 480)) -> dict:
    """The clean stream with `fraction` of its events made minutes late: event_time = arrival - lag."""
    summary = clean_landing(folder)
    rng = np.random.default_rng(5)
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        table = pq.read_table(path)
        n = table.num_rows
        arrival = pc.cast(table["arrival_time"], pa.timestamp("us", tz="UTC"))
        lag = pa.array(rng.integers(lag_s[0] * 1_000_000, lag_s[1] * 1_000_000, n), pa.duration("us"))
        late = pc.strftime(pc.subtract(arrival, lag), format="%Y-%m-%dT%H:%M:%SZ")
        valid = pc.and_(pc.is_valid(table["event_time"]), pc.not_equal(table["event_time"], "not-a-time"))
        chosen = pc.and_(pa.array(rng.random(n) < fraction), pc.fill_null(valid, False))
        event_time = pc.if_else(chosen, late, table["event_time"])
        table = table.set_column(table.schema.get_field_index("event_time"), "event_time", event_time)
        pq.write_table(table, path)
    return summary
