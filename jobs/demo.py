"""The main job on embedded defaults: generate a sample sensor stream, ingest it, replay every job, summarize.

`replay demo` (and README command 1) runs it: local Spark, a local Delta lake under `.retrace/`. The jobs
are the spec's count/sum job on `infra/policies/production.yaml` and the example jobs of `jobs/examples/`
(per-device 1-minute statistics, per-region 5-minute alarms), all over one sensor journal.
"""
from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_POLICY = os.path.join(ROOT, "infra", "policies", "production.yaml")
SOURCE = "sensors"


def run_demo(work: str = ".retrace", events: int = 200_000, policy_file: str | None = None) -> dict:
    from jobs.catalog import folder
    from replay.cli.generate import generate
    from replay.cli.hashing import target_hash
    from replay.cli.runner import run, summarize
    from replay.io.journal import SourceFields, ingest
    from replay.io.spark import get_spark
    from replay.model.jobs import job_root, load_folder
    from replay.model.policy import Policy

    began = time.perf_counter()
    landing, lake = os.path.join(work, "landing"), os.path.join(work, "lake")
    catalog = load_folder(folder())  # a broken job file stops the demo before Spark starts
    _set_aside_old_layout(landing, lake)
    if not os.path.isdir(landing):
        print(f"demo: generating {events} sensor events into {landing}", file=sys.stderr)
        generate(landing, events, partitions=8, keys=1000, files=20, seed=0, shape="sensors")
        open(os.path.join(landing, ".shape-sensors"), "a").close()
    spark = get_spark("retrace-demo")
    source = catalog.sources[SOURCE]
    r = ingest(spark, landing, lake, fields=SourceFields(source.event_time_field, source.key_field))
    print(f"demo: journal +{r.rows} rows from {len(r.files)} files ({r.skipped} already journaled)", file=sys.stderr)
    policy = Policy.from_yaml(policy_file or DEFAULT_POLICY)
    print("demo: replaying the spec's count/sum job into target 'production'", file=sys.stderr)
    run(spark, lake, policy)
    jobs = {}
    for name, job in sorted(catalog.jobs.items()):
        if job.source != SOURCE:
            continue
        print(f"demo: replaying job {name} ({job.origin}) into target 'production'", file=sys.stderr)
        s = run(spark, lake, job.policy, job=job)
        root = job_root(lake, job)
        windows = spark.read.format("delta").load(os.path.join(root, "outputs", "production", "windows"))
        jobs[name] = {"windows": windows.count(), "outputs": os.path.join(root, "outputs", "production"),
                      "output_hash": target_hash(spark, root), "seconds": round(s.seconds, 1)}
    return {**summarize(spark, lake), "output_hash": target_hash(spark, lake), "lake": lake,
            "policy": policy_file or DEFAULT_POLICY, "jobs": jobs,
            "wall_seconds": round(time.perf_counter() - began, 1)}


def _set_aside_old_layout(landing: str, lake: str) -> None:
    """A demo folder from before sensor events and whole payloads is moved aside (never deleted)."""
    marker = os.path.join(landing, ".shape-sensors")
    if os.path.isdir(landing) and not os.path.exists(marker):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for path in (landing, lake):
            if os.path.exists(path):
                os.rename(path, f"{path}.before-{stamp}")
                print(f"demo: {path} is from an older demo; moved to {path}.before-{stamp}", file=sys.stderr)
