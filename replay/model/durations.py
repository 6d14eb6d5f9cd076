"""Durations and instants in integer microseconds: the spec's unit, exact and sortable."""
from __future__ import annotations

import re
from datetime import datetime, timezone

_UNITS = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000, "d": 86_400_000_000}
_DURATION = re.compile(r"^\s*(-?)(\d+)\s*(us|ms|s|m|h|d)\s*$")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def parse_duration(text: str, field: str = "duration") -> int:
    """`500ms`, `5s`, `2m`, `1h`, `-1us` -> microseconds; anything else names the field and value."""
    m = _DURATION.match(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(
            f"{field}: {text!r} is not a duration; use an integer and a unit (us, ms, s, m, h, d), e.g. '5s', '-1us'"
        )
    sign, number, unit = m.groups()
    return (-1 if sign else 1) * int(number) * _UNITS[unit]


def format_duration(us: int) -> str:
    if us == 0:
        return "0s"
    for unit in ("d", "h", "m", "s", "ms"):
        if us % _UNITS[unit] == 0:
            return f"{us // _UNITS[unit]}{unit}"
    return f"{us}us"


def describe_span(us: int) -> str:
    """A span for people to read: `42s`, `3.5 minutes`, `2.9 years` (durations in policies use format_duration)."""
    seconds = us / 1e6
    for unit, size in (("years", 365.25 * 86_400), ("days", 86_400), ("hours", 3_600), ("minutes", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f}s"


def parse_instant(text: str, field: str = "time") -> int:
    """An ISO-8601 instant (naive means UTC) -> microseconds since the epoch."""
    try:
        d = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{field}: {text!r} is not an ISO-8601 time, e.g. 2024-01-01T00:00:00Z") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)
    delta = d - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def format_instant(us: int | None) -> str | None:
    """Microseconds -> `2024-01-01T00:00:30.000001Z` (fraction only when non-zero); None stays None."""
    if us is None:
        return None
    seconds, micros = divmod(us, 1_000_000)
    d = datetime.fromtimestamp(seconds, tz=timezone.utc)
    text = d.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{micros:06d}Z" if micros else f"{text}Z"
