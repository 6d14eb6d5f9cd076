"""Small replayed lakes for tests that need a whole target to work on (maintenance, interrupted runs)."""
from __future__ import annotations

import os

from replay.cli import main as cli
from replay.cli.generate import generate
from replay.io.journal import ingest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICY_FILE = os.path.join(ROOT, "infra", "policies", "production.yaml")


def replayed_lake(spark, root, seed: int) -> str:
    """400 events on 2 partitions, ingested and replayed into `production` through the CLI; returns the lake."""
    landing, lake = str(root / "landing"), str(root / "lake")
    generate(landing, 400, partitions=2, keys=10, files=2, seed=seed, rate=0.3)
    ingest(spark, landing, lake)
    assert cli.main(["run", "--lake", lake, "--policy", POLICY_FILE]) == 0
    return lake
