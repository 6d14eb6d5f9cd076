"""What a target of a job holds, in a few numbers: events by action and reason, windows emitted, dead letters."""
from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from replay.io.lake import TargetDir
from replay.model.jobs import Job
from replay.ops import outputs


def summarize(spark: SparkSession, where: TargetDir, job: Job) -> dict:
    """Events by action and reason, windows emitted (and flushed at the end), the events in them and dead letters
    by reason. The events in windows are the sum of the job's aggregate that counts members (`count(*)`): with
    hopping windows that overlap an event is in several, so the sum is `window_memberships`; a job without
    such an aggregate has `windowed_events: null` and a note saying why (not 0)."""
    windows, dead_letters, hourly = (outputs.read(spark, where, n) for n in ("windows", "dead_letters", "metrics"))
    # every event with a reason or not accepted is stored; the metrics count the events and clock rows
    exceptions = outputs.exceptions(spark, where)
    totals = hourly.agg(F.sum("events").alias("events"), F.sum("clock_rows").alias("clock_rows")).first()
    events = totals["events"] or 0
    by_action = {r["action"]: r["n"] for r in exceptions.where("action != 'accepted'").groupBy("action")
                 .agg(F.count("*").alias("n")).collect()}
    if events > sum(by_action.values()):
        by_action["accepted"] = events - sum(by_action.values())
    by_reason = {r["reason"]: r["n"] for r in exceptions.select(F.explode("reasons").alias("reason"))
                 .groupBy("reason").agg(F.count("*").alias("n")).collect()}
    letters = {r["reason"]: r["n"] for r in dead_letters.groupBy("reason").agg(F.count("*").alias("n")).collect()}
    counted = job.counting_aggregate
    windowed = F.sum(F.col(counted)) if counted is not None else F.lit(None)
    w = windows.agg(F.count("*").alias("windows"), windowed.alias("windowed"),
                    F.count(F.when(F.col("emitted_at").isNull(), 1)).alias("flushed")).first()
    return {
        "events": events,
        "clock_rows": totals["clock_rows"] or 0,
        "by_action": dict(sorted(by_action.items())),
        "by_reason": dict(sorted(by_reason.items())),
        "windows": w["windows"], **_in_windows(job, w["windowed"]), "flushed_windows": w["flushed"],
        "dead_letters": dict(sorted(letters.items())),
    }


def _in_windows(job: Job, total: int | None) -> dict:
    """How many events the windows hold, under a name that says what the number is."""
    window = job.policy.window
    if job.counting_aggregate is None:
        return {"windowed_events": None,
                "windowed_events_note": f"job {job.name} has no count(*) aggregate, so its windows do not say how "
                                        "many events they hold"}
    if window is not None and window.kind == "hopping" and window.hop < window.size:
        return {"window_memberships": total or 0}  # an event is counted once in each overlapping window
    return {"windowed_events": total or 0}
