"""The live job (`replay stream`, the Dagster `live` job): Spark Structured Streaming over landing files or a
Kafka topic; each micro-batch is journaled first, then decided by every job on the source from its own checkpoint.

In named parts: `options` (what it reads, how it runs), `batch` (the micro-batch core and clock rows),
`consumers` (the jobs on the source), `commit` (the commit protocol of one job's batch), `observe` (lag and
diagnostics), `deferred` (the metrics, lag and diagnostics written every few batches), `files` and `kafka` (the
two sources), `query` (the streaming query and its heartbeats), `offsets` (what the journal held before a batch),
`lag` and `diagnostics` (their tables).
"""
from __future__ import annotations

from contextlib import ExitStack

from pyspark.sql import SparkSession

from jobs.live.options import FileSource, KafkaSource, LiveOptions
from jobs.live.report import StreamSummary
from replay.io import landing as landings
from replay.io import lake_marker, locks
from replay.io.journal import KAFKA_ONLY, SourceFields
from replay.io.lake import Lake
from replay.model.jobs import Job


def run_stream(spark: SparkSession, source: FileSource | KafkaSource, lake: str, jobs: tuple[Job, ...] | list[Job],
               options: LiveOptions = LiveOptions(), fields: SourceFields | None = None) -> StreamSummary:
    """Run the live job over `source` for `jobs` (the first is the lead: `jobs.live.consumers`), `fields` naming
    the payload's event time and key. Holds the journal's lock and each job's target's (one writer at a time)."""
    from jobs.live.files import run_files
    from jobs.live.kafka import check_topic, run_kafka

    topic = check_topic(spark, source) if isinstance(source, KafkaSource) else None  # a refused topic: lake untouched
    if isinstance(source, FileSource):
        if fields is not None and fields.kafka.declared:
            raise ValueError(KAFKA_ONLY)
        landings.check_apart(source.landing, lake)  # a lake inside its landing: refused before any lock is made
    with writer_locks(lake, jobs, options.target, "stream"):
        if topic is not None:
            return run_kafka(spark, source, topic, lake, tuple(jobs), options, fields)
        return run_files(spark, source, lake, tuple(jobs), options, fields)


def writer_locks(lake: str, jobs, target: str, command: str, wait: float | None = None) -> ExitStack:
    """The journal's lock and the target's lock of every job (entered; close the stack to release them). Every
    target is validated, and the folder claimed as a lake, before the first lock file is made."""
    place = Lake(lake)
    paths = [place.journal_lock, *(place.target(job.name, target).lock for job in jobs)]
    lake_marker.claim(lake)
    stack = ExitStack()
    try:
        for path in paths:
            stack.enter_context(locks.hold(path, command, wait=wait))
    except BaseException:
        stack.close()
        raise
    return stack
