"""Hypothesis strategies for random but valid policies and journals.

Everything sits on a whole-second grid near 2024-01-01T00:00:00Z so that the strict/non-strict
equality edges of the spec (exactly L late, exactly at the watermark, window end) happen often.

Issue 48's features (punctuation rows sent by the source, the `source` strategy, substreams over the payload
field `device`, session windows) are drawn only with `features=True`; the default is DRAW_ISSUE_48, on: every
property test that draws from here (engine vs model, incremental) draws them too.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import strategies as st

START = datetime(2024, 1, 1, tzinfo=timezone.utc)
KEYS = ("a", "b", "c")
DEVICES = ("d1", "d2", None)  # the payload field `device` of drawn events (null: a substream of its own)
DRAW_ISSUE_48 = True

TOLERANCES = st.sampled_from(["0s", "1s", "2s", "3s", "5s", "10s", "1m"])
NULLABLE_TOLERANCES = st.one_of(st.none(), TOLERANCES)
SMALL = st.sampled_from(["0s", "1s", "2s", "5s"])


def _iso(d: datetime) -> str:
    text = d.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{d.microsecond:06d}Z" if d.microsecond else f"{text}Z"


@st.composite
def watermarks(draw, features: bool = DRAW_ISSUE_48):
    """Bounded (sometimes left to the default), or punctuated by count and/or event time; with `features`, also
    the source's own punctuations alone."""
    if features and draw(st.integers(0, 3)) == 0:
        return {"strategy": "source"}
    if draw(st.booleans()):
        return draw(st.sampled_from([None, {"strategy": "bounded"}]))
    wm = {"strategy": "punctuated", "delay": draw(st.sampled_from(["-1us", "0s", "1s", "5s", "-1s"]))}
    by = draw(st.sampled_from(["events", "time", "both"]))
    if by in ("events", "both"):
        wm["every_events"] = draw(st.integers(1, 4))
    if by in ("time", "both"):
        wm["every"] = draw(st.sampled_from(["1s", "2s", "5s", "30s"]))
    return wm


@st.composite
def windows(draw, features: bool = DRAW_ISSUE_48, sessions: bool = False):
    """None, tumbling, or hopping with hop smaller or larger than size; sometimes an offset; with `features`,
    also sessions; with `sessions`, session windows alone."""
    kinds = ["session"] if sessions else [None, "tumbling", "hopping"] + (["session"] if features else [])
    kind = draw(st.sampled_from(kinds))
    if kind is None:
        return None
    if kind == "session":
        return {"kind": "session", "gap": draw(st.sampled_from(["1s", "2s", "3s", "5s", "10s"]))}
    w = {"kind": kind, "size": draw(st.sampled_from(["1s", "2s", "3s", "5s", "10s", "1m"]))}
    if kind == "hopping":
        w["hop"] = draw(st.sampled_from(["1s", "2s", "4s", "7s", "15s"]))
        if w["size"] == "1m" and w["hop"] == "1s":
            w["hop"] = "4s"  # keep the number of windows per event small
    if draw(st.booleans()):
        w["offset"] = draw(st.sampled_from(["0s", "1s", "-2s", "3s"]))
    return w


@st.composite
def policies(draw, features: bool = DRAW_ISSUE_48, sessions: bool = False):
    """A valid policy dict with the spec's field names; some fields left out to exercise defaults. With `features`:
    the source strategy, substreams over the payload field `device` and session windows; with `sessions`: always
    a session window."""
    fields = {
        "early_arrival_tolerance": NULLABLE_TOLERANCES,
        "early_arrival_action": st.sampled_from(["drop", "adjust"]),
        "late_arrival_tolerance": NULLABLE_TOLERANCES,
        "late_arrival_action": st.sampled_from(["adjust", "drop", "accept"]),
        "out_of_order_tolerance": TOLERANCES,
        "out_of_order_action": st.sampled_from(["adjust", "drop", "accept"]),
        "substream_by": st.sampled_from([None, "key"] + (["device"] if features else [])),
        "partitions": st.sampled_from(["merged", "independent"]),
        "watermark": watermarks(features),
        "window": windows(features, sessions),
        "timestamp_by": st.sampled_from(["event_time", "event_time", "arrival_time"]),
        "group_by_key": st.booleans(),
        "allowed_lateness": SMALL,
        "idle_timeout": st.sampled_from([None, "1s", "2s", "5s"]),
        "flush_at_end": st.booleans(),
    }
    policy = {}
    for name, strategy in fields.items():
        value = draw(strategy)
        if name == "window" and sessions:
            policy[name] = value
        elif draw(st.integers(0, 9)) > 0:  # 1 in 10: leave the field to its default
            policy[name] = value
    if policy.get("watermark") is None:
        policy.pop("watermark", None)
    drawn = policy.get("watermark", {}).get("strategy", "bounded")
    if policy.get("timestamp_by") == "arrival_time" and drawn != "bounded":
        policy["watermark"] = {"strategy": "bounded"}  # arrival time fixes the watermark: the others are refused
    return policy


@st.composite
def journals(draw, max_partitions: int = 3, features: bool = DRAW_ISSUE_48):
    """1-3 partitions (or up to `max_partitions`), 0-40 rows in seq order; arrivals mostly increasing by whole
    seconds. With `features`: 1-40 rows, every row has the payload field `device` (null on all but events, so a
    policy may name it), and about 1 row in 8 is a punctuation sent by the source (1 in 10 of those without a
    valid time), near its arrival; offsets of punctuations are the partition's, redeliveries included."""
    n_partitions = draw(st.integers(1, max_partitions))
    n_rows = draw(st.integers(1 if features else 0, 40))
    arrival = START + timedelta(seconds=draw(st.integers(0, 5)))
    next_offset, used = {}, {}
    rows = []
    for _ in range(n_rows):
        p = draw(st.integers(0, n_partitions - 1))
        offset = next_offset.get(p, draw(st.integers(0, 3)))
        next_offset[p] = offset + draw(st.integers(1, 2))
        if draw(st.integers(0, 9)) == 0 and used.get(p):  # a redelivery: an offset seen before (a duplicate)
            offset = draw(st.sampled_from(used[p]))
        used.setdefault(p, []).append(offset)
        arrival += timedelta(seconds=draw(st.sampled_from([0, 1, 1, 1, 2, 3, 5, -1])))
        row = {"partition": p, "offset": offset, "arrival_time": _iso(arrival), "device": None}
        if draw(st.integers(0, 9)) < 2:
            row.update(kind="clock", event_time=None, key=None, value=None)
            rows.append(row)
            continue
        if features and draw(st.integers(0, 7)) == 0:
            shift = timedelta(seconds=draw(st.integers(-8, 4)))
            time = None if draw(st.integers(0, 9)) == 0 else _iso(arrival + shift)
            row.update(kind="punctuation", event_time=time, key=None, value=None)
            rows.append(row)
            continue
        shift = draw(st.one_of(
            st.integers(-6, 6).map(lambda s: timedelta(seconds=s)),
            st.integers(-6, 6).map(lambda m: timedelta(minutes=m)),
        ))
        event_time = None if draw(st.integers(0, 19)) == 0 else _iso(arrival + shift)
        row.update(kind="event", event_time=event_time, key=draw(st.sampled_from(KEYS)),
                   value=float(draw(st.integers(0, 9))))
        if features:
            row["device"] = draw(st.sampled_from(DEVICES))
        rows.append(row)
    fields = ("partition", "offset", "kind", "arrival_time", "event_time", "key", "value") + (
        ("device",) if features else ())
    return [{k: r[k] for k in fields} for r in rows]


@st.composite
def one_pass_policies(draw):
    """A policy `replay.engine.one_pass` decides: drawn as `policies`, then bounded (or the source strategy) with no
    substreams, no idle timeout and no session window."""
    policy = draw(policies())
    policy.pop("idle_timeout", None)
    policy.pop("substream_by", None)
    if policy.get("watermark", {}).get("strategy") == "punctuated":
        policy["watermark"] = {"strategy": "bounded"}
    if (policy.get("window") or {}).get("kind") == "session":
        policy["window"] = {"kind": "tumbling", "size": draw(st.sampled_from(["2s", "5s", "10s"]))}
    return policy
