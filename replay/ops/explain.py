"""`replay explain`: why a window of a job holds what it holds. The events in it, and the events whose own time lies
in it that it does not hold, each with its reason (late, early, out of order, quarantined, window closed, adjusted
out of it), read from a target's windows, decisions and dead letters and the journal's event times."""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

from replay.engine.job_sql import decided_events
from replay.io import journal
from replay.io.lake import Lake
from replay.io.store import default_store
from replay.model.durations import format_instant, parse_instant
from replay.model.jobs import Job
from replay.ops import outputs

EVENT_COLUMNS = ("seq", "partition", "offset", "event_time", "arrival_time", "timestamp")


@dataclass(frozen=True)
class Question:
    """Which window: the one starting at `start` (ISO), of the groups given (`groups`: column -> value, e.g. the
    spec job's `key`) and of `partition` when the job's windows are per partition; at most `limit` events each."""

    start: str
    groups: tuple[tuple[str, str], ...] = ()
    partition: int | None = None
    limit: int = 50


@dataclass(frozen=True)
class Explained:
    """The windows found (their rows as written, times as ISO text), their members and the events that missed
    them (first `limit` of each, in seq order), and how many of each there are in all."""

    windows: list[dict]
    members: list[dict]
    missed: list[dict]
    member_count: int
    missed_count: int

    def as_dict(self) -> dict:
        return {"windows": self.windows, "members": self.members, "missed": self.missed,
                "member_count": self.member_count, "missed_count": self.missed_count}

    def text(self) -> str:
        lines = [] if self.windows else ["no window was emitted: every event of it came after it had closed"]
        for w in self.windows:
            rest = ", ".join(f"{k}={v}" for k, v in w.items() if k not in ("window_start", "window_end", "emitted_at"))
            when = ("flushed at the end of the journal" if w.get("emitted_at") is None
                    else f"emitted at seq {w['emitted_at']}")
            lines.append(f"window [{w['window_start']}, {w['window_end']}) {rest}: {when}")
        lines += _section(f"in it: {self.member_count} events", self.members, self.member_count,
                          (*EVENT_COLUMNS, "action", "reasons"))
        lines += _section(f"missed it: {self.missed_count} events whose time lies in it", self.missed,
                          self.missed_count, (*EVENT_COLUMNS, "reason"))
        return "\n".join(lines)


@dataclass(frozen=True)
class _Tables:
    """What an explanation reads: the target's windows, decisions and dead letters, and the journal's events with
    their own time (`_own`: the event time, or the arrival for `timestamp_by: arrival_time`)."""

    job: Job
    windows: DataFrame
    decisions: DataFrame
    letters: DataFrame
    times: DataFrame

    def closed(self, start: int) -> DataFrame:
        """(seq, _closed) of the events that came after the windows starting at `start` had closed."""
        return (self.letters.where((F.col("reason") == "window_closed") & (F.unix_micros("window_start") == start))
                .select("seq", F.lit(True).alias("_closed")))

    def with_times(self, df: DataFrame) -> DataFrame:
        return df.drop("event_time").join(self.times.drop("_own"), "seq", "left")


def explain(spark: SparkSession, lake: str, job: Job, target: str, q: Question) -> Explained:
    """The window of `q` in `target` of `job`, its members and the events that missed it."""
    start = parse_instant(q.start, "--window")
    where = Lake(lake).target(job.name, target)
    store, names = default_store(), ("windows", "decisions", "dead_letters")
    outputs.require(where, names, store)
    windows, decisions, letters = (outputs.read(spark, where, n, store) for n in names)
    for column, _ in q.groups:
        if column not in windows.columns:
            raise ValueError(f"--group {column}: the windows of job {job.name!r} have no such column "
                             f"(their columns: {', '.join(windows.columns)})")
    own_time = "arrival_time" if job.policy.by_arrival else "event_time"
    times = journal.read(spark, lake, store).where(F.col("kind") == "event").select(
        "seq", "event_time", F.col(own_time).alias("_own"))
    t = _Tables(job, windows, decisions, letters, times)
    chosen = windows.where(F.unix_micros("window_start") == start)
    for column, value in q.groups:
        chosen = chosen.where(F.col(column).cast("string") == value)
    if q.partition is not None:
        chosen = chosen.where(F.col("partition") == q.partition)
    found = _collect(chosen.orderBy(*[c for c in windows.columns if c in ("partition", *job.grouping)]))
    if found:
        return _emitted(t, chosen, found, start, q)
    never = _never_emitted(t, start, q)  # every event of it may have come after it closed
    if never is None:
        raise ValueError(f"no window of job {job.name!r} in target {target!r} starts at {q.start}"
                         + "".join(f", {c} {v!r}" for c, v in q.groups)
                         + ("" if q.partition is None else f", partition {q.partition}")
                         + " (`replay show` lists the windows)")
    return never


def _emitted(t: _Tables, chosen: DataFrame, found: list[dict], start: int, q: Question) -> Explained:
    """The windows `found` (`chosen`), their members, and the events of their groups timed in them that are not."""
    groups = _grouping(t.job, t.windows)
    chosen = chosen.select("window_start", "window_end", *groups, "partition").distinct()
    in_window = lambda c: (c >= F.col("w.window_start")) & (c < F.col("w.window_end"))  # noqa: E731
    closed = t.closed(start)
    # kept at a time in the window: its members, unless the window had closed when they came
    kept_here = _in(decided_events(t.decisions, t.job), chosen, groups, in_window(F.col("e.timestamp")))
    members = kept_here.join(closed, "seq", "left_anti")
    events = t.decisions.where(F.col("kind") == "event")
    # every event as if kept at its own time, with its groups as the job computes them (fields, where, transform)
    as_if_kept = decided_events(
        events.drop("timestamp").join(t.times.select("seq", F.col("_own").alias("timestamp")), "seq"), t.job)
    own = _in(as_if_kept, chosen, groups, in_window(F.col("e.timestamp"))).select("seq")
    missed = (own.unionByName(kept_here.select("seq")).distinct().join(members.select("seq"), "seq", "left_anti")
              .join(events, "seq").join(closed, "seq", "left").withColumn("reason", _missed_reason()))
    members = t.with_times(members.join(events.select("seq", "reasons"), "seq", "left"))
    missed = t.with_times(missed)
    shown = lambda *last: (*EVENT_COLUMNS[:3], *groups, *EVENT_COLUMNS[3:], *last)  # noqa: E731
    member_rows = _rows(members, shown("action", "reasons"), q.limit)
    missed_rows = _rows(missed, shown("reason"), q.limit)
    return Explained(found, member_rows, missed_rows, _count(members, member_rows, q.limit),
                     _count(missed, missed_rows, q.limit))


def _never_emitted(t: _Tables, start: int, q: Question) -> Explained | None:
    """No window starts at `start` (of the groups asked for): the events that came after such a window had closed,
    so it never held one (its `window_closed` dead letters); None when there are none either."""
    missed = t.closed(start).join(t.decisions, "seq").withColumn("reason", F.lit("window_closed"))
    for column, value in q.groups:
        missed = missed.where(F.col(column).cast("string") == value) if column in missed.columns else missed.limit(0)
    if q.partition is not None:
        missed = missed.where(F.col("partition") == q.partition)
    missed = t.with_times(missed)
    rows = _rows(missed, (*EVENT_COLUMNS[:3], *[c for c, _ in q.groups], *EVENT_COLUMNS[3:], "reason"), q.limit)
    return Explained([], [], rows, 0, _count(missed, rows, q.limit)) if rows else None


def _grouping(job: Job, windows: DataFrame) -> list[str]:
    """The columns a window's events share: the job's grouping, as its windows table has it (the spec's job run
    with `group_by_key: false` writes no key: its windows hold every key)."""
    groups = [g for g in job.grouping if g in windows.columns]
    if job.is_spec and groups and windows.where(F.col("key").isNotNull()).limit(1).count() == 0:
        return []
    return groups


def _in(events: DataFrame, chosen: DataFrame, groups: list[str], inside: Column) -> DataFrame:
    """`events` (as `e`) that fall in one of the `chosen` windows (as `w`): the same groups and, for windows per
    partition, partition, and `inside` the window's bounds. One row per event."""
    on = inside & (F.col("w.partition").isNull() | (F.col("w.partition") == F.col("e.partition")))
    for g in groups:
        on = on & F.col(f"e.{g}").eqNullSafe(F.col(f"w.{g}"))
    return events.alias("e").join(F.broadcast(chosen.alias("w")), on, "left_semi")


def _missed_reason() -> Column:
    """Why an event whose time lies in the window is not in it: its window had closed when it came, it was dropped
    or quarantined (its last reason), or an adjustment moved it out (its reasons, and to where)."""
    reasons = F.array_join("reasons", ",")
    return (F.when(F.col("_closed"), F.lit("window_closed"))
            .when(F.col("action").isin("dropped", "quarantined"), F.element_at("reasons", -1))
            .when(F.col("action") == "adjusted", F.concat(F.lit("adjusted out of it ("), reasons, F.lit(")")))
            .otherwise(F.concat(F.lit("not taken by the job ("), F.col("action"), F.lit(")"))))


def _rows(df: DataFrame, columns: tuple[str, ...], limit: int) -> list[dict]:
    return _collect(df.select(*[c for c in columns if c in df.columns]).orderBy("seq").limit(limit))


def _count(df: DataFrame, rows: list[dict], limit: int) -> int:
    return len(rows) if len(rows) < limit else df.count()


def _collect(df: DataFrame) -> list[dict]:
    """The rows, instants as ISO text as every other command prints them (read as microseconds: no time zone)."""
    times = {f.name for f in df.schema.fields if isinstance(f.dataType, TimestampType)}
    picked = df.select(*(F.unix_micros(c).alias(c) if c in times else F.col(c) for c in df.columns))
    return [{c: format_instant(v) if c in times and v is not None else v for c, v in r.asDict().items()}
            for r in picked.collect()]


def _section(title: str, rows: list[dict], total: int, columns: tuple[str, ...]) -> list[str]:
    if not rows:
        return [title]
    shown = [c for c in columns if c in rows[0]] + [c for c in rows[0] if c not in columns]
    cells = [[_cell(r.get(c)) for c in shown] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(shown)]
    line = lambda values: "  " + "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    more = [f"  ... {total - len(rows)} more (--limit to see them)"] if total > len(rows) else []
    return [title, line(shown), *map(line, cells), *more]


def _cell(value) -> str:
    if value is None:
        return "-"
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
