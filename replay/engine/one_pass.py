"""The bounded (or source) watermark without substreams, idle timeout or session windows, the production policy's
kind, decided in one pass in the JVM (`replay/engine/jvm/retrace/engine/Decide.java`): each row's checks, watermarks
and output watermark where the row lies, and back to Spark only what an output keeps: the exceptions, a few partial
aggregates (each window index's first closing row, the watermark timeline's steps, the hourly metrics' counts, each
output scope's last values) and, for the windows, the kept events. No row per journal row is written, cached or
moved to Python: that copy of the journal was most of a replay's time (issue 46)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from replay.engine import job_sql, kernels, watermarks
from replay.engine.decisions import NEG, decoded, kind_code
from replay.jvm import once_per_jvm
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.model.state import State

# the rows the operator sends back (`Decide`'s tags): a decided row, or a partial aggregate
DECIDED, UNTIMED, CLOSE, STEP, METRICS, SCOPE, CLOSED, TERMS = range(8)
HELD = -1  # no operator tag: the held open windows' index range, collected with the decide run's ends (`scope_ends`)
BROADCAST_FIELDS = 1_000_000  # exceptions up to which they are broadcast to the journal for their fields


def applies(policy: Policy) -> bool:
    """Whether the one pass decides this policy: every per-row decision is then a running maximum from a start
    value (spec 3 and 4). Punctuated watermarks, substreams, idle timeouts and session windows take the passes of
    `watermarks`, `idle` and `sessions`."""
    return (not policy.punctuated and policy.substream_by is None and policy.idle_timeout is None
            and not policy.sessions)


@dataclass(frozen=True)
class Pass:
    """The decide pass of a job over prepared rows (`pipeline.prepare`), from the starts `watermarks.bounded_starts`
    found; each `run` reads the journal again and sends back what its mode keeps."""

    starts: watermarks.BoundedStarts
    job: Job
    state: State

    @property
    def closed_here(self) -> bool:
        """The decide run finds the `window_closed` dead letters: the job's windows take its kept events as they are
        (no transform), so an event the job's filter keeps misses exactly the windows closed before its row."""
        return self.job.policy.window is not None and self.job.transform is None

    def run(self, mode: str, since: int | None = None, step_before: dict[int, int] | None = None) -> DataFrame:
        """`all` (every row), `kept` (the kept events), `members` (each kept event in every window it did not miss) or
        `decide` (exceptions and partials from `since` on: `kernels.decide_pass`). The job's fields go with the rows
        of `all` and `kept` only: the others leave them out, so the scan does not compute them (for a job over the
        payload, most of a replay's reading)."""
        carried = self.job.field_names if mode in ("all", "kept") else ()
        rows = self.starts.rows.select(
            "seq", "partition", "offset", kind_code().alias("kind"), "arrival", "et", "key", "value", "duplicate",
            "chunk", *(["row"] if self.starts.where is not None else []), *carried)
        owm = {s: v.owm for s, v in self.state.scopes.items()}
        return kernels.decide_pass(rows, self.starts.start, self.job.policy, mode, self.starts.where, since=since,
                                   step_before=step_before, scope_owm=owm, closed_here=self.closed_here)


def decision_rows(ran: DataFrame, carried: tuple[str, ...] = ()) -> DataFrame:
    """The operator's decided rows as the decisions table's columns (`pipeline.decision_rows`'), with `carried`."""
    return decoded(ran).select(*_decision_columns(), *carried)


@once_per_jvm
def _decision_columns() -> list[Column]:
    return [F.col(c) for c in ("seq", "partition", "offset", "kind", "action", "reasons")] + [
        _instant("timestamp").alias("timestamp"), _instant("wp").alias("watermark"),
        _instant("owm").alias("output_watermark"), F.timestamp_micros("arrival").alias("arrival_time"),
        F.col("key"), F.col("value"), _instant("wp").alias("partition_watermark")]


def _instant(c: str) -> Column:
    """Microseconds -> UTC timestamp; -infinity -> null."""
    return F.when(F.col(c) > NEG, F.timestamp_micros(F.col(c)))


def tagged(ran: DataFrame, tag: int) -> DataFrame:
    return ran.where(F.col("tag") == tag)


def with_fields(decided: DataFrame, journal: DataFrame, job: Job) -> DataFrame:
    """The decided rows (few: the exceptions) with the job's fields, read from the journal rows they came from. The
    decide pass leaves the fields out, so only these rows' payloads are parsed."""
    if not job.fields:
        return decided
    seqs = decided.select("seq")
    few = seqs.count() <= BROADCAST_FIELDS
    source = journal.join(F.broadcast(seqs) if few else seqs, "seq", "left_semi")
    fields = job_sql.with_payload(source).select("seq", *job_sql.event_fields(job.fields))
    return decided.join(F.broadcast(fields) if few else fields, "seq", "left")


def close_firsts(ran: DataFrame) -> DataFrame:
    """(scope, reached, close_seq): the first row at which each scope's output watermark reaches each window index
    (`windows.closes_of`), from each task's first."""
    return tagged(ran, CLOSE).groupBy(F.col("s").alias("scope"), F.col("x").alias("reached")).agg(
        F.min("y").alias("close_seq"))


def timeline_steps(ran: DataFrame) -> DataFrame:
    """Each task's first row per partition and watermark step, as `watermarks.timeline` reads rows."""
    return tagged(ran, STEP).select(
        F.col("s").alias("partition"), F.col("y").alias("seq"), F.col("z").alias("arrival"),
        F.col("counts")[0].alias("wp"), F.col("counts")[1].alias("output_watermark"))


def members(ran: DataFrame, policy: Policy) -> DataFrame:
    """The `members` run's rows as the spec's windows group them: scope, group_key (the key, or null when not
    grouped), the window's index k and the event's value."""
    group = F.col("key") if policy.group_by_key else F.lit(None).cast("string")
    return ran.select(F.col("s").alias("scope"), group.alias("group_key"), F.col("x").alias("k"), "value")


def window_closed(ran: DataFrame, journal: DataFrame, job: Job) -> DataFrame:
    """The `window_closed` dead letters the decide run found (`Pass.closed_here`), one per window missed, of the events
    the job's filter keeps (their fields read from the `journal` rows they came from: they are few)."""
    w = job.policy.window
    missed = decision_rows(tagged(ran, CLOSED), ("x",))
    if job.where is not None:
        missed = with_fields(missed, journal, job).where(F.expr(job.where))
    return missed.select(
        "seq", "partition", "offset", F.lit("window_closed").alias("reason"),
        F.timestamp_micros(F.lit(w.offset) + F.col("x") * w.hop).alias("window_start"), "arrival_time")


def metric_partials(ran: DataFrame) -> DataFrame:
    """Each task's counts per partition and hour of arrival (`metrics.from_partials`)."""
    return tagged(ran, METRICS).select(F.col("s").alias("partition"), F.timestamp_micros("x").alias("hour"), "counts")


@dataclass(frozen=True)
class ScopeEnd:
    """An output scope after the rows: its last seq, highest output watermark and latest event arrival."""

    seq: int
    owm: int
    last_event: int | None


class Ends(NamedTuple):
    """What the decide run found at its end (`scope_ends`)."""

    scopes: dict[int, ScopeEnd]
    span: tuple  # the kept events' first and last timestamp (None without any)
    partials: list | None  # the metric counts and timeline steps a live job keeps for its flush (`deferred.Held`)
    terms: list[tuple[int, int, int | None]] | None  # (partition, floor term's max, event term's max or None)
    held_range: tuple[int | None, int | None] | None = None  # the held open windows' least and greatest index k


def scope_ends(ran: DataFrame, partials: bool = False, terms: bool = False, held: DataFrame | None = None) -> Ends:
    """Per output scope, its end (`ScopeEnd`); the kept events' first and last timestamp; with `partials`, the metric
    counts and timeline steps (rows tag, s, x, y, z, counts); with `terms`, each partition's maxima of the
    watermark's two terms (the state after the rows, when no aggregation found them before the pass); with `held`
    (a state's open windows), their index range, which the close points are bounded by (`windows.closes_of`).
    Collected in one job: a few rows per task (a live batch paid a job of its own for the range)."""
    tags = (SCOPE, *((METRICS, STEP) if partials else ()), *((TERMS,) if terms else ()))
    rows = ran.where(F.col("tag").isin(*tags)).select("tag", "s", "x", "y", "z", "counts")
    if held is not None:
        typed = {f.name: f.dataType for f in rows.schema.fields}
        rows = rows.unionByName(held.agg(
            F.lit(HELD).cast(typed["tag"]).alias("tag"), F.lit(None).cast(typed["s"]).alias("s"),
            F.min("k").cast(typed["x"]).alias("x"), F.max("k").cast(typed["y"]).alias("y"),
            F.lit(None).cast(typed["z"]).alias("z"), F.lit(None).cast(typed["counts"]).alias("counts")))
    found = rows.collect()
    ends, lo, hi = {}, None, None
    for r in (r for r in found if r["tag"] == SCOPE):
        seq, owm, last, first_ts, last_ts = r["counts"]
        e = ends.get(r["s"])
        event = last if last > -(2**63) else None
        if e is not None:
            seq, owm = max(seq, e.seq), max(owm, e.owm)
            event = max((v for v in (event, e.last_event) if v is not None), default=None)
        ends[r["s"]] = ScopeEnd(seq, owm, event)
        if first_ts <= last_ts:  # the task kept an event
            lo = first_ts if lo is None else min(lo, first_ts)
            hi = last_ts if hi is None else max(hi, last_ts)
    kept = [r for r in found if r["tag"] in (METRICS, STEP)] if partials else None
    maxima = [(r["s"], r["x"], r["y"]) for r in found if r["tag"] == TERMS] if terms else None
    index_range = next(((r["x"], r["y"]) for r in found if r["tag"] == HELD), None)
    return Ends(ends, (lo, hi), kept, maxima, index_range)


def arrival_span(ran: DataFrame) -> tuple[int | None, int | None]:
    """The first and the last hour of arrival of the rows counted (from `since` on), in microseconds."""
    r = tagged(ran, METRICS).agg(F.min("x").alias("lo"), F.max("x").alias("hi")).first()
    return r["lo"], r["hi"]
