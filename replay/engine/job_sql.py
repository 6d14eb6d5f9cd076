"""A job's Spark SQL: fields extracted from the journal, the filter and transform of decided events, and
the checks that refuse, when a job is loaded, any expression whose result could differ between runs."""
from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.utils import AnalysisException

from replay.jvm import once_per_jvm
from replay.model.jobs import Job, JobError

JOURNAL_COLUMNS = ("seq", "partition", "offset", "kind", "arrival_time", "event_time", "key", "value")
DECIDED_COLUMNS = ("seq", "partition", "offset", "action", "timestamp", "arrival_time", "key", "value")
# Aggregates whose result depends on the order rows reach them (Spark does not fix that order).
ORDER_DEPENDENT = {"First", "Last", "CollectList", "CollectSet", "AnyValue", "ListAgg", "ApproximatePercentile",
                   "HistogramNumeric", "CountMinSketchAgg", "BloomFilterAggregate", "Mode"}
# Aggregates that add up their input: on floating-point values the result depends on the order of additions.
SUMMING = {"Sum", "Average", "TrySum", "TryAverage", "StddevSamp", "StddevPop", "VarianceSamp", "VariancePop",
           "Skewness", "Kurtosis", "Corr", "CovPopulation", "CovSample", "RegrAvgX", "RegrAvgY", "RegrSXX", "RegrSYY",
           "RegrSXY", "RegrSlope", "RegrIntercept", "RegrR2"}
FLOATING = {"DoubleType", "FloatType"}


def with_payload(journal: DataFrame) -> DataFrame:
    """The journal with `payload` as a VARIANT (the event as it landed), what field expressions read."""
    return journal.withColumn("payload", F.expr("try_parse_json(payload)"))


@once_per_jvm
def event_fields(fields: tuple[tuple[str, str], ...]) -> list[Column]:
    """A job's fields (name, expression) as columns of its events, null on the other rows (clocks, punctuations)."""
    is_event = F.col("kind") == "event"
    return [F.when(is_event, F.expr(e)).alias(n) for n, e in fields]


def field_columns(job: Job) -> list[Column]:
    return [F.expr(e).alias(n) for n, e in job.fields]


def fields(journal: DataFrame, job: Job) -> DataFrame:
    """(seq, the job's fields) for every event row of the journal."""
    events = with_payload(journal.where(F.col("kind") == "event"))
    return events.select("seq", *field_columns(job))


def decided_events(decisions: DataFrame, job: Job) -> DataFrame:
    """The kept events (accepted or adjusted) with the job's fields, after its `where` and `transform`:
    what the windows aggregate."""
    kept = decisions.where(F.col("timestamp").isNotNull() & (F.col("kind") == "event"))
    kept = kept.select(*DECIDED_COLUMNS, *job.field_names)
    if job.where is not None:
        kept = kept.where(F.expr(job.where))
    if job.transform is not None:
        out = job.transform(kept)
        missing = [c for c in ("seq", "partition", "offset", "timestamp", "arrival_time") if c not in out.columns]
        if missing:
            raise JobError(f"{job.describe()}: transform dropped column {missing[0]!r}; keep "
                           "seq, partition, offset, timestamp and arrival_time")
        kept = out
    return kept


# aggregate_inputs' answers: they depend only on the columns' names and the job's groups and aggregates
_INPUTS: dict[tuple, tuple[str, ...]] = {}


def aggregate_inputs(kept: DataFrame, grouping: tuple[str, ...], aggregates: tuple[tuple[str, str], ...]) -> list[str]:
    """The columns of `kept` that the job's groups and aggregates read, in `kept`'s order: all a window needs of its
    members (the open windows' members go from batch to batch in the checkpoint: the rest would only be carried).
    Analyzed once per job and columns, not every live batch."""
    key = (tuple(kept.columns), tuple(grouping), tuple(aggregates))
    if key not in _INPUTS:
        agg = kept.groupBy(*grouping).agg(*[F.expr(e).alias(n) for n, e in aggregates])
        refs = agg._jdf.queryExecution().analyzed().references().toSeq()
        read = {refs.apply(i).name() for i in range(refs.size())}
        _INPUTS[key] = tuple(c for c in kept.columns if c in read)
    return list(_INPUTS[key])


def check(spark: SparkSession, job: Job) -> None:
    """Analyze every expression of `job` on an empty journal: an unknown column, a wrong type, a
    non-deterministic function or an order-dependent aggregate is refused, naming the job and expression."""
    if job.is_spec:
        return
    journal = spark.createDataFrame([], "seq long, partition int, offset long, kind string, arrival_time timestamp, "
                                        "event_time timestamp, key string, value double, payload string")
    base = with_payload(journal)
    for name, expr in job.fields:
        _analyzed(lambda: base.select(F.expr(expr).alias(name)), job, f"fields.{name}", expr)
    decided = spark.createDataFrame([], "seq long, partition int, offset long, kind string, action string, "
                                        "timestamp timestamp, arrival_time timestamp, key string, value double")
    decided = decided.join(fields(journal, job), "seq", "left") if job.fields else decided
    if job.where is not None:
        plan = _analyzed(lambda: decided.select(F.expr(job.where).alias("where")), job, "where", job.where)
        kind = plan.schema().fields()[0].dataType().typeName()
        if kind != "boolean":
            raise JobError(f"{job.describe()}: where: {job.where!r} is {kind}, not a boolean condition")
    kept = _analyzed(lambda: decided_events(decided, job), job, "transform", "(Python)", plan=False)
    groups = [F.col(g) for g in job.grouping]
    for g in job.grouping:
        if g not in kept.columns:
            raise JobError(f"{job.describe()}: group_by: {g!r} is not a column of the decided events")
    for name, expr in job.aggregates:
        plan = _analyzed(lambda: kept.groupBy(*groups).agg(F.expr(expr).alias(name)), job, f"aggregates.{name}", expr)
        for node in _nodes(plan.aggregateExpressions().apply(plan.aggregateExpressions().size() - 1)):
            kind = node.getClass().getSimpleName()
            if kind in ORDER_DEPENDENT:
                raise JobError(f"{job.describe()}: aggregates.{name}: {expr!r} uses {kind}, whose result depends on the "
                               "order of rows; use an order-free aggregate (min, max, max_by, percentile, ...)")
            if kind in ("MaxBy", "MinBy") and not _reads(_children(node)[1], "seq"):
                raise JobError(f"{job.describe()}: aggregates.{name}: {expr!r} picks any one of rows that tie on "
                               "the ordering; break ties by seq, e.g. max_by(x, struct(y, -seq)) keeps the earliest")
            if kind in SUMMING and any(_type(c) in FLOATING for c in _children(node)):
                raise JobError(f"{job.describe()}: aggregates.{name}: {expr!r} adds floating-point values, whose "
                               "sum depends on the order of additions; make the field exact, e.g. "
                               "`payload:x::decimal(18,6)`")


def _analyzed(build, job: Job, what: str, expr: str, plan: bool = True):
    """The analyzed plan of the DataFrame `build()` makes (or the DataFrame, with plan=False)."""
    try:
        df = build()
        analyzed = df._jdf.queryExecution().analyzed()
    except AnalysisException as e:
        raise JobError(f"{job.describe()}: {what}: {expr!r}: {_first_line(e)}") from None
    for e in _top_expressions(analyzed):
        for node in _nodes(e):
            if not node.deterministic() and all(c.deterministic() for c in _children(node)):
                raise JobError(f"{job.describe()}: {what}: {expr!r} is not deterministic ({node.prettyName()}); "
                               "a replay would not give the same answer")
    return analyzed if plan else df


def _top_expressions(plan):
    exprs = plan.expressions()
    return [exprs.apply(i) for i in range(exprs.size())]


def _children(node) -> list:
    kids = node.children()
    return [kids.apply(i) for i in range(kids.size())]


def _nodes(node):
    yield node
    for child in _children(node):
        yield from _nodes(child)


def _reads(node, column: str) -> bool:
    """The expression reads the column (an attribute of that name somewhere in it)."""
    return any(n.getClass().getSimpleName() == "AttributeReference" and n.name() == column for n in _nodes(node))


def _type(node) -> str:
    try:
        return node.dataType().getClass().getSimpleName().rstrip("$")
    except Exception:  # an unresolved or untyped node
        return ""


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return " ".join(text.split())[:300]
