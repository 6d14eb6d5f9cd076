"""The main job on embedded defaults: generate a sample stream, ingest it, replay it, summarize.

`replay demo` (and README command 1) runs it: local Spark, a local Delta lake under `.retrace/`.
"""
from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_POLICY = os.path.join(ROOT, "infra", "policies", "production.yaml")


def run_demo(work: str = ".retrace", events: int = 200_000, policy_file: str | None = None) -> dict:
    from replay.generate import generate
    from replay.hashing import target_hash
    from replay.journal import ingest
    from replay.policy import Policy
    from replay.runner import run, summarize
    from replay.spark import get_spark

    began = time.perf_counter()
    landing, lake = os.path.join(work, "landing"), os.path.join(work, "lake")
    if not os.path.isdir(landing):
        print(f"demo: generating {events} events into {landing}", file=sys.stderr)
        generate(landing, events, partitions=8, keys=1000, files=20, seed=0)
    spark = get_spark("retrace-demo")
    r = ingest(spark, landing, lake)
    print(f"demo: journal +{r.rows} rows from {len(r.files)} files ({r.skipped} already journaled)", file=sys.stderr)
    policy = Policy.from_yaml(policy_file or DEFAULT_POLICY)
    print("demo: replaying into target 'production'", file=sys.stderr)
    run(spark, lake, policy)
    return {**summarize(spark, lake), "output_hash": target_hash(spark, lake), "lake": lake,
            "policy": policy_file or DEFAULT_POLICY, "wall_seconds": round(time.perf_counter() - began, 1)}
