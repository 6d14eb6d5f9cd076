"""Wall-clock stack sampling of a process's threads, by phase: where a live batch spends its time, early
against late in a soak (bench/stream_latency.py --stacks). Counts each line of Retrace's code on a sampled
stack once per sample, every 10 ms, while a phase is set."""
from __future__ import annotations

import collections
import os
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class StackSampler:
    def __init__(self, period: float = 0.01):
        self.period, self.phase = period, None
        self.samples: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        me = threading.get_ident()
        while True:
            time.sleep(self.period)
            phase = self.phase
            if phase is None:
                continue
            for thread, frame in sys._current_frames().items():
                lines = _our_lines(frame) if thread != me else []
                if any(not line.startswith("bench/") for line in lines):  # a thread in Retrace's code
                    self.samples[phase].update(set(lines))

    def write(self, path: str, early: str, late: str, batches: int) -> None:
        """Seconds per batch of each line, in both phases, largest growth first."""
        a, b = self.samples[early], self.samples[late]
        per = lambda n: n * self.period / batches  # noqa: E731
        with open(path, "w") as out:
            out.write(f"seconds per batch: {early} ({batches} batches), {late} ({batches}), growth; line\n")
            for line in sorted(set(a) | set(b), key=lambda k: (a[k] - b[k], k)):
                if max(per(a[line]), per(b[line])) >= 0.02:
                    out.write(f"{per(a[line]):7.2f} {per(b[line]):7.2f} {per(b[line] - a[line]):+7.2f}  {line}\n")


def _our_lines(frame) -> list[str]:
    found = []
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(ROOT) and "/.venv/" not in name and not name.endswith("stack_sampler.py"):
            found.append(f"{os.path.relpath(name, ROOT)}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    return found
