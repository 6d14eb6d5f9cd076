"""Delta tables behind one small interface: Spark computes and writes Parquet, a Delta log commits it.

`DeltaRsStore` commits with delta-rs (no JVM jars needed); `DeltaSparkStore` uses delta-spark where its
jars are on the classpath (a cluster). Everything else in Retrace talks to `TableStore` only.
"""
from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema


@dataclass(frozen=True)
class Replace:
    """Rows of the table whose `column` lies in [low, high) are replaced by the new rows (high None = no
    bound); with `nulls`, rows whose `column` is null are replaced too."""

    column: str
    low: int
    high: int | None = None
    nulls: bool = False


@dataclass(frozen=True)
class AppTransaction:
    """An idempotency token: a commit for (app_id, version) lands at most once."""

    app_id: str
    version: int


class TableStore(Protocol):
    def exists(self, path: str) -> bool: ...

    def read(self, spark: SparkSession, path: str) -> DataFrame: ...

    def write(self, df: DataFrame, path: str, *, mode: str = "append", replace: Replace | None = None,
              txn: AppTransaction | None = None, stats_columns: tuple[str, ...] = ()) -> int | None: ...

    def transaction_version(self, path: str, app_id: str) -> int | None: ...


def _local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


class DeltaRsStore:
    """Spark executors write Parquet into the table folder; the driver commits Add/Remove actions with delta-rs."""

    def exists(self, path: str) -> bool:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(path)

    def read(self, spark: SparkSession, path: str) -> DataFrame:
        from deltalake import DeltaTable

        table = DeltaTable(path)
        schema = from_arrow_schema(_arrow_schema(table), prefer_timestamp_ntz=False)
        uris = table.file_uris()
        if not uris:
            return spark.createDataFrame([], schema)
        return spark.read.schema(schema).parquet(*uris)

    def transaction_version(self, path: str, app_id: str) -> int | None:
        from deltalake import DeltaTable

        if not self.exists(path):
            return None
        return DeltaTable(path).transaction_version(app_id)

    def write(self, df: DataFrame, path: str, *, mode: str = "append", replace: Replace | None = None,
              txn: AppTransaction | None = None, stats_columns: tuple[str, ...] = ()) -> int | None:
        """Write `df` as new files of the table and commit them in one Delta transaction; returns the version.

        mode `overwrite` replaces the whole table; `replace` removes only the rows in a range (files that
        straddle the range are rewritten). With `txn`, a commit already made for it is not made again.
        """
        from deltalake import DeltaTable
        from deltalake.transaction import CommitProperties, Transaction, create_table_with_add_actions

        if mode not in ("append", "overwrite"):
            raise ValueError(f"mode: {mode!r} is not one of append, overwrite")
        if mode == "overwrite" and replace is not None:
            raise ValueError(f"replace: {replace} replaces a range; mode 'overwrite' replaces everything, not both")
        if txn is not None:
            done = self.transaction_version(path, txn.app_id)
            if done is not None and done >= txn.version:
                return None
        exists = self.exists(path)
        stats_columns = tuple(stats_columns) + ((replace.column,) if replace else ())
        actions = []
        if exists and replace is not None:
            actions += self._replace_range(df.sparkSession, DeltaTable(path), path, replace, stats_columns)
        actions += _write_files(df, path, stats_columns)
        schema = _nullable(to_arrow_schema(df.schema, timezone="UTC"))
        props = CommitProperties(
            app_transactions=[Transaction(app_id=txn.app_id, version=txn.version)] if txn else None)
        if not exists:
            create_table_with_add_actions(path, _delta_schema(schema), actions, mode="error", commit_properties=props)
        else:
            # overwrite removes every live file and takes the new schema (an upgrade may add columns)
            DeltaTable(path).create_write_transaction(actions, mode=mode,
                                                      schema=schema, commit_properties=props)
        return DeltaTable(path).version()

    def _replace_range(self, spark, table, path, replace: Replace, stats_columns):
        """Remove actions for files inside the range; files that straddle it are rewritten without its rows."""
        from deltalake.transaction import RemoveAction

        actions, straddling = [], []
        now = int(time.time() * 1000)
        for add in _add_actions(table):
            stats = json.loads(add["stats"] or "{}")
            lo = stats.get("minValues", {}).get(replace.column)
            hi = stats.get("maxValues", {}).get(replace.column)
            if lo is None or hi is None or replace.nulls:
                # no range statistics, or null rows to replace (their count is not recorded): rewrite it
                inside = outside = False
            else:
                inside = lo >= replace.low and (replace.high is None or hi < replace.high)
                outside = hi < replace.low or (replace.high is not None and lo >= replace.high)
            if outside:
                continue
            actions.append(RemoveAction(add["path"], True, now, add["size"], {}))
            if not inside:
                straddling.append(os.path.join(_local(path), add["path"]))
        if straddling:
            from pyspark.sql import functions as F

            c = F.col(replace.column)
            in_range = c >= replace.low if replace.high is None else (c >= replace.low) & (c < replace.high)
            schema = from_arrow_schema(_arrow_schema(table), prefer_timestamp_ntz=False)
            kept_nulls = F.lit(not replace.nulls)
            kept = spark.read.schema(schema).parquet(*straddling).where(
                F.when(c.isNull(), kept_nulls).otherwise(~in_range))
            actions += _write_files(kept, path, stats_columns)
        return actions


def _arrow_schema(table):
    import pyarrow as pa

    return pa.schema(table.schema().to_arrow())


def _nullable(schema):
    """Delta columns are declared nullable so later appends and replays never clash on nullability."""
    import pyarrow as pa

    return pa.schema([f.with_nullable(True) for f in schema])


def _delta_schema(arrow_schema):
    from deltalake import Schema

    return Schema.from_arrow(arrow_schema)


def _add_actions(table) -> list[dict]:
    batch = table.get_add_actions(flatten=False)
    import pyarrow as pa

    rows = pa.table(batch).select(["path", "size_bytes"]).to_pylist()
    stats = _stats_by_path(table)
    return [{"path": r["path"], "size": r["size_bytes"], "stats": stats.get(r["path"])} for r in rows]


def _stats_by_path(table) -> dict[str, str]:
    """The raw `stats` JSON of each live file, read from the log's add actions."""
    import pyarrow as pa

    flat = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    out = {}
    for r in flat:
        mins = {k[len("min."):]: _plain(v) for k, v in r.items() if k.startswith("min.")}
        maxs = {k[len("max."):]: _plain(v) for k, v in r.items() if k.startswith("max.")}
        out[r["path"]] = json.dumps({"numRecords": r.get("num_records"), "minValues": mins, "maxValues": maxs})
    return out


def _plain(v):
    return v if isinstance(v, (int, float, str)) or v is None else str(v)


def _write_files(df: DataFrame, path: str, stats_columns) -> list:
    """Executors write Parquet under the table folder; the driver turns the files into Add actions."""
    from deltalake.transaction import AddAction

    folder = f"part-{uuid.uuid4().hex}"
    target = os.path.join(_local(path), folder)
    df.write.mode("errorifexists").parquet(target)
    actions = []
    for name in sorted(os.listdir(target)):
        if not name.endswith(".parquet"):
            continue
        full = os.path.join(target, name)
        actions.append(AddAction(
            path=f"{folder}/{name}",
            size=os.path.getsize(full),
            partition_values={},
            modification_time=int(os.path.getmtime(full) * 1000),
            data_change=True,
            stats=_file_stats(full, stats_columns),
        ))
    return actions


def _file_stats(path: str, columns) -> str:
    """numRecords and min/max of integer columns, from the Parquet footer (no data read)."""
    meta = pq.read_metadata(path)
    mins, maxs = {}, {}
    names = meta.schema.names
    for column in columns:
        if column not in names:
            continue
        i = names.index(column)
        lo = hi = None
        for g in range(meta.num_row_groups):
            s = meta.row_group(g).column(i).statistics
            if s is None or not s.has_min_max:
                lo = hi = None
                break
            lo = s.min if lo is None else min(lo, s.min)
            hi = s.max if hi is None else max(hi, s.max)
        if lo is not None:
            mins[column], maxs[column] = lo, hi
    return json.dumps({"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs})


class DeltaSparkStore:
    """delta-spark, for clusters whose classpath has the Delta jars (`format("delta")`)."""

    def exists(self, path: str) -> bool:
        from delta.tables import DeltaTable as SparkDeltaTable
        from pyspark.sql import SparkSession

        return SparkDeltaTable.isDeltaTable(SparkSession.getActiveSession(), path)

    def read(self, spark: SparkSession, path: str) -> DataFrame:
        return spark.read.format("delta").load(path)

    def transaction_version(self, path: str, app_id: str) -> int | None:
        return None  # delta-spark dedupes through the txnAppId/txnVersion writer options instead

    def write(self, df: DataFrame, path: str, *, mode: str = "append", replace: Replace | None = None,
              txn: AppTransaction | None = None, stats_columns: tuple[str, ...] = ()) -> int | None:
        writer = df.write.format("delta").mode("overwrite" if (mode == "overwrite" or replace) else "append")
        if mode == "overwrite" and replace is None:
            writer = writer.option("overwriteSchema", "true")
        if replace is not None and self.exists(path):
            cond = f"{replace.column} >= {replace.low}"
            if replace.high is not None:
                cond += f" AND {replace.column} < {replace.high}"
            writer = writer.option("replaceWhere", cond)
        if txn is not None:
            writer = writer.option("txnAppId", txn.app_id).option("txnVersion", txn.version)
        writer.save(path)
        return None


def default_store() -> TableStore:
    """delta-spark when RETRACE_STORE=delta-spark (jars on the classpath), else delta-rs."""
    return DeltaSparkStore() if os.environ.get("RETRACE_STORE") == "delta-spark" else DeltaRsStore()
