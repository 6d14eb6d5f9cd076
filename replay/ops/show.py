"""`replay show`: a few rows of a job's windows, decisions or dead letters, for a time range and a key, without
writing Spark code. Windows are chosen by when they start, decisions and dead letters by when their row arrived."""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StructType, TimestampType

from replay.io.lake import Lake
from replay.model.durations import format_instant, parse_instant
from replay.model.jobs import Job
from replay.ops import outputs

TABLES = ("windows", "decisions", "dead_letters")
TIME_COLUMN = {"windows": "window_start", "decisions": "arrival_time", "dead_letters": "arrival_time"}
WIDEST = 60  # characters of a cell in the text table (a dead letter's payload is the whole landed line)
ORDER = {"windows": ("window_start", "window_end"), "decisions": ("seq",), "dead_letters": ("seq",)}


@dataclass(frozen=True)
class Query:
    """Which rows: `table`'s rows in the time range [start, end) (ISO instants, None for open), of `key` if given,
    at most `limit` of them."""

    table: str = "windows"
    start: str | None = None
    end: str | None = None
    key: str | None = None
    limit: int = 20


@dataclass(frozen=True)
class Shown:
    """The rows found, first ones first (times as ISO text), and how many matched in all."""

    table: str
    columns: list[str]
    rows: list[dict]
    matched: int

    def text(self) -> str:
        """An aligned table (long cells cut; --json has them whole), and a last line saying how many rows matched."""
        if not self.rows:
            return f"no {self.table.replace('_', ' ')} match"
        cells = [[_cell(r[c]) for c in self.columns] for r in self.rows]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(self.columns)]
        line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
        more = (f"{len(self.rows)} of {self.matched} rows (--limit to see more)" if self.matched > len(self.rows)
                else f"{self.matched} rows")
        return "\n".join([line(self.columns), line(["-" * w for w in widths]), *map(line, cells), more])


def show(spark: SparkSession, lake: str, job: Job, target: str, query: Query) -> Shown:
    """The rows of `query` in `target`'s table of `job`."""
    if query.table not in TABLES:
        raise ValueError(f"--table: {query.table!r} is not one of {', '.join(TABLES)}")
    bounds = [None if b is None else parse_instant(b, name) for b, name in ((query.start, "--from"),
                                                                          (query.end, "--to"))]
    if None not in bounds and bounds[0] >= bounds[1]:
        raise ValueError(f"--from {query.start} must be before --to {query.end}")
    where = Lake(lake).target(job.name, target)
    outputs.require(where, [query.table])
    df = outputs.read(spark, where, query.table)
    if query.key is not None and "key" not in df.columns:
        raise ValueError(f"--key: the {query.table} of job {job.name!r} have no key column "
                         f"(their columns: {', '.join(df.columns)})")
    time = F.unix_micros(TIME_COLUMN[query.table])
    for bound, keep in zip(bounds, (time.__ge__, time.__lt__)):
        if bound is not None:
            df = df.where(keep(bound))
    if query.key is not None:
        df = df.where(F.col("key") == query.key)
    times = {f.name for f in df.schema.fields if isinstance(f.dataType, TimestampType)}
    first = ORDER[query.table]  # then every other plain column: ties are shown in the same order every time
    ties = [f.name for f in df.schema.fields if f.name not in first
            and not isinstance(f.dataType, (ArrayType, MapType, StructType))]
    ordered = df.orderBy(*first, *ties)
    picked = ordered.select(*(F.unix_micros(c).alias(c) if c in times else F.col(c) for c in df.columns))
    rows = [{c: format_instant(v) if c in times else v for c, v in r.asDict().items()}
            for r in picked.limit(query.limit).collect()]
    matched = len(rows) if len(rows) < query.limit else df.count()
    return Shown(query.table, list(df.columns), rows, matched)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return text if len(text) <= WIDEST else text[:WIDEST - 3] + "..."
