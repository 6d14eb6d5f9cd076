"""Small landings and replayed lakes for tests that need a whole target to work on (maintenance, interrupted runs),
or a journal of known lateness (advice, diff)."""
from __future__ import annotations

import json
import os
import random

from replay.cli import main as cli
from replay.io.journal import ingest
from replay.ops.generate import StreamSpec, generate
from tests.support import POLICY_FILE


def replayed_lake(spark, root, seed: int) -> str:
    """400 events on 2 partitions, ingested and replayed into `production` through the CLI; returns the lake."""
    landing, lake = str(root / "landing"), str(root / "lake")
    generate(landing, StreamSpec(400, partitions=2, keys=10, files=2, seed=seed, rate=0.3))
    ingest(spark, landing, lake)
    assert cli.main(["run", "--lake", lake, "--policy", POLICY_FILE]) == 0
    return lake


EVENTS_PER_PARTITION = 2000
PARTITIONS = 2
LATE_EVERY = 100  # one event in a hundred is 30-60 s late


def known_lateness(folder) -> None:
    """Events every 250 ms per partition; lateness uniform in [0, 1.9] s, and in [30, 60) s for one in a hundred.
    The journal is in arrival order, as a broker would deliver it."""
    rng = random.Random(7)
    start = 1_704_067_200_000  # 2024-01-01T00:00:00Z, in ms
    rows = []
    for p in range(PARTITIONS):
        events = []
        for i in range(EVENTS_PER_PARTITION):
            t = start + 250 * i
            lag = rng.randint(30_000, 59_999) if i % LATE_EVERY == 37 else rng.randint(0, 1_900)
            events.append((t + lag, t, i))
        for offset, (a, t, i) in enumerate(sorted(events)):
            rows.append((a, p, offset, t, i))
    rows.sort()
    iso = lambda ms: f"{_iso(ms)}"  # noqa: E731
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "part-0.jsonl"), "w") as f:
        for a, p, offset, t, i in rows:
            f.write(json.dumps({"partition": p, "offset": offset, "arrival_time": iso(a), "event_time": iso(t),
                                "key": f"k{i % 5}", "value": 1.0}) + "\n")


def _iso(ms: int) -> str:
    from replay.model.durations import format_instant

    return format_instant(ms * 1000)
