"""Compare a runner's output with a conformance case's `expected` (the rules of the conformance README)."""
from __future__ import annotations

import json
import sys
from datetime import datetime, timezone

TIME_FIELDS = ("timestamp", "watermark", "output_watermark", "window_start", "window_end")


def _instant(v):
    if v is None:
        return None
    d = datetime.fromisoformat(str(v).replace("Z", "+00:00"))
    return d if d.tzinfo else d.replace(tzinfo=timezone.utc)


def _norm(row: dict) -> dict:
    return {k: (_instant(v) if k in TIME_FIELDS else v) for k, v in row.items()}


def _index(rows, key):
    """Rows by `key`. A journal may repeat a (partition, offset) (a broker redelivery, quarantined as
    `duplicate`): rows with a `seq` then match by occurrence in seq order; without one a repeat is an error."""
    rows = list(map(_norm, rows))
    ordered = all(r.get("seq") is not None for r in rows)
    if ordered:
        rows.sort(key=lambda r: r["seq"])
    out, seen = {}, {}
    for r in rows:
        k = tuple(r.get(f) for f in key)
        n = seen.get(k, 0)
        if n and not ordered:
            raise AssertionError(f"duplicate row for {key}={k}")
        seen[k] = n + 1
        out[k + ((n,) if n else ())] = r
    return out


def diff(expected: dict, actual: dict) -> list[str]:
    """Return a list of human-readable differences; empty means the case passes."""
    problems = []
    specs = {
        "decisions": (("partition", "offset", "kind"),
                      ("action", "reasons", "timestamp", "watermark", "output_watermark")),
        "windows": (("partition", "key", "window_start"), ("window_end", "count", "sum", "emitted_at")),
        "dead_letters": (("partition", "offset", "window_start"), ("reason",)),
    }
    for table, (key, fields) in specs.items():
        try:
            exp = _index(expected.get(table, []), key)
            act = _index(actual.get(table, []), key)
        except AssertionError as e:
            problems.append(f"{table}: {e}")
            continue
        for k in sorted(exp.keys() - act.keys(), key=str):
            problems.append(f"{table}: missing {dict(zip(key, k))}")
        for k in sorted(act.keys() - exp.keys(), key=str):
            problems.append(f"{table}: unexpected {dict(zip(key, k))}")
        for k in sorted(exp.keys() & act.keys(), key=str):
            for f in fields:
                e, a = exp[k].get(f), act[k].get(f)
                if f == "sum" and e is not None and a is not None:
                    same = abs(float(e) - float(a)) <= 1e-9
                elif f == "reasons":
                    same = list(e or []) == list(a or [])
                else:
                    same = e == a
                if not same:
                    problems.append(f"{table} {dict(zip(key, k))}: {f} expected {e} got {a}")
    return problems


def main(argv):
    case = json.load(open(argv[1]))
    actual = None
    for line in open(argv[2]):
        line = line.strip()
        if line:
            obj = json.loads(line)
            if obj.get("name") == case["name"]:
                actual = obj
    if actual is None:
        print(f"{case['name']}: no output")
        return 1
    problems = diff(case["expected"], actual)
    for p in problems:
        print(f"{case['name']}: {p}")
    print(f"{case['name']}: {'ok' if not problems else 'FAILED'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
