"""Delta tables behind one small interface, on delta-spark: Spark computes, writes and reads `format("delta")`.

Everything else in Retrace talks to `TableStore` only. Each commit can carry an application transaction
(`txnAppId`/`txnVersion`: a retried micro-batch lands once) and `userMetadata` (what wrote it, and which run).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class Replace:
    """Rows of the table whose `column` lies in [low, high) are replaced by the new rows (high None = no
    bound); with `nulls`, rows whose `column` is null are replaced too."""

    column: str
    low: int
    high: int | None = None
    nulls: bool = False

    def predicate(self) -> str:
        """The rows replaced, as a Delta `replaceWhere` condition."""
        cond = f"`{self.column}` >= {int(self.low)}"
        if self.high is not None:
            cond += f" AND `{self.column}` < {int(self.high)}"
        return f"(({cond}) OR `{self.column}` IS NULL)" if self.nulls else cond


@dataclass(frozen=True)
class AppTransaction:
    """An idempotency token: a commit for (app_id, version) lands at most once."""

    app_id: str
    version: int


class TableStore(Protocol):
    def exists(self, path: str) -> bool: ...

    def read(self, spark: SparkSession, path: str) -> DataFrame: ...

    def write(self, df: DataFrame, path: str, *, mode: str = "append", replace: Replace | None = None,
              txn: AppTransaction | None = None, metadata: dict | None = None) -> int | None: ...

    def transaction_version(self, path: str, app_id: str) -> int | None: ...


def _spark() -> SparkSession:
    spark = SparkSession.getActiveSession()
    if spark is None:
        from replay.io.spark import get_spark

        spark = get_spark()
    return spark


def _delta_log(spark: SparkSession, path: str):
    """The JVM DeltaLog of a table (cached by delta-spark per path, shared with its readers and writers)."""
    return spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)


class DeltaStore:
    """delta-spark: appends, `replaceWhere` range replaces, overwrites with the new schema, idempotent commits."""

    def exists(self, path: str) -> bool:
        from delta.tables import DeltaTable

        return DeltaTable.isDeltaTable(_spark(), path)

    def read(self, spark: SparkSession, path: str) -> DataFrame:
        return spark.read.format("delta").load(path)

    def version(self, path: str) -> int | None:
        """The table's latest version (None: no table)."""
        v = _delta_log(_spark(), path).update(False, _none(), _none()).version()
        return None if v < 0 else int(v)

    def transaction_version(self, path: str, app_id: str) -> int | None:
        """The latest version committed for `app_id` (txnAppId), from the Delta log's snapshot."""
        snapshot = _delta_log(_spark(), path).update(False, _none(), _none())
        if snapshot.version() < 0:
            return None
        found = snapshot.transactions().get(app_id)
        return int(found.get()) if found.isDefined() else None

    def write(self, df: DataFrame, path: str, *, mode: str = "append", replace: Replace | None = None,
              txn: AppTransaction | None = None, metadata: dict | None = None) -> int | None:
        """Commit `df` to the table in one Delta transaction; returns the new version, or None when `txn`
        was already committed (nothing written).

        mode `overwrite` replaces the whole table and takes `df`'s schema; `replace` replaces only the rows
        in a range (`replaceWhere`). `metadata` is the commit's userMetadata (a JSON object).
        """
        if mode not in ("append", "overwrite"):
            raise ValueError(f"mode: {mode!r} is not one of append, overwrite")
        if mode == "overwrite" and replace is not None:
            raise ValueError(f"replace: {replace} replaces a range; mode 'overwrite' replaces everything, not both")
        log = _delta_log(df.sparkSession, path)
        if mode == "append" and replace is None and txn is not None:
            done = _idempotent_append(df, log, txn, metadata)
            if done is not _SLOW:
                return done
        before = log.unsafeVolatileSnapshot().version()  # no I/O: the write refreshes the same cached log
        writer = df.write.format("delta").mode("overwrite" if (mode == "overwrite" or replace) else "append")
        if mode == "overwrite":
            writer = writer.option("overwriteSchema", "true")
        if replace is not None:
            writer = writer.option("replaceWhere", replace.predicate())
        if txn is not None:
            writer = writer.option("txnAppId", txn.app_id).option("txnVersion", str(txn.version))
        if metadata is not None:
            writer = writer.option("userMetadata", _user_metadata(metadata))
        writer.save(path)
        after = log.unsafeVolatileSnapshot().version()
        return int(after) if after > before else None


_SLOW = object()  # _idempotent_append cannot take the fast path: write through the DataFrame writer


def _idempotent_append(df: DataFrame, log, txn: AppTransaction, metadata: dict | None):
    """An append tagged with a transaction, committed through the Delta transaction API: the new version,
    None when `txn` was already committed, or _SLOW to write through `df.write` instead.

    Why: delta-spark 4.4's writer looks the transaction up in a full state reconstruction of the table
    (three Spark jobs, about 0.5 s per commit here), although the table's checksum file already lists its
    transactions. This reads them from the checksum, then writes the files and commits them with the same
    SetTransaction action the writer would add. Only for an existing table of the same schema with a
    checksum that lists its transactions; anything else takes the writer's path."""
    jvm = df.sparkSession._jvm
    snapshot = log.update(False, _none(), _none())
    if snapshot.version() < 0 or snapshot.schema().simpleString() != df._jdf.schema().simpleString():
        return _SLOW
    checksum = snapshot.checksumOpt()
    listed = checksum.get().setTransactions() if checksum.isDefined() else None
    if listed is None or not listed.isDefined():
        return _SLOW
    committed, found = -1, listed.get().iterator()
    while found.hasNext():
        t = found.next()
        if t.appId() == txn.app_id:
            committed = t.version()
    if committed >= txn.version:
        return None
    delta, some = jvm.org.apache.spark.sql.delta, jvm.scala.Some
    transaction = log.startTransaction(_none(), some(snapshot))
    files = transaction.writeFiles(df._jdf)
    stamp = delta.actions.SetTransaction(txn.app_id, txn.version, some(jvm.java.lang.Long.valueOf(_millis())))
    write = getattr(getattr(delta, "DeltaOperations$Write$"), "MODULE$")
    user = _none() if metadata is None else some(_user_metadata(metadata))
    defaults = [getattr(write, f"apply$default${n}")() for n in range(5, 10)]
    operation = write.apply(jvm.org.apache.spark.sql.SaveMode.Append, _none(), _none(), user, *defaults)
    return int(transaction.commit(files.appended(stamp), operation))


def _user_metadata(metadata: dict) -> str:
    """A commit's userMetadata: the same JSON whichever path commits it."""
    return json.dumps(metadata, sort_keys=True, default=str)


def _millis() -> int:
    return time.time_ns() // 1_000_000


def _none():
    from pyspark import SparkContext

    return SparkContext._jvm.scala.Option.empty()


def commit_metadata(spark: SparkSession, path: str, depth: int = 50) -> dict | None:
    """The userMetadata (as a dict) of the table's latest commit that has one among its last `depth`
    commits, skipping e.g. OPTIMIZE and VACUUM commits; None when none has one. Reads the commit infos of
    the Delta log through delta-spark, newest first, on the driver."""
    jvm = spark._jvm
    log = _delta_log(spark, path)
    latest = log.update(False, _none(), _none()).version()
    conf = log.newDeltaHadoopConf()
    delta = jvm.org.apache.spark.sql.delta
    for version in range(latest, max(-1, latest - depth), -1):
        info = delta.DeltaHistoryManager.getCommitInfoOpt(
            log.store(), delta.util.FileNames.unsafeDeltaFile(log.logPath(), version), conf)
        text = info.get().userMetadata() if info.isDefined() else None
        if text is not None and text.isDefined():
            try:
                value = json.loads(text.get())
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def default_store() -> TableStore:
    return DeltaStore()
