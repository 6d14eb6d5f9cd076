"""`python -m replay.conformance CASE.json ... [--check]`: the conformance cases through `replay run`.

Each case's journal is written to a Delta table in a scratch lake and replayed by the same code path
as the replay job (the spec's job, `Job.spec`); the outputs are read back from their Delta tables and printed
as one JSON line. `diff` holds the comparison rules of the conformance README.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from replay.io import journal
from replay.io.lake import Lake
from replay.io.store import default_store
from replay.model.durations import format_instant
from replay.model.jobs import Job
from replay.model.policy import SUBSTREAM_COLUMNS, Policy
from replay.ops import outputs
from replay.ops.run import run

TIMES = {"timestamp", "watermark", "output_watermark", "window_start", "window_end"}
SHAPES = {
    "decisions": ("seq", "partition", "offset", "kind", "action", "reasons", "timestamp", "watermark",
                  "output_watermark"),
    "windows": ("window_start", "window_end", "key", "partition", "count", "sum", "emitted_at"),
    "dead_letters": ("seq", "partition", "offset", "reason", "window_start"),
}
JOURNAL_FIELDS = {"seq", "partition", "offset", "kind", "arrival_time", "event_time", "key", "value"}


def case_job(case: dict) -> Job:
    """The job a case runs: the spec's job on the case's policy. A journal row is the event as it landed, so a field
    other than the journal's own is a payload field; `substream_by` may name one, and the spec's job then has that
    field (a string)."""
    payload_fields = tuple(sorted({f for r in case["journal"] for f in r} - JOURNAL_FIELDS))
    policy = Policy.from_dict(case.get("policy") or {}, fields=SUBSTREAM_COLUMNS + payload_fields)
    return Job.spec(policy, () if policy.substream_by in (None, *SUBSTREAM_COLUMNS) else (policy.substream_by,))


def _rows(df: DataFrame, fields: tuple[str, ...]) -> list[dict]:
    # a job with a payload field's windows not grouped by key have no `key` column: null, as in the spec's shape
    cols = [F.lit(None).alias(f) if f not in df.columns else F.unix_micros(f).alias(f) if f in TIMES else F.col(f)
            for f in fields]
    out = []
    for r in df.select(*cols).collect():
        d = r.asDict()
        for f in TIMES & d.keys():
            d[f] = format_instant(d[f])
        out.append(d)
    order = "seq" if "seq" in fields else "window_start"
    return sorted(out, key=lambda d: (str(d.get(order)).zfill(20), str(d.get("partition")), str(d.get("key"))))


def run_case(spark: SparkSession, case: dict) -> dict:
    """Replay one case's journal with its policy; the outputs in the shape of the case's `expected`."""
    job = case_job(case)
    store = default_store()
    with tempfile.TemporaryDirectory(prefix="retrace-case-") as lake:
        store.write(journal.from_rows(spark, case["journal"]), Lake(lake).journal)
        run(spark, lake, job, target="conformance")
        where = Lake(lake).target(job.name, "conformance")
        result = {"name": case.get("name")}
        for table, fields in SHAPES.items():
            result[table] = _rows(outputs.read(spark, where, table, store), fields)
    return result


def engine_case(spark: SparkSession, case: dict) -> dict:
    """The same outputs from the engine alone (no Delta tables): what the property tests compare with the
    model many times over; `run_case` is the contract's path, through `replay run`."""
    from replay.engine import pipeline as engine

    job = case_job(case)
    out = engine.replay(journal.from_rows(spark, case["journal"]), job)
    tables = {"decisions": out.decisions, "windows": out.windows, "dead_letters": out.dead_letters}
    result = {"name": case.get("name"), **{t: _rows(tables[t], f) for t, f in SHAPES.items()}}
    out.unpersist()
    return result


# -- the comparison rules (the conformance README's) --------------------------------------------------------

def _instant(v):
    if v is None:
        return None
    d = datetime.fromisoformat(str(v).replace("Z", "+00:00"))
    return d if d.tzinfo else d.replace(tzinfo=timezone.utc)


def _norm(row: dict) -> dict:
    return {k: (_instant(v) if k in TIMES else v) for k, v in row.items()}


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
    """The differences between a case's `expected` and a runner's output, one line each (none: the case passes)."""
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m replay.conformance", description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", help="conformance case JSON files")
    parser.add_argument("--check", action="store_true", help="compare with each case's expected outputs")
    args = parser.parse_args(argv)
    from replay.io.spark import get_spark

    spark = get_spark("retrace-conformance")
    passed = failed = 0
    for path in args.cases:
        problems = _checked(spark, path, args.check)
        passed, failed = (passed + 1, failed) if not problems else (passed, failed + 1)
    if args.check:
        print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def _checked(spark: SparkSession, path: str, check: bool) -> list[str]:
    """Run one case file and print its outputs; its problems (each also on stderr), one when it cannot be read or
    its policy is refused."""
    try:
        with open(path) as f:
            case = json.load(f)
        case.setdefault("name", os.path.splitext(os.path.basename(path))[0])
        actual = run_case(spark, case)
    except (OSError, json.JSONDecodeError, ValueError) as e:  # a policy or feature refused: one line, then go on
        print(f"{path}: {' '.join(str(e).split())}", file=sys.stderr)
        return [str(e)]
    print(json.dumps(actual), flush=True)
    problems = diff(case.get("expected", {}), actual) if check else []
    for p in problems:
        print(f"{case['name']}: {p}", file=sys.stderr)
    return problems


if __name__ == "__main__":
    sys.exit(main())
