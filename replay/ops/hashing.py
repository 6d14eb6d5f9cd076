"""`replay hash`: one order-independent content hash of every output table of a target (decisions, windows, dead
letters, watermarks, metrics): all of them are a function of the journal and the job. The live job's `lag` and
`diagnostics` are observations of the wall clock, not outputs, and its checkpoints are where it resumes: left out."""
from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from replay.io.lake import OUTPUT_TABLES, TargetDir
from replay.io.runs import check_whole
from replay.io.store import default_store
from replay.ops import outputs

HASHED = OUTPUT_TABLES


def table_digest(df: DataFrame) -> tuple[int, int]:
    """(rows, sum of 64-bit row hashes): a multiset digest, the same whatever the row order or partitioning."""
    r = _digest_row("", df).first()
    return int(r["n"]), int(r["h"])


def _digest_row(name: str, df: DataFrame) -> DataFrame:
    """One row: (table `name`, rows, sum of the rows' hashes), the columns hashed in name order."""
    row = F.xxhash64(*[F.col(c) for c in sorted(df.columns)]).cast("decimal(38,0)")
    return df.agg(F.lit(name).alias("table"), F.count("*").alias("n"), F.coalesce(F.sum(row), F.lit(0)).alias("h"))


def target_hash(spark: SparkSession, where: TargetDir, tables: Mapping[str, DataFrame] | None = None) -> str:
    """Refuses (replay.io.runs.MixedRuns) a target whose tables come from different runs: its hash would be
    of a half-written state. `tables`: those of its output tables (as `outputs.read` gives them) a caller has read
    already."""
    store, tables = default_store(), tables or {}
    check_whole(spark, where, store)
    outputs.require(where, HASHED, store)
    return _digest({name: tables[name] if name in tables else outputs.read(spark, where, name, store)
                   for name in HASHED})


def _digest(tables: Mapping[str, DataFrame]) -> str:
    """The hash of a target whose output tables (every row: the decisions as their full view) are `tables`. The
    tables' digests are one query (a replay of the demo ran a query per table: ten Spark jobs one after another)."""
    rows = functools.reduce(DataFrame.unionAll, [_digest_row(name, tables[name]) for name in HASHED]).collect()
    found = {r["table"]: (int(r["n"]), int(r["h"])) for r in rows}
    h = hashlib.sha256()
    for name in HASHED:
        n, s = found[name]
        h.update(f"{name}:{n}:{s}\n".encode())
    return h.hexdigest()
