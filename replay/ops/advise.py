"""`replay advise`: choose a job's tolerances from its journal instead of guessing them.

Two parts. A profile of the arrivals (lateness, out-of-orderness, early arrivals, partition silences) of the events
the policy keeps (not those it drops as early), read from the journal alone. And a sweep: each candidate tolerance
is replayed by the engine itself (not a model of it), so the share of events it adjusts or drops is what a replay
with that policy gives, exactly, and the output delay it costs is that of every window a live run would emit (the
journal's clock rows, or for an ingested journal those a live run would have journaled: `live_clock`). The advice is
the smallest candidate that meets the completeness target, or, given a latency budget, the most complete candidate
whose windows are emitted within it (p99 of the output delay).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from replay.engine import pipeline as engine
from replay.io import journal
from replay.io.store import default_store
from replay.model.durations import parse_duration
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.diff import emission_delay, number, quantile_label
from replay.ops.live_clock import with_live_clock
from replay.ops.run import seq_bounds

LATE_GRID = ("0s", "1s", "2s", "5s", "10s", "30s", "1m", "2m", "5m", "10m", "30m")
OUT_OF_ORDER_GRID = ("0s", "1s", "2s", "5s", "10s", "30s", "1m", "2m", "5m")
QUANTILES = (0.5, 0.9, 0.99, 0.999, 1.0)
# lateness histogram bins, in seconds (the first holds early arrivals: lateness below 0)
EDGES = (0, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)


class NoEvents(ValueError):
    """The range holds no event: there is nothing to advise on."""


BUDGET_QUANTILE = "p99"  # a latency budget bounds this quantile of the windows' output delay


@dataclass(frozen=True)
class Sweep:
    """What `advise` tries: the candidate tolerances, the share of events a candidate must leave untouched, an
    optional latency budget (a duration: windows emitted within it, p99), and the heartbeat of the live run whose
    clock rows an ingested journal is given to measure output delays."""

    completeness: float = 0.999
    late_grid: tuple[str, ...] = LATE_GRID
    out_of_order_grid: tuple[str, ...] = OUT_OF_ORDER_GRID
    latency_budget: str | None = None
    heartbeat: str = "1s"

    def __post_init__(self):
        if not 0 < self.completeness < 1:
            raise ValueError(f"--completeness: {self.completeness} must be between 0 and 1, e.g. 0.999")
        for name, grid in (("--late-grid", self.late_grid), ("--out-of-order-grid", self.out_of_order_grid)):
            for g in grid:
                if parse_duration(g, name) < 0:
                    raise ValueError(f"{name}: {g!r} is negative; tolerances are 0s or more")
        if self.latency_budget is not None and parse_duration(self.latency_budget, "--latency-budget") <= 0:
            raise ValueError(f"--latency-budget: {self.latency_budget!r} must be a positive duration, e.g. 30s")
        if parse_duration(self.heartbeat, "--heartbeat") <= 0:
            raise ValueError(f"--heartbeat: {self.heartbeat!r} must be a positive duration, e.g. 1s")

    @property
    def budget_s(self) -> float | None:
        return None if self.latency_budget is None else parse_duration(self.latency_budget) / 1e6


def advise(spark: SparkSession, lake: str, job: Job, start: str | None = None, end: str | None = None,
           sweep: Sweep = Sweep(), log: Callable[[str], None] | None = None) -> dict:
    """The advice for `job` over the arrivals [start, end), as a JSON-ready dict: profile, both sweeps, the
    recommended tolerances and what a replay with them gives. `log` hears of each candidate as it is replayed."""
    if job.policy.by_arrival:
        raise ValueError("the policy times events by arrival (timestamp_by: arrival_time): no tolerance applies")
    store = default_store()
    rows = journal.read(spark, lake, store)
    lo, hi = seq_bounds(rows, start, end)
    if lo is not None:
        rows = rows.where(F.col("seq") >= lo)
    if hi is not None:
        rows = rows.where(F.col("seq") < hi)
    rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
    live = None
    try:
        prof = profile(rows, job.policy)
        if not prof["events"]:
            raise NoEvents(f"no events in the journal of {lake} between {start or 'the start'} and "
                           f"{end or 'the end'}: nothing to advise on")
        partitions = journal.declared_partitions(spark, lake, store)
        live, clock = with_live_clock(rows, partitions, parse_duration(sweep.heartbeat), sweep.heartbeat)
        live = live.persist(StorageLevel.MEMORY_AND_DISK)
        candidates = _Candidates(live, job, partitions, sweep, log)
        late = candidates.replayed("late_arrival_tolerance", sweep.late_grid, job.policy, "late")
        base = Policy.from_dict({**job.policy.to_dict(), "late_arrival_tolerance": _chosen(late, sweep)["tolerance"]})
        ordered = candidates.replayed("out_of_order_tolerance", sweep.out_of_order_grid, base, "out_of_order")
    finally:
        rows.unpersist()
        if live is not None:
            live.unpersist()
    return _advice(job, (start, end, lo, hi), sweep, prof, late, ordered, clock)


@dataclass(frozen=True)
class _Candidates:
    """Replays of the rows with candidate tolerances, one field at a time."""

    rows: DataFrame
    job: Job
    partitions: list[int] | None
    sweep: Sweep
    log: Callable[[str], None] | None

    def replayed(self, field: str, grid, base: Policy, reason: str) -> list[dict]:
        allowed, out = 1 - Fraction(str(self.sweep.completeness)), []
        for text in sorted(set(grid), key=lambda g: parse_duration(g, field)):
            candidate = dataclasses.replace(self.job, policy=Policy.from_dict({**base.to_dict(), field: text}))
            r = outcome(self.rows, candidate, self.partitions)
            r.update(tolerance=text, seconds=parse_duration(text, field) / 1e6, touched=r[reason],
                     share=r[reason] / r["events"], meets=r[reason] <= allowed * r["events"])
            budget = self.sweep.budget_s
            r["within_budget"] = None if budget is None else _within(r["delay"], budget)
            if self.log is not None:
                self.log(f"{field} {text}: {r[reason]} of {r['events']} events {reason.replace('_', '-')} "
                         f"({r['share']:.4%}); output delay p50 {number(r['delay']['p50'])} s, p99 "
                         f"{number(r['delay']['p99'])} s ({r['delay']['flushed']} windows not measured)")
            out.append(r)
            if r[reason] == 0:  # a larger tolerance only lowers the threshold further: it touches none either
                break
        return out


def _advice(job: Job, span: tuple, sweep: Sweep, prof: dict, late: list[dict], ordered: list[dict],
            clock: dict) -> dict:
    """The advice as a JSON-ready dict, from the profile and both sweeps; `verdict` is its one-line summary."""
    start, end, lo, hi = span
    best_late, best_order = _chosen(late, sweep), _chosen(ordered, sweep)
    chosen = {"late_arrival_tolerance": best_late["tolerance"], "out_of_order_tolerance": best_order["tolerance"]}
    notes = [f"no {name} candidate meets completeness {sweep.completeness}; "
             + ("the most complete within the latency budget is given" if sweep.latency_budget else
                "the largest tried is given")
             for name, best in (("late_arrival_tolerance", best_late), ("out_of_order_tolerance", best_order))
             if not best["meets"]]
    notes += [f"no {name} candidate emits windows within the latency budget {sweep.latency_budget} "
              f"({BUDGET_QUANTILE}); the fastest is given"
              for name, best in (("late_arrival_tolerance", best_late), ("out_of_order_tolerance", best_order))
              if best["within_budget"] is False]
    return {
        "job": job.name, "from": start, "to": end, "seq_from": lo, "seq_to": hi,
        "completeness": sweep.completeness, "latency_budget": sweep.latency_budget,
        "verdict": verdict(chosen, best_late, best_order, sweep),
        "events": prof["events"], "profile": prof, "live_clock": clock,
        "policy": job.policy.to_dict(),
        "late_sweep": late, "out_of_order_sweep": ordered,
        "recommended": chosen,
        # the sweep row at the chosen out-of-order tolerance is a replay of exactly the recommended policy
        "predicted": {k: best_order[k] for k in ("events", "accepted", "adjusted", "dropped", "quarantined", "late",
                                                 "out_of_order", "adjusted_share", "dropped_share", "delay")},
        "snippet": snippet(chosen, best_late, best_order, sweep.completeness),
        "recommended_policy": {**job.policy.to_dict(), **chosen},
        "run_config": run_config(job, chosen),
        "notes": notes,
    }


def verdict(chosen: dict, late: dict, ordered: dict, sweep: Sweep) -> str:
    """One line that says plainly what the advice is, and when no candidate meets the target or the budget."""
    untouched = f"{1 - late['share']:.4%} of events within the late tolerance, {1 - ordered['share']:.4%} in order"
    delay = ordered["delay"]
    emitted = (f"windows emitted {number(delay[BUDGET_QUANTILE])} s ({BUDGET_QUANTILE}) after they end"
               if delay["windows"] else "no window's output delay could be measured")
    tolerances = (f"late_arrival_tolerance {chosen['late_arrival_tolerance']}, "
                  f"out_of_order_tolerance {chosen['out_of_order_tolerance']}")
    missed = [name for name, best in (("late", late), ("out-of-order", ordered)) if not best["meets"]]
    over = [name for name, best in (("late", late), ("out-of-order", ordered)) if best["within_budget"] is False]
    if over:
        return (f"NO CANDIDATE FITS THE LATENCY BUDGET {sweep.latency_budget}: no {' or '.join(over)} tolerance tried "
                f"emits windows within it ({BUDGET_QUANTILE}); the fastest: {tolerances} ({emitted}; {untouched})")
    if missed and sweep.latency_budget is None:
        return (f"NO CANDIDATE MEETS COMPLETENESS {sweep.completeness}: the largest {' and '.join(missed)} tolerance "
                f"tried still touches too many events; given: {tolerances} ({untouched}; {emitted}); widen the grid "
                f"or lower --completeness")
    if sweep.latency_budget is not None:
        target = ("meets" if not missed else f"does NOT meet ({' and '.join(missed)})")
        return (f"within the latency budget {sweep.latency_budget} ({BUDGET_QUANTILE}), the most complete: "
                f"{tolerances} ({untouched}; {emitted}); it {target} completeness {sweep.completeness}")
    return f"recommended for completeness {sweep.completeness}: {tolerances} ({untouched}; {emitted})"


def outcome(rows: DataFrame, job: Job, partitions) -> dict:
    """What a replay of `rows` for `job` decides (counts per action and reason) and the output delay."""
    out = engine.replay(rows, job, partitions=partitions)
    try:
        events = out.decisions.where(F.col("kind") == "event")
        count = lambda cond: F.count(F.when(cond, 1))  # noqa: E731
        s = events.agg(F.count("*").alias("events"),
                       *[count(F.col("action") == a).alias(a)
                         for a in ("accepted", "adjusted", "dropped", "quarantined")],
                       *[count(F.array_contains("reasons", r)).alias(r) for r in ("late", "out_of_order", "early")]
                       ).first().asDict()
        s["delay"] = live_delay(out.windows, rows)
    finally:
        out.unpersist()
    n = s["events"] or 1
    s["adjusted_share"], s["dropped_share"] = s["adjusted"] / n, s["dropped"] / n
    return s


UNMEASURED = ("still open when the range's rows end: a live run emits them only when later rows (data, or its "
              "heartbeats' clock rows) move the output watermark past them")


def live_delay(windows: DataFrame, rows: DataFrame) -> dict:
    """The output delay of every window emitted before the rows end (the arrival of the row that closed it minus
    its end, from `rows`: the journal with the live run's clock rows), and how many it could not measure, and why:
    those only the final flush emits."""
    delay = emission_delay(windows, rows)
    return {**delay, "unmeasured": delay["flushed"], "unmeasured_reason": UNMEASURED if delay["flushed"] else None}


def _within(delay: dict, budget: float) -> bool:
    """Its windows are emitted within the budget: the quantile of the measured ones is at most the budget (a
    candidate whose windows could not be measured at all is not known to fit)."""
    value = delay[BUDGET_QUANTILE]
    return value is not None and value <= budget


def _chosen(sweep: list[dict], plan: Sweep) -> dict:
    """Without a budget: the smallest candidate that meets the completeness target, else the largest tried. With
    one: the most complete candidate within it (fewest events touched; the smallest tolerance of those), else
    the fastest (smallest p99 output delay)."""
    if plan.latency_budget is None:
        return next((r for r in sweep if r["meets"]), sweep[-1])
    within = [r for r in sweep if r["within_budget"]]
    if within:
        return min(within, key=lambda r: (r["touched"], r["seconds"]))
    inf = float("inf")
    return min(sweep, key=lambda r: (inf if r["delay"][BUDGET_QUANTILE] is None else r["delay"][BUDGET_QUANTILE],
                                     r["seconds"]))


def profile(rows: DataFrame, policy: Policy) -> dict:
    """Per partition and overall, over the events the policy keeps (those it drops as early are counted apart, and
    one it adjusts as early is measured at its adjusted time): lateness (arrival - event time, negative for early
    arrivals), how far an event is below the largest earlier event time of its scope, how far early arrivals are
    ahead, and the silences between a partition's events; all in seconds, exact quantiles."""
    valid = rows.where((F.col("kind") == "event") & F.col("event_time").isNotNull()).select(
        "seq", "partition", "key", F.unix_micros("arrival_time").alias("a"), F.unix_micros("event_time").alias("t"))
    e = policy.early_arrival_tolerance
    early = F.lit(False) if e is None else F.col("t") > F.col("a") + F.lit(e)
    if e is not None and policy.early_arrival_action == "adjust":
        valid = valid.withColumn("t", F.least("t", F.col("a") + F.lit(e)))
        early = F.lit(False)
    valid = valid.withColumn("dropped_early", early).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        dropped = valid.where("dropped_early").count()
        return {**_profile(valid.where(~F.col("dropped_early")), policy), "dropped_as_early": dropped}
    finally:
        valid.unpersist()


def _profile(events: DataFrame, policy: Policy) -> dict:
    """The profile of `events` (seq, partition, key, arrival `a` and event time `t` in microseconds)."""
    scope = ["partition", "key"] if policy.substream_by else ["partition"]
    before = Window.partitionBy(*scope).orderBy("seq").rowsBetween(Window.unboundedPreceding, -1)
    previous = Window.partitionBy("partition").orderBy("seq")
    measured = events.select(
        "partition",
        ((F.col("a") - F.col("t")) / 1e6).alias("lateness"),
        (F.greatest(F.max("t").over(before) - F.col("t"), F.lit(0)) / 1e6).alias("out_of_order"),
        (F.greatest(F.col("t") - F.col("a"), F.lit(0)) / 1e6).alias("early"),
        ((F.col("a") - F.lag("a").over(previous)) / 1e6).alias("silence"),
    ).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        stats = [F.count("*").alias("events")]
        for c in ("lateness", "out_of_order", "early", "silence"):
            positive = F.when(F.col(c) > 0, F.col(c))
            measured_over = F.col(c) if c == "lateness" else positive  # lateness: over all events, early ones too
            stats += [F.count(positive).alias(f"{c}_n"), F.percentile(measured_over, list(QUANTILES)).alias(f"{c}_q")]
        overall = measured.agg(*stats).first()
        per = measured.groupBy("partition").agg(*stats).orderBy("partition").collect()
        bins = F.lit(0)
        for i, edge in enumerate(EDGES):
            bins = F.when(F.col("lateness") >= edge, i + 1).otherwise(bins)
        counts = dict(measured.groupBy(bins.alias("b")).count().collect())
    finally:
        measured.unpersist()
    labels = ["< 0 (early)", *[f"{lo:g}-{hi:g} s" for lo, hi in zip(EDGES, EDGES[1:])], f">= {EDGES[-1]:g} s"]
    return {
        "events": overall["events"],
        "overall": _stats(overall),
        "partitions": {str(r["partition"]): _stats(r) for r in per},
        "lateness_histogram": [{"bin": label, "events": counts.get(i, 0)} for i, label in enumerate(labels)],
    }


def _stats(r) -> dict:
    out = {"events": r["events"]}
    for c in ("lateness", "out_of_order", "early", "silence"):
        q = r[f"{c}_q"] or [None] * len(QUANTILES)
        out[c] = {"positive": r[f"{c}_n"],
                  **{quantile_label(p): None if v is None else round(v, 6) for p, v in zip(QUANTILES, q)}}
    return out


def snippet(chosen: dict, late: dict, ordered: dict, completeness: float) -> str:
    """The policy lines to paste into a job's `policy:` (YAML), with what each costs."""
    return "\n".join([
        f"# from `replay advise` (completeness {completeness}): {1 - late['share']:.4%} of events arrive within "
        f"the late tolerance,",
        f"# {1 - ordered['share']:.4%} within the out-of-order tolerance; windows are emitted "
        f"{ordered['delay']['p50']} s (median) after they end",
        f"late_arrival_tolerance: {chosen['late_arrival_tolerance']}",
        f"out_of_order_tolerance: {chosen['out_of_order_tolerance']}",
    ])


def run_config(job: Job, chosen: dict) -> dict:
    """Launch-dialog run config of the job's outputs asset (op `<job>_outputs`): replay into a shadow target
    with the advice, so the run's metadata holds the diff against production."""
    return {"ops": {f"{job.name}_outputs": {"config": {"target": "advice", "policy_override": dict(chosen)}}}}
