"""What the floor benchmarks share: the generated data's options, and timing a step warm."""
from __future__ import annotations

import argparse
import time


def data_options(ap: argparse.ArgumentParser, events: int) -> argparse.ArgumentParser:
    """The generated landing's options, as `bench/replay_bench.py` names them."""
    ap.add_argument("--events", type=int, default=events)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def warm(step) -> float:
    """The second of two runs of `step` (the first warms the JVM, the Python workers and the page cache)."""
    for _ in range(2):
        t0 = time.perf_counter()
        step()
        seconds = time.perf_counter() - t0
    return seconds
