"""Windows (spec section 5): membership, close points, aggregates and `window_closed` dead letters.

A window closes at the first row whose output watermark reaches its end + allowed lateness. The
output watermark is monotone, so the close row of window k is the first row whose "last window
reached" index is >= k: a group-by and a small join, no global ordering.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from pyspark.sql import Column, DataFrame
from pyspark.sql.window import Window as SqlWindow
from pyspark.sql import functions as F

from replay.engine import job_sql
from replay.engine.decisions import NEG
from replay.model.policy import Policy, Window
from replay.model.state import State


def floor_div(a: Column, b: int) -> Column:
    """Exact integer floor division, also for negative numerators."""
    return ((a - F.pmod(a, F.lit(b))) / F.lit(b)).cast("long")


def window_range(ts: Column, w: Window) -> tuple[Column, Column]:
    """Indexes k of the windows [offset + k*hop, + size) holding instant ts (empty when lo > hi)."""
    lo = floor_div(ts - w.offset - w.size, w.hop).cast("long") + 1
    hi = floor_div(ts - w.offset, w.hop).cast("long")
    return lo, hi


def window_start(k: Column, w: Window) -> Column:
    return F.lit(w.offset) + k * w.hop


MERGED = -1  # the one output scope of a merged source (partitions are >= 0)


def scope_column(policy: Policy) -> Column:
    """The output scope of a row: its partition when independent, else one scope for all."""
    return F.col("partition") if policy.independent else F.lit(MERGED)


def members(decisions: DataFrame, policy: Policy) -> DataFrame:
    """One row per (kept event, window it belongs to): seq, partition, offset, arrival, scope, key, value, k."""
    w = policy.window
    lo, hi = window_range(F.col("timestamp"), w)
    kept = decisions.where(F.col("timestamp").isNotNull())
    if w.hop >= w.size:  # tumbling, or hopping with gaps: at most one window per instant, nothing to explode
        k = hi
        kept = kept.where(lo <= hi)
    else:
        k = F.explode(F.sequence(lo, hi))  # overlapping windows: never empty
    return kept.select(
        "seq", "partition", "offset", "arrival",
        scope_column(policy).alias("scope"),
        (F.col("key") if policy.group_by_key else F.lit(None).cast("string")).alias("group_key"),
        "value",
        k.alias("k"),
    )


def unwindowed(decisions: DataFrame, policy: Policy) -> Column:
    """Kept events that fall into no window (hopping windows with gaps)."""
    lo, hi = window_range(F.col("timestamp"), policy.window)
    return F.col("timestamp").isNotNull() & (lo > hi)


def reached_index(owm: Column | int, policy: Policy):
    """The last window index closed once the output watermark is `owm`."""
    w = policy.window
    if isinstance(owm, int):
        return (owm - w.offset - w.size - policy.allowed_lateness) // w.hop
    return floor_div(owm - w.offset - w.size - policy.allowed_lateness, w.hop)


def close_points(decisions: DataFrame, policy: Policy, state: State | None = None) -> DataFrame:
    """(scope, k, close_seq): the first row at which window k of a scope is closed, for every k that closes
    within the span of the kept events' windows and the open windows of `state`."""
    span = decisions.agg(F.min("timestamp").alias("lo"), F.max("timestamp").alias("hi")).first()
    firsts = (
        decisions.where(F.col("output_watermark") > NEG)
        .groupBy(scope_column(policy).alias("scope"), reached_index(F.col("output_watermark"), policy).alias("reached"))
        .agg(F.min("seq").alias("close_seq"))
    )
    return closes_of(firsts, (span["lo"], span["hi"]), policy, state)


def closes_of(firsts: DataFrame, span: tuple[int | None, int | None], policy: Policy,
              state: State | None = None, held_range: tuple[int | None, int | None] | None = None) -> DataFrame:
    """`close_points` from the first row at which each scope's output watermark reaches each window index (scope,
    reached, close_seq) and the kept events' first and last timestamp (`span`, None without kept events).
    `held_range`: the least and greatest index of `state`'s open windows, when the caller found them (else a Spark
    job here)."""
    w = policy.window
    state = state or State()
    k_min = k_max = None
    if span[0] is not None:
        k_min = (span[0] - w.offset - w.size) // w.hop + 1
        k_max = (span[1] - w.offset) // w.hop
    if state.windows is not None:
        if held_range is None:
            found = state.windows.agg(F.min("k").alias("lo"), F.max("k").alias("hi")).first()
            held_range = found["lo"], found["hi"]
        first, last = held_range
        if first is not None:
            k_min = first if k_min is None else min(k_min, first)
            k_max = last if k_max is None else max(k_max, last)
    if k_min is None:
        return firsts.sparkSession.createDataFrame([], "scope int, k long, close_seq long")
    # The output watermark only rises, so the row that first reaches index r closes the windows after
    # the previous reached index (or the state's), up to r.
    closed_before = {s: reached_index(v.owm, policy) for s, v in state.scopes.items() if v.owm > NEG}
    earlier = F.lit(k_min)
    for s, r in closed_before.items():
        earlier = F.when(F.col("scope") == s, F.lit(r + 1)).otherwise(earlier)
    previous = F.lag("reached").over(SqlWindow.partitionBy("scope").orderBy("reached"))
    bounds = firsts.select(
        "scope", "close_seq",
        F.greatest(F.coalesce(previous + 1, earlier), F.lit(k_min)).alias("lo"),
        F.least(F.col("reached"), F.lit(k_max)).alias("hi"),
    )
    lo, hi = F.col("lo"), F.col("hi")
    return bounds.select(
        "scope", "close_seq",
        F.explode(F.when(lo <= hi, F.sequence(lo, hi)).otherwise(F.array().cast("array<bigint>"))).alias("k"),
    )


def _closed_by(state: State, policy: Policy) -> Column | None:
    """A row (scope, k) is of a window `state`'s output watermarks had closed already (None: they closed none)."""
    closed = None
    for s, v in sorted(state.scopes.items()):
        if v.owm > NEG:
            one = (F.col("scope") == s) & (F.col("k") <= reached_index(v.owm, policy))
            closed = one if closed is None else closed | one
    return closed


def _too_late(policy: Policy, state: State) -> Column:
    """A member (scope, k, seq, close_seq) came after its window closed: in this stretch, or in the state's."""
    too_late = F.col("close_seq").isNotNull() & (F.col("seq") > F.col("close_seq"))
    closed = _closed_by(state, policy)
    return too_late if closed is None else too_late | closed


@dataclass
class WindowResults:
    windows: DataFrame  # emitted windows (and, with flush, the open ones with a null emitted_at)
    closed: DataFrame   # `window_closed` dead letters
    closes: DataFrame   # the (cached, small) close points both share
    open: DataFrame     # windows still open after the last row (state.WINDOWS_SCHEMA)
    added: DataFrame | None = None  # the rows of `open` these rows added (`State.windows_added`), when known


def windows_and_closed(decisions: DataFrame, policy: Policy, flush: bool, state: State | None = None) -> WindowResults:
    """Emitted windows, the `window_closed` dead letters of events that came after their window closed,
    and the windows still open, continuing from the open windows and output watermarks of `state`."""
    w = policy.window
    state = state or State()
    m = members(decisions, policy)
    closes = close_points(decisions, policy, state).persist()  # small: one row per window index that closes
    joined = m.join(F.broadcast(closes), ["scope", "k"], "left")  # members stay where they are: no shuffle
    too_late = _too_late(policy, state)
    counted = joined.where(~too_late).groupBy("scope", "group_key", "k").agg(
        F.count("*").alias("count"),
        # decimal sums are exact, so the result does not depend on how rows were partitioned
        F.sum(F.col("value").cast("decimal(38,12)")).alias("sum"),
    )
    windows, still_open = emitted(counted, closes, policy, flush, state)
    start = window_start(F.col("k"), w)
    closed = joined.where(too_late).select(
        "seq", "partition", "offset",
        F.lit("window_closed").alias("reason"),
        F.timestamp_micros(start).alias("window_start"),
        F.timestamp_micros(F.col("arrival")).alias("arrival_time"),
    )
    return WindowResults(windows, closed, closes, still_open)


def emitted(counted: DataFrame, closes: DataFrame, policy: Policy, flush: bool, state: State | None = None,
            once: Callable[[DataFrame], DataFrame] | None = None) -> tuple[DataFrame, DataFrame]:
    """The spec's windows from their counts and exact sums (scope, group_key, k, count, sum: the members that did not
    miss them, in any number of rows per window) and the open windows of `state`: the emitted ones (with `flush`, the
    open ones too, with a null `emitted_at`) and those still open (state.WINDOWS_SCHEMA). `once`: how the windows
    with their close points, which both read, are computed once (a live batch writes both)."""
    w = policy.window
    state = state or State()
    if state.windows is not None:
        counted = counted.unionByName(state.windows)
    # decimal sums are exact, so the result does not depend on how rows were partitioned
    counted = counted.groupBy("scope", "group_key", "k").agg(
        F.sum("count").alias("count"), F.sum("sum").cast("decimal(38,12)").alias("sum"))
    counted = counted.join(F.broadcast(closes), ["scope", "k"], "left")
    if once is not None:
        counted = once(counted)
    still_open = counted.where(F.col("close_seq").isNull()).select(
        "scope", "group_key", "k", "count", F.col("sum").cast("decimal(38,12)").alias("sum"))
    windows = counted if flush else counted.where(F.col("close_seq").isNotNull())
    start = window_start(F.col("k"), w)
    windows = windows.select(
        F.timestamp_micros(start).alias("window_start"),
        F.timestamp_micros(start + w.size).alias("window_end"),
        F.col("group_key").alias("key"),
        F.when(F.col("scope") != MERGED, F.col("scope")).alias("partition"),
        "count", F.col("sum").cast("double").alias("sum"), F.col("close_seq").alias("emitted_at"),
    )
    return windows, still_open


def job_windows(decisions: DataFrame | None, kept: DataFrame, policy: Policy, grouping: tuple[str, ...],
                aggregates: tuple[tuple[str, str], ...], flush: bool, state: State | None = None,
                closes: DataFrame | None = None, once: Callable[[DataFrame], DataFrame] | None = None
                ) -> WindowResults:
    """A user job's windows: `kept` (its decided events after filter and transform: seq, partition, offset,
    timestamp, arrival_time and its columns) aggregated with its Spark SQL aggregates per window and group.
    `decisions` are the engine's rows (times in microseconds), where windows close, unless the caller has the close
    points (`closes`). `once`: how the members with their close points, which the windows and the open ones both
    read, are computed once.

    Any aggregate is allowed, so a window's state is its members: the open windows of `state` hold them
    (scope, k and the columns of theirs that the groups and aggregates read: `job_sql.aggregate_inputs`), and
    `WindowResults.open` gives them on to the next batch.
    Aggregates whose result could depend on row order are refused when the job is loaded (`job_sql.check`)."""
    w = policy.window
    state = state or State()
    closes = (close_points(decisions, policy, state) if closes is None else closes).persist()
    lo, hi = window_range(F.unix_micros("timestamp"), w)
    rows = kept
    if w.hop >= w.size:
        rows, k = rows.where(lo <= hi), hi
    else:
        k = F.explode(F.sequence(lo, hi))
    members = rows.select(scope_column(policy).alias("scope"), k.alias("k"), *kept.columns)
    joined = members.join(F.broadcast(closes), ["scope", "k"], "left")
    too_late = _too_late(policy, state)
    # a window's state is what its groups and aggregates read of its members (a checkpoint carries it every batch)
    carried = ["scope", "k", *job_sql.aggregate_inputs(kept, grouping, aggregates)]
    held = joined.where(~too_late).select(*carried)
    if state.windows is not None:  # a checkpoint of an earlier version holds every column: the same ones are read
        held = held.unionByName(state.windows.select(*carried))
    held = held.join(F.broadcast(closes), ["scope", "k"], "left")
    if once is not None:
        held = once(held)
    groups = ["scope", *grouping, "k"]
    ordered = held if flush else held.where(F.col("close_seq").isNotNull())
    # close_seq is one value per (scope, k): a grouping column, not an aggregate
    counted = ordered.groupBy(*groups, "close_seq").agg(
        *[F.expr(e).alias(n) for n, e in aggregates])
    start = window_start(F.col("k"), w)
    windows = counted.select(
        F.timestamp_micros(start).alias("window_start"),
        F.timestamp_micros(start + w.size).alias("window_end"),
        *grouping,
        F.when(F.col("scope") != MERGED, F.col("scope")).alias("partition"),
        *[n for n, _ in aggregates],
        F.col("close_seq").alias("emitted_at"),
    )
    closed = joined.where(too_late).select(
        "seq", "partition", "offset",
        F.lit("window_closed").alias("reason"),
        F.timestamp_micros(start).alias("window_start"),
        "arrival_time",
    )
    still_open = held.where(F.col("close_seq").isNull()).drop("close_seq")
    added = joined.where(~too_late & F.col("close_seq").isNull()).select(*carried)
    return WindowResults(windows, closed, closes, still_open, added)


def without_closed(state: State, policy: Policy) -> State:
    """`state` without the open-window rows of windows its own output watermarks had closed: a checkpoint that saved
    only each batch's new members (`State.windows_added`) still holds the members of the windows closed since its
    last whole save."""
    if state.windows is None or policy.window is None or policy.sessions:
        return state
    closed = _closed_by(state, policy)
    return state if closed is None else replace(state, windows=state.windows.where(~closed))
