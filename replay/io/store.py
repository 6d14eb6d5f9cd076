"""Delta tables behind one small interface, on delta-spark: Spark computes, writes and reads `format("delta")`.

Everything else in Retrace talks to `TableStore` only. Each commit can carry an application transaction
(`txnAppId`/`txnVersion`: a retried micro-batch lands once) and `userMetadata` (what wrote it, and which run).
"""
from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from replay.io import lake_fs
from replay.io.paths import spark_path
from replay.jvm import lookup, once_per_jvm


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

    def read(self, spark: SparkSession, path: str, version: int | None = None) -> DataFrame: ...

    def version(self, path: str) -> int | None: ...

    def read_commit(self, spark: SparkSession, path: str, version: int) -> DataFrame | None: ...

    def read_current(self, spark: SparkSession, path: str) -> DataFrame: ...

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
    _object_store(spark, path)
    return lookup("org.apache.spark.sql.delta.DeltaLog.forTable")(spark._jsparkSession, path)


def _object_store(spark: SparkSession, path: str) -> None:
    """A table on object storage (s3a://): S3A set up from the environment first (replay.io.spark)."""
    if path.startswith("s3a://"):
        from replay.io.spark import use_object_store

        use_object_store(spark, path)


class DeltaStore:
    """delta-spark: appends, `replaceWhere` range replaces, overwrites with the new schema, idempotent commits."""

    def exists(self, path: str) -> bool:
        from delta.tables import DeltaTable

        _object_store(_spark(), path)
        return DeltaTable.isDeltaTable(_spark(), path)

    def read(self, spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
        """The table's rows, at `version` when given (Delta's `versionAsOf`: what a later commit adds is not seen);
        else at its latest version each time a query runs."""
        _object_store(spark, path)
        reader = spark.read.format("delta")
        return (reader if version is None else reader.option("versionAsOf", version)).load(path)

    def read_commit(self, spark: SparkSession, path: str, version: int) -> DataFrame | None:
        """The rows commit `version` added, read from the files it added; None when it removed any (unless
        it overwrote the whole table: then they are the table's rows) or the table needs Delta's reader for
        its files (partitions, column mapping, deletion vectors).

        Why: reading the table rebuilds its state from the log first (three Spark jobs, about 0.5 s) once
        per new version, and a live batch and a replay read back rows they have just committed."""
        found = _added(spark, path, version)
        if found is None or (found.removed and not found.whole):
            return None
        return found.rows(spark)

    def read_current(self, spark: SparkSession, path: str) -> DataFrame:
        """The table's rows at its latest version (as of this call, not of each query), read from the data files
        its checksum lists, or from those of its latest commit when that commit overwrote the whole table; else as
        `read`. Why: Delta's reader rebuilds a table's state from its log at each new version first (three or four
        Spark jobs, about 0.15 s each here), and every output a replay writes is a new version read once after."""
        log = _delta_log(spark, path)
        snapshot = log.update(False, _none(), _none())
        if snapshot.version() < 0:
            return self.read(spark, path)
        listed = _listed_rows(spark, log, snapshot)
        if listed is not None:
            return listed
        found = _added(spark, path, int(snapshot.version()))
        return found.rows(spark) if found is not None and found.whole else self.read(spark, path)

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
        if mode == "append" and replace is None:
            done = _append(df, log, txn, metadata)
        elif mode == "overwrite" or replace is not None:
            done = _whole_file_rewrite(df, log, replace, txn, metadata)
        else:
            done = _SLOW
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
        if before < 0:  # the writer creates the table
            for key, value in created_with(path, df.columns).items():
                writer = writer.option(key, value)
        writer.save(path)
        after = log.unsafeVolatileSnapshot().version()
        return int(after) if after > before else None


# Delta keeps every column's minimum and maximum in each file's statistics; for the tables a replay writes a row
# per journal row, the strings (keys, payloads, reasons) took a fifth of the write and no read filters on them.
STATS_COLUMNS = {
    "journal": "seq,partition,offset,arrival_time,event_time",
    "decisions": "seq,partition,offset,timestamp,arrival_time",
    "dead_letters": "seq,partition,offset,window_start,arrival_time",
    "checkpoints": "batch,seq,entity",
}


# How often each table a live batch commits to every batch writes its Delta log checkpoint (about 1 s each on 2 cores):
# distinct primes near the session's default of 50, so no two of them write one in the same batch before version 2021
# (43 x 47). With 50 for all, every 50th batch wrote all of them: 11 s for the spec's job's batch instead of 2.
LOG_CHECKPOINT_EVERY = {"dead_letters": 43, "decisions": 47, "journal": 53, "windows": 59, "checkpoints": 61}


def created_with(path: str, columns: list[str]) -> dict[str, str]:
    """The table properties a new table at `path` with `columns` gets (by its folder's name, wherever the lake and
    target are): statistics only on the columns reads filter on, for the tables named in STATS_COLUMNS that have them
    all (Delta refuses a property naming a column the table lacks); its own log checkpoint interval, for the tables
    named in LOG_CHECKPOINT_EVERY."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    listed, every = STATS_COLUMNS.get(name), LOG_CHECKPOINT_EVERY.get(name)
    properties = {"delta.dataSkippingStatsColumns": listed} if listed and set(listed.split(",")) <= set(columns) else {}
    return properties if every is None else {**properties, "delta.checkpointInterval": str(every)}


@dataclass(frozen=True)
class _Added:
    """What one commit did: the files it added (and the table's schema), whether it removed any, and whether
    it overwrote the whole table."""

    files: list[str]
    schema: StructType
    removed: bool
    whole: bool

    def rows(self, spark: SparkSession) -> DataFrame:
        """The rows the commit added, read from its files (built only when a caller uses them)."""
        if not self.files:
            return spark.createDataFrame([], self.schema)
        return _parquet_rows(spark, self.schema, self.files)


def _listed_rows(spark: SparkSession, log, snapshot) -> DataFrame | None:
    """The rows of a snapshot of a plain table (_plain_table) from the files its checksum lists (`allFilesInCrc`:
    written for tables of few files); None without that list, or with a deletion vector on a file. `log`: the
    table's DeltaLog, which the files' paths are relative to."""
    if not _plain_table(snapshot.metadata()) or not snapshot.checksumOpt().isDefined():
        return None
    listed = snapshot.checksumOpt().get().allFiles()
    if not listed.isDefined():
        return None
    files, adds = [], listed.get().iterator()
    while adds.hasNext():
        add = adds.next()
        if add.deletionVector() is not None:
            return None
        files.append(spark_path(add.absolutePath(log).toString()))
    schema = StructType.fromJson(json.loads(snapshot.metadata().schema().json()))
    return _parquet_rows(spark, schema, files) if files else spark.createDataFrame([], schema)


def _parquet_rows(spark: SparkSession, schema: StructType, files: list[str]) -> DataFrame:
    """The rows of a plain table's data files (see _plain_table), read as Parquet with the table's schema."""
    return spark.read.schema(schema).parquet(*files)


def _added(spark: SparkSession, path: str, version: int) -> _Added | None:
    """What commit `version` did; None when the table needs Delta's reader (partitions, column mapping,
    deletion vectors)."""
    log = _delta_log(spark, path)
    metadata = log.update(False, _none(), _none()).metadata()
    if not _plain_table(metadata):
        return None
    files, removed, whole, commits = [], False, False, log.getChanges(version, version, _none(), True)
    while commits.hasNext():
        actions = commits.next()._2().iterator()
        while actions.hasNext():
            action = actions.next()
            kind = action.getClass().getSimpleName()
            if kind == "AddFile" and action.deletionVector() is not None:
                return None
            removed = removed or kind == "RemoveFile"
            if kind == "CommitInfo":
                whole = _overwrote_all(action)
            if kind == "AddFile":
                files.append(spark_path(action.absolutePath(log).toString()))
    return _Added(files, StructType.fromJson(json.loads(metadata.schema().json())), removed, whole)


_SLOW = object()  # a commit the fast paths below cannot make: write through the DataFrame writer


def _overwrote_all(info) -> bool:
    """Whether a commit's CommitInfo is a write that replaced the whole table (no replaceWhere predicate)."""
    params = info.operationParameters()
    return (info.operation() == "WRITE" and params.get("mode").isDefined()
            and params.get("mode").get().strip('"') == "Overwrite" and not params.get("predicate").isDefined())


def _append(df: DataFrame, log, txn: AppTransaction | None, metadata: dict | None):
    """An append (tagged with a transaction or not), committed through the Delta transaction API: the new
    version, None when `txn` was already committed, or _SLOW to write through `df.write` instead.

    Why: delta-spark 4.4's writer looks a transaction up in a full state reconstruction of the table
    (three Spark jobs, about 0.5 s per commit here), although the table's checksum file already lists its
    transactions; and even without one, its append took about twice as long as writing the files and
    committing them (a live batch makes two such appends: the journal and the landing manifest). This reads
    the transactions from the checksum, then writes the files and commits them with the same SetTransaction
    action the writer would add. Only for an existing table of the same schema with a checksum (that lists
    its transactions, for `txn`); anything else takes the writer's path."""
    snapshot = _same_schema_snapshot(df, log)
    if snapshot is None:
        return _SLOW
    if txn is not None:
        committed = _committed_version(snapshot.checksumOpt().get(), txn.app_id)
        if committed is _SLOW:
            return _SLOW
        if committed >= txn.version:
            return None
    return _commit([df], log, snapshot, "Append", (), None, txn, metadata)


def _whole_file_rewrite(df: DataFrame, log, replace: Replace | None, txn: AppTransaction | None,
                        metadata: dict | None):
    """An overwrite, or a range replace whose range holds whole files only, committed through the Delta
    transaction API: the new version, None when `txn` was already committed, or _SLOW.

    Why: the writer rebuilds the table's state to list its files first (three Spark jobs, about 0.6 s),
    although Delta keeps the file list, with each file's statistics, in the checksum of a table of up to 50
    files (`allFilesInCrc`). The statistics tell which files hold only replaced rows (removed) and which hold
    none (kept). Anything else (no list, another schema, a file holding both) takes the writer's path. Unlike
    the writer, this does not check that the new rows lie in the replaced range: callers write only those.

    A replace that takes the nulls too (the live windows: emitted ones kept, open ones replaced every batch)
    writes its null and non-null rows to separate files, so the next replace removes whole files; a file that
    holds both (the writer's, or a compaction's) is rewritten here once, its non-null rows kept."""
    snapshot = _same_schema_snapshot(df, log)
    if snapshot is None:
        return _SLOW
    checksum = snapshot.checksumOpt().get()
    listed = checksum.allFiles()
    if not listed.isDefined():
        return _SLOW
    if txn is not None:
        committed = _committed_version(checksum, txn.app_id)
        if committed is _SLOW:
            return _SLOW
        if committed >= txn.version:
            return None
    removed, mixed, files = [], [], listed.get().iterator()
    while files.hasNext():
        add = files.next()
        verdict = True if replace is None else replaced_by(replace, add.stats())
        if verdict is None or (verdict is NULLS and (not _plain_table(snapshot.metadata())
                                                     or add.deletionVector() is not None)):
            return _SLOW
        if verdict is NULLS:
            mixed.append(spark_path(add.absolutePath(log).toString()))
        if verdict:
            removed.append(add)
    if replace is None or not replace.nulls:
        return _commit([df], log, snapshot, "Overwrite", removed, replace, txn, metadata)
    df = df.persist()  # computed once for its two parts
    try:
        values = df.where(F.col(replace.column).isNotNull())
        if mixed:  # the rows of those files that are not replaced
            kept = _parquet_rows(df.sparkSession, df.schema, mixed).where(F.col(replace.column).isNotNull())
            values = values.unionByName(kept)
        return _commit([df.where(F.col(replace.column).isNull()), values], log, snapshot, "Overwrite", removed,
                       replace, txn, metadata)
    finally:
        df.unpersist()


NULLS = "nulls"  # replaced_by: only the file's null rows are replaced (its values lie outside the range)


def replaced_by(replace: Replace, stats: str | None) -> bool | str | None:
    """Whether a file with these Delta statistics holds only rows `replace` replaces (True), none (False),
    only nulls that `replace` replaces besides values it keeps (NULLS), or both or unknown (None)."""
    s = json.loads(stats) if stats else {}
    rows, nulls = s.get("numRecords"), s.get("nullCount", {}).get(replace.column)
    lo, hi = s.get("minValues", {}).get(replace.column), s.get("maxValues", {}).get(replace.column)
    if not isinstance(rows, int) or not isinstance(nulls, int):
        return None
    if rows == nulls:  # no values: only nulls, or an empty file
        return replace.nulls or rows == 0
    if not isinstance(lo, int) or not isinstance(hi, int):
        return None
    inside = lambda v: v >= replace.low and (replace.high is None or v < replace.high)  # noqa: E731
    if inside(lo) and inside(hi) and (nulls == 0 or replace.nulls):
        return True
    if hi < replace.low or (replace.high is not None and lo >= replace.high):
        return NULLS if nulls and replace.nulls else False
    return None


def _plain_table(metadata) -> bool:
    """Whether the table's data files hold its rows as plain Parquet (no partition values in paths, no column
    mapping); a file's rows also need it to have no deletion vector."""
    return metadata.partitionColumns().isEmpty() and not metadata.configuration().contains("delta.columnMapping.mode")


def _same_schema_snapshot(df: DataFrame, log):
    """The table's latest snapshot, if it exists, has `df`'s schema and a checksum; else None."""
    snapshot = log.update(False, _none(), _none())
    if snapshot.version() < 0 or snapshot.schema().simpleString() != df._jdf.schema().simpleString():
        return None
    return snapshot if snapshot.checksumOpt().isDefined() else None


def _committed_version(checksum, app_id: str):
    """The latest version committed for `app_id` as the checksum lists it (-1: none), or _SLOW when the
    checksum does not list the table's transactions."""
    listed = checksum.setTransactions()
    if listed is None or not listed.isDefined():
        return _SLOW
    committed, found = -1, listed.get().iterator()
    while found.hasNext():
        t = found.next()
        if t.appId() == app_id:
            committed = t.version()
    return committed


def _commit(parts: list[DataFrame], log, snapshot, mode: str, removed, replace: Replace | None,
            txn: AppTransaction | None, metadata: dict | None) -> int:
    """Write the files of `parts` (each its own files) and commit them, with `removed` files removed, as the
    writer would (a WRITE operation in `mode`, the transaction's SetTransaction, the userMetadata)."""
    some = lookup("scala.Some")
    transaction = log.startTransaction(_none(), some(snapshot))
    if mode == "Overwrite":
        transaction.readWholeTable()  # a concurrent commit conflicts with this one, as with the writer
    actions = transaction.writeFiles(parts[0]._jdf)
    for part in parts[1:]:
        actions = actions.appendedAll(transaction.writeFiles(part._jdf))
    now = _millis()
    for add in removed:
        actions = actions.appended(add.removeWithTimestamp(now, True))
    if txn is not None:
        actions = actions.appended(lookup("org.apache.spark.sql.delta.actions.SetTransaction")(
            txn.app_id, txn.version, some(lookup("java.lang.Long.valueOf")(now))))
    write = lookup("org.apache.spark.sql.delta.DeltaOperations$Write$.MODULE$")
    user = _none() if metadata is None else some(_user_metadata(metadata))
    predicate = _none() if replace is None else some(replace.predicate())
    operation = write.apply(lookup(f"org.apache.spark.sql.SaveMode.{mode}"), _none(), predicate, user,
                            *_write_defaults())
    return int(transaction.commit(actions, operation))


@once_per_jvm
def _write_defaults() -> list:
    """The WRITE operation's other parameters as the writer leaves them: its defaults, values every commit shares."""
    write = lookup("org.apache.spark.sql.delta.DeltaOperations$Write$.MODULE$")
    return [getattr(write, f"apply$default${n}")() for n in range(5, 10)]


def _user_metadata(metadata: dict) -> str:
    """A commit's userMetadata: the same JSON whichever path commits it."""
    return json.dumps(metadata, sort_keys=True, default=str)


def _millis() -> int:
    return time.time_ns() // 1_000_000


def _none():
    return lookup("scala.Option.empty")()


def commit_metadata(spark: SparkSession, path: str, depth: int = 50) -> dict | None:
    """The userMetadata (as a dict) of the table's latest commit that has one among its last `depth`
    commits, skipping e.g. OPTIMIZE and VACUUM commits; None when none has one. Reads the commit infos of
    the Delta log through delta-spark, newest first, on the driver."""
    log = _delta_log(spark, path)
    latest = log.update(False, _none(), _none()).version()
    conf = log.newDeltaHadoopConf()
    for version in range(latest, max(-1, latest - depth), -1):
        info = lookup("org.apache.spark.sql.delta.DeltaHistoryManager.getCommitInfoOpt")(
            log.store(), lookup("org.apache.spark.sql.delta.util.FileNames.unsafeDeltaFile")(log.logPath(), version),
            conf)
        text = info.get().userMetadata() if info.isDefined() else None
        if text is not None and text.isDefined():
            try:
                value = json.loads(text.get())
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def commits_after(path: str, version: int) -> list[tuple[int, dict]]:
    """(version, userMetadata) of the table's commits after `version` that record one, oldest first: read from the
    Delta log's JSON commit files in Python, so that a sensor needs no Spark session."""
    log, fs = os.path.join(path, "_delta_log"), lake_fs.of(path)
    out = []
    for v, actions in _commits(fs, log, [e.name for e in fs.list(log)], version):
        infos = [a["commitInfo"] for a in actions if "commitInfo" in a]
        text = infos[0].get("userMetadata") if infos else None
        try:
            meta = json.loads(text) if text else None
        except json.JSONDecodeError:
            meta = None
        if isinstance(meta, dict):
            out.append((v, meta))
    return out


def _commits(fs, log: str, names: list[str], after: int) -> Iterator[tuple[int, list[dict]]]:
    """(version, actions) of each JSON commit file among `names` of the Delta log folder `log` after version
    `after`, oldest first (a local or an s3a:// lake: replay.io.lake_fs)."""
    for name in sorted(n for n in names if _COMMIT_FILE.fullmatch(n) and int(n[:20]) > after):
        found = fs.read(os.path.join(log, name))
        lines = found[0].decode().splitlines() if found else []
        yield int(name[:20]), [json.loads(line) for line in lines if line.strip()]


_COMMIT_FILE = re.compile(r"\d{20}\.json")


@dataclass(frozen=True)
class LogStats:
    """A table's rows and each column's least and greatest value, as the Delta log's per-file statistics record
    them (a timestamp as text, e.g. `2024-01-01T00:00:00.000Z`; files without statistics are left out)."""

    rows: int
    low: dict
    high: dict


def log_stats(path: str) -> LogStats | None:
    """The table's statistics, read in Python from the latest checkpoint and the JSON commits after it: no Spark,
    for the code location (at load) and its sensors. None: no table."""
    log, fs = os.path.join(path, "_delta_log"), lake_fs.of(path)
    if not fs.is_dir(log):
        return None
    names = [e.name for e in fs.list(log)]
    done, live = _checkpoint_files(fs, log, names)
    for _, actions in _commits(fs, log, names, done):
        for action in actions:
            if "add" in action:
                live[action["add"]["path"]] = action["add"].get("stats")
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    rows, low, high = 0, {}, {}
    for stats in (json.loads(t) for t in live.values() if t):
        if not stats.get("numRecords"):
            continue
        rows += stats["numRecords"]
        _widen(low, stats.get("minValues"), min)
        _widen(high, stats.get("maxValues"), max)
    return LogStats(rows, low, high)


def _widen(found: dict, values: dict | None, pick) -> None:
    """`found` updated with a file's least (`pick` min) or greatest (max) values of its top-level columns."""
    for column, value in (values or {}).items():
        if not isinstance(value, dict):  # a struct column's values are nested: left out
            found[column] = pick(value, found.get(column, value), key=_comparable)


def least_value(path: str, column: str):
    """The least value of `column` in the table (`log_stats`); None: no table, no rows or no statistics of it."""
    stats = log_stats(path)
    return None if stats is None else stats.low.get(column)


def _checkpoint_files(fs, log: str, names: list[str]) -> tuple[int, dict]:
    """The version of the table's latest (classic, single or multi-part) checkpoint and its files' statistics by
    path; (-1, {}) without one."""
    parts = [n for n in names if _CHECKPOINT_FILE.fullmatch(n)]
    if not parts:
        return -1, {}
    import pyarrow as pa
    import pyarrow.parquet as pq

    version = max(int(n[:20]) for n in parts)
    live = {}
    for name in sorted(n for n in parts if int(n[:20]) == version):
        found = fs.read(os.path.join(log, name))
        if not found:
            continue  # gone since it was listed (a log clean-up)
        for row in pq.read_table(pa.BufferReader(found[0]), columns=["add"]).column("add").to_pylist():
            if row is not None:
                live[row["path"]] = row.get("stats")
    return version, live


_CHECKPOINT_FILE = re.compile(r"\d{20}\.checkpoint(\.\d{10}\.\d{10})?\.parquet")


def _comparable(value):
    """Timestamps in statistics carry their offset (the session's time zone): compared as instants."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return value
    return value


def default_store() -> TableStore:
    return DeltaStore()
