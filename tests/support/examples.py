"""How many random cases the property tests draw: a CI-sized default, scaled up for a deeper run with
RETRACE_EXAMPLES_SCALE (e.g. 4), since each case is a few Spark jobs (~5-10 s on 2 cores)."""
from __future__ import annotations

import os


def examples(default: int) -> int:
    return max(1, round(default * float(os.environ.get("RETRACE_EXAMPLES_SCALE", "1"))))
