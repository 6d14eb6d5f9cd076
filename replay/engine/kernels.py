"""The watermark pass's sequential part, vectorized: numpy over one chunk's rows on the executors.

Each chunk's rows go to one task (`repartitionById`, no sort in Spark) and reach Python as Arrow batches
(`mapInArrow`). There, in `seq` order, every partition's running maximum starts from its value at the
chunk's start, and the merged output watermark is the minimum over partitions of those step functions.
Both are sorts, cumulative extrema and binary searches: O(n log n) per chunk, whatever the partitions.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType


def running_watermarks(rows: DataFrame, start, merged: bool) -> DataFrame:
    """Adds `wp` (the row's partition's running maximum of `c` after the row, from its value at the chunk's
    start in `start`, a `watermarks.Starts`), `w_before` (the same before the row) and, when `merged`, `merged`
    (the minimum over all partitions of their `wp` after the row). Rows carry `chunk`, `partition`, `seq`, `c`."""
    parts = np.array(sorted(start.values), dtype=np.int64)
    table = np.array([start.values[p] for p in parts], dtype=np.int64).reshape(len(parts), -1)
    lowest = start.lowest_after()
    caps = np.array([lowest[start.first + i] for i in range(table.shape[1])], dtype=np.int64)
    first = start.first
    added = ["wp", "w_before", *(["merged"] if merged else [])]
    schema = StructType([*rows.schema.fields, *(StructField(c, LongType(), False) for c in added)])

    def per_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for chunk, part in by_chunk(batches):
            yield from _chunk(part, table[:, chunk - first], caps[chunk - first], parts, merged).to_batches()

    return rows.repartitionById(table.shape[1], F.col("chunk") - first).mapInArrow(per_task, schema)


def by_chunk(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, pa.Table]]:
    """A task's rows, chunk by chunk (their `chunk` column): one chunk per task, unless Spark put several into
    one; none when the task got no rows."""
    batches = list(batches)
    if not batches:
        return
    whole = pa.Table.from_batches(batches)
    chunks = whole.column("chunk").to_numpy()
    present = np.unique(chunks)
    for chunk in present:
        yield int(chunk), whole if len(present) == 1 else whole.filter(pa.array(chunks == chunk))


def _chunk(rows: pa.Table, start: np.ndarray, cap: int, parts: np.ndarray, merged: bool) -> pa.Table:
    """One chunk: its rows with wp, w_before (and merged), computed in seq order and put back in the rows'
    order (so the columns passed through are not copied)."""
    order = np.argsort(rows.column("seq").to_numpy(), kind="stable")
    which = np.searchsorted(parts, rows.column("partition").to_numpy().astype(np.int64)[order])
    wp, before = grouped_running_max(which, rows.column("c").to_numpy()[order], start[which])
    added = {"wp": wp, "w_before": before}
    if merged:
        added["merged"] = minimum_of_steps(wp, before, cap)
    for name, values in added.items():
        in_place = np.empty_like(values)
        in_place[order] = values
        rows = rows.append_column(name, pa.array(in_place))
    return rows


def grouped_running_max(group: np.ndarray, values: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row (in order), the maximum of its group's `start` and `values` up to and including it, and
    before it. No loop over groups: within the rows sorted by group, a cumulative maximum of
    group * (number of distinct values) + rank of the value never crosses from one group into the next."""
    n = len(values)
    if n == 0:
        return values.astype(np.int64), values.astype(np.int64)
    by_group = np.argsort(group, kind="stable")  # stable: each group's rows stay in order
    g, v = group[by_group].astype(np.int64), np.maximum(values[by_group], start[by_group]).astype(np.int64)
    distinct, rank = np.unique(v, return_inverse=True)
    upto = distinct[np.maximum.accumulate(g * len(distinct) + rank) % len(distinct)]
    first = np.ones(n, dtype=bool)
    first[1:] = g[1:] != g[:-1]
    before = np.empty(n, dtype=np.int64)
    before[1:] = upto[:-1]
    before[first] = start[by_group][first]
    wp, w_before = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    wp[by_group], w_before[by_group] = upto, before
    return wp, w_before


def minimum_of_steps(after: np.ndarray, before: np.ndarray, cap: int) -> np.ndarray:
    """Per row (in seq order), the minimum over all partitions of their value after it, given each row's own
    partition's value after (`after`) and before (`before`) it, and `cap`, the least value any partition
    holds at the end of the chunk. A row that raises its partition leaves the value before it at its place;
    in value order, a running maximum of those places says from which row on every partition is past each
    value; a row's minimum is the least value not yet passed by all (a binary search), capped by `cap`."""
    rises = np.flatnonzero(after > before)
    if len(rises) == 0:
        return np.full(len(after), cap, dtype=np.int64)
    values, places = before[rises], rises
    order = np.lexsort((places, values))
    values, passed_at = values[order], np.maximum.accumulate(places[order])
    j = np.searchsorted(passed_at, np.arange(len(after)), side="right")  # first value not passed after row i
    least = np.where(j < len(values), values[np.minimum(j, len(values) - 1)], cap)
    return np.minimum(least, cap)


PASS = ("chunk int, partition int, hour long, backward long, not_rising long, first long, last long, "
        "floor long, events long")
_PASS = pa.schema([(name, pa.int32() if name in ("chunk", "partition") else pa.int64())
                   for name in ("chunk", "partition", "hour", "backward", "not_rising", "first", "last", "floor",
                                "events")])


def chunk_pass(rows: DataFrame, tasks: int) -> tuple[list[tuple[int, int, int, int]], list[tuple[int, int, int, int]]]:
    """One pass over journal rows (chunk, partition, seq, offset, hour, event, floor, events), the chunks spread
    over `tasks` tasks however few partitions the source has (a task holds its chunks' rows at once, and numpy
    sorts them chunk by chunk). Gives the events' offset steps (`joined_up`: per partition and hour of arrival,
    events whose offset is below, or at or below, the previous event's in their partition in seq order) and, per
    chunk and partition, the maxima of `floor` and `events` (the watermark's two terms,
    `watermarks.Starts.from_maxima`), so no other pass is needed for them."""
    def per_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for chunk, part in by_chunk(batches):
            event = part.column("event").to_numpy()
            columns = {c: part.column(c).to_numpy().astype(np.int64)
                       for c in ("partition", "seq", "offset", "hour", "floor", "events")}
            found = [(*r, None, None) for r in chunk_steps(*(columns[c][event] for c in ("partition", "seq", "offset",
                                                                                          "hour")))]
            found += [(p, None, None, None, None, None, f, e)
                      for p, f, e in chunk_maxima(columns["partition"], columns["floor"], columns["events"])]
            yield pa.RecordBatch.from_arrays(
                [pa.array([chunk] * len(found), pa.int32()), *(pa.array(c, t) for c, t in zip(
                    zip(*found), [pa.int32(), *[pa.int64()] * 7]))], schema=_PASS)

    found = [tuple(r) for r in rows.repartitionById(tasks, F.pmod("chunk", F.lit(tasks))).mapInArrow(
        per_task, PASS).collect()]
    maxima = sorted((r[0], r[1], r[7], r[8]) for r in found if r[7] is not None)
    return joined_up([r[:7] for r in found if r[7] is None]), maxima


def chunk_maxima(partition: np.ndarray, *values: np.ndarray) -> list[tuple[int, ...]]:
    """(partition, the maximum of each of `values`) for each partition with rows."""
    order = np.argsort(partition, kind="stable")
    p = partition[order]
    starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]]) if len(p) else np.array([], dtype=np.int64)
    maxima = [np.maximum.reduceat(v[order], starts) if len(p) else [] for v in values]
    return [(int(p[s]), *(int(m[i]) for m in maxima)) for i, s in enumerate(starts)]


def chunk_steps(partition: np.ndarray, seq: np.ndarray, offset: np.ndarray, hour: np.ndarray) -> list[tuple]:
    """One chunk's events: (partition, hour, backward, not_rising, None, None) per partition and hour with any
    steps inside the chunk, and (partition, hour of its first event, 0, 0, first offset, last offset) per
    partition."""
    order = np.lexsort((seq, partition))
    p, o, h = partition[order], offset[order], hour[order]
    same = np.zeros(len(p), dtype=bool)
    same[1:] = p[1:] == p[:-1]
    prior = np.roll(o, 1)
    backward, not_rising = same & (o < prior), same & (o <= prior)
    rows = []
    if not_rising.any():
        keys, at = np.unique(np.stack([p[not_rising], h[not_rising]], axis=1), axis=0, return_inverse=True)
        backs = np.bincount(at.ravel(), weights=backward[not_rising], minlength=len(keys))
        nots = np.bincount(at.ravel(), minlength=len(keys))
        rows += [(int(k[0]), int(k[1]), int(b), int(n), None, None) for k, b, n in zip(keys, backs, nots)]
    firsts = np.flatnonzero(~same)
    lasts = np.append(firsts[1:] - 1, len(p) - 1)
    rows += [(int(p[f]), int(h[f]), 0, 0, int(o[f]), int(o[e])) for f, e in zip(firsts, lasts)]
    return rows


def joined_up(rows: list[tuple]) -> list[tuple[int, int, int, int]]:
    """The chunks' `chunk_steps` rows, each led by its chunk: their counts, plus the step from each partition's
    last offset in one chunk to its first in the next chunk where it has events."""
    counts, ends = {}, sorted((r[1], r[0], r[5], r[6], r[2]) for r in rows if r[5] is not None)

    def add(key, backward, not_rising):
        b, n = counts.get(key, (0, 0))
        counts[key] = (b + backward, n + not_rising)

    for (p0, _, _, last, _), (p, _, first, _, hour) in zip(ends, ends[1:]):
        if p == p0 and first <= last:
            add((p, hour), int(first < last), 1)
    for r in rows:
        if r[5] is None:
            add((r[1], r[2]), r[3], r[4])
    return sorted((p, h, b, n) for (p, h), (b, n) in counts.items())
