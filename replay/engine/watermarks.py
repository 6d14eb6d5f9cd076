"""Watermarks (spec section 4): scope and partition watermarks per row, then the output watermark.

Every watermark is a running maximum. Rows are cut into chunks of consecutive `seq`; a small table of
each chunk's maxima gives every chunk its starting values, and then each chunk computes its running
maxima on its own. One shuffle by chunk at most, and no task needs all rows: a whole replay's rows stay
where they lie, cut into the first pass's stretches (`AsTheyLie`), each with its own starting values. Nothing
carries a column per partition: the cost is the same for 8 partitions or 512.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StructField, StructType

from replay.engine import kernels
from replay.engine.decisions import NEG, arrival_checks, decoded, kind_code, ordering_check, source_punctuation
from replay.model.policy import Policy, Punctuated
from replay.model.state import KEYS_SCHEMA, PartitionState, State


CHUNK_ROWS = 250_000  # seq values per chunk: a chunk is one task of the watermark pass


def chunk_column(size: int | None = None) -> Column:
    return F.floor(F.col("seq") / (size or CHUNK_ROWS)).cast("int")


@dataclass(frozen=True)
class Starts:
    """Each timeline's value at the start of every chunk: the maximum over earlier chunks (NEG before any).
    Built from a small table of per-chunk maxima, so a chunk can run its running maxima on its own."""

    first: int
    values: dict  # timeline key -> [start of chunk first, first + 1, ...]
    ends: dict = field(default_factory=dict)  # timeline key -> its value after the last chunk

    @property
    def last(self) -> int:
        return self.first + len(next(iter(self.values.values()))) - 1

    @classmethod
    def from_maxima(cls, maxima: list[tuple[int, object, int | None]], keys: list,
                    span: tuple[int, int] | None = None, initial: dict | None = None) -> "Starts":
        """`maxima`: (chunk, key, max) for every (chunk, key) with rows (max None when nothing counted).
        `initial`: each timeline's value before the first chunk (the state of earlier rows)."""
        chunks = [c for c, _, _ in maxima]
        first, last = span or ((min(chunks), max(chunks)) if chunks else (0, 0))
        table = {(c, k): v for c, k, v in maxima if v is not None}
        values, ends = {}, {}
        for key in keys:
            acc, starts = (initial or {}).get(key, NEG), []
            for c in range(first, last + 1):
                starts.append(acc)
                if (c, key) in table:
                    acc = max(acc, table[(c, key)])
            values[key], ends[key] = starts, acc
        return cls(first, values, ends)

    def own(self, rows: DataFrame, name: str) -> DataFrame:
        """Adds `name`: the start value of the row's own partition in the row's chunk (a broadcast join with
        the small chunks x partitions table; rows keep their partitioning)."""
        table = [(self.first + i, k, v[i]) for k, v in self.values.items() for i in range(len(v))]
        return _with_constants(rows, ["chunk", "partition"], table, name, NEG)

    def lowest_after(self) -> dict[int, int]:
        """Per chunk: the least value of any timeline after the chunk (each key's start of the next chunk)."""
        n = self.last - self.first + 1
        return {self.first + i: min(v[i + 1] if i + 1 < n else self.ends[k] for k, v in self.values.items())
                for i in range(n)}

    def combine(self, other: "Starts") -> "Starts":
        """Element-wise maximum of two tables over the same chunks (a watermark of two running maxima)."""
        return Starts(self.first, {k: [max(a, b) for a, b in zip(v, other.values[k])] for k, v in self.values.items()},
                      {k: max(v, other.ends[k]) for k, v in self.ends.items()})


def _upto(*keys: str):
    return Window.partitionBy(*keys).orderBy("seq").rowsBetween(Window.unboundedPreceding, Window.currentRow)


def _before(*keys: str):
    return Window.partitionBy(*keys).orderBy("seq").rowsBetween(Window.unboundedPreceding, -1)


def _running_max(c: Column, window, start: Column | None = None) -> Column:
    running = F.coalesce(F.max(c).over(window), F.lit(NEG))
    return running if start is None else F.greatest(running, start)


@dataclass
class Decided:
    """Every row's decision, with `watermark` (its scope's, after the row) and `wp` (its partition's), clustered
    by `chunk` or where the journal's rows lie; each partition's `wp` at the start of every chunk (keys: all
    partitions of the source); and the state of every partition (and of every substream key) after the last row."""

    rows: DataFrame
    wp_start: Starts
    partitions: dict[int, PartitionState]
    keys: DataFrame | None = None


class AsTheyLie(NamedTuple):
    """A whole journal's rows of every kind (`row`: the semantics act on it) as the first pass read them, and the
    stretches it cut them into: the watermark pass takes them again where they lie, with no shuffle."""

    rows: DataFrame
    stretches: kernels.Stretches


STRETCH_CELLS = 1_000_000  # partitions x stretches up to which the watermark pass takes the rows where they lie


def decide(rows: DataFrame, policy: Policy, state: State | None = None, partitions: list[int] | None = None,
           maxima: list[tuple[int, int, int, int]] | None = None, lying: AsTheyLie | None = None,
           carried: tuple[str, ...] = ()) -> Decided | None:
    """Journal rows (engine.prepare) -> decisions, continuing from `state`. `partitions`: the partitions of the
    source when known up front (else those with rows). `maxima`: (chunk, partition, max of the floor term, max
    of the event term) of the rows, when a pass over them found these already (`pipeline.first_pass`), and
    `lying`, the same rows where that pass found them. `carried`: columns of `rows` the decisions keep as they are
    (a job's fields). None when there are no rows."""
    state = state or State()
    rows = rows.withColumn("chunk", chunk_column())
    if policy.punctuated:  # never with timestamp_by: arrival_time (the policy refuses it)
        return _punctuated(arrival_checks(rows, policy), policy, state, partitions)
    return _bounded(rows, policy, state, partitions, maxima, lying, carried)


def _source_partitions(seen, state: State, partitions: list[int] | None) -> list[int]:
    return sorted(set(partitions or ()) | set(state.partitions) | set(seen))


def _with_constants(rows: DataFrame, on: list[str], table: list[tuple], name: str, default: int) -> DataFrame:
    """Adds `name` (a long) from a small table of (`on` values..., value) rows, by a broadcast join, not a CASE
    with a branch per key; `default` where the table has no row for the key. Rows keep their partitioning."""
    schema = ", ".join([*(f"{c} int" for c in on), f"{name} long"])
    small = rows.sparkSession.createDataFrame(table, schema)
    return rows.join(F.broadcast(small), on, "left").fillna(default, [name])


def _by_partition(rows: DataFrame, values: dict, name: str, default) -> DataFrame:
    """Adds `name`: a per-partition constant (e.g. from the state)."""
    if not values:
        return rows.withColumn(name, F.lit(default))
    return _with_constants(rows, ["partition"], list(values.items()), name, default)


def contributions(rows: DataFrame, policy: Policy) -> DataFrame:
    """The arrival checks, and the two terms of the bounded watermark: the partition's (arrival - L, and the time of
    a punctuation the source sent), and t - O of events (none under the source strategy).
    With `timestamp_by: arrival_time` the floor is arrival - O: the watermark is the latest arrival of the
    partition (events and clocks) minus O, and the event term (t - O = arrival - O) never exceeds it."""
    O = policy.out_of_order_tolerance
    L = O if policy.by_arrival else policy.late_arrival_tolerance
    floor = F.lit(NEG) if L is None else F.col("arrival") - L
    # the source's punctuations raise every watermark of their partition: a term of the partition's, like the floor
    floor = F.greatest(floor, F.when(source_punctuation(), F.col("et")))
    checked = arrival_checks(rows, policy)
    # the source strategy: no watermark from event times
    events = F.lit(None).cast("long") if policy.source_punctuated else F.when(F.col("passed"), F.col("t") - O)
    return checked.withColumn("floor_c", floor).withColumn("event_c", events)


def _bounded(rows: DataFrame, policy: Policy, state: State, partitions: list[int] | None,
             maxima: list[tuple[int, int, int, int]] | None, lying: AsTheyLie | None,
             carried: tuple[str, ...] = ()) -> Decided | None:
    """W_s = max(max over kept events of the scope of t - O, max over all rows of the partition of
    arrival - L). An out-of-order event never raises it, so the maxima may include every event."""
    if policy.substream_by:
        terms = _terms(rows, policy, state, partitions, maxima)
        if terms is None:
            return None
        parts, floor_start, _ = terms
        # The checks run again after the shuffle: moving the 9 journal columns is cheaper than moving 16.
        rows = rows.repartition(floor_start.last - floor_start.first + 1, "chunk")
        decided, keys = _substreams(contributions(rows, policy), policy, floor_start, state)
        after = {p: PartitionState(floor=floor_start.ends[p], wp=floor_start.ends[p]) for p in parts}
        return Decided(decided, floor_start, after, keys)
    b = bounded_starts(rows, policy, state, partitions, maxima, lying)
    if b is None:
        return None
    decided = _partition_scopes(b.rows, policy, b.start, b.where, carried)
    return Decided(decided, b.wp_start, b.after)


class BoundedStarts(NamedTuple):
    """Where the bounded watermark's pass (no substreams) starts: its rows (with `chunk`, and `row` when they lie as
    the first pass read them), each unit's start values (`start`: per chunk, or per stretch of `where`), every
    chunk's start values (`wp_start`) and each source partition's state after the rows."""

    rows: DataFrame
    start: Starts
    where: kernels.Stretches | None
    wp_start: Starts
    after: dict[int, PartitionState] | None  # None: the pass's own maxima give it (`one_chunk_starts`)


def bounded_starts(rows: DataFrame, policy: Policy, state: State, partitions: list[int] | None,
                   maxima: list[tuple[int, int, int, int]] | None, lying: AsTheyLie | None) -> BoundedStarts | None:
    """The starts of the bounded watermark's pass over `rows` (`decide`'s arguments), from the first pass's maxima
    when it found them (`maxima`, `lying`), else from an aggregation per chunk; None without rows."""
    terms = _terms(rows, policy, state, partitions, maxima)
    if terms is None:
        return None
    parts, floor_start, event_start = terms
    wp_start = floor_start.combine(event_start)
    after = _after(floor_start, event_start, parts)
    if lying is not None and len(parts) * len(lying.stretches.first) <= STRETCH_CELLS:
        s = lying.stretches
        floor, events = _term_starts(s.maxima, parts, state, (0, len(s.first) - 1))
        return BoundedStarts(lying.rows.withColumn("chunk", chunk_column()), floor.combine(events), s, wp_start, after)
    return BoundedStarts(rows, wp_start, None, wp_start, after)


def one_chunk_starts(rows: DataFrame, state: State, partitions: list[int] | None, seen: tuple[int, ...],
                     chunk: int) -> BoundedStarts:
    """The starts of the bounded watermark's pass over rows of one chunk whose partitions are known (`seen`): the
    state's values, with no aggregation before the pass (a Spark job per job of a live batch). The state after the
    rows comes from the pass's own maxima (`after_maxima`)."""
    parts = _source_partitions(seen, state, partitions)
    floor, events = _term_starts([], parts, state, (chunk, chunk))
    wp_start = floor.combine(events)
    return BoundedStarts(rows, wp_start, None, wp_start, None)


def after_maxima(maxima: list[tuple[int, int, int, int]], parts: list[int], state: State) -> dict[int, PartitionState]:
    """Each partition's state after rows with these maxima ((chunk, partition, floor max, events max))."""
    return _after(*_term_starts(maxima, parts, state), parts)


def _after(floor: Starts, events: Starts, parts: list[int]) -> dict[int, PartitionState]:
    wp = floor.combine(events)
    return {p: PartitionState(floor=floor.ends[p], events=events.ends[p], wp=wp.ends[p]) for p in parts}


def _terms(rows: DataFrame, policy: Policy, state: State, partitions: list[int] | None,
           maxima: list[tuple[int, int, int, int]] | None) -> tuple[list[int], Starts, Starts] | None:
    """The source's partitions and the bounded watermark's two terms at each chunk's start, from `maxima` (the
    first pass's) or an aggregation per chunk; None without rows."""
    if maxima is None:
        maxima = _chunk_maxima(rows, policy)
    if not maxima:
        return None
    parts = _source_partitions({p for _, p, _, _ in maxima}, state, partitions)
    return (parts, *_term_starts(maxima, parts, state))


def _chunk_maxima(rows: DataFrame, policy: Policy) -> list[tuple[int, int, int, int]]:
    """(chunk, partition, max of the floor term, max of the event term) of `rows` (with `chunk`)."""
    return [tuple(r) for r in contributions(rows, policy).groupBy("chunk", "partition")
            .agg(F.max("floor_c"), F.max("event_c")).collect()]


def _term_starts(maxima: list[tuple[int, int, int, int]], parts: list[int], state: State,
                 span: tuple[int, int] | None = None) -> tuple[Starts, Starts]:
    """The bounded watermark's two terms (floor, events) at the start of every chunk, or stretch, of `maxima`
    ((chunk or stretch, partition, floor max, events max)), each from its value in `state`."""
    return (Starts.from_maxima([(c, p, f) for c, p, f, _ in maxima], parts, span,
                               {p: state.partition(p).floor for p in parts}),
            Starts.from_maxima([(c, p, e) for c, p, _, e in maxima], parts, span,
                               {p: state.partition(p).events for p in parts}))


def _partition_scopes(rows: DataFrame, policy: Policy, start: Starts,
                      where: kernels.Stretches | None = None, carried: tuple[str, ...] = ()) -> DataFrame:
    """Scope = partition: every row decided by the JVM's decide pass (`kernels.decide_pass`) from its chunk's (or with
    `where`, its stretch's) start values: `wp` (its partition's watermark, the scope's too) and, for a merged source,
    `merged` (the minimum over all partitions after the row), the action, reasons and timestamp (microseconds)."""
    narrow = rows.select(
        "seq", "partition", "offset", kind_code().alias("kind"), "arrival", "et", "key", "value", "duplicate", "chunk",
        *(["row"] if where is not None else []), *carried)
    ran = decoded(kernels.decide_pass(narrow, start, policy, "all", where))
    return ran.select(
        "seq", "partition", "offset", "kind", "arrival", "et", "key", "value", "duplicate", "chunk", *carried,
        "action", "reasons", "timestamp", "wp", F.col("wp").alias("watermark"),
        *([] if policy.independent else [F.col("owm").alias("merged")]))


def _substreams(rows: DataFrame, policy: Policy, floor_start: Starts, state: State) -> tuple[DataFrame, DataFrame]:
    """Scope = (partition, substream value `sub`: the key or a field): the floor runs per partition, the event
    term per value, each from its chunk's starting value (per value: a small window over the per-chunk maxima,
    after the state's, which keeps the values as `key`)."""
    if "sub" not in rows.columns:  # rows prepared without a substream column: substreams by key
        rows = rows.withColumn("sub", F.col("key"))
    keys = rows.groupBy("chunk", "partition", F.col("sub").alias("key")).agg(F.max("event_c").alias("e"))
    earlier = Window.partitionBy("partition", "key").orderBy("chunk").rowsBetween(Window.unboundedPreceding, -1)
    keys = keys.select("chunk", "partition", "key", "e", F.max("e").over(earlier).alias("e0"))
    before = state.keys if state.keys is not None else rows.sparkSession.createDataFrame([], KEYS_SCHEMA)
    before = before.select(F.col("partition").alias("bp"), F.col("key").alias("bk"), F.col("e").alias("be"))
    same = (F.col("partition") == F.col("bp")) & F.col("key").eqNullSafe(F.col("bk"))
    keys = keys.join(F.broadcast(before), same, "left").select(
        "chunk", "partition", "key", "e", F.greatest("e0", "be").alias("e0"))
    after = (keys.groupBy("partition", "key").agg(F.max("e").alias("e"))
             .unionByName(before.select(F.col("bp").alias("partition"), F.col("bk").alias("key"), F.col("be").alias("e")))
             .groupBy("partition", "key").agg(F.max("e").alias("e")))
    k = keys.select(F.col("chunk").alias("kc"), F.col("partition").alias("kp"), F.col("key").alias("kk"), "e0")
    on = (F.col("chunk") == F.col("kc")) & (F.col("partition") == F.col("kp")) & F.col("sub").eqNullSafe(F.col("kk"))
    rows = rows.join(k, on, "left").drop("kc", "kp", "kk").fillna(NEG, ["e0"])
    rows = floor_start.own(rows, "f0")
    f0 = F.col("f0")
    scope = ("chunk", "partition", "sub")
    rows = rows.select(
        "*",
        _running_max(F.col("floor_c"), _upto("chunk", "partition"), f0).alias("floor_after"),
        _running_max(F.col("event_c"), _upto(*scope), F.col("e0")).alias("events_after"),
        F.greatest(_running_max(F.col("floor_c"), _before("chunk", "partition"), f0),
                   _running_max(F.col("event_c"), _before(*scope), F.col("e0"))).alias("w_before"),
    )
    scope_wm = F.greatest("floor_after", "events_after")
    decided = ordering_check(rows, policy).select(
        "*",
        F.when(F.col("kind") == "event", scope_wm).otherwise(F.col("floor_after")).alias("watermark"),
        F.col("floor_after").alias("wp"),
    )
    return decided, after


def _punctuated(rows: DataFrame, policy: Policy, state: State, partitions: list[int] | None) -> Decided | None:
    """CTIs: punctuation flags per partition, W_p = running max of (t - delay) at punctuations and of the times of
    the source's own punctuations (`sent`), which also restart the count and become the `every` reference. Counts
    and `every` chains span chunks, so this runs per partition, then a pass finds chunk starts."""
    strategy: Punctuated = policy.watermark
    before = {p: state.partition(p) for p in state.partitions}
    rows = rows.withColumn("sent", source_punctuation())
    if strategy.every is None:
        rows = _by_partition(rows, {p: s.counted for p, s in before.items()}, "counted0", 0)
        # a source punctuation restarts the count: count within the stretches between them (the first one
        # continues the state's count)
        rows = rows.withColumn("_since", F.count(F.when(F.col("sent"), 1)).over(_upto("partition")))
        n = (F.count(F.when(F.col("passed"), 1)).over(_upto("partition", "_since"))
             + F.when(F.col("_since") == 0, F.col("counted0")).otherwise(0))
        flagged = rows.withColumn("_counted", n).withColumn("punct", F.col("passed") & (F.col("_counted") % strategy.every_events == 0)
                                                      ).withColumn("ref", F.lit(None).cast("long")).drop("counted0", "_since")
    else:
        schema = StructType([*rows.schema.fields, StructField("punct", BooleanType()), StructField("ref", LongType()),
                             StructField("_counted", LongType())])
        initial = {p: (s.counted, s.ref) for p, s in before.items()}
        flagged = rows.groupBy("partition").applyInPandas(_sequential_punctuations(strategy, initial), schema)
    value = F.when(F.col("punct"), F.col("t") - strategy.delay).when(F.col("sent"), F.col("et"))
    flagged = _by_partition(flagged, {p: s.wp for p, s in before.items()}, "wp0", NEG)
    wp0 = F.col("wp0")
    flagged = flagged.select(
        "*",
        _running_max(value, _upto("partition"), wp0).alias("wp"),
        _running_max(value, _before("partition"), wp0).alias("w_before"),
    )
    decided = ordering_check(flagged, policy).withColumn("watermark", F.col("wp")).persist()
    ends = decided.groupBy("chunk", "partition").agg(
        F.max("wp").alias("w"), F.max_by("_counted", "seq").alias("n"), F.max_by("ref", "seq").alias("ref")).collect()
    if not ends:
        decided.unpersist()
        return None
    parts = _source_partitions({r["partition"] for r in ends}, state, partitions)
    wp_start = Starts.from_maxima([(r["chunk"], r["partition"], r["w"]) for r in ends], parts,
                                  initial={p: state.partition(p).wp for p in parts})
    last = {r["partition"]: r for r in sorted(ends, key=lambda r: r["chunk"])}  # each partition's last chunk
    after = {}
    for p in parts:
        s, r = state.partition(p), last.get(p)
        after[p] = PartitionState(wp=wp_start.ends[p], counted=s.counted if r is None else int(r["n"]),
                                  ref=s.ref if r is None or r["ref"] is None else r["ref"])
    return Decided(decided, wp_start, after)


def _sequential_punctuations(strategy: Punctuated, initial: dict[int, tuple[int, int | None]]):
    """`every T` refers to the event that made the last punctuation: a chain, so it runs in seq order,
    one partition per task, on the executors, from each partition's (count, reference) in `initial`. A source
    punctuation (`sent`) restarts the count and is the new reference. Adds `punct`, `ref` and `n` (the count)."""
    N, T = strategy.every_events, strategy.every

    def flag(pdf: pd.DataFrame) -> pd.DataFrame:
        pdf = pdf.sort_values("seq", kind="stable").reset_index(drop=True)
        passed, sent = pdf["passed"].to_numpy(), pdf["sent"].to_numpy()
        t, et = pdf["t"].to_numpy(), pdf["et"].to_numpy()
        out, refs, counts = [False] * len(pdf), [None] * len(pdf), [0] * len(pdf)
        count, ref = initial.get(int(pdf["partition"].iloc[0]), (0, None)) if len(pdf) else (0, None)
        for i in range(len(pdf)):
            if sent[i]:
                count, ref = 0, int(et[i])
            elif passed[i]:
                count += 1
                ti = int(t[i])
                make = (N is not None and count % N == 0) or (ref is not None and ti >= ref + T)
                if make or ref is None:
                    ref = ti
                out[i] = make
            refs[i], counts[i] = ref, count
        pdf["punct"] = out
        pdf["ref"] = pd.array(refs, dtype="Int64")
        pdf["_counted"] = pd.array(counts, dtype="int64")
        return pdf

    return flag


def output_watermark(decided: DataFrame, policy: Policy, wp_start: Starts,
                     raise_start: Starts | None = None, raised_before: dict[int, int] | None = None) -> DataFrame:
    """Adds `output_watermark`: independent = the partition's own; merged = min over all partitions of
    their latest `wp` (-infinity until each has had a row); either raised by idle timeouts (column
    `raise`, with `raise_start` its chunk starts; None when there is no idle timeout). `raised_before`:
    each independent partition's raise from earlier rows."""
    if policy.independent:
        if raise_start is None:
            return decided.withColumn("output_watermark", F.col("wp"))
        decided = _by_partition(decided, raised_before or {}, "raised0", NEG)
        raised = _running_max(F.col("raise"), _upto("partition"), F.col("raised0"))
        return decided.withColumn("output_watermark", F.greatest("wp", raised)).drop("raised0")
    if "merged" not in decided.columns:  # the bounded pass computes it on its narrow rows
        decided = merged(decided, wp_start)
    if raise_start is None:
        return decided.withColumnRenamed("merged", "output_watermark")
    decided = _at_chunk(decided, raise_start, "raise", "r0")
    raised = _running_max(F.col("raise"), _upto("chunk"), F.col("r0"))
    return decided.select("*", F.greatest("merged", raised).alias("output_watermark")).drop("merged", "r0")


def merged(decided: DataFrame, start: Starts, before: str | None = None) -> DataFrame:
    """Adds `merged`: min over all partitions of their `wp` after the row, without a column per partition.

    Every partition's `wp` is a non-decreasing step function of seq, so the minimum exceeds v from the
    first row by which every partition has passed v. Per chunk, each row that raises its partition's `wp`
    leaves a value (the one before it) at its seq; in value order, a running max of those seqs says from
    which row on the minimum exceeds each value. A row's minimum is the least value whose `at` is after
    the row (a running min in descending seq order), capped by the least value any partition has at the end
    of the chunk (`Starts.lowest_after`). Sorts and running extrema only: O(n log n), whatever the partitions.
    `before`: a column with each row's partition's `wp` before the row, when the caller has it."""
    rows = decided
    if before is None:
        rows = start.own(decided, "_s0")
        prior = F.lag("wp").over(Window.partitionBy("chunk", "partition").orderBy("seq"))
        rows = rows.withColumn("_before", F.coalesce(prior, F.col("_s0"))).drop("_s0")
        before = "_before"
    steps = rows.where(F.col(before) < F.col("wp")).select("chunk", F.col(before).alias("_v"), F.col("seq").alias("_n"))
    by_value = Window.partitionBy("chunk").orderBy("_v", "_n").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    # sort key: 2 * seq, rows (odd) before the values (even) left at the same seq: a value counts for later rows
    points = steps.select("chunk", "_v", (F.max("_n").over(by_value) * 2).alias("_key"))
    tagged = rows.select("*", (F.col("seq") * 2 + 1).alias("_key"))
    union = tagged.unionByName(points, allowMissingColumns=True)
    down = Window.partitionBy("chunk").orderBy(F.col("_key").desc()).rowsBetween(Window.unboundedPreceding, 0)
    out = union.select("*", F.min("_v").over(down).alias("_m")).where(F.col("_key") % 2 == 1)
    out = _with_constants(out, ["chunk"], list(start.lowest_after().items()), "_cap", NEG)  # every chunk has one
    return out.select(*decided.columns, F.least(F.coalesce("_m", "_cap"), F.col("_cap")).alias("merged"))


def _at_chunk(rows: DataFrame, start: Starts, key, name: str) -> DataFrame:
    """Adds `name`: timeline `key`'s start value in the row's chunk (a broadcast join)."""
    table = [(start.first + i, v) for i, v in enumerate(start.values[key])]
    return _with_constants(rows, ["chunk"], table, name, NEG)


def raise_starts(raises: DataFrame, span: Starts, before: int = NEG) -> Starts:
    """Each chunk's starting idle-timeout raise (the maximum raise of earlier chunks, and `before`)."""
    ends = raises.groupBy(chunk_column().alias("chunk")).agg(F.max("raise").alias("r")).collect()
    return Starts.from_maxima([(r["chunk"], "raise", r["r"]) for r in ends], ["raise"], (span.first, span.last),
                              initial={"raise": before})


def timeline(decisions: DataFrame, resolution_us: int = 1_000_000, before: dict[int, int] | None = None) -> DataFrame:
    """The watermark timeline: per partition, the first row at which its watermark reached each new
    `resolution` step (a second by default), with the output watermark at that row. `before`: each
    partition's watermark after earlier rows, whose step is already on the timeline."""
    step = F.floor(F.col("wp") / resolution_us)
    reached = {p: w // resolution_us for p, w in (before or {}).items() if w > NEG}
    # one min_by per column, not one over a struct: fixed-width buffers keep this a hash aggregation
    return (
        _by_partition(decisions, reached, "_reached", NEG).where((F.col("wp") > NEG) & (step > F.col("_reached")))
        .groupBy("partition", step.alias("step"))
        .agg(F.min("seq").alias("seq"),
             *[F.min_by(c, "seq").alias(c) for c in ("arrival", "wp", "output_watermark")])
        .select("partition", "seq", "arrival", "wp", "output_watermark")
    )
