"""The sequential passes on the executors, in the JVM (`replay/engine/jvm`): the first pass over a whole journal
(`FirstPass`) and, for the bounded watermark without substreams, the decide pass (`Decide`): the running maxima, the
output watermark and every row's decision.

A whole replay's rows stay where they lie: the first pass (`chunk_pass`) cut each task's rows into stretches of
consecutive `seq`, and the watermark pass finds the same stretches in the same tasks (`Stretches`). Else each
chunk's rows go to one task (`repartitionById`, no sort in Spark). There, in `seq` order, every partition's running
maximum starts from its value at the stretch's (or chunk's) start, and the merged output watermark is the minimum
over partitions after each row (a tournament tree: O(log P) a row, whatever the partitions).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from replay.jvm import lookup
from replay.model.policy import Policy
from replay.model.state import NEG


@dataclass(frozen=True)
class Stretches:
    """The first pass's stretches, in seq order: each one's first and last seq and its number of rows (of every
    kind), and per (stretch index, partition) the maxima of the watermark's two terms over the rows it acts on."""

    first: np.ndarray
    last: np.ndarray
    rows: np.ndarray
    maxima: list[tuple[int, int, int, int]]


def decide_pass(rows: DataFrame, start, policy: Policy, mode: str, where: Stretches | None = None, *,
                since: int | None = None, step_before: dict[int, int] | None = None,
                scope_owm: dict[int, int] | None = None, closed_here: bool = False) -> DataFrame:
    """Spec steps 1-4 and the bounded watermarks of `rows` in the JVM (`Decide`), each partition's running maximum from
    its value at the start of the row's chunk (or with `where`, its stretch: the rows lie where the first pass found
    them) in `start` (a `watermarks.Starts`), the merged output watermark a minimum over all partitions. Rows carry
    seq, partition, kind (`decisions.kind_code`), arrival, et, duplicate, chunk (and with `where`, `row`: rows the
    semantics skip count towards their stretch and are left out); other columns pass through. `mode`: what comes back
    (`Decide`'s javadoc): `all` rows, the `kept` events, the `members` of windows, or for `decide` the exceptions from
    `since` on and the partial aggregates (`step_before`: each partition's timeline step reached before the rows;
    `scope_owm`: each output scope's output watermark before them; `closed_here`: the `window_closed` dead letters
    too). Adds `Decide.ADDED`'s columns."""
    parts = np.array(sorted(start.values), dtype=np.int64)
    table = np.array([start.values[p] for p in parts], dtype=np.int64).reshape(len(parts), -1)
    spark = rows.sparkSession
    if where is None:
        rows = rows.repartitionById(table.shape[1], F.col("chunk") - start.first)
        bounds = (None, None, None)
    else:
        bounds = tuple(_bytes(a) for a in (where.first, where.last, where.rows))
    steps = np.array([(step_before or {}).get(int(p), np.iinfo(np.int64).min) for p in parts], dtype=np.int64)
    owm = scope_owm or {}
    owm = [owm.get(-1, NEG)] if not policy.independent else [owm.get(int(p), NEG) for p in parts]
    settings = {**_rules(policy), "since": since, "closed_here": closed_here, "step_before": _bytes(steps),
                "scope_owm": _bytes(np.array(owm, dtype=np.int64))}
    ran = lookup("retrace.engine.Decide.run")(rows._jdf, mode, settings, _bytes(parts), _bytes(table),
                                               int(start.first), *bounds)
    return DataFrame(ran, spark)


ACTIONS = {"adjust": 0, "drop": 1, "accept": 2}  # `Decide.Rules`' codes of a tolerance's action
RESOLUTION = 1_000_000  # the watermark timeline's step, as `watermarks.timeline` takes it


def _rules(policy: Policy) -> dict:
    """The policy's numbers as `Decide.Rules` reads them: microseconds, None where a tolerance is disabled."""
    w = policy.window if not policy.sessions else None
    return {
        "early": policy.early_arrival_tolerance, "late": policy.late_arrival_tolerance,
        "out_of_order": policy.out_of_order_tolerance, "early_adjust": policy.early_arrival_action == "adjust",
        "late_action": ACTIONS[policy.late_arrival_action], "order_action": ACTIONS[policy.out_of_order_action],
        "by_arrival": policy.by_arrival, "source_only": policy.source_punctuated, "merged": not policy.independent,
        "size": w.size if w is not None else None, "hop": w.hop if w is not None else None,
        "offset": w.offset if w is not None else None, "lateness": policy.allowed_lateness, "resolution": RESOLUTION,
    }


def _bytes(values: np.ndarray) -> bytes:
    """An int64 array as py4j hands it to the JVM: little-endian bytes (`RunningWatermarks.longs`)."""
    return np.ascontiguousarray(values, dtype="<i8").tobytes()


@dataclass(frozen=True)
class FirstPass:
    """What `chunk_pass` found: the events' offset steps (`joined_up`), the watermark terms' maxima per chunk and
    partition, and the stretches (with their own maxima), where the watermark pass can take the rows again."""

    steps: list[tuple[int, int, int, int]]
    maxima: list[tuple[int, int, int, int]]
    stretches: Stretches


def chunk_pass(rows: DataFrame) -> FirstPass:
    """One pass over journal rows (chunk, file, partition, seq, offset, hour, event, row, floor, events) where they
    lie: no shuffle. Each task cuts its rows, in seq order, into stretches of consecutive seq within a chunk and a
    file (in the JVM, `FirstPass`); no other task holds a row inside a stretch, so stretches are whole, disjoint seq
    ranges, joined up in seq order afterwards. Gives the events' offset steps (`joined_up`: per partition and hour
    of arrival, events whose offset is below, or at or below, the previous event's in their partition in seq order)
    and, per chunk (and per stretch) and partition, the maxima of `floor` and `events` over the rows flagged `row`
    (the watermark's two terms, `watermarks.Starts.from_maxima`). Ingest writes a journal file as runs of
    consecutive seq, so stretches are about as many as the journal's files; a layout that scatters seq over files
    gives more, not wrong, results."""
    spark = rows.sparkSession
    # per stretch (its first seq and chunk): (stretch, chunk, partition, hour, backward, not_rising, first, last,
    # floor, events, rows), one kind of row per filled set of columns
    found = [tuple(r) for r in DataFrame(lookup("retrace.engine.FirstPass.run")(rows._jdf), spark).collect()]
    census = sorted((r[0], r[7], r[10]) for r in found if r[10] is not None)
    index = {first: i for i, (first, _, _) in enumerate(census)}
    maxima, per_stretch = {}, []  # (chunk, partition) -> the two maxima, over the chunk's stretches
    for r in found:
        if r[8] is not None:
            f, e = maxima.get((r[1], r[2]), (r[8], r[9]))
            maxima[(r[1], r[2])] = (max(f, r[8]), max(e, r[9]))
            per_stretch.append((index[r[0]], r[2], r[8], r[9]))
    steps = joined_up([(r[0], *r[2:8]) for r in found if r[8] is None and r[10] is None])
    where = Stretches(*(np.array([c[i] for c in census], dtype=np.int64) for i in range(3)), sorted(per_stretch))
    return FirstPass(steps, sorted((c, p, f, e) for (c, p), (f, e) in maxima.items()), where)


def joined_up(rows: list[tuple]) -> list[tuple[int, int, int, int]]:
    """Offset-step rows (key, partition, hour, backward, not_rising, first, last) of disjoint seq ranges, each led
    by a key that orders the ranges (a chunk, or a stretch's first seq): a partition's steps inside a range
    (first and last None) and its first and last offset there (backward and not_rising 0). Their counts, plus
    the step from each partition's last offset in one range to its first in the next range where it has events."""
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
