"""The small tables the quality checks validate, computed by Spark from one target's outputs over an
arrival range [start, end): counts per hour of arrival, and the windows the target must hold.

Window memberships are attributed to events, so counts can be placed in the event's hour of arrival:
a kept event (accepted or adjusted) is a member of every window holding its timestamp (spec 5); a
membership is *windowed* when a row of the windows table for that window was emitted at or after the
event's row (`seq <= emitted_at`, or flushed: `emitted_at` null), once per such row. A membership with no
row is *open* while its window is still open at the end of the target (not closed by the last output
watermark and not flushed); any other membership without a row is unaccounted for.

Every job, the spec's count/sum job included, has its tables in its target (`replay.io.lake`); its windows are
identified by the windows table's columns other than the aggregates, window_end and emitted_at (window_start,
its grouping columns, partition), and its members are its decided events after its `where` and `transform`
(`replay.engine.job_sql.decided_events`).
"""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from replay.engine.job_sql import decided_events
from replay.engine.windows import window_range
from replay.io import journal as journal_table
from replay.io.lake import Lake, TargetDir
from replay.model.durations import parse_instant
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.run import seq_bounds
from replay.ops import outputs

KEPT = ("accepted", "adjusted")
LOST = ("dropped", "quarantined")
EVENT_REASONS = ("early", "late", "out_of_order", "invalid_event_time")
HOUR_US = 3_600_000_000


@dataclass(frozen=True)
class Target:
    """One job's target: its output tables and the journal, and the arrival range [start, end) under check (ISO
    instants; None leaves that side open). `job` carries the policy the target was replayed with (any what-if
    override applied)."""

    spark: SparkSession
    lake: str
    target: str
    job: Job
    start: str | None = None
    end: str | None = None

    def __post_init__(self):
        lo, hi = self.bounds_us
        if lo is not None and hi is not None and lo >= hi:
            raise ValueError(f"start: {self.start} must be before end: {self.end}")

    @property
    def bounds_us(self) -> tuple[int | None, int | None]:
        return (None if self.start is None else parse_instant(self.start, "start"),
                None if self.end is None else parse_instant(self.end, "end"))

    @property
    def where(self) -> TargetDir:
        return Lake(self.lake).target(self.job.name, self.target)

    @property
    def policy(self) -> Policy:
        return self.job.policy

    @property
    def label(self) -> str:
        """The target's name in reports and GX suites: `<job>.<target>`."""
        return f"{self.job.name}.{self.target}"

    @property
    def window_id(self) -> tuple[str, ...]:
        """The columns that identify a row of the windows table: all but the aggregates, window_end and
        emitted_at (window_start, the grouping columns, partition)."""
        values = {n for n, _ in self.job.aggregates} | {"window_end", "emitted_at"}
        return tuple(c for c in self.table("windows").columns if c not in values)

    @property
    def count_column(self) -> str | None:
        """The windows column holding each window's member count: the job's `count(*)` aggregate, if any."""
        return self.job.counting_aggregate

    def table(self, name: str) -> DataFrame:
        if name == "decisions":
            return self.decisions
        outputs.require(self.where, [name])
        return outputs.read(self.spark, self.where, name)

    @functools.cached_property
    def decisions(self) -> DataFrame:
        """Every decision row, derived once for all the checks that read them (`replay.ops.outputs`)."""
        outputs.require(self.where, ["decisions"])
        return outputs.read(self.spark, self.where, "decisions")

    def journal(self) -> DataFrame:
        return journal_table.read(self.spark, self.lake)

    def in_range(self, column: str) -> Column:
        """Rows whose instant `column` lies in [start, end)."""
        lo, hi = self.bounds_us
        us, cond = F.unix_micros(column), F.lit(True)
        if lo is not None:
            cond = cond & (us >= F.lit(lo))
        if hi is not None:
            cond = cond & (us < F.lit(hi))
        return cond

    def seq_range(self) -> tuple[int, int | None]:
        """The seq range [lo, hi) that a replay of [start, end) rewrote (hi None: to the end, flushed)."""
        lo, hi = seq_bounds(self.journal(), self.start, self.end)
        return lo or 0, hi


def _hour(column: str) -> Column:
    return F.date_trunc("hour", column).alias("hour")


def late_counts(t: Target) -> DataFrame:
    """Per hour of arrival (summed over partitions, from the metrics table): events, early, late and
    out-of-order events (whatever their action), dropped events and dead letters."""
    lo, hi = t.bounds_us
    hour = F.unix_micros("hour")
    overlaps = F.lit(True)
    if lo is not None:
        overlaps = overlaps & (hour > F.lit(lo - HOUR_US))
    if hi is not None:
        overlaps = overlaps & (hour < F.lit(hi))
    reason = lambda r: sum(F.col(f"{r}_{a}") for a in ("dropped", "adjusted", "accepted"))  # noqa: E731
    return (
        t.table("metrics").where(overlaps).groupBy("hour").agg(
            F.sum("events").alias("events"),
            F.sum(reason("early")).alias("early"),
            F.sum(reason("late")).alias("late"),
            F.sum(reason("out_of_order")).alias("out_of_order"),
            F.sum("dropped").alias("dropped"),
            F.sum("dead_letters").alias("dead_letters"),
        ).orderBy("hour")
    )


def watermark_delay(t: Target) -> DataFrame:
    """Per hour of arrival (from the watermarks table): rows, rows whose output watermark is still
    undefined, and the largest and mean delay (arrival - output watermark) in seconds."""
    delay = (F.unix_micros("arrival_time") - F.unix_micros("output_watermark")) / 1e6
    return (
        t.table("watermarks").where(t.in_range("arrival_time")).groupBy(_hour("arrival_time")).agg(
            F.count("*").alias("rows"),
            F.count(F.when(F.col("output_watermark").isNull(), 1)).alias("undefined"),
            F.max(delay).alias("max_delay_s"),
            F.avg(delay).alias("avg_delay_s"),
        ).orderBy("hour")
    )


def memberships(t: Target, decisions: DataFrame, window_id: tuple[str, ...]) -> DataFrame:
    """One row per (kept event, window holding its timestamp): seq, arrival_time, scope (its partition when
    independent, else -1), and the window's id (`window_id`) as the windows table writes it. The kept events
    are the job's decided events (after its `where` and transform), keyed by the journal's `key`, not by the
    decisions' being checked."""
    p, w, groups = t.policy, t.policy.window, list(t.job.grouping)
    keyed = decisions.drop("key").join(t.journal().select("seq", "key"), "seq")
    lo, hi = window_range(F.unix_micros("timestamp"), w)
    start = F.lit(w.offset) + F.col("k") * F.lit(w.hop)
    rest = [F.lit(None).cast("string").alias(c) for c in window_id if c not in ("window_start", "partition", *groups)]
    return (
        decided_events(keyed, t.job)
        .select(
            "seq", "arrival_time", *groups,
            (F.col("partition") if p.independent else F.lit(-1)).alias("scope"),
            (F.col("partition") if p.independent else F.lit(None).cast("int")).alias("w_partition"),
            F.explode(F.when(lo <= hi, F.sequence(lo, hi)).otherwise(F.array().cast("array<bigint>"))).alias("k"),
        )
        .select(
            "seq", "arrival_time", "scope",
            F.timestamp_micros(start).alias("window_start"),
            F.timestamp_micros(start + F.lit(w.size)).alias("window_end"),
            *groups, *rest, F.col("w_partition").alias("partition"),
        )
    )


def _unwindowed(t: Target) -> Column:
    lo, hi = window_range(F.unix_micros("timestamp"), t.policy.window)
    return F.col("action").isin(*KEPT) & F.col("timestamp").isNotNull() & (lo > hi)


def scope_watermarks(t: Target, decisions: DataFrame, below_seq: int | None, name: str) -> DataFrame:
    """(scope, `name`): each output scope's watermark in microseconds after the rows before `below_seq`
    (all rows when None); the output watermark only rises, so it is the maximum."""
    rows = decisions if below_seq is None else decisions.where(F.col("seq") < below_seq)
    scope = F.col("partition") if t.policy.independent else F.lit(-1)
    return rows.groupBy(scope.alias("scope")).agg(F.max(F.unix_micros("output_watermark")).alias(name))


def _closed_by(column: str, lateness: int) -> Column:
    return F.col(column).isNotNull() & (F.col(column) >= F.unix_micros("window_end") + F.lit(lateness))


def is_flushed(t: Target, decisions: DataFrame) -> bool:
    """The target was replayed to the end of the journal with `flush_at_end`: no window is still open."""
    if not t.policy.flush_at_end:
        return False
    last = decisions.agg(F.max("seq")).first()[0]
    return last is not None and last == t.journal().agg(F.max("seq")).first()[0]


def conservation(t: Target) -> DataFrame:
    """Per hour of arrival: events (from the journal) and where they went: windowed, dropped,
    quarantined, window_closed, unwindowed, open (window not closed yet); `accounted` is their sum and
    `unaccounted` = events - accounted (spec 7: zero with tumbling windows). `missing_memberships` counts
    memberships of closed windows that have no row."""
    events = (t.journal().where((F.col("kind") == "event") & t.in_range("arrival_time"))
              .groupBy(_hour("arrival_time")).agg(F.count("*").alias("events")))
    decisions = t.table("decisions")
    has_window = t.policy.window is not None
    fates = decisions.where((F.col("kind") == "event") & t.in_range("arrival_time")).groupBy(_hour("arrival_time")).agg(
        F.count(F.when(F.col("action") == "dropped", 1)).alias("dropped"),
        F.count(F.when(F.col("action") == "quarantined", 1)).alias("quarantined"),
        F.count(F.when(_unwindowed(t) if has_window else F.col("action").isin(*KEPT), 1)).alias("unwindowed"),
    )
    closed = (t.table("dead_letters").where((F.col("reason") == "window_closed") & t.in_range("arrival_time"))
              .groupBy(_hour("arrival_time")).agg(F.count("*").alias("window_closed")))
    per_hour, cached = [fates, closed], []
    if has_window:
        ids = t.window_id
        member = memberships(t, decisions.where(t.in_range("arrival_time")), ids).persist()
        cached.append(member)
        rows = t.table("windows").select(*ids, "emitted_at")
        same = functools.reduce(operator.and_, [member[c].eqNullSafe(rows[c]) for c in ids])
        joined = member.join(rows, same, "left")
        counted = (rows["window_start"].isNotNull()
                   & (rows["emitted_at"].isNull() | (member["seq"] <= rows["emitted_at"])))
        windowed = (joined.where(counted)
                    .groupBy(_hour("arrival_time")).agg(F.count("*").alias("windowed")))
        flushed = is_flushed(t, decisions)
        rowless = (member.join(rows, same, "left_anti")
                   .join(scope_watermarks(t, decisions, None, "final_wm"), "scope", "left"))
        still_open = F.lit(False) if flushed else ~_closed_by("final_wm", t.policy.allowed_lateness)
        leftover = rowless.groupBy(_hour("arrival_time")).agg(
            F.count(F.when(still_open, 1)).alias("open"),
            F.count(F.when(~still_open, 1)).alias("missing_memberships"),
        )
        per_hour += [windowed, leftover]
    out = events
    for part in per_hour:
        out = out.join(part, "hour", "full")
    terms = ["windowed", "dropped", "quarantined", "window_closed", "unwindowed", "open"]
    for c in ["events", *terms, "missing_memberships"]:
        out = out.withColumn(c, F.coalesce(F.col(c), F.lit(0)).cast("long")) if c in out.columns else \
            out.withColumn(c, F.lit(0).cast("long"))
    accounted = sum(F.col(c) for c in terms)
    out = (out.withColumn("accounted", accounted)
           .withColumn("unaccounted", F.col("events") - F.col("accounted"))
           .select("hour", "events", *terms, "accounted", "unaccounted", "missing_memberships")
           .orderBy("hour"))
    small = t.spark.createDataFrame(out.collect(), out.schema)  # a row per hour; frees the cached memberships
    for df in cached:
        df.unpersist()
    return small


@dataclass(frozen=True)
class WindowTables:
    """What the windows check compares: the windows table with `in_range` (emitted by the replay of
    [start, end)), every window with counted members and its `expected_count`, and those of them due in
    range (closed by the output watermark within the seq range, or flushed at its end)."""

    windows: DataFrame
    expected: DataFrame
    due: DataFrame
    seq_lo: int
    seq_hi: int | None

    def unpersist(self) -> None:
        self.expected.unpersist()
        self.due.unpersist()


def windows_in_range(t: Target, lo: int, hi: int | None) -> DataFrame:
    """The windows table with `in_range`: emitted within the seq range [lo, hi) (hi None: flushed too)."""
    emitted = F.col("emitted_at")
    in_range = (emitted >= lo) & (emitted < hi) if hi is not None else (emitted >= lo) | emitted.isNull()
    return t.table("windows").withColumn("in_range", F.coalesce(in_range, F.lit(False)))


def window_tables(t: Target) -> WindowTables:
    decisions = t.table("decisions")
    lo, hi = t.seq_range()
    windows = windows_in_range(t, lo, hi)
    if t.policy.window is None:
        empty = t.spark.createDataFrame([], "window_start timestamp, window_end timestamp, key string, "
                                            "partition int, scope int, expected_count long")
        return WindowTables(windows, empty, empty, lo, hi)
    missed = t.table("dead_letters").where(F.col("reason") == "window_closed").select("seq", "window_start")
    lateness = t.policy.allowed_lateness
    w = t.policy.window
    candidates = decisions
    if lo > 0 and not t.policy.independent:
        # a window closed before the range (its end + lateness <= the watermark before it) cannot be due
        # in it, so events older than that watermark - lateness - size need not be read
        floor = decisions.where(F.col("seq") < lo).agg(F.max(F.unix_micros("output_watermark"))).first()[0]
        if floor is not None:
            candidates = decisions.where(F.unix_micros("timestamp") >= F.lit(floor - lateness - w.size))
    ids = t.window_id
    counted = memberships(t, candidates, ids).join(missed, ["seq", "window_start"], "left_anti")
    expected = counted.groupBy("window_start", "window_end", *ids[1:], "scope").agg(
        F.count("*").alias("expected_count")).persist()  # read by every query of the check
    marks = (expected.join(scope_watermarks(t, decisions, lo, "wm_lo"), "scope", "left")
             .join(scope_watermarks(t, decisions, hi, "wm_hi"), "scope", "left"))
    before = _closed_by("wm_lo", lateness) if lo > 0 else F.lit(False)
    by_end = F.lit(True) if hi is None and t.policy.flush_at_end else _closed_by("wm_hi", lateness)
    due = marks.where(~before & by_end).select(*expected.columns).persist()
    return WindowTables(windows, expected, due, lo, hi)


def lost_events(t: Target) -> DataFrame:
    """Dropped and quarantined events arriving in range: each must be a dead letter with its reason."""
    return (t.table("decisions").where((F.col("kind") == "event") & F.col("action").isin(*LOST)
                                       & t.in_range("arrival_time"))
            .select("seq", "partition", "offset", "action", "reasons", "arrival_time"))


def kept_events(t: Target) -> DataFrame:
    """Kept events arriving in range: the only ones a `window_closed` dead letter in range may name."""
    return (t.table("decisions").where((F.col("kind") == "event") & F.col("action").isin(*KEPT)
                                       & t.in_range("arrival_time")).select("seq"))


def dead_letters_in_range(t: Target) -> DataFrame:
    return t.table("dead_letters").withColumn("in_range", F.coalesce(t.in_range("arrival_time"), F.lit(False)))
