"""The live job over landing files (a folder or an S3 prefix): a micro-batch is landing lines (source, source_line,
line), journaled in (file, line) order through Retrace's `retrace_landing` streaming source (each file's manifest row
follows at the next flush); files already in the journal are never read again."""
from __future__ import annotations

import json
import sys
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.live.batch import Journaled, LiveStream, processing_time
from jobs.live.options import FileSource, LiveOptions
from jobs.live.query import run_query
from jobs.live.report import StreamSummary
from replay.io import journal, manifest
from replay.io import landing as landings
from replay.io.spark import one_job
from replay.model.jobs import Job
from replay.model.sources import PLAIN_BATCH, PLAIN_LIVE

LINES = "source string, source_line long, line string"


class FileStream(LiveStream):
    """Micro-batches of landing lines."""

    def __init__(self, spark: SparkSession, lake: str, jobs, options: LiveOptions = LiveOptions(),
                 fields: journal.SourceFields | None = None, landing: landings.Landing | None = None):
        super().__init__(spark, lake, jobs, options, fields)
        self.landing = landing  # to record the files' manifest and report the files waiting
        self.sources: set[str] | None = None  # landing files journaled (for the lag report), loaded lazily

    def _process(self, lines: DataFrame) -> None:
        began = time.perf_counter()
        with one_job(lines.sparkSession):  # the stream's session (Spark's clone of `self.spark`)
            per_file = {r["source"]: r for r in lines.groupBy("source").agg(
                F.count("*").alias("count"), F.max("source_line").alias("lines")).collect()}
        files = sorted(per_file)
        tail = None if self.caught_up else self.tail()
        if tail is not None:
            pending, rows = tail
            if set(files) <= pending:  # a retried batch that an earlier attempt journaled (or none: at start)
                self.decide(rows, len(pending), began, trigger="recovery")
                return
            if pending & set(files):
                raise RuntimeError(f"landing files {sorted(pending & set(files))} are half journaled")
            self.decide(rows, len(pending), began, trigger="recovery")  # finish what a crashed run journaled
            began = time.perf_counter()
        self.caught_up = True
        self.start_followers()
        if not files:
            return
        new, observed = self._append(lines, {f: per_file[f]["lines"] for f in files})
        if self.sources is not None:
            self.sources |= set(files)
        self.observed.landed(observed)  # their manifest rows: written at the next flush, beside the batches
        self.decide(new.rows, len(files), began, reads=new.reads)

    def _append(self, lines: DataFrame, per_file: dict[str, int]) -> tuple[Journaled, dict[str, manifest.Recorded]]:
        """Journal the batch (`per_file`: each file's line count): its rows in (file, line) order, then the clock
        rows; returns the new rows, and the files as they were read (their manifest rows, recorded by the caller)."""
        files = sorted(per_file)
        base = self.lead.seq + 1
        observed = manifest.observe(self.landing, files) if self.landing is not None else {}
        raw = journal.raw_from_lines(lines, self.fields)
        origins = self.fields.origins
        plain = (set() if origins.declared or self.landing is None
                 else {f for f in files if per_file[f] and landings.is_plain(self.landing, f)})
        if plain or not origins.from_fields:  # partition, offset or arrival recorded by Retrace
            following = {p: s.last_offset + 1 for p, s in self.lead.cp.source.items() if s.last_offset is not None}
            now = processing_time(self.options.clock, None)  # `observed`: when this batch is journaled
            # plain files of an undeclared source: arrival observed on the system clock, else the file's mtime
            default = PLAIN_LIVE if self.options.clock == "system" else PLAIN_BATCH
            raw = journal.place_undeclared(self.spark, raw, origins, default, plain, files,
                                           {f: r.mtime_ns for f, r in observed.items()}, following, now)
        rows = journal.normalize(raw, self.source_partitions)
        sequenced = journal.with_seq(self.spark, rows, files, per_file, base)
        return self.journal_batch(sequenced, base, sum(per_file.values())), observed

    def files_waiting(self) -> int | None:
        if self.landing is None:
            return None
        return sum(1 for f in self.landing.files() if f.name not in self._journaled())

    def input_waiting(self) -> bool:
        """A landing file not journaled yet."""
        return self.landing is not None and any(f.name not in self._journaled() for f in self.landing.files())

    def _journaled(self) -> set[str]:
        if self.sources is None:
            self.sources = journal.journaled_sources(self.spark, self.lake, self.store)
        return self.sources


def run_files(spark: SparkSession, source: FileSource, lake: str, jobs: tuple[Job, ...],
              options: LiveOptions = LiveOptions(), fields: journal.SourceFields | None = None) -> StreamSummary:
    """Micro-batches over the landing until it is idle (`until_idle`), `max_batches` were committed, or the
    process is stopped; first reports journaled landing files that changed since (they are never re-read)."""
    began = time.perf_counter()
    if fields is not None and fields.origins.arrival == "observed" and options.clock != "system":
        raise ValueError("arrival_time: observed is the system clock's time when a row is journaled; run the live job "
                         "with --clock system")
    landing = landings.Landing.of(source.landing)
    journaled = journal.journaled_sources(spark, lake)
    for change in manifest.check_journaled(spark, lake, landing, sorted(journaled)):
        print(change.line(), file=sys.stderr, flush=True)
    stream = FileStream(spark, lake, jobs, options, fields, landing)
    stream.process(spark.createDataFrame([], LINES))  # finish a crashed batch
    landings.register(spark)
    reader = (spark.readStream.format("retrace_landing").option("landing", source.landing)
              .option("exclude", json.dumps(sorted(journaled))))
    if source.max_files_per_batch:
        reader = reader.option("maxFilesPerBatch", str(source.max_files_per_batch))
    if source.max_bytes_per_batch:
        reader = reader.option("maxBytesPerBatch", str(source.max_bytes_per_batch))
    return run_query(stream, reader.load(), began)
