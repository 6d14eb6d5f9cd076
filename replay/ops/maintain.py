"""`replay maintain`, table maintenance of a lake (also the Dagster `maintenance` job): per Delta table, compact
small files (OPTIMIZE), keep only the last N checkpoints of each target, and vacuum files that no version
within the retention needs. Micro-batches leave many small files; reads slow down with each one.

Only the tables Retrace writes are touched (`Lake.tables`: the journal's, and each target's by name), in a folder
that is a lake (`replay.io.lake_marker`): a file or table of the user's beside them is left as it is.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from replay.io import checkpoints, lake_fs, lake_marker
from replay.io.lake import CHECKPOINT_TABLES, Lake, TargetDir, is_table
from replay.model.durations import format_duration, parse_duration

DEFAULT_RETENTION = "7d"  # Delta's own default (delta.deletedFileRetentionDuration)
DEFAULT_KEEP_CHECKPOINTS = 100
HOUR_US = 3_600_000_000


@dataclass
class TableReport:
    table: str  # relative to the lake, e.g. jobs/default/outputs/production/decisions
    version_before: int
    version_after: int
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int
    files_vacuumed: int = 0
    checkpoints_removed: int = 0  # batches whose checkpoint rows were deleted


@dataclass
class MaintenanceReport:
    lake: str
    retention: str
    keep_checkpoints: int
    tables: list[TableReport]

    def totals(self) -> dict:
        t = self.tables
        return {"tables": len(t), "files_before": sum(r.files_before for r in t),
                "files_after": sum(r.files_after for r in t), "bytes_before": sum(r.bytes_before for r in t),
                "bytes_after": sum(r.bytes_after for r in t), "files_vacuumed": sum(r.files_vacuumed for r in t),
                "checkpoints_removed": sum(r.checkpoints_removed for r in t)}

    def to_dict(self) -> dict:
        return {"lake": self.lake, "retention": self.retention, "keep_checkpoints": self.keep_checkpoints,
                "totals": self.totals(), "tables": [asdict(r) for r in self.tables]}


def maintain(spark: SparkSession, lake: str, retention: str = DEFAULT_RETENTION,
             keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS) -> MaintenanceReport:
    """Prune checkpoints, OPTIMIZE, then VACUUM every table of the lake (`Lake.tables`: the journal's and every
    job's targets', scratch ones left alone); what it did, per table."""
    retention_us = parse_duration(retention, "retention")
    if retention_us < 0:
        raise ValueError(f"retention: {retention!r} must not be negative")
    if keep_checkpoints < 1:
        raise ValueError(f"keep_checkpoints: {keep_checkpoints} must be at least 1 "
                         f"(the live job resumes from the last)")
    if not lake_fs.of(lake).is_dir(lake):
        raise FileNotFoundError(f"no lake at {lake}")
    lake_marker.claim(lake)  # a folder that is not a lake is refused: its files are never vacuumed
    place, removed = Lake(lake), {}
    for where in place.targets():
        if is_table(where.table("checkpoints")):
            removed.update(prune_checkpoints(spark, where, keep_checkpoints))
    reports = [_maintain_table(spark, place, path, retention_us, removed.get(path, 0)) for path in place.tables()]
    return MaintenanceReport(lake, format_duration(retention_us), keep_checkpoints, reports)


def prune_checkpoints(spark: SparkSession, where: TargetDir, keep: int) -> dict[str, int]:
    """Delete the checkpoint rows of every batch but the last `keep` (by batch, as `checkpoints.load` picks
    them), except the open windows the kept ones build on (saved since their whole save: `checkpoints`); returns
    the batches removed per table path. A range replay from before the oldest checkpoint kept starts from the
    journal's start instead (slower, same result)."""
    from delta.tables import DeltaTable

    marks = (spark.read.format("delta").load(where.table("checkpoints"))
             .where(F.col("entity") == "batch")
             .select("batch", F.coalesce(F.col("id").cast("long"), F.col("batch")).alias("whole")).distinct())
    kept = marks.orderBy(F.col("batch").desc()).limit(keep).collect()
    if len(kept) < keep:
        return {}
    oldest, whole = min(r["batch"] for r in kept), min(r["whole"] for r in kept)
    out = {}
    for table in CHECKPOINT_TABLES:
        path = where.table(table)
        if not is_table(path):
            continue
        doomed = F.col("batch") < oldest
        if table == "checkpoints":  # the open windows of the batches since the kept ones' whole save stay
            doomed = (doomed & (F.col("entity") != checkpoints.WINDOW)) | (F.col("batch") < whole)
        old = spark.read.format("delta").load(path).where(doomed)
        n = old.select("batch").distinct().count()
        if n:
            DeltaTable.forPath(spark, path).delete(doomed)
        out[path] = n
    return out


def _maintain_table(spark, place: Lake, path: str, retention_us: int, checkpoints_removed: int) -> TableReport:
    from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, path)
    before = _detail(table)
    table.optimize().executeCompaction()
    hours = retention_us / HOUR_US
    with _retention_check(spark, hours), _conf(spark, LISTING, str(spark.sparkContext.defaultParallelism)):
        doomed = spark.sql(f"VACUUM delta.`{path}` RETAIN {hours} HOURS DRY RUN").count()
        if doomed:
            table.vacuum(hours)
    after = _detail(table)
    return TableReport(place.relative(path), before["version"], after["version"], before["files"], after["files"],
                       before["bytes"],
                       after["bytes"], doomed, checkpoints_removed)


def _detail(table) -> dict:
    d = table.detail().select("numFiles", "sizeInBytes").first()
    version = table.history(1).select("version").first()["version"]
    return {"files": int(d["numFiles"]), "bytes": int(d["sizeInBytes"]), "version": int(version)}


# VACUUM lists the table's files in as many tasks as this says (Spark's default: 10000, minutes on 2 cores)
LISTING = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


@contextmanager
def _conf(spark: SparkSession, key: str, value: str):
    previous = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


@contextmanager
def _retention_check(spark: SparkSession, hours: float):
    """Delta refuses a retention shorter than the table's `delta.deletedFileRetentionDuration` (7 days by
    default) unless `retentionDurationCheck` is off: a shorter one is asked for explicitly, so allow it here
    (time travel to versions older than the retention then fails, and so may readers running that long)."""
    key = "spark.databricks.delta.retentionDurationCheck.enabled"
    if hours >= 7 * 24:
        yield
        return
    previous = spark.conf.get(key, "true")
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        spark.conf.set(key, previous)
