"""The tests' model of a user job: the spec's model (tests/model.py) with field extraction, a filter,
grouping columns and the aggregates the example jobs use, evaluated in plain Python in seq order."""
from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal

from tests.model import Policy, Replay, iso

FIELD = re.compile(r"^payload:(\w+)::(\w+)(?:\((\d+),(\d+)\))?$")


def field_value(expr: str, payload: dict):
    """`payload:name::type`: the payload field cast as Spark casts it (decimal: rounded half up)."""
    m = FIELD.match(expr)
    assert m, f"the model reads only payload:field::type fields, not {expr!r}"
    name, kind, _, scale = m.groups()
    v = payload.get(name)
    if v is None:
        return None
    if kind == "string":
        return str(v)
    if kind == "decimal":
        return Decimal(str(v)).quantize(Decimal(1).scaleb(-int(scale)), ROUND_HALF_UP)
    raise AssertionError(f"the model has no cast to {kind}")


def percentile(values, p):
    """Spark's exact `percentile`: linear interpolation between the sorted values around (n-1)*p."""
    xs = sorted(float(v) for v in values if v is not None)
    position = (len(xs) - 1) * p
    lower, higher = int(position // 1), -int(-position // 1)
    if lower == higher or xs[lower] == xs[higher]:
        return xs[lower]
    return (higher - position) * xs[lower] + (position - lower) * xs[higher]


def _avg(values, scale=6):
    xs = [v for v in values if v is not None]
    return (sum(xs) / Decimal(len(xs))).quantize(Decimal(1).scaleb(-scale), ROUND_HALF_UP) if xs else None


AGGREGATES = {
    "count(*)": lambda ms: len(ms),
    "avg(temperature)": lambda ms: _avg([m["temperature"] for m in ms]),
    "max(temperature)": lambda ms: max((m["temperature"] for m in ms if m["temperature"] is not None), default=None),
    "percentile(pressure, 0.95)": lambda ms: percentile([m["pressure"] for m in ms], 0.95),
    "count_if(status = 'alarm')": lambda ms: sum(1 for m in ms if m["status"] == "alarm"),
    "count(distinct device)": lambda ms: len({m["device"] for m in ms if m["device"] is not None}),
    # struct ordering: a null field sorts first; equal temperatures: the greatest -seq, the earliest reading
    "max_by(device, struct(temperature, -seq))": lambda ms: max(
        ms, key=lambda m: (m["temperature"] is not None, m["temperature"] or 0, -m["seq"]))["device"],
}
FILTERS = {"status <> 'test'": lambda m: m["status"] is not None and m["status"] != "test"}


class JobReplay(Replay):
    """The spec's replay whose windows hold their members (field values), aggregated at the end."""

    def __init__(self, job, journal):
        super().__init__(Policy(job.policy.to_dict()), journal)
        self.job = job

    def add_to_windows(self, seq, row, out, t, closed_before):
        member = {"seq": seq, **{n: field_value(e, row) for n, e in self.job.fields}}
        if self.job.where is not None and not FILTERS[self.job.where](member):
            return  # filtered before windowing: in no window, not a dead letter
        group = tuple(member[g] if g != "key" else row.get("key") for g in self.job.grouping)
        for s in self.window_starts(t):
            if closed_before >= self.closes_at(s):
                self.dead_letter(seq, row, "window_closed", s)
            else:
                self.windows.setdefault((out, group, s), []).append(member)

    def window_rows(self):
        rows = []
        for (out, group, s), members in self.windows.items():
            if (out, group, s) in self.emitted or self.pol.flush_at_end:
                row = {"window_start": iso(s), "window_end": iso(s + self.pol.size),
                       **dict(zip(self.job.grouping, group)),
                       "partition": out, "emitted_at": self.emitted.get((out, group, s))}
                row.update({n: AGGREGATES[e](members) for n, e in self.job.aggregates})
                rows.append(row)
        return rows


def run_job_model(job, journal: list[dict]) -> dict:
    replay = JobReplay(job, journal)
    for seq, row in enumerate(journal):
        replay.row(seq, row)
    return {"windows": replay.window_rows(), "dead_letters": replay.dead_letters}
