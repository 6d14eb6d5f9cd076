"""Reference model of shared/spec/time-semantics.md: row by row, pure Python, integer microseconds.

It is a test oracle, so it shares no code with the Spark engine and favours plain transcription
of the spec over speed. Section numbers (§) refer to the spec. -infinity is `NEG` inside and null
outside.
"""
from __future__ import annotations

import math
import re
from datetime import datetime, timezone

NEG = -math.inf
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
UNITS = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000, "d": 86_400_000_000}
DEFAULTS = {  # §2
    "timestamp_by": "event_time",
    "early_arrival_tolerance": "5m", "early_arrival_action": "drop",
    "late_arrival_tolerance": "5s", "late_arrival_action": "adjust",
    "out_of_order_tolerance": "0s", "out_of_order_action": "adjust",
    "substream_by": None, "partitions": "merged", "watermark": {"strategy": "bounded"},
    "window": None, "group_by_key": True, "allowed_lateness": "0s", "idle_timeout": None,
    "flush_at_end": True,
}


# ---- units -------------------------------------------------------------------------------

def duration(text):
    """`500ms`, `5s`, `-1us` -> microseconds; null stays None (a disabled tolerance)."""
    if text is None:
        return None
    sign, number, unit = re.fullmatch(r"(-?)(\d+)(us|ms|s|m|h|d)", text.strip()).groups()
    return (-1 if sign else 1) * int(number) * UNITS[unit]


def instant(text):
    """ISO-8601 (naive = UTC) -> microseconds; None when missing or unparseable (§3 step 1)."""
    try:
        d = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (AttributeError, TypeError, ValueError):
        return None
    d = d if d.tzinfo else d.replace(tzinfo=timezone.utc)
    delta = d - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def iso(us):
    """Microseconds -> `2024-01-01T00:00:30.000001Z` (fraction only when non-zero); -inf -> None."""
    if us == NEG:
        return None
    seconds, micros = divmod(us, 1_000_000)
    text = datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{micros:06d}Z" if micros else f"{text}Z"


class Policy:
    """The policy with §2 defaults filled in and durations in microseconds."""

    def __init__(self, raw: dict):
        p = {**DEFAULTS, **raw}
        self.by_arrival = p["timestamp_by"] == "arrival_time"
        self.E, self.L = duration(p["early_arrival_tolerance"]), duration(p["late_arrival_tolerance"])
        if p["out_of_order_tolerance"] is None:
            raise ValueError("out_of_order_tolerance cannot be null (the spec only lets E and L be null)")
        self.O = duration(p["out_of_order_tolerance"])
        self.early, self.late, self.ooo = p["early_arrival_action"], p["late_arrival_action"], p["out_of_order_action"]
        self.substream_by, self.independent = p["substream_by"], p["partitions"] == "independent"
        wm = p["watermark"] or {"strategy": "bounded"}
        self.punctuated = wm.get("strategy", "bounded") == "punctuated"
        self.source = wm.get("strategy") == "source"  # §4: the source's own punctuations alone
        if self.by_arrival and (self.punctuated or self.source):
            raise ValueError("timestamp_by: arrival_time fixes the watermark (latest arrival - O); not "
                             f"{wm['strategy']}")
        self.every_events, self.every = wm.get("every_events"), duration(wm.get("every"))
        self.delay = duration(wm.get("delay", "0s"))
        w = p["window"]
        self.window = w is not None
        self.sessions = self.window and w["kind"] == "session"
        if self.sessions:
            self.gap = duration(w["gap"])
        elif w:
            self.size = duration(w["size"])
            self.hop = duration(w["hop"]) if w["kind"] == "hopping" else self.size
            self.offset = duration(w.get("offset", "0s"))
        self.group_by_key, self.flush_at_end = p["group_by_key"], p["flush_at_end"]
        self.lateness, self.idle = duration(p["allowed_lateness"]), duration(p["idle_timeout"])


# ---- §3 per-event checks -------------------------------------------------------------------

def fire(action, t, moved_to, reasons, reason):
    """A check that fired: record its reason, then drop (None), move, or keep t; returns (t, adjusted)."""
    reasons.append(reason)
    return {"drop": (None, False), "adjust": (moved_to, True), "accept": (t, False)}[action]


def check_early(pol, t, arrival, reasons):
    """Step 2: later than arrival + E is early (strict)."""
    if pol.E is not None and t > arrival + pol.E:
        return fire(pol.early, t, arrival + pol.E, reasons, "early")
    return t, False


def check_late(pol, t, arrival, reasons):
    """Step 3: before arrival - L is late (strict)."""
    if pol.L is not None and t < arrival - pol.L:
        return fire(pol.late, t, arrival - pol.L, reasons, "late")
    return t, False


def check_out_of_order(pol, t, w_before, reasons):
    """Step 4: before the scope's watermark after the previous row is out of order (strict)."""
    if t < w_before:
        return fire(pol.ooo, t, w_before, reasons, "out_of_order")
    return t, False


def action_of(reasons, t, adjusted):
    """Step 5: the decision's action from what the checks did."""
    if reasons[:1] in (["duplicate"], ["invalid_event_time"]):
        return "quarantined"
    return "dropped" if t is None else "adjusted" if adjusted else "accepted"


# ---- the replay ----------------------------------------------------------------------------

class Replay:
    """State after each journal row; `row()` applies §3-§6 to one row in seq order."""

    def __init__(self, pol: Policy, journal: list[dict]):
        self.pol = pol
        self.partitions = {r["partition"] for r in journal}  # §1: the source's partitions
        self.seen = set()                 # partitions that have had a row
        self.identities = set()           # (partition, offset) of the events so far: a repeat is a duplicate
        self.event_term = {}              # scope -> max(timestamp - O) over its kept events (§4)
        self.floor = {}                   # partition -> max(arrival - L) over all its rows (§4)
        self.counted, self.reference, self.punctuation = {}, {}, {}  # partition -> punctuated state
        self.sent = {}                    # partition -> latest punctuation the source sent (bounded, source)
        self.raised = {}                  # output scope -> output watermark raised by §6
        self.last_event_arrival = {}      # output scope -> latest arrival of its event rows (§6)
        self.windows = {}                 # (output scope, key, start) -> [count, sum]
        self.emitted = {}                 # window group -> seq it was emitted at
        self.sessions = []                # §5 session windows: dicts out, key, start, end, count, sum, emitted
        self.decisions, self.dead_letters = [], []

    # §4 watermarks
    def scope_of(self, row):
        """The watermark scope: the partition, or (partition, value of the `substream_by` field) with substreams
        (not punctuated). A case's journal row is the event as it landed: a field is a key of the row."""
        p = row["partition"]
        if self.pol.substream_by and not self.pol.punctuated:
            return (p, row.get(self.pol.substream_by))
        return p

    def scope_watermark(self, scope):
        """Bounded: max(kept timestamps - O, arrival floor, source punctuations); punctuated: the latest
        punctuation (made or sent); source: the latest source punctuation, raised by the arrival floor."""
        p = scope[0] if isinstance(scope, tuple) else scope
        if self.pol.punctuated:
            return self.punctuation.get(p, NEG)
        partition_terms = max(self.floor.get(p, NEG), self.sent.get(p, NEG))
        if self.pol.source:
            return partition_terms
        return max(self.event_term.get(scope, NEG), partition_terms)

    def partition_watermark(self, p):
        """W_p: the scope's watermark, or with substreams the partition's own terms alone (arrival floor and
        source punctuations): a value never seen has only those."""
        if self.pol.substream_by and not self.pol.punctuated:
            return max(self.floor.get(p, NEG), self.sent.get(p, NEG))
        return self.scope_watermark(p)

    def output_scope(self, p):
        """Whole stream (None) when merged, the partition when independent."""
        return p if self.pol.independent else None

    def output_watermark(self, out):
        """Merged: min over the source's partitions once all have had a row; independent: W_p; §6 raises it."""
        if out is not None:
            w = self.partition_watermark(out)
        elif self.seen >= self.partitions:
            w = min(self.partition_watermark(q) for q in self.partitions)
        else:
            w = NEG
        return max(w, self.raised.get(out, NEG))

    def advance_floor(self, p, arrival):
        """Every row of a partition, event, clock or punctuation, lifts its floor to arrival - L (bounded or source,
        L set); by arrival time to arrival - O (§2: the watermark is the latest arrival minus O)."""
        if self.pol.by_arrival:
            self.floor[p] = max(self.floor.get(p, NEG), arrival - self.pol.O)
        elif self.pol.L is not None and not self.pol.punctuated:
            self.floor[p] = max(self.floor.get(p, NEG), arrival - self.pol.L)

    def punctuate(self, p, t3):
        """CTIs: after every N-th counted event, or once t3 is `every` past the last punctuating event."""
        pol, n = self.pol, self.counted.get(p, 0) + 1
        self.counted[p] = n
        by_count = pol.every_events is not None and n % pol.every_events == 0
        by_time = pol.every is not None and p in self.reference and t3 - self.reference[p] >= pol.every
        if by_count or by_time or p not in self.reference:
            self.reference[p] = t3
        if by_count or by_time:
            self.punctuation[p] = max(self.punctuation.get(p, NEG), t3 - pol.delay)

    def source_punctuation(self, seq, row):
        """§4: a punctuation row raises every watermark of its partition to its time P (never lowering one);
        under the punctuated strategy it is also the latest punctuation (count restarts, P is the reference).
        A repeat of a (partition, offset) already seen (a redelivery) was applied once and changes nothing."""
        p, identity = row["partition"], (row["partition"], row["offset"])
        if identity in self.identities:
            return
        self.identities.add(identity)
        time = instant(row.get("event_time"))
        if time is None:
            self.dead_letter(seq, row, "malformed")
        elif self.pol.punctuated:
            self.punctuation[p] = max(self.punctuation.get(p, NEG), time)
            self.counted[p], self.reference[p] = 0, time
        else:
            self.sent[p] = max(self.sent.get(p, NEG), time)

    # §5 windows
    def window_starts(self, t):
        """Every s = offset + k*hop with s <= t < s + size."""
        pol, starts = self.pol, []
        s = pol.offset + ((t - pol.offset) // pol.hop) * pol.hop
        while s + pol.size > t:
            starts.append(s)
            s -= pol.hop
        return starts

    def closes_at(self, start):
        return start + self.pol.size + self.pol.lateness

    def add_to_windows(self, seq, row, out, t, closed_before):
        """Count the event in each of its windows, or dead-letter it for each one already closed."""
        key = row.get("key") if self.pol.group_by_key else None
        for s in self.window_starts(t):
            if closed_before >= self.closes_at(s):
                self.dead_letter(seq, row, "window_closed", s)
            else:
                w = self.windows.setdefault((out, key, s), [0, 0.0])
                w[0] += 1
                w[1] += row.get("value") or 0.0

    def add_to_session(self, seq, row, out, t, closed_before):
        """§5 sessions: the event's span [t, t+G) joins (merges) the open sessions of its group it overlaps,
        unless it overlaps closed ones or would make a session the output watermark already closed."""
        key = row.get("key") if self.pol.group_by_key else None
        end = t + self.pol.gap
        group = [x for x in self.sessions if (x["out"], x["key"]) == (out, key) and x["start"] < end and t < x["end"]]
        closed = [x for x in group if x["emitted"] is not None]
        if closed:
            for x in closed:
                self.dead_letter(seq, row, "window_closed", x["start"])
        elif closed_before >= end + self.pol.lateness:
            self.dead_letter(seq, row, "window_closed", t)
        else:
            merged = {"out": out, "key": key, "start": min([t] + [x["start"] for x in group]),
                      "end": max([end] + [x["end"] for x in group]), "count": 1, "sum": row.get("value") or 0.0,
                      "emitted": None}
            for x in group:
                merged["count"] += x["count"]
                merged["sum"] += x["sum"]
                self.sessions.remove(x)
            self.sessions.append(merged)

    def open_sessions(self):
        return [x for x in self.sessions if x["emitted"] is None]

    def open_windows(self):
        return [g for g in self.windows if g not in self.emitted]

    def close_windows(self, seq):
        """A window (a session) is emitted at the first row after which its output watermark reached its close
        time: its end plus the allowed lateness."""
        for g in self.open_windows():
            if self.output_watermark(g[0]) >= self.closes_at(g[2]):
                self.emitted[g] = seq
        for x in self.open_sessions():
            if self.output_watermark(x["out"]) >= x["end"] + self.pol.lateness:
                x["emitted"] = seq

    def idle_timeout(self, seq, p, arrival):
        """§6: a clock row closes open windows whose end and last event are idle_timeout behind it."""
        out = self.output_scope(p)
        last = self.last_event_arrival.get(out)
        if self.pol.idle is None or last is None:
            return
        for g in self.open_windows():
            end = g[2] + self.pol.size
            if g[0] == out and arrival >= max(end, last) + self.pol.idle:
                self.emitted[g] = seq
                self.raised[out] = max(self.raised.get(out, NEG), end + self.pol.lateness)
        for x in self.open_sessions():
            if x["out"] == out and arrival >= max(x["end"], last) + self.pol.idle:
                x["emitted"] = seq
                self.raised[out] = max(self.raised.get(out, NEG), x["end"] + self.pol.lateness)

    # rows
    def dead_letter(self, seq, row, reason, start=None):
        self.dead_letters.append({"seq": seq, "partition": row["partition"], "offset": row["offset"],
                                  "reason": reason, "window_start": None if start is None else iso(start)})

    def row(self, seq, row):
        p, arrival = row["partition"], instant(row["arrival_time"])
        out = self.output_scope(p)
        closed_before = self.output_watermark(out)
        self.seen.add(p)
        decision = {"seq": seq, "partition": p, "offset": row["offset"], "kind": row["kind"],
                    "action": None, "reasons": None, "timestamp": None}
        if row["kind"] == "clock":
            self.advance_floor(p, arrival)
            self.idle_timeout(seq, p, arrival)
            decision["watermark"] = iso(self.partition_watermark(p))
        elif row["kind"] == "punctuation":  # not an event: no action, no window, not idle-timeout activity
            self.advance_floor(p, arrival)
            self.source_punctuation(seq, row)
            decision["watermark"] = iso(self.partition_watermark(p))
        else:
            scope = self.scope_of(row)
            t, action, reasons = self.decide(seq, row, scope, arrival)
            self.advance_floor(p, arrival)
            self.last_event_arrival[out] = max(self.last_event_arrival.get(out, NEG), arrival)
            if t is not None and self.pol.sessions:
                self.add_to_session(seq, row, out, t, closed_before)
            elif t is not None and self.pol.window:
                self.add_to_windows(seq, row, out, t, closed_before)
            decision.update(action=action, reasons=reasons, timestamp=None if t is None else iso(t),
                            watermark=iso(self.scope_watermark(scope)))
        self.close_windows(seq)
        decision["output_watermark"] = iso(self.output_watermark(out))
        self.decisions.append(decision)

    def decide(self, seq, row, scope, arrival):
        """§3 steps 1-5 for one event; feeds its watermark (§4); returns (timestamp, action, reasons)."""
        t, reasons = instant(row.get("event_time")), []
        identity = (row["partition"], row["offset"])
        duplicate = identity in self.identities
        self.identities.add(identity)
        if self.pol.by_arrival and not duplicate:  # §2: the time is the arrival; steps 2-4 never fire
            t, adjusted = arrival, False
            self.event_term[scope] = max(self.event_term.get(scope, NEG), t - self.pol.O)
        elif duplicate or t is None:  # a duplicate (the first copy wins), then an invalid event time: quarantined
            reasons.append("duplicate" if duplicate else "invalid_event_time")
            t, adjusted = None, False
        else:
            w_before = self.scope_watermark(scope)
            t, adj_early = check_early(self.pol, t, arrival, reasons)
            t, adj_late = (t, False) if t is None else check_late(self.pol, t, arrival, reasons)
            t3 = t  # after steps 2-3: what punctuations count and measure
            t, adj_ooo = (t, False) if t is None else check_out_of_order(self.pol, t, w_before, reasons)
            adjusted = adj_early or adj_late or adj_ooo
            if t3 is not None and self.pol.punctuated:
                self.punctuate(row["partition"], t3)
            if t is not None and not self.pol.punctuated and not self.pol.source:
                self.event_term[scope] = max(self.event_term.get(scope, NEG), t - self.pol.O)
        if t is None:
            self.dead_letter(seq, row, reasons[-1])
        return t, action_of(reasons, t, adjusted), reasons

    def window_rows(self):
        """Emitted windows, then (flush_at_end) the still open ones with emitted_at null."""
        rows = []
        for (out, key, s), (count, total) in self.windows.items():
            if (out, key, s) in self.emitted or self.pol.flush_at_end:
                rows.append({"window_start": iso(s), "window_end": iso(s + self.pol.size), "key": key,
                             "partition": out, "count": count, "sum": total,
                             "emitted_at": self.emitted.get((out, key, s))})
        for x in self.sessions:
            if x["emitted"] is not None or self.pol.flush_at_end:
                rows.append({"window_start": iso(x["start"]), "window_end": iso(x["end"]), "key": x["key"],
                             "partition": x["out"], "count": x["count"], "sum": x["sum"], "emitted_at": x["emitted"]})
        return rows


def run_model(policy: dict, journal: list[dict]) -> dict:
    """Replay `journal` (list index = seq) under `policy`; returns the shape of a case's `expected`."""
    replay = Replay(Policy(policy or {}), journal)
    for seq, row in enumerate(journal):
        replay.row(seq, row)
    return {"decisions": replay.decisions, "windows": replay.window_rows(), "dead_letters": replay.dead_letters}
