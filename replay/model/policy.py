"""The time policy of a job: a frozen, validated value with the spec's field names and defaults.

Closed types with named factories, as Trill's DisorderPolicy: a policy can only be built valid.
Durations are held in integer microseconds.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from replay.model.durations import format_duration, parse_duration

EARLY_ACTIONS = ("drop", "adjust")
LATE_ACTIONS = ("adjust", "drop", "accept")
OUT_OF_ORDER_ACTIONS = ("adjust", "drop", "accept")
SUBSTREAM_COLUMNS = ("key",)  # the fields of the spec's job; a user's job adds its own (Job.define)
PARTITION_MODES = ("merged", "independent")
TIMESTAMP_BY = ("event_time", "arrival_time")


class PolicyError(ValueError):
    """A policy field has a bad value; the message names the field and the value."""


@dataclass(frozen=True)
class Bounded:
    """Watermark = max accepted timestamp - out-of-order tolerance, floored by arrival - late tolerance."""

    strategy: str = "bounded"

    def to_dict(self) -> dict:
        return {"strategy": "bounded"}


@dataclass(frozen=True)
class Punctuated:
    """StreamInsight CTIs: a punctuation after every N events and/or every T of event time, D behind."""

    every_events: int | None = None
    every: int | None = None
    delay: int = 0
    strategy: str = "punctuated"

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"strategy": "punctuated", "delay": format_duration(self.delay)}
        if self.every_events is not None:
            out["every_events"] = self.every_events
        if self.every is not None:
            out["every"] = format_duration(self.every)
        return out


@dataclass(frozen=True)
class Source:
    """The source's own punctuations alone (journal rows of kind `punctuation`), floored by arrival - late
    tolerance: no watermark from event times."""

    strategy: str = "source"

    def to_dict(self) -> dict:
        return {"strategy": "source"}


@dataclass(frozen=True)
class Window:
    """Windows [offset + k*hop, + size); tumbling when hop == size, gaps when hop > size."""

    kind: str
    size: int
    hop: int
    offset: int = 0

    @classmethod
    def tumbling(cls, size: int, offset: int = 0) -> "Window":
        return cls("tumbling", size, size, offset)

    @classmethod
    def hopping(cls, size: int, hop: int, offset: int = 0) -> "Window":
        return cls("hopping", size, hop, offset)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"kind": self.kind, "size": format_duration(self.size)}
        if self.kind == "hopping":
            out["hop"] = format_duration(self.hop)
        if self.offset:
            out["offset"] = format_duration(self.offset)
        return out


@dataclass(frozen=True)
class Session:
    """Session windows: an event spans [t, t + gap); overlapping spans of a group merge into one session."""

    gap: int
    kind: str = "session"

    def to_dict(self) -> dict:
        return {"kind": "session", "gap": format_duration(self.gap)}


@dataclass(frozen=True)
class Policy:
    """`timestamp_by: arrival_time` (Azure Stream Analytics without `TIMESTAMP BY`): every event's time is its
    arrival time. The event-time column is then not read at all, so an event whose `event_time` is null or
    unparseable is *not* quarantined (a `duplicate` still is: that is the event's identity, not its time); the
    early, late and out-of-order checks never fire (their tolerances and actions are ignored), and the watermark
    is the latest arrival of the partition (events and clock rows) minus `out_of_order_tolerance`. It cannot be
    combined with a punctuated watermark (refused: the spec fixes the watermark for this mode); with
    `substream_by` every key of a partition has the partition's arrival watermark."""

    timestamp_by: str = "event_time"
    early_arrival_tolerance: int | None = 5 * 60_000_000
    early_arrival_action: str = "drop"
    late_arrival_tolerance: int | None = 5_000_000
    late_arrival_action: str = "adjust"
    out_of_order_tolerance: int = 0
    out_of_order_action: str = "adjust"
    substream_by: str | None = None
    partitions: str = "merged"
    watermark: Bounded | Punctuated | Source = field(default_factory=Bounded)
    window: Window | Session | None = None
    group_by_key: bool = True
    allowed_lateness: int = 0
    idle_timeout: int | None = None
    flush_at_end: bool = True

    def __post_init__(self):
        if self.by_arrival and isinstance(self.watermark, (Punctuated, Source)):
            raise PolicyError(f"timestamp_by: 'arrival_time' cannot be combined with watermark strategy "
                              f"{self.watermark.strategy!r}: with arrival_time the watermark is the latest arrival "
                              "minus out_of_order_tolerance; use watermark: {strategy: bounded} or "
                              "timestamp_by: event_time")

    @classmethod
    def from_dict(cls, raw: dict | None, fields: tuple[str, ...] = SUBSTREAM_COLUMNS) -> "Policy":
        """`fields`: what `substream_by` may name (the spec's job has `key`; a job adds its own fields)."""
        return _build(raw or {}, fields)

    @classmethod
    def from_yaml(cls, path: str | Path, fields: tuple[str, ...] = SUBSTREAM_COLUMNS) -> "Policy":
        try:
            text = Path(path).read_text(encoding="utf-8")
            raw = yaml.safe_load(text)
        except FileNotFoundError:
            raise PolicyError(f"policy file {path} does not exist") from None
        except IsADirectoryError:
            raise PolicyError(f"policy file {path} is a directory; give the policy YAML file in it") from None
        except UnicodeDecodeError as e:
            raise PolicyError(f"policy file {path} is not UTF-8 text "
                              f"(byte {e.start}: {e.object[e.start:e.start + 1]!r}); "
                              "save it as UTF-8 YAML") from None
        except yaml.YAMLError as e:
            raise PolicyError(f"policy file {path} is not valid YAML: {' '.join(str(e).split())}") from None
        if raw is None:  # an empty file is a mistake, not a request for the defaults
            raise PolicyError(f"policy file {path} is empty; write the policy fields in it "
                              f"(`{{}}` for the spec defaults)")
        if not isinstance(raw, dict):
            raise PolicyError(f"policy file {path} must hold a mapping of policy fields, got {type(raw).__name__}")
        try:
            return _build(raw, fields)
        except PolicyError as e:
            raise PolicyError(f"{path}: {e}") from None

    @property
    def by_arrival(self) -> bool:
        """Each event's time is its arrival time (`timestamp_by: arrival_time`)."""
        return self.timestamp_by == "arrival_time"

    @property
    def independent(self) -> bool:
        return self.partitions == "independent"

    @property
    def punctuated(self) -> bool:
        return isinstance(self.watermark, Punctuated)

    @property
    def source_punctuated(self) -> bool:
        """The watermark is the source's own punctuations alone (`{strategy: source}`)."""
        return isinstance(self.watermark, Source)

    @property
    def sessions(self) -> bool:
        return isinstance(self.window, Session)

    def to_dict(self) -> dict:
        """The policy in the spec's YAML shape, every field explicit (a canonical form for hashing and logs),
        except `timestamp_by`, which appears only when it is not its default: a policy written before the field
        existed keeps its canonical form, so its hash (`policy_hash`) and checkpoints stay valid."""
        dur = lambda v: None if v is None else format_duration(v)  # noqa: E731
        out: dict[str, Any] = {} if self.timestamp_by == "event_time" else {"timestamp_by": self.timestamp_by}
        return out | {
            "early_arrival_tolerance": dur(self.early_arrival_tolerance),
            "early_arrival_action": self.early_arrival_action,
            "late_arrival_tolerance": dur(self.late_arrival_tolerance),
            "late_arrival_action": self.late_arrival_action,
            "out_of_order_tolerance": dur(self.out_of_order_tolerance),
            "out_of_order_action": self.out_of_order_action,
            "substream_by": self.substream_by,
            "partitions": self.partitions,
            "watermark": self.watermark.to_dict(),
            "window": None if self.window is None else self.window.to_dict(),
            "group_by_key": self.group_by_key,
            "allowed_lateness": dur(self.allowed_lateness),
            "idle_timeout": dur(self.idle_timeout),
            "flush_at_end": self.flush_at_end,
        }


def policy_hash(policy: Policy) -> str:
    """A short fingerprint of the policy (canonical JSON), recorded with each commit."""
    return hashlib.sha256(json.dumps(policy.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


_FIELDS = set(Policy.__dataclass_fields__)


def _duration(raw: dict, name: str, *, nullable: bool, minimum: int | None = 0, positive: bool = False):
    if name not in raw:
        return Policy.__dataclass_fields__[name].default
    value = raw[name]
    if value is None:
        if nullable:
            return None
        raise PolicyError(f"{name}: null is not allowed; give a duration such as '0s'")
    us = _parse(value, name)
    if positive and us <= 0:
        raise PolicyError(f"{name}: must be positive, got {value!r}")
    if minimum is not None and us < minimum:
        raise PolicyError(f"{name}: must not be negative, got {value!r}")
    return us


def _parse(value: Any, name: str) -> int:
    try:
        return parse_duration(value, name)
    except ValueError as e:
        raise PolicyError(str(e)) from None


def _choice(raw: dict, name: str, allowed: tuple[str, ...]):
    value = raw.get(name, Policy.__dataclass_fields__[name].default)
    if value not in allowed:
        raise PolicyError(f"{name}: {value!r} is not one of {', '.join(allowed)}")
    return value


def _bool(raw: dict, name: str) -> bool:
    value = raw.get(name, Policy.__dataclass_fields__[name].default)
    if not isinstance(value, bool):
        raise PolicyError(f"{name}: must be true or false, got {value!r}")
    return value


def _unknown(raw: dict, known: set[str], where: str) -> None:
    extra = sorted(set(raw) - known)
    if extra:
        raise PolicyError(f"{where}unknown field {extra[0]!r}; known fields: {', '.join(sorted(known))}")


def _watermark(raw: Any) -> Bounded | Punctuated | Source:
    if raw is None:
        return Bounded()
    if not isinstance(raw, dict):
        raise PolicyError(f"watermark: must be a mapping like {{strategy: bounded}}, got {raw!r}")
    strategy = raw.get("strategy", "bounded")
    if strategy == "bounded":
        _unknown(raw, {"strategy"}, "watermark: ")
        return Bounded()
    if strategy == "source":
        for name in ("every_events", "every", "delay"):
            if name in raw:
                raise PolicyError(f"watermark.{name}: not allowed with strategy 'source' (got {raw[name]!r}): the "
                                  "watermark is the source's own punctuations; use strategy punctuated to make them")
        _unknown(raw, {"strategy"}, "watermark: ")
        return Source()
    if strategy != "punctuated":
        raise PolicyError(f"watermark.strategy: {strategy!r} is not one of bounded, punctuated, source")
    _unknown(raw, {"strategy", "every_events", "every", "delay"}, "watermark: ")
    n = raw.get("every_events")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise PolicyError(f"watermark.every_events: must be a positive integer, got {n!r}")
    every = raw.get("every")
    every_us = None if every is None else _parse(every, "watermark.every")
    if every_us is not None and every_us <= 0:
        raise PolicyError(f"watermark.every: must be positive, got {every!r}")
    if n is None and every_us is None:
        raise PolicyError("watermark: a punctuated strategy needs every_events, every, or both")
    delay = _parse(raw.get("delay", "0s"), "watermark.delay")
    return Punctuated(every_events=n, every=every_us, delay=delay)


def _session(raw: dict) -> Session:
    for name in ("size", "hop", "offset"):
        if name in raw:
            raise PolicyError(f"window.{name}: a session window has no {name} (got {raw[name]!r}); its sessions "
                              "are as long as their events and gap make them: give only gap")
    _unknown(raw, {"kind", "gap"}, "window: ")
    if "gap" not in raw:
        raise PolicyError("window.gap: missing; a session window needs a positive gap such as '5m'")
    gap = _parse(raw["gap"], "window.gap")
    if gap <= 0:
        raise PolicyError(f"window.gap: must be positive, got {raw['gap']!r}")
    return Session(gap)


def _window(raw: Any) -> Window | Session | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise PolicyError(f"window: must be a mapping like {{kind: tumbling, size: 1m}}, got {raw!r}")
    kind = raw.get("kind")
    if kind == "session":
        return _session(raw)
    if kind not in ("tumbling", "hopping"):
        raise PolicyError(f"window.kind: {kind!r} is not one of tumbling, hopping, session")
    known = {"kind", "size", "offset"} | ({"hop"} if kind == "hopping" else set())
    _unknown(raw, known, "window: ")
    if "size" not in raw:
        raise PolicyError("window.size: missing; give a duration such as '1m'")
    size = _parse(raw["size"], "window.size")
    if size <= 0:
        raise PolicyError(f"window.size: must be positive, got {raw['size']!r}")
    offset = _parse(raw.get("offset", "0s"), "window.offset")
    if kind == "tumbling":
        return Window.tumbling(size, offset)
    if "hop" not in raw:
        raise PolicyError("window.hop: missing; a hopping window needs a hop such as '10s'")
    hop = _parse(raw["hop"], "window.hop")
    if hop <= 0:
        raise PolicyError(f"window.hop: must be positive, got {raw['hop']!r}")
    return Window.hopping(size, hop, offset)


def substream_error(substream: Any, fields: tuple[str, ...]) -> str | None:
    """Why `substream_by` cannot name `substream` for a job with these fields (None: it can)."""
    if substream is None or substream in fields:
        return None
    return f"substream_by: {substream!r} is not a field of the job; use one of {', '.join(sorted(fields))} or null"


def _build(raw: dict, fields: tuple[str, ...] = SUBSTREAM_COLUMNS) -> Policy:
    if not isinstance(raw, dict):
        raise PolicyError(f"policy must be a mapping of fields, got {type(raw).__name__}")
    _unknown(raw, _FIELDS, "")
    substream = raw.get("substream_by")
    problem = substream_error(substream, tuple(fields))
    if problem:
        raise PolicyError(problem)
    return Policy(
        timestamp_by=_choice(raw, "timestamp_by", TIMESTAMP_BY),
        early_arrival_tolerance=_duration(raw, "early_arrival_tolerance", nullable=True),
        early_arrival_action=_choice(raw, "early_arrival_action", EARLY_ACTIONS),
        late_arrival_tolerance=_duration(raw, "late_arrival_tolerance", nullable=True),
        late_arrival_action=_choice(raw, "late_arrival_action", LATE_ACTIONS),
        out_of_order_tolerance=_duration(raw, "out_of_order_tolerance", nullable=False),
        out_of_order_action=_choice(raw, "out_of_order_action", OUT_OF_ORDER_ACTIONS),
        substream_by=substream,
        partitions=_choice(raw, "partitions", PARTITION_MODES),
        watermark=_watermark(raw.get("watermark")),
        window=_window(raw.get("window")),
        group_by_key=_bool(raw, "group_by_key"),
        allowed_lateness=_duration(raw, "allowed_lateness", nullable=False),
        idle_timeout=_duration(raw, "idle_timeout", nullable=True, positive=True),
        flush_at_end=_bool(raw, "flush_at_end"),
    )
