"""The live job over a Kafka topic: a micro-batch is Kafka records; partition, offset and arrival time (the
broker's append time) come from Kafka, the rest from the JSON value, kept whole in `payload` (with the record's key
and headers when the source declares `kafka: {key_as, headers_as}`). Exactly once: the
journal is the record of what was read, so a run starts after the journal's highest offset per partition."""
from __future__ import annotations

import time
from dataclasses import replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.live.batch import LiveStream
from jobs.live.commit import persisted
from jobs.live.options import KafkaSource, LiveOptions
from jobs.live.query import run_query
from jobs.live.report import StreamSummary
from replay.io import journal
from replay.io import kafka_source as kafka
from replay.io.spark import one_job
from replay.model.jobs import Job

RECORDS = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
HEADERS = "headers array<struct<key: string, value: binary>>"  # read only for a source that keeps them


class KafkaStream(LiveStream):
    """Micro-batches of a topic's records."""

    unit = "partitions"

    def __init__(self, spark: SparkSession, lake: str, jobs, source: KafkaSource, options: LiveOptions = LiveOptions(),
                 fields: journal.SourceFields | None = None):
        super().__init__(spark, lake, jobs, options, fields)
        self.source = source
        self.offsets = kafka.journaled_offsets(spark, lake, source.topic, self.store)

    def backlog(self, files_waiting: int | None) -> tuple[dict, str]:
        """Records past the journaled offset of each partition (None when the broker cannot be asked)."""
        ends = kafka.end_offsets(self.spark, self.source.bootstrap, self.source.topic, self.source_partitions)
        return {p: max(0, ends[p] - self.offsets.get(p, -1) - 1) if p in ends else None
                for p in self.source_partitions}, "records"

    def input_waiting(self) -> bool:
        """Records past the journaled offsets (unknown when the broker cannot be asked: then none are assumed)."""
        backlog, _ = self.backlog(None)
        return any(n for n in backlog.values())

    def _process(self, records: DataFrame) -> None:
        began = time.perf_counter()
        if not self.caught_up:
            tail = self.tail()
            if tail is not None:  # finish what a crashed run journaled (its offsets are not read again)
                self.decide(tail[1], len(tail[0]), began, trigger="recovery")
                began = time.perf_counter()
            self.caught_up = True
        self.start_followers()
        raw = kafka.raw_from_records(kafka.after(records, self.offsets), self.source.topic, self.fields)
        with persisted(journal.normalize(raw, self.source_partitions)) as rows:
            with one_job(rows.sparkSession):  # the stream's session (Spark's clone of `self.spark`)
                per_partition = {r["partition"]: r for r in rows.groupBy("partition").agg(
                    F.count("*").alias("n"), F.max("offset").alias("offset")).collect()}
            if not per_partition:
                return
            base = self.lead.seq + 1
            new = self.journal_batch(kafka.with_seq(rows, base), base, sum(r["n"] for r in per_partition.values()))
        self.offsets.update({p: r["offset"] for p, r in per_partition.items()})
        self.decide(new.rows, len(per_partition), began, reads=new.reads)


def check_topic(spark: SparkSession, source: KafkaSource) -> kafka.TopicInfo:
    """The topic as the broker describes it, refused (before anything is written) when its timestamps are not
    arrival times."""
    info = kafka.describe(spark, source.bootstrap, source.topic)
    kafka.check_arrival_time(info, source.trust_create_time)
    return info


def run_kafka(spark: SparkSession, source: KafkaSource, info: kafka.TopicInfo, lake: str, jobs: tuple[Job, ...],
              options: LiveOptions = LiveOptions(), fields: journal.SourceFields | None = None) -> StreamSummary:
    """Micro-batches over the topic, from the offsets after the journal's, until it is caught up with the topic
    as it was at start (`until_idle`), `max_batches` were committed, or the process is stopped. The partition
    count is the topic's (`info`: as `check_topic` described and accepted it, before any lock was taken)."""
    began = time.perf_counter()
    wanted = options.partitions
    if wanted is not None and (isinstance(wanted, int) and wanted != info.partitions
                               or not isinstance(wanted, int) and sorted(wanted) != list(range(info.partitions))):
        raise ValueError(f"--partitions {options.partitions} differs from the {info.partitions} partitions of topic "
                         f"{source.topic}")
    stream = KafkaStream(spark, lake, jobs, source, replace(options, partitions=info.partitions), fields)
    headers = stream.fields.kafka.headers_as is not None
    stream.process(spark.createDataFrame([], RECORDS + (f", {HEADERS}" if headers else "")))  # finish a crashed batch
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", source.bootstrap)
              .option("subscribe", source.topic).option("includeHeaders", str(headers).lower())
              .option("startingOffsets", kafka.starting_offsets(source.topic, info.partitions, stream.offsets)))
    if source.max_records_per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(source.max_records_per_batch))
    return run_query(stream, reader.load(), began)
