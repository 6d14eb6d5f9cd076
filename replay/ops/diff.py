"""`replay diff`: what two targets of one job decided differently, for a what-if policy against production.

Both targets replay the same journal, so their rows meet on `seq` (decisions), on the window's identity
(windows) and on the reason (dead letters). Everything here is a function of the two targets' tables.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from replay.io import journal
from replay.io.lake import Lake
from replay.io.store import default_store
from replay.model.jobs import Job
from replay.ops.run import seq_bounds
from replay.ops.verify import in_range
from replay.ops import outputs

SAMPLE = 5  # rows quoted per kind of difference
DECIDED = ("action", "reasons", "timestamp")  # what an event's decision is
QUANTILES = (0.5, 0.9, 0.99, 1.0)


@dataclass
class DiffReport:
    job: str
    a: str
    b: str
    start: str | None
    end: str | None
    events: int  # events compared
    changed: int  # events whose action, reasons or timestamp differ
    transitions: list[dict]  # {"from": action, "to": action, "events": n}, most first
    changed_sample: list[dict]
    windows: dict  # compared, only_in_a, only_in_b, aggregates_differ, emitted_differ, largest, samples
    dead_letters: dict  # reason -> {a: n, b: n}
    delay: dict  # side -> emission delay distribution (seconds of arrival time past the window's end)
    notes: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        w = self.windows
        return (self.changed == 0 and not (w["only_in_a"] or w["only_in_b"] or w["aggregates_differ"]
                                           or w["emitted_differ"])
                and all(v["a"] == v["b"] for v in self.dead_letters.values()))

    def to_dict(self) -> dict:
        return {"job": self.job, "a": self.a, "b": self.b, "from": self.start, "to": self.end,
                "identical": self.identical, "events": self.events, "changed": self.changed,
                "transitions": self.transitions, "changed_sample": self.changed_sample, "windows": self.windows,
                "dead_letters": self.dead_letters, "delay": self.delay, "notes": self.notes}

    def text(self) -> str:
        span = f"from {self.start or 'the start'} to {self.end or 'the end'}"
        lines = [f"diff of job {self.job}: {self.a} (a) vs {self.b} (b), {span}: "
                 f"{'identical' if self.identical else 'DIFFERENT'}",
                 f"  decisions: {self.events} events, {self.changed} decided differently"]
        lines += [f"    {t['from']} -> {t['to']}{' (other reasons or timestamp)' if t['from'] == t['to'] else ''}: "
                  f"{t['events']}" for t in self.transitions]
        lines += [f"    e.g. {_short(s)}" for s in self.changed_sample]
        w = self.windows
        lines.append(f"  windows: {w['compared']} compared, {w['only_in_a']} only in a, {w['only_in_b']} only in b, "
                     f"{w['aggregates_differ']} with different aggregates, {w['emitted_differ']} emitted at "
                     f"another row")
        lines += [f"    largest {d['column']} difference: {d['a']} (a) vs {d['b']} (b) for {_short(d['window'])}"
                  for d in w["largest"]]
        lines += [f"    e.g. only in {s['side']}: {_short(s['window'])}" for s in w["samples"]]
        lines.append("  dead letters by reason (a / b): " + (", ".join(
            f"{r} {v['a']} / {v['b']}" for r, v in self.dead_letters.items()) or "none"))
        header = (f"  {'output delay (s)':<18}" + "".join(f"{quantile_label(q):>10}" for q in QUANTILES)
                  + f"{'flushed':>10}")
        lines.append(header)
        for side in ("a", "b"):
            d = self.delay[side]
            lines.append(f"  {side + ': ' + getattr(self, side):<18}" + "".join(
                f"{number(d[quantile_label(q)]):>10}" for q in QUANTILES) + f"{d['flushed']:>10}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def diff(spark: SparkSession, lake: str, job: Job, a: str, b: str, start: str | None = None,
         end: str | None = None) -> DiffReport:
    """Compare targets `a` and `b` of `job` over the arrival range [start, end)."""
    store = default_store()
    sides = {"a": Lake(lake).target(job.name, a), "b": Lake(lake).target(job.name, b)}
    names = ("decisions", "windows", "dead_letters")
    for where in sides.values():
        outputs.require(where, names, store)
    lo, hi = seq_bounds(journal.read(spark, lake, store), start, end)
    tables = {side: {name: in_range(outputs.read(spark, where, name, store), name, lo, hi) for name in names}
              for side, where in sides.items()}
    changed = changed_events(tables["a"]["decisions"], tables["b"]["decisions"]).cache()
    try:
        events = tables["a"]["decisions"].where(F.col("kind") == "event").count()
        transitions = [{"from": r["a_action"], "to": r["b_action"], "events": r["n"]} for r in
                       changed.groupBy("a_action", "b_action").agg(F.count("*").alias("n"))
                       .orderBy(F.desc("n"), "a_action", "b_action").collect()]
        sample = [_plain(r.asDict()) for r in changed.orderBy("seq").limit(SAMPLE).collect()]
        n_changed = sum(t["events"] for t in transitions)
    finally:
        changed.unpersist()
    aggregates = [n for n, _ in job.aggregates]
    report = DiffReport(job.name, a, b, start, end, events, n_changed, transitions, sample,
                        window_differences(tables["a"]["windows"], tables["b"]["windows"], aggregates),
                        _dead_letters(tables["a"]["dead_letters"], tables["b"]["dead_letters"]),
                        {side: emission_delay(tables[side]["windows"], tables[side]["decisions"])
                         for side in ("a", "b")})
    only = events - tables["b"]["decisions"].where(F.col("kind") == "event").count()
    if only:
        report.notes.append(f"{abs(only)} more events in {a if only > 0 else b}: the targets cover different "
                            f"ranges of the journal (replay both over the same range)")
    return report


def changed_events(a: DataFrame, b: DataFrame) -> DataFrame:
    """Events whose decision (action, reasons, timestamp) differs between two decisions tables, one row each
    with both sides; an event missing from one side has nulls there."""
    def side(df: DataFrame, name: str) -> DataFrame:
        return df.where(F.col("kind") == "event").select(
            "seq", "partition", "offset", *[F.col(c).alias(f"{name}_{c}") for c in DECIDED])

    same = F.lit(True)
    for c in DECIDED:
        same = same & F.col(f"a_{c}").eqNullSafe(F.col(f"b_{c}"))
    joined = side(a, "a").join(side(b, "b"), ["seq", "partition", "offset"], "full")
    return joined.where(~same).select("seq", "partition", "offset", *[f"{s}_{c}" for c in DECIDED for s in "ab"])


def window_differences(a: DataFrame, b: DataFrame, aggregates: list[str]) -> dict:
    """Windows only on one side, and windows on both whose aggregates (or emitting row) differ."""
    identity = [c for c in a.columns if c not in aggregates and c != "emitted_at"]
    left = a.select(*identity, *[F.col(c).alias(f"a_{c}") for c in (*aggregates, "emitted_at")], F.lit(1).alias("_a"))
    right = b.select(*identity, *[F.col(c).alias(f"b_{c}") for c in (*aggregates, "emitted_at")], F.lit(1).alias("_b"))
    joined = _null_safe_join(left, right, identity)
    differs = F.lit(False)
    for c in aggregates:
        differs = differs | ~F.col(f"a_{c}").eqNullSafe(F.col(f"b_{c}"))
    both = F.col("_a").isNotNull() & F.col("_b").isNotNull()
    joined = joined.withColumn("_differs", both & differs).withColumn(
        "_emitted", both & ~F.col("a_emitted_at").eqNullSafe(F.col("b_emitted_at"))).cache()
    try:
        s = joined.agg(F.count("*").alias("n"), F.count(F.when(F.col("_b").isNull(), 1)).alias("a"),
                       F.count(F.when(F.col("_a").isNull(), 1)).alias("b"),
                       F.count(F.when(F.col("_differs"), 1)).alias("d"),
                       F.count(F.when(F.col("_emitted"), 1)).alias("e")).first()
        largest = []
        numeric = {f.name for f in a.schema.fields if f.dataType.typeName() in ("long", "integer", "double", "float",
                                                                                  "short", "decimal")}
        for c in (c for c in aggregates if c in numeric):
            gap = F.abs(F.col(f"a_{c}").cast("double") - F.col(f"b_{c}").cast("double"))
            top = (joined.where("_differs").where(gap.isNotNull() & (gap > 0))
                   .orderBy(gap.desc(), *identity).limit(1).collect())
            for r in top:
                largest.append({"column": c, "a": r[f"a_{c}"], "b": r[f"b_{c}"],
                                "window": _plain({k: r[k] for k in identity})})
        samples = []
        for r in (joined.where(F.col("_a").isNull() | F.col("_b").isNull())
                  .orderBy(*identity).limit(SAMPLE).collect()):
            samples.append({"side": "a" if r["_b"] is None else "b", "window": _plain({k: r[k] for k in identity})})
    finally:
        joined.unpersist()
    return {"identity": identity, "compared": s["n"], "only_in_a": s["a"], "only_in_b": s["b"],
            "aggregates_differ": s["d"], "emitted_differ": s["e"], "largest": largest, "samples": samples}


def _null_safe_join(left: DataFrame, right: DataFrame, identity: list[str]) -> DataFrame:
    """A full join on `identity` where null equals null (`key` and `partition` are null when not grouped)."""
    r = right.select(*[F.col(c).alias(f"_r_{c}") for c in identity], *[c for c in right.columns if c not in identity])
    cond = None
    for c in identity:
        e = F.col(c).eqNullSafe(F.col(f"_r_{c}"))
        cond = e if cond is None else cond & e
    joined = left.join(r, cond, "full")
    return joined.select(*[F.when(F.col("_a").isNotNull(), F.col(c)).otherwise(F.col(f"_r_{c}")).alias(c)
                           for c in identity],
                         *[c for c in joined.columns if c not in identity and not c.startswith("_r_")])


def _dead_letters(a: DataFrame, b: DataFrame) -> dict:
    counts = {}
    for side, df in (("a", a), ("b", b)):
        for r in df.groupBy("reason").count().collect():
            counts.setdefault(r["reason"], {"a": 0, "b": 0})[side] = r["count"]
    return dict(sorted(counts.items(), key=lambda kv: str(kv[0])))


def emission_delay(windows: DataFrame, decisions: DataFrame) -> dict:
    """How long after its end each window was emitted, in arrival time: the arrival of the row that closed it
    (from the decisions table) minus `window_end`. Windows flushed at the end of the journal (emitted_at null)
    are counted apart."""
    emitted = windows.where(F.col("emitted_at").isNotNull()).join(
        decisions.select(F.col("seq").alias("emitted_at"), "arrival_time"), "emitted_at", "left")
    seconds = (F.unix_micros("arrival_time") - F.unix_micros("window_end")) / 1e6
    s = emitted.agg(F.count("*").alias("n"), F.percentile(seconds, list(QUANTILES)).alias("q"),
                    F.avg(seconds).alias("mean")).first()
    out = {"windows": s["n"], "mean": None if s["mean"] is None else round(s["mean"], 6),
           "flushed": windows.where(F.col("emitted_at").isNull()).count()}
    for q, v in zip(QUANTILES, s["q"] or [None] * len(QUANTILES)):
        out[quantile_label(q)] = None if v is None else round(v, 6)
    return out


def markdown(report: DiffReport) -> str:
    """The report as a few Markdown tables (Dagster metadata)."""
    w = report.windows
    lines = [f"**{report.a}** (a) vs **{report.b}** (b): {'identical' if report.identical else 'different'}", "",
             "| decisions | events |", "| --- | ---: |", f"| compared | {report.events} |",
             f"| decided differently | {report.changed} |"]
    lines += [f"| {t['from']} -> {t['to']} | {t['events']} |" for t in report.transitions]
    lines += ["", "| windows | count |", "| --- | ---: |"]
    lines += [f"| {k.replace('_', ' ')} | {w[k]} |" for k in ("compared", "only_in_a", "only_in_b",
                                                              "aggregates_differ", "emitted_differ")]
    lines += ["", "| output delay (s) | " + " | ".join(quantile_label(q) for q in QUANTILES) + " | flushed |",
              "| --- |" + " ---: |" * (len(QUANTILES) + 1)]
    for side in ("a", "b"):
        d = report.delay[side]
        lines.append(f"| {getattr(report, side)} | " + " | ".join(number(d[quantile_label(q)]) for q in QUANTILES)
                     + f" | {d['flushed']} |")
    if report.dead_letters:
        lines += ["", "| dead letters | a | b |", "| --- | ---: | ---: |"]
        lines += [f"| {r} | {v['a']} | {v['b']} |" for r, v in report.dead_letters.items()]
    return "\n".join(lines)


def quantile_label(q: float) -> str:
    """p50, p99.9, max: the key of a quantile in every report."""
    return "max" if q == 1.0 else f"p{q * 100:g}"


def number(v) -> str:
    """A report's number as text, '-' for none."""
    return "-" if v is None else f"{v:g}"


def _plain(d: dict) -> dict:
    """JSON-ready: instants as ISO text, arrays as lists."""
    out = {}
    for k, v in d.items():
        if isinstance(v, datetime):
            v = (v.astimezone(timezone.utc) if v.tzinfo else v).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        elif isinstance(v, tuple):
            v = list(v)
        out[k] = v
    return out


def _short(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())
