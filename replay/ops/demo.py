"""The main job on embedded defaults: generate a sample sensor stream, ingest it, replay every job, summarize.

`replay demo` (and README command 1) runs it: local Spark, a local Delta lake under `.retrace/`. The jobs are
the spec's count/sum job on `infra/policies/production.yaml` and the example jobs of `jobs/examples/`
(per-device 1-minute statistics, per-region 5-minute alarms), all over one sensor journal, all through
`replay run`.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

from replay.io.lake import Lake
from replay.model.jobs import SPEC_JOB, Job
from replay.model.policy import Policy
from replay.ops.catalog import ROOT, catalog

DEFAULT_POLICY = os.path.join(ROOT, "infra", "policies", "production.yaml")
SOURCE = "sensors"


def run_demo(work: str = ".retrace", events: int = 200_000, policy_file: str | None = None, log=None) -> dict:
    """The spec's job's summary and output hash, each example job's, the lake and the wall time; `log` hears
    what the demo does next."""
    from replay.io.journal import SourceFields, ingest
    from replay.io.spark import get_spark

    began, say = time.perf_counter(), log or (lambda line: None)
    landing, lake = os.path.join(work, "landing"), os.path.join(work, "lake")
    jobs = catalog()  # a broken job file stops the demo before Spark starts
    with ThreadPoolExecutor(1, thread_name_prefix="retrace-demo") as pool:
        # the sample stream is written while Spark's driver starts: generating it takes about half that start
        prepared = pool.submit(_prepare, landing, lake, events, say)
        spark = get_spark("retrace-demo")
        prepared.result()
    source = jobs.sources[SOURCE]
    r = ingest(spark, landing, lake, fields=SourceFields.of(source))
    say(f"demo: journal +{r.rows} rows from {len(r.files)} files ({r.skipped} already journaled)")
    policy_file = policy_file or DEFAULT_POLICY
    every = demo_jobs(policy_file, jobs)
    # side by side: a replay's driver work (planning, commits) overlaps the others' tasks (the replays ~10% shorter)
    with ThreadPoolExecutor(len(every), thread_name_prefix="retrace-replay") as pool:
        futures = [(job.name, pool.submit(_replayed, spark, lake, job, say)) for job in every]
        replayed = {name: f.result() for name, f in futures}
    spec = replayed.pop(SPEC_JOB)
    return {**spec, "lake": lake, "policy": policy_file, "jobs": replayed,
            "wall_seconds": round(time.perf_counter() - began, 1)}


def demo_jobs(policy_file: str = DEFAULT_POLICY, found=None) -> list[Job]:
    """The spec's job on `policy_file`, then the jobs on the sensor source of the catalog `found` (default: read it)."""
    jobs = (found or catalog()).jobs
    return [Job.spec(Policy.from_yaml(policy_file)), *(job for _, job in sorted(jobs.items()) if job.source == SOURCE)]


def _replayed(spark, lake: str, job: Job, say) -> dict:
    """`replay run` of one job into target `production`: what its target holds and its output hash."""
    from replay.ops.run import run
    from replay.ops.summarize import summarize

    say(f"demo: replaying {job.describe()} into target 'production'")
    s = run(spark, lake, job, hashed=True)
    where = Lake(lake).target(job.name, "production")
    return {**summarize(spark, where, job), "output_hash": s.output_hash, "outputs": where.folder,
            "seconds": round(s.seconds, 1)}


def _prepare(landing: str, lake: str, events: int, say) -> None:
    """The landing of sensor events (generated once) and a lake in today's layout."""
    from replay.ops.generate import StreamSpec, generate
    from replay.ops.migrate import migrate

    _set_aside_older_demo(landing, lake, say)
    if Lake(lake).has_old_layout():
        say(f"demo: {lake} is in the layout before jobs; moving it ({migrate(lake)})")
    if not os.path.isdir(landing):
        say(f"demo: generating {events} sensor events into {landing}")
        generate(landing, StreamSpec(events, partitions=8, keys=1000, files=20, seed=0, shape="sensors"))
        open(os.path.join(landing, ".shape-sensors"), "a").close()


def _set_aside_older_demo(landing: str, lake: str, say) -> None:
    """A demo folder from before sensor events and whole payloads is moved aside (never deleted)."""
    marker = os.path.join(landing, ".shape-sensors")
    if os.path.isdir(landing) and not os.path.exists(marker):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for path in (landing, lake):
            if os.path.exists(path):
                os.rename(path, f"{path}.before-{stamp}")
                say(f"demo: {path} is from an older demo; moved to {path}.before-{stamp}")
