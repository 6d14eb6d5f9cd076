"""Data-quality validations of one target's outputs over an arrival range, with Great Expectations 1.x.

Each function takes a `Target` (lake, target, job, range [start, end)) and returns an `Outcome`:
passed or not, the counts behind it (for check metadata) and what failed. Spark computes the tables
(`assets.quality_tables`); GX validates them: the per-hour tables (one row per hour) as pandas frames,
the windows and dead-letters tables on Spark with `UnexpectedRowsExpectation` queries over `{batch}`
and temporary views. Every validation is stored in a GX file context in LAKE/quality/ and its Data Docs
site is rebuilt there (LAKE/quality/gx/uncommitted/data_docs/local_site/index.html).
"""
from __future__ import annotations

import fcntl
import math
import numbers
import os
import sys
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from assets import quality_tables as tables
from assets.partitions import END_OF_JOURNAL
from assets.quality_tables import EVENT_REASONS, Target
from replay.io.lake import Lake
from replay.model.durations import format_duration, parse_duration


def _without_spark_connect() -> None:
    """GX imports pyspark's Spark Connect DataFrame, and pyspark's check for that calls sys.exit(0) in a
    process whose __main__ has no file (it takes that for a doctest run), as Dagster's run workers are.
    Retrace uses classic Spark only, so there GX is told Spark Connect is not installed."""
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__spec__", None) is None and not hasattr(main, "__file__"):
        for module in ("pyspark.sql.connect.dataframe", "pyspark.sql.connect.session"):  # what GX imports
            sys.modules.setdefault(module, None)


_without_spark_connect()

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # no usage statistics sent from a data pipeline

CATEGORIES = ("early", "late", "out_of_order", "dropped", "dead_letters")


@dataclass(frozen=True)
class Limit:
    """At most `max_fraction` of an hour's events, and at most `max_count` events, per hour (None: no limit)."""

    max_fraction: float | None = None
    max_count: int | None = None


@dataclass(frozen=True)
class Thresholds:
    """Limits per hour of arrival. Fractions are judged only in hours with at least `min_events` events
    (in a nearly empty hour one late event is a large fraction); counts in every hour."""

    early: Limit = Limit(max_fraction=0.02)
    late: Limit = Limit(max_fraction=0.10)
    out_of_order: Limit = Limit(max_fraction=0.10)
    dropped: Limit = Limit(max_fraction=0.02)
    dead_letters: Limit = Limit(max_fraction=0.02)
    min_events: int = 50
    max_watermark_delay: int = 15 * 60_000_000  # microseconds

    def __post_init__(self):
        for name in CATEGORIES:
            limit = getattr(self, name)
            if not isinstance(limit, Limit):
                raise TypeError(f"thresholds.{name}: {limit!r} must be a Limit")
            f = limit.max_fraction
            if f is not None and (isinstance(f, bool) or not isinstance(f, numbers.Real)
                                  or not math.isfinite(f) or not 0 <= f <= 1):
                raise ValueError(f"thresholds.{name}_max_fraction: {f!r} must be a number from 0 to 1")
            _count(f"thresholds.{name}_max_count", limit.max_count, nullable=True)
        _count("thresholds.min_events", self.min_events)
        if isinstance(self.max_watermark_delay, bool) or not isinstance(self.max_watermark_delay, int) \
                or self.max_watermark_delay <= 0:
            raise ValueError(f"thresholds.max_watermark_delay: {self.max_watermark_delay!r} must be a positive "
                             f"number of microseconds")

    @classmethod
    def from_flat(cls, values: dict) -> "Thresholds":
        """From flat settings as in check config: `late_max_fraction`, `late_max_count`, ...,
        `min_events`, `max_watermark_delay` (a duration such as '15m'). Missing keys keep defaults."""
        known = {f"{c}_{k}" for c in CATEGORIES for k in ("max_fraction", "max_count")}
        known |= {"min_events", "max_watermark_delay"}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"thresholds: unknown setting {unknown[0]!r}; known: {', '.join(sorted(known))}")
        default = cls()
        kwargs: dict = {}
        for c in CATEGORIES:
            base = getattr(default, c)
            kwargs[c] = Limit(values.get(f"{c}_max_fraction", base.max_fraction),
                              values.get(f"{c}_max_count", base.max_count))
        kwargs["min_events"] = values.get("min_events", default.min_events)
        if "max_watermark_delay" in values:
            kwargs["max_watermark_delay"] = parse_duration(values["max_watermark_delay"], "max_watermark_delay")
        return cls(**kwargs)


def _count(name: str, value, nullable: bool = False) -> None:
    if value is None and nullable:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}: {value!r} must be a whole number >= 0")


@dataclass(frozen=True)
class Outcome:
    """The result of one validation: `counts` are totals over the range (numbers for check metadata),
    `failures` say in words which expectations failed, `hours` is the validated per-hour table."""

    check: str
    passed: bool
    counts: dict = field(default_factory=dict)
    failures: tuple[str, ...] = ()
    hours: tuple[dict, ...] = ()
    docs: str | None = None
    applicable: bool = True


def docs_index(lake: str) -> str:
    return os.path.join(Lake(lake).quality, "gx", "uncommitted", "data_docs", "local_site", "index.html")


# --- the validations -----------------------------------------------------------------------------------

def late_events(t: Target, thresholds: Thresholds = Thresholds()) -> Outcome:
    """Early, late, out-of-order, dropped events and dead letters per hour within `thresholds`."""
    import great_expectations.expectations as gxe

    hours = _hour_rows(tables.late_counts(t))
    for c in CATEGORIES:
        hours[f"{c}_fraction"] = (hours[c] / hours["events"]).where(hours["events"] >= thresholds.min_events)
    expectations = []
    for c in CATEGORIES:
        limit = getattr(thresholds, c)
        if limit.max_fraction is not None:
            expectations.append(gxe.ExpectColumnValuesToBeBetween(
                column=f"{c}_fraction", min_value=0, max_value=limit.max_fraction,
                description=f"{c} events are at most {limit.max_fraction:g} of an hour's events"))
        if limit.max_count is not None:
            expectations.append(gxe.ExpectColumnValuesToBeBetween(
                column=c, min_value=0, max_value=limit.max_count,
                description=f"at most {limit.max_count} {c} events per hour"))
    result = _validate(t, "late_events", hours, expectations)
    counts = {"hours": len(hours), "events": int(hours["events"].sum())}
    for c in CATEGORIES:
        counts[c] = int(hours[c].sum())
        counts[f"{c}_max_fraction"] = round(float(hours[f"{c}_fraction"].max()), 6) \
            if hours[f"{c}_fraction"].notna().any() else 0.0
    return _outcome("late_events", result, counts, hours, t)


def conservation(t: Target) -> Outcome:
    """Spec 7 per hour of arrival: events = windowed + dropped + quarantined + window_closed + unwindowed
    (+ open: windows not closed yet at the end of the target). Stated for tumbling windows."""
    import great_expectations.expectations as gxe

    if not t.job.conserves:
        return Outcome("conservation", True, {"hours": 0}, applicable=False,
                       failures=(f"not applicable: job {t.job.name} has a filter or transform that keeps kept events "
                                 f"out of its windows, or no aggregate counting their members (Job.conserves)",))
    window = t.policy.window
    if window is not None and window.kind != "tumbling":
        return Outcome("conservation", True, {"hours": 0}, applicable=False,
                       failures=(f"not applicable: spec 7 states conservation for tumbling windows, "
                                 f"the policy has {window.kind} windows",))
    hours = _hour_rows(tables.conservation(t))
    result = _validate(t, "conservation", hours, [gxe.ExpectColumnPairValuesToBeEqual(
        column_A="events", column_B="accounted",
        description="events = windowed + dropped + quarantined + window_closed + unwindowed + open, per hour")])
    counts = {"hours": len(hours)}
    for c in ("events", "windowed", "dropped", "quarantined", "window_closed", "unwindowed", "open",
              "unaccounted", "missing_memberships"):
        counts[c] = int(hours[c].sum())
    counts["hours_unbalanced"] = int((hours["unaccounted"] != 0).sum())
    return _outcome("conservation", result, counts, hours, t)


def windows_emitted_once(t: Target) -> Outcome:
    """Every window with counted events that closes in range is in the windows table, and every row
    emitted in range has exactly the count of its window's counted events; totals agree. A user job's
    windows are identified by (window_start, its grouping, partition) and counted by its `count(*)`
    aggregate; without one, a row emitted in range must have counted events, whatever their number."""
    import great_expectations.expectations as gxe

    wt = tables.window_tables(t)
    on = " AND ".join(f"b.{_q(c)} {'=' if c == 'window_start' else '<=>'} d.{_q(c)}" for c in t.window_id)
    count = t.count_column
    try:
        with _views(due=wt.due, expected=wt.expected) as v:
            expectations = [
                gxe.UnexpectedRowsExpectation(
                    description="missing: windows with counted events, closed in range, with no row",
                    unexpected_rows_query=f"SELECT d.* FROM {v['due']} d LEFT ANTI JOIN {{batch}} b ON {on}"),
                gxe.UnexpectedRowsExpectation(
                    description="miscounted: rows emitted in range whose count differs from their window's "
                                "counted events (or whose window has none)",
                    unexpected_rows_query=f"SELECT b.* FROM {{batch}} b LEFT JOIN {v['expected']} d ON {on} WHERE "
                                          f"b.in_range AND (d.expected_count IS NULL OR b.{_q(count)} <> "
                                          f"d.expected_count)") if count else
                gxe.UnexpectedRowsExpectation(
                    description="phantom: rows emitted in range whose window and group have no counted events",
                    unexpected_rows_query=f"SELECT b.* FROM {{batch}} b LEFT JOIN {v['expected']} d ON {on} WHERE "
                                          f"b.in_range AND d.expected_count IS NULL"),
            ]
            if count:
                expectations.append(gxe.UnexpectedRowsExpectation(
                    description="totals: the counts of rows emitted in range add up to the counted events of "
                                "the windows due in range",
                    unexpected_rows_query=f"SELECT * FROM (SELECT COALESCE(SUM({_q(count)}), 0) AS emitted FROM "
                                          f"{{batch}} WHERE in_range) e, "
                                          f"(SELECT COALESCE(SUM(expected_count), 0) AS due "
                                          f"FROM {v['due']}) d WHERE e.emitted <> d.due"))
            result = _validate(t, "windows_emitted_once", wt.windows, expectations)
            summed = F.sum(count) if count else F.lit(None)
            totals = wt.windows.where("in_range").agg(F.count("*").alias("n"), summed.alias("s")).first()
            due = wt.due.agg(F.count("*").alias("n"), F.sum("expected_count").alias("s")).first()
    finally:
        wt.unpersist()
    observed = _observed(result)
    counts = {"windows_in_range": totals["n"], "events_in_range_windows": int(totals["s"] or 0),
              "windows_due": due["n"], "events_due": int(due["s"] or 0),
              "missing_windows": observed[0], "miscounted_windows": observed[1],
              "seq_from": wt.seq_lo, "seq_to": END_OF_JOURNAL if wt.seq_hi is None else wt.seq_hi}
    return _outcome("windows_emitted_once", result, counts, None, t)


def window_rows_unique(t: Target) -> Outcome:
    """No window has two rows (same window_start, key and partition; for a user's job, same window_start,
    grouping columns and partition) among the rows emitted in range."""
    import great_expectations.expectations as gxe

    wt = tables.windows_in_range(t, *t.seq_range())
    ids = ", ".join(_q(c) for c in t.window_id)
    result = _validate(t, "window_rows_unique", wt, [gxe.UnexpectedRowsExpectation(
        description="duplicates: windows with more than one row",
        unexpected_rows_query=f"SELECT {ids}, COUNT(*) AS copies FROM {{batch}} "
                              f"GROUP BY {ids} HAVING COUNT(*) > 1 AND MAX(in_range)")])
    n = wt.where("in_range").count()
    return _outcome("window_rows_unique", result, {"windows_in_range": n, "duplicated_windows": _observed(result)[0]},
                    None, t)


def _q(column: str) -> str:
    """A column name quoted for Spark SQL (a job's grouping column may be any identifier)."""
    return f"`{column}`"


def dead_letters_match(t: Target) -> Outcome:
    """Every dropped or quarantined event arriving in range is a dead letter with one of its reasons,
    once; every event dead letter is such an event; every `window_closed` letter names a kept event."""
    import great_expectations.expectations as gxe

    letters = tables.dead_letters_in_range(t)
    reasons = ", ".join(f"'{r}'" for r in EVENT_REASONS)
    with _views(lost=tables.lost_events(t), kept=tables.kept_events(t)) as v:
        expectations = [
            gxe.UnexpectedRowsExpectation(
                description="lost events without a dead letter",
                unexpected_rows_query=f"SELECT l.* FROM {v['lost']} l LEFT ANTI JOIN {{batch}} b "
                                      f"ON b.seq = l.seq AND array_contains(l.reasons, b.reason)"),
            gxe.UnexpectedRowsExpectation(
                description="dead letters of events that were not dropped or quarantined for that reason",
                unexpected_rows_query=f"SELECT b.* FROM {{batch}} b LEFT ANTI JOIN {v['lost']} l "
                                      f"ON b.seq = l.seq AND array_contains(l.reasons, b.reason) "
                                      f"WHERE b.in_range AND b.reason IN ({reasons})"),
            gxe.UnexpectedRowsExpectation(
                description="window_closed dead letters of events that were not kept",
                unexpected_rows_query=f"SELECT b.* FROM {{batch}} b LEFT ANTI JOIN {v['kept']} k ON b.seq = k.seq "
                                      f"WHERE b.in_range AND b.reason = 'window_closed'"),
            gxe.UnexpectedRowsExpectation(
                description="events with more than one dead letter for their reason",
                unexpected_rows_query=f"SELECT seq, COUNT(*) AS copies FROM {{batch}} WHERE in_range AND reason "
                                      f"IN ({reasons}) GROUP BY seq HAVING COUNT(*) > 1"),
        ]
        result = _validate(t, "dead_letters_match", letters, expectations)
        lost = tables.lost_events(t).count()
    observed = _observed(result)
    by_reason = {r["reason"]: r["n"] for r in letters.where("in_range").groupBy("reason")
                 .agg(F.count("*").alias("n")).collect()}
    counts = {"lost_events": lost, "dead_letters": sum(by_reason.values()),
              **{f"dead_letters_{k}": v for k, v in sorted(by_reason.items())},
              "lost_without_letter": observed[0], "letters_without_event": observed[1],
              "window_closed_without_kept_event": observed[2], "duplicated_letters": observed[3]}
    return _outcome("dead_letters_match", result, counts, None, t)


def watermark_delay(t: Target, thresholds: Thresholds = Thresholds()) -> Outcome:
    """The output watermark trails arrivals by at most `thresholds.max_watermark_delay`, every hour."""
    import great_expectations.expectations as gxe

    bound_s = thresholds.max_watermark_delay / 1e6
    hours = _hour_rows(tables.watermark_delay(t))
    result = _validate(t, "watermark_delay", hours, [gxe.ExpectColumnValuesToBeBetween(
        column="max_delay_s", min_value=None, max_value=bound_s,
        description=f"watermark delay (arrival - output watermark) at most "
                    f"{format_duration(thresholds.max_watermark_delay)}")])
    worst = hours["max_delay_s"].max() if len(hours) else None
    counts = {"hours": len(hours), "rows": int(hours["rows"].sum()), "undefined_rows": int(hours["undefined"].sum()),
              "max_delay_s": 0.0 if worst is None or worst != worst else round(float(worst), 3),
              "bound_s": bound_s, "hours_over_bound": int((hours["max_delay_s"] > bound_s).sum())}
    return _outcome("watermark_delay", result, counts, hours, t)


VALIDATIONS = {"late_events": late_events, "conservation": conservation,
               "windows_emitted_once": windows_emitted_once, "window_rows_unique": window_rows_unique,
               "dead_letters_match": dead_letters_match, "watermark_delay": watermark_delay}


# --- GX plumbing ----------------------------------------------------------------------------------------

def _hour_rows(df: DataFrame):
    """A per-hour Spark table (a row per hour: small) as pandas, hours as ISO strings."""
    return df.withColumn("hour", F.date_format("hour", "yyyy-MM-dd'T'HH:mm'Z'")).toPandas()


@contextmanager
def _views(**frames: DataFrame):
    """Temporary views with unique names (concurrent checks share a SparkSession), dropped afterwards."""
    names = {k: f"retrace_q_{k}_{uuid.uuid4().hex[:12]}" for k in frames}
    spark = next(iter(frames.values())).sparkSession
    for k, df in frames.items():
        df.createOrReplaceTempView(names[k])
    try:
        yield names
    finally:
        for name in names.values():
            spark.catalog.dropTempView(name)


@contextmanager
def _context(lake: str):
    """The GX file context in LAKE/quality/, held under a file lock: checks in other processes write the
    same stores and Data Docs."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    folder = Lake(lake).quality
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ctx = gx.get_context(mode="file", project_root_dir=folder)
        ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        yield ctx


def _source_name(spark: bool) -> str:
    return "retrace_spark" if spark else "retrace_pandas"


def _batch_definition(ctx, name: str, spark: bool):
    source_name = _source_name(spark)
    if source_name in {s.name for s in ctx.data_sources.all().values()}:
        source = ctx.data_sources.get(source_name)
    else:
        source = ctx.data_sources.add_spark(source_name) if spark else ctx.data_sources.add_pandas(source_name)
    asset = source.get_asset(name) if name in source.get_asset_names() else source.add_dataframe_asset(name)
    if name in {b.name for b in asset.batch_definitions}:
        return asset.get_batch_definition(name)
    return asset.add_batch_definition_whole_dataframe(name)


def _validate(t: Target, check: str, frame, expectations: list):
    """Run `expectations` on `frame` (a Spark or pandas frame) as suite `<check>.<job>.<target>`; the result is
    stored and the Data Docs rebuilt."""
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (ExpectationSuiteIdentifier,
                                                                            ValidationResultIdentifier)

    name, spark = f"{check}.{t.label}", isinstance(frame, DataFrame)
    with _context(t.lake) as ctx:
        batch = _batch_definition(ctx, name, spark)
        suite = ctx.suites.add_or_update(gx.ExpectationSuite(name=name, expectations=expectations))
        definition = ctx.validation_definitions.add_or_update(gx.ValidationDefinition(name=name, data=batch,
                                                                                      suite=suite))
        run_id = RunIdentifier(run_name=f"{t.label} [{t.start or '-inf'}, {t.end or '+inf'})",
                               run_time=datetime.now(timezone.utc))
        result = definition.run(batch_parameters={"dataframe": frame}, run_id=run_id)
        # render only this suite and this result (and the index): the site grows with every run
        suite_id = ExpectationSuiteIdentifier(name=name)
        result_id = ValidationResultIdentifier(suite_id, run_id, f"{_source_name(spark)}-{name}")
        ctx.build_data_docs(resource_identifiers=[suite_id, result_id])
    return result


def _observed(result) -> list[int]:
    """The number of unexpected rows of each expectation of a result, in suite order."""
    return [int((r.result or {}).get("observed_value") or 0) for r in result.results]


def _plain(value) -> str:
    """A value GX reports (numpy scalars, tuples of them) as short text."""
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_plain(v) for v in value) + ")"
    value = value.item() if hasattr(value, "item") else value
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _describe(r) -> str:
    config = r.expectation_config
    text = config.description or config.type
    res = r.result or {}
    if "observed_value" in res:
        return f"{text}: {res['observed_value']} unexpected rows"
    if "unexpected_count" in res:
        shown = ", ".join(_plain(v) for v in (res.get("partial_unexpected_list") or [])[:5])
        return f"{text}: {res['unexpected_count']} of {res.get('element_count')} hours fail ({shown})"
    return f"{text}: failed"


def _outcome(check: str, result, counts: dict, hours, t: Target) -> Outcome:
    failures = tuple(_describe(r) for r in result.results if not r.success)
    rows = () if hours is None else tuple(
        {k: (None if v != v else v) for k, v in row.items()} for row in hours.to_dict("records"))  # NaN -> None
    return Outcome(check, bool(result.success), counts, failures, rows, docs_index(t.lake))
