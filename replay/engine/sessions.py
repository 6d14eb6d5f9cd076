"""Session windows (spec section 5): an event with timestamp t spans [t, t + gap); the open sessions of its
group that the span overlaps merge with it into one, unless the span touches a closed session or the output
watermark already passed its end (a `window_closed` dead letter).

Which sessions exist depends on every earlier event of the group, so they are built in `seq` order, one
(output scope, group) per pandas group on the executors. What is global is the output watermark: each event
carries the watermark before its row (a running max over the scope), and a session is emitted at the first
row whose output watermark reaches its end + allowed lateness (a lookup in the watermark's steps).

The state between batches (`State.windows`) holds the open sessions' members (their columns, and the
session's `session_start`/`session_end`) and the bounds of every closed session (`session_closed`, member
columns null): a later event touching one is `window_closed` with that session's start.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window as SqlWindow

from replay.model.policy import Policy
from replay.model.state import NEG, State

BOUNDS = ("session_start", "session_end", "session_closed")
NEW, HELD, CLOSED = 0, 1, 2  # a row of this stretch; an open session's member from the state; a closed session
ASSIGNED = "scope int, gid string, mid long, held int, start long, end long, dead long"


@dataclass
class Built:
    windows: DataFrame  # window_start, window_end, grouping..., partition, aggregates..., emitted_at
    closed: DataFrame   # `window_closed` dead letters: seq, partition, offset, reason, window_start, arrival_time
    open: DataFrame     # the state's session rows after the stretch (open members and closed bounds)
    steps: DataFrame    # (scope, owm, first_seq): where the output watermark reaches each value (cached)


def build(decisions: DataFrame, members: DataFrame, policy: Policy, scope: Column, grouping: list[str],
          aggregates: list[tuple[str, Column]], flush: bool, state: State | None = None) -> Built:
    """Sessions of `members` (kept events: seq, partition, offset, timestamp, arrival_time, the grouping columns
    and whatever the aggregates read), per output scope (`scope`, a column of `decisions` and `members`) and group,
    continuing from the session rows of `state`. `decisions`: the engine's rows (seq, partition, output_watermark
    in microseconds), where the output watermark comes from."""
    state = state or State()
    before = {s: v.owm for s, v in state.scopes.items() if v.owm > NEG}
    steps = (decisions.where(F.col("output_watermark") > NEG)
             .groupBy(scope.alias("scope"), F.col("output_watermark").alias("owm"))
             .agg(F.min("seq").alias("first_seq"))).persist()
    # the output watermark before each row: the running max over the scope's earlier rows (or the state's)
    prior = F.max("output_watermark").over(
        SqlWindow.partitionBy("scope").orderBy("seq").rowsBetween(SqlWindow.unboundedPreceding, -1))
    start_owm = F.lit(NEG)
    for s, v in before.items():
        start_owm = F.when(F.col("scope") == s, F.lit(v)).otherwise(start_owm)
    ob = (decisions.select("seq", scope.alias("scope"), "output_watermark")
          .select("seq", F.greatest(F.coalesce(prior, F.lit(NEG)), start_owm).alias("ob")))
    gid = F.to_json(F.struct(*[F.col(g) for g in grouping])) if grouping else F.lit("")
    new = members.select(scope.alias("scope"), "*").withColumn("_gid", gid)
    slim = new.join(ob, "seq").select(
        "scope", F.col("_gid").alias("gid"), F.col("seq").alias("mid"), F.lit(NEW).alias("held"),
        F.unix_micros("timestamp").alias("t"), "ob", F.lit(None).cast("long").alias("s0"),
        F.lit(None).cast("long").alias("s1"))
    held = None
    if state.windows is not None:
        held = state.windows.withColumn("_gid", gid)
        slim = slim.unionByName(held.select(
            "scope", F.col("_gid").alias("gid"),
            F.coalesce(F.col("seq"), F.col("session_start")).alias("mid"),
            F.when(F.col("session_closed"), F.lit(CLOSED)).otherwise(F.lit(HELD)).alias("held"),
            F.lit(None).cast("long").alias("t"), F.lit(None).cast("long").alias("ob"),
            F.col("session_start").alias("s0"), F.col("session_end").alias("s1")))
    assigned = slim.groupBy("scope", "gid").applyInPandas(
        _builder(policy.window.gap, policy.allowed_lateness), ASSIGNED)
    assigned = assigned.persist()
    placed = assigned.where(F.col("dead").isNull()).select(
        "scope", "gid", "mid", "held", F.col("start").alias("session_start"), F.col("end").alias("session_end"))
    in_sessions = new.withColumn("mid", F.col("seq")).withColumn("held", F.lit(NEW))
    if held is not None:
        open_members = held.where(~F.col("session_closed")).drop(*BOUNDS)
        in_sessions = in_sessions.unionByName(
            open_members.withColumn("mid", F.col("seq")).withColumn("held", F.lit(HELD)))
    in_sessions = in_sessions.join(placed.withColumnRenamed("gid", "_gid"), ["scope", "_gid", "mid", "held"])
    emitted = _emitted(in_sessions.select("scope", "_gid", "session_start", "session_end").distinct(),
                       steps, policy.allowed_lateness)
    in_sessions = in_sessions.join(emitted, ["scope", "_gid", "session_start", "session_end"], "left")
    shown = in_sessions if flush else in_sessions.where(F.col("emitted_at").isNotNull())
    counted = shown.groupBy("scope", *grouping, "session_start", "session_end", "emitted_at").agg(
        *[c.alias(n) for n, c in aggregates])
    windows = counted.select(
        F.timestamp_micros("session_start").alias("window_start"),
        F.timestamp_micros("session_end").alias("window_end"),
        *grouping,
        F.when(F.col("scope") >= 0, F.col("scope")).alias("partition"),
        *[n for n, _ in aggregates], "emitted_at")
    dead = assigned.where(F.col("dead").isNotNull() & (F.col("held") == NEW)).select(
        "scope", F.col("gid").alias("_gid"), F.col("mid").alias("seq"), "dead")
    closed = new.join(dead, ["scope", "_gid", "seq"]).select(
        "seq", "partition", "offset", F.lit("window_closed").alias("reason"),
        F.timestamp_micros("dead").alias("window_start"), "arrival_time")
    columns = [c for c in members.columns]
    still_open = in_sessions.where(F.col("emitted_at").isNull()).select(
        "scope", *columns, "session_start", "session_end", F.lit(False).alias("session_closed"))
    # every closed session's bounds stay in the state: a later event touching one is `window_closed`
    bound = ["scope", "_gid", "session_start", "session_end"]
    done = in_sessions.where(F.col("emitted_at").isNotNull())
    # a group's columns are the same on each of its rows (its _gid is made from them); no grouping: none to take
    ended = (done.groupBy(*bound).agg(*[F.first(g).alias(g) for g in grouping]) if grouping
             else done.select(*bound).distinct())
    bounds = ended.select("scope", *grouping, "session_start", "session_end", F.lit(True).alias("session_closed"))
    if held is not None:
        bounds = bounds.unionByName(held.where(F.col("session_closed")).select(
            "scope", *grouping, "session_start", "session_end", "session_closed"))
    rest = [c for c in columns if c not in grouping]
    types = dict(members.dtypes)
    bounds = bounds.select("scope", *[F.lit(None).cast(types[c]).alias(c) if c in rest else F.col(c)
                                      for c in columns], *BOUNDS)
    return Built(windows, closed, still_open.unionByName(bounds), steps)


def _emitted(sessions: DataFrame, steps: DataFrame, lateness: int) -> DataFrame:
    """(scope, _gid, session_start, session_end, emitted_at): the first row at which the output watermark reaches
    the session's end + allowed lateness. The watermark only rises, so in value order its steps' first rows rise
    too: the first step at or after a session's close value is where it closes."""
    close = sessions.select("scope", "_gid", "session_start", "session_end",
                            (F.col("session_end") + F.lit(lateness)).alias("_v"), F.lit(0).alias("_step"),
                            F.lit(None).cast("long").alias("first_seq"))
    marks = steps.select("scope", F.lit(None).cast("string").alias("_gid"),
                         F.lit(None).cast("long").alias("session_start"), F.lit(None).cast("long").alias("session_end"),
                         F.col("owm").alias("_v"), F.lit(1).alias("_step"), "first_seq")
    following = SqlWindow.partitionBy("scope").orderBy("_v", "_step").rowsBetween(
        SqlWindow.currentRow, SqlWindow.unboundedFollowing)
    return (close.unionByName(marks)
            .select("*", F.min("first_seq").over(following).alias("emitted_at"))
            .where(F.col("_step") == 0)
            .select("scope", "_gid", "session_start", "session_end", "emitted_at"))


def _builder(gap: int, lateness: int):
    """The pandas function that builds one group's sessions in seq order (see `Sessions`)."""

    def run(pdf: pd.DataFrame) -> pd.DataFrame:
        out = {c: [] for c in ("mid", "held", "start", "end", "dead")}
        if len(pdf):
            pdf = pdf.sort_values(["held", "mid"], ascending=[False, True], kind="stable")
            group = Sessions(gap, lateness)
            for held, mid, t, ob, s0, s1 in zip(pdf["held"], pdf["mid"], pdf["t"], pdf["ob"], pdf["s0"], pdf["s1"]):
                if held != NEW:
                    group.hold(int(mid), int(held), int(s0), int(s1))
                else:
                    for start in group.add(int(mid), int(t), int(ob)):
                        for c, v in zip(out, (mid, NEW, None, None, start)):
                            out[c].append(v)
            for mid, held, start, end in group.members():
                for c, v in zip(out, (mid, held, start, end, None)):
                    out[c].append(v)
        frame = pd.DataFrame({c: pd.Series(v, dtype="Int64" if c != "held" else "int32") for c, v in out.items()})
        frame.insert(0, "gid", pdf["gid"].iloc[0] if len(pdf) else None)
        frame.insert(0, "scope", pdf["scope"].iloc[0] if len(pdf) else 0)
        frame["scope"] = frame["scope"].astype("int32")
        return frame

    return run


class Sessions:
    """One group's sessions: disjoint intervals sorted by start, each open (with its members) or closed."""

    def __init__(self, gap: int, lateness: int):
        self.gap, self.lateness = gap, lateness
        self.starts: list[int] = []
        self.items: list[list] = []  # [start, end, members (mid, held) or None for a closed session from the state]
        self.merged: tuple[list[int], int] = ([], 0)  # the last `add` that joined: the ends it removed, the new end

    def _insert(self, item: list) -> None:
        i = bisect.bisect_left(self.starts, item[0])
        self.starts.insert(i, item[0])
        self.items.insert(i, item)

    def hold(self, mid: int, held: int, start: int, end: int) -> None:
        """A row of the state: a member of an open session, or a closed session's bounds."""
        i = bisect.bisect_left(self.starts, start)
        if i < len(self.starts) and self.starts[i] == start:
            self.items[i][2].append((mid, held))
        else:
            self._insert([start, end, None if held == CLOSED else [(mid, held)]])

    def add(self, mid: int, t: int, ob: int) -> list[int]:
        """Event `mid` at t, the output watermark before its row `ob`: the starts of its `window_closed` dead
        letters (none when it joined or started a session)."""
        end = t + self.gap
        hi = bisect.bisect_left(self.starts, end)  # sessions starting before the span's end
        lo = hi
        while lo > 0 and self.items[lo - 1][1] > t:  # disjoint and sorted: the overlapping ones are contiguous
            lo -= 1
        touched = self.items[lo:hi]
        closed = [x[0] for x in touched if x[2] is None or ob >= x[1] + self.lateness]
        if closed:
            return closed
        if ob >= end + self.lateness:
            return [t]
        members = [(mid, NEW)]
        for x in touched:
            members = x[2] + members if len(x[2]) >= len(members) else members + x[2]
        merged = [min([t] + [x[0] for x in touched]), max([end] + [x[1] for x in touched]), members]
        self.merged = ([x[1] for x in touched], merged[1])
        del self.starts[lo:hi], self.items[lo:hi]
        self._insert(merged)
        return []

    def members(self):
        for start, end, members in self.items:
            for mid, held in members or ():
                yield mid, held, start, end


def idle_raises(rows: DataFrame, policy: Policy, scope: Column, group: Column, state: State | None = None
                ) -> DataFrame:
    """(seq, raise): spec 6 with session windows: at a clock row with arrival a, the open sessions ending at e with
    a >= max(e, the scope's latest event arrival) + idle_timeout close, raising the output watermark to e + allowed
    lateness. Which sessions are open depends on the raises before, so one pass per output scope in seq order
    builds its groups' sessions as `build` does. `rows`: the decided rows with their output watermark before any
    raise (`output_watermark`), `group`: an event's group; `state`: the scopes' and sessions' state before."""
    state = state or State()
    slim = rows.select(scope.alias("scope"), "seq", "kind", "arrival", F.col("timestamp").alias("t"),
                       F.col("output_watermark").alias("owm"), group.alias("gid"),
                       F.lit(None).cast("long").alias("s0"), F.lit(None).cast("long").alias("s1"))
    if state.windows is not None:
        slim = slim.unionByName(state.windows.select(
            "scope", F.lit(None).cast("long").alias("seq"),
            F.when(F.col("session_closed"), F.lit("closed")).otherwise(F.lit("held")).alias("kind"),
            F.lit(None).cast("long").alias("arrival"), F.lit(None).cast("long").alias("t"),
            F.lit(None).cast("long").alias("owm"), group.alias("gid"),
            F.col("session_start").alias("s0"), F.col("session_end").alias("s1")).distinct())
    before = {s: (v.owm, v.last_event) for s, v in state.scopes.items()}
    return slim.groupBy("scope").applyInPandas(_idle_pass(policy, before), "seq long, raise long")


def _idle_pass(policy: Policy, before: dict[int, tuple[int, int | None]]):
    gap, lateness, idle = policy.window.gap, policy.allowed_lateness, policy.idle_timeout

    def run(pdf: pd.DataFrame) -> pd.DataFrame:
        out_seq, out_raise = [], []
        if len(pdf):
            owm, last_event = before.get(int(pdf["scope"].iloc[0]), (NEG, None))
            pdf = pdf.assign(_held=pdf["kind"].isin(["held", "closed"])).sort_values(
                ["_held", "seq"], ascending=[False, True], kind="stable")
            groups: dict = {}
            ends: list[int] = []  # the ends of the scope's sessions, sorted (a merged-away session's end leaves)
            for kind, seq, arrival, t, row_owm, gid, s0, s1 in zip(
                    pdf["kind"], pdf["seq"], pdf["arrival"], pdf["t"], pdf["owm"], pdf["gid"], pdf["s0"], pdf["s1"]):
                gid = None if pd.isna(gid) else gid
                if kind in ("held", "closed"):
                    group = groups.setdefault(gid, Sessions(gap, lateness))
                    group.hold(0, HELD if kind == "held" else CLOSED, int(s0), int(s1))
                    bisect.insort(ends, int(s1))
                    continue
                if kind == "event":
                    last_event = int(arrival) if last_event is None else max(last_event, int(arrival))
                    if not pd.isna(t) and t > NEG:
                        group = groups.setdefault(gid, Sessions(gap, lateness))
                        if not group.add(int(seq), int(t), owm):
                            gone, made = group.merged
                            for e in gone:
                                ends.pop(bisect.bisect_left(ends, e))
                            bisect.insort(ends, made)
                elif kind == "clock" and last_event is not None and ends:
                    limit = int(arrival) - idle
                    if last_event <= limit:
                        j = bisect.bisect_right(ends, limit)
                        if j and ends[j - 1] + lateness > owm:
                            out_seq.append(int(seq))
                            out_raise.append(ends[j - 1] + lateness)
                            owm = ends[j - 1] + lateness
                owm = max(owm, int(row_owm))  # the output watermark after the row: before the next one
        return pd.DataFrame({"seq": pd.Series(out_seq, dtype="int64"), "raise": pd.Series(out_raise, dtype="int64")})

    return run
