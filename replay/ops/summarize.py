"""What a target of a job holds, in a few numbers: events by action and reason, windows emitted, dead letters."""
from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from replay.io.lake import TargetDir
from replay.io.store import default_store
from replay.model.jobs import Job


def summarize(spark: SparkSession, where: TargetDir, job: Job) -> dict:
    """Events by action and reason, windows emitted (and flushed at the end), the events they count (the job's
    aggregate that counts members; 0 without one) and dead letters by reason."""
    store = default_store()
    decisions, windows, dead_letters = (store.read(spark, where.table(n)) for n in ("decisions", "windows",
                                                                                    "dead_letters"))
    by_action = {r["action"]: r["n"] for r in decisions.where("kind = 'event'").groupBy("action")
                 .agg(F.count("*").alias("n")).collect()}
    by_reason = {r["reason"]: r["n"] for r in decisions.select(F.explode("reasons").alias("reason"))
                 .groupBy("reason").agg(F.count("*").alias("n")).collect()}
    letters = {r["reason"]: r["n"] for r in dead_letters.groupBy("reason").agg(F.count("*").alias("n")).collect()}
    counted = job.counting_aggregate
    windowed = F.sum(F.col(counted)) if counted is not None else F.lit(None)
    w = windows.agg(F.count("*").alias("windows"), windowed.alias("windowed"),
                    F.count(F.when(F.col("emitted_at").isNull(), 1)).alias("flushed")).first()
    return {
        "events": sum(by_action.values()),
        "clock_rows": decisions.where("kind = 'clock'").count(),
        "by_action": dict(sorted(by_action.items())),
        "by_reason": dict(sorted(by_reason.items())),
        "windows": w["windows"], "windowed_events": w["windowed"] or 0, "flushed_windows": w["flushed"],
        "dead_letters": dict(sorted(letters.items())),
    }
