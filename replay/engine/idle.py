"""Idle timeout (spec section 6, as in Atlas): a clock row closes open windows of a quiet scope.

At a clock row with arrival a, every open window (end e) with a >= max(e, last event arrival) +
idle_timeout closes: the scope's output watermark is raised to e + allowed lateness. Which windows
are open depends on everything before the row, so this runs in seq order, one output scope per task.
"""
from __future__ import annotations

import bisect

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from replay.engine.windows import scope_column, window_range
from replay.model.policy import Policy


def raises(rows: DataFrame, policy: Policy, before: dict[int, tuple[int | None, list[int]]] | None = None) -> DataFrame:
    """(seq, raise): the output watermark a clock row raises its scope to (only rows that raise it).
    `before`: per scope, from earlier rows, the latest event arrival and the ends of its open windows
    (windows that closed no longer matter: a raise to their end would not move the watermark)."""
    w = policy.window
    lo, hi = window_range(F.col("timestamp"), w)
    slim = rows.select(
        "seq", "kind", "arrival",
        scope_column(policy).alias("scope"),
        F.when(F.col("timestamp").isNotNull() & (lo <= hi), lo).alias("k_lo"),
        F.when(F.col("timestamp").isNotNull() & (lo <= hi), hi).alias("k_hi"),
    )
    return slim.groupBy("scope").applyInPandas(_raises_in_scope(policy, before or {}), "seq long, raise long")


def _raises_in_scope(policy: Policy, before: dict[int, tuple[int | None, list[int]]]):
    w, idle, lateness = policy.window, policy.idle_timeout, policy.allowed_lateness

    def run(pdf: pd.DataFrame) -> pd.DataFrame:
        pdf = pdf.sort_values("seq", kind="stable")
        is_event, is_clock = (pdf["kind"] == "event").to_numpy(), (pdf["kind"] == "clock").to_numpy()
        arrival = pdf["arrival"].to_numpy(dtype=np.int64)
        seqs = pdf["seq"].to_numpy(dtype=np.int64)
        k_lo, k_hi = pdf["k_lo"].to_numpy(), pdf["k_hi"].to_numpy()
        last_event, open_ends = before.get(int(pdf["scope"].iloc[0]), (None, [])) if len(pdf) else (None, [])
        ends: list[int] = sorted(open_ends)  # sorted ends of windows that have held an event so far
        seen: set[int] = {(e - w.size - w.offset) // w.hop for e in ends}
        out_seq, out_raise = [], []
        for i in range(len(pdf)):
            if is_event[i]:
                last_event = arrival[i] if last_event is None else max(last_event, arrival[i])
                if not pd.isna(k_lo[i]):
                    for k in range(int(k_lo[i]), int(k_hi[i]) + 1):
                        if k not in seen:
                            seen.add(k)
                            bisect.insort(ends, w.offset + k * w.hop + w.size)
            elif is_clock[i] and last_event is not None and ends:  # a punctuation is no idle-timeout activity
                limit = int(arrival[i]) - idle
                if last_event <= limit:
                    j = bisect.bisect_right(ends, limit)
                    if j:
                        out_seq.append(int(seqs[i]))
                        out_raise.append(ends[j - 1] + lateness)
        return pd.DataFrame({"seq": pd.Series(out_seq, dtype="int64"), "raise": pd.Series(out_raise, dtype="int64")})

    return run
