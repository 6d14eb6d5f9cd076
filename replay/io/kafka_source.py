"""Kafka as the live job's source: a topic's records become journal rows.

Kafka gives `partition` and `offset`, and with `message.timestamp.type=LogAppendTime` the record timestamp
is the broker's append time, the spec's arrival time (broker enqueue time). The record value is the event
payload (JSON with the landing line's other fields). The journal is the record of what was read: the job
resumes after the highest journaled offset of each partition, so Spark's checkpoint stays scratch.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from replay.io import journal
from replay.io.lake import Lake
from replay.io.store import TableStore, default_store

TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}  # Spark's `timestampType` column
# A record value that is not UTF-8 text is kept in `payload` as `<N bytes, not UTF-8, hex: 0aff...>`: angle brackets,
# so it cannot be taken for JSON, a URL or text that was sent; hex, so the bytes can be read back exactly.
NOT_TEXT = "<{n} bytes, not UTF-8, hex: {hex}>"


def source_prefix(topic: str) -> str:
    """What the journal's `source` of a topic's records starts with: `kafka://TOPIC/PARTITION`, with the
    record's offset as `source_line`, so (source, source_line) names one record as it does one landing line."""
    return f"kafka://{topic}/"


def source_column(topic: str) -> F.Column:
    return F.concat(F.lit(source_prefix(topic)), F.col("partition").cast("string"))


def of_topic(topic: str) -> F.Column:
    """Journal rows read from the topic."""
    return F.col("source").startswith(source_prefix(topic))


@dataclass(frozen=True)
class TopicInfo:
    topic: str
    partitions: int
    timestamp_type: str  # message.timestamp.type: CreateTime or LogAppendTime


def _admin(jvm, bootstrap: str, timeout_s: int):
    """kafka-clients' Admin in the driver JVM (on its classpath with Spark's Kafka source), through py4j."""
    props = jvm.java.util.Properties()
    props.setProperty("bootstrap.servers", bootstrap)
    props.setProperty("default.api.timeout.ms", str(timeout_s * 1000))
    props.setProperty("request.timeout.ms", str(timeout_s * 1000))
    return jvm.org.apache.kafka.clients.admin.Admin.create(props)


def describe(spark: SparkSession, bootstrap: str, topic: str, timeout_s: int = 30) -> TopicInfo:
    """The topic's partition count and timestamp type, from the broker's metadata (kafka-clients' Admin,
    through py4j in the driver JVM, which has kafka-clients on its classpath with Spark's Kafka source)."""
    jvm = spark.sparkContext._jvm
    seconds = jvm.java.util.concurrent.TimeUnit.SECONDS
    admin = _admin(jvm, bootstrap, timeout_s)
    try:
        try:
            names = jvm.java.util.Collections.singletonList(topic)
            described = admin.describeTopics(names).allTopicNames().get(timeout_s, seconds)
            partitions = described.get(topic).partitions().size()
            resource = jvm.org.apache.kafka.common.config.ConfigResource(
                jvm.org.apache.kafka.common.config.ConfigResource.Type.TOPIC, topic)
            configs = admin.describeConfigs(jvm.java.util.Collections.singletonList(resource)).all().get(
                timeout_s, seconds)
            timestamp_type = configs.get(resource).get("message.timestamp.type").value()
        except Exception as e:  # py4j's Py4JJavaError: the broker's answer (unknown topic, timeout) in one line
            cause = str(getattr(e, "java_exception", e)).splitlines()[0]
            raise ValueError(f"--topic {topic}: cannot describe it on --kafka-bootstrap {bootstrap}: {cause}") from None
    finally:
        admin.close()
    return TopicInfo(topic, int(partitions), str(timestamp_type))


def end_offsets(spark: SparkSession, bootstrap: str, topic: str, partitions: list[int],
                timeout_s: int = 10) -> dict[int, int]:
    """The offset the next record of each partition will get (Admin.listOffsets latest); {} when the broker
    does not answer within `timeout_s` (the backlog is then unknown, not an error of the live job)."""
    jvm = spark.sparkContext._jvm
    admin = _admin(jvm, bootstrap, timeout_s)
    try:
        latest = jvm.org.apache.kafka.clients.admin.OffsetSpec.latest()
        wanted = jvm.java.util.HashMap()
        for p in partitions:
            wanted.put(jvm.org.apache.kafka.common.TopicPartition(topic, p), latest)
        found = admin.listOffsets(wanted).all().get(timeout_s, jvm.java.util.concurrent.TimeUnit.SECONDS)
        return {p: int(found.get(jvm.org.apache.kafka.common.TopicPartition(topic, p)).offset()) for p in partitions}
    except Exception:  # noqa: BLE001 - py4j's error for a broker that does not answer: the backlog is unknown
        return {}
    finally:
        admin.close()


def check_arrival_time(info: TopicInfo, trust_create_time: bool) -> None:
    """Arrival time is the broker's append time; a CreateTime topic's timestamps are the producers' clocks."""
    if info.timestamp_type == "LogAppendTime" or trust_create_time:
        return
    raise ValueError(f"--topic {info.topic}: message.timestamp.type is {info.timestamp_type}, so record timestamps "
                     f"come from producer clocks, not the broker's; set the topic's message.timestamp.type="
                     f"LogAppendTime, or pass --trust-create-time to use producer times as arrival times")


def journaled_offsets(spark: SparkSession, lake: str, topic: str, store: TableStore | None = None) -> dict[int, int]:
    """The highest journaled offset of each partition of the topic (events and malformed records)."""
    store = store or default_store()
    path = Lake(lake).journal
    if not store.exists(path):
        return {}
    rows = store.read(spark, path).where(of_topic(topic))
    found = rows.groupBy("partition").agg(F.max("offset").alias("offset")).collect()
    return {r["partition"]: r["offset"] for r in found}


def starting_offsets(topic: str, partitions: int, journaled: dict[int, int]) -> str:
    """Spark's `startingOffsets`: after the journaled offset of each partition, else the earliest (-2)."""
    return json.dumps({topic: {str(p): journaled[p] + 1 if p in journaled else -2 for p in range(partitions)}})


def after(records: DataFrame, journaled: dict[int, int]) -> DataFrame:
    """The records past each partition's journaled offset (a batch Spark hands over again is journaled once)."""
    if not journaled:
        return records
    done = F.create_map(*[F.lit(x) for p, o in sorted(journaled.items()) for x in (p, o)])
    return records.where(F.col("offset") > F.coalesce(F.try_element_at(done, F.col("partition")), F.lit(-1)))


def record_text() -> F.Column:
    """The record value as text: itself when UTF-8, else NOT_TEXT (its length and its bytes in hex)."""
    before, after = NOT_TEXT.split("{n}")
    middle, end = after.split("{hex}")
    return F.when(F.col("value").isNull(), F.lit(None).cast("string")).when(
        F.is_valid_utf8(F.col("value").cast("string")), F.col("value").cast("string")).otherwise(
        F.concat(F.lit(before), F.octet_length("value").cast("string"), F.lit(middle), F.lower(F.hex("value")),
                 F.lit(end)))


def raw_from_records(records: DataFrame, topic: str, names: journal.SourceFields | None = None) -> DataFrame:
    """Kafka records -> the raw shape `journal.normalize` takes: partition, offset and arrival time from
    Kafka, the other fields from the JSON value (`names`: which fields hold the event time and the key);
    a value that is not a JSON object is `unparsed`."""
    names = names or journal.SourceFields()
    ours = {"partition": F.col("partition").cast("string"), "offset": F.col("offset").cast("string"),
            "arrival_time": F.col("timestamp").cast("string")}
    # the text first, then one parse of it into a struct (as journal.raw_from_lines): an expression that
    # names `from_json(...)` once per field is evaluated once per field
    lines = records.select(source_column(topic).alias("source"), F.col("offset").alias("source_line"),
                           record_text().alias("line"), *[v.alias(f) for f, v in ours.items()])
    parsed = lines.select("*", F.from_json("line", names.raw_schema()).alias("_fields"),
                          F.json_object_keys("line").isNull().alias("unparsed"))
    return names.recognised(parsed.select(
        "source", "source_line", "line",
        *[(F.col(f) if f in ours else F.col("_fields")[c]).alias(f) for f, c in zip(journal.FIELDS, names.columns())],
        *[F.col("_fields")[c].alias(m) for m, c in names.marks().items()],
        "unparsed"))


def with_seq(rows: DataFrame, base: int) -> DataFrame:
    """seq = base + rank in (arrival time, partition, offset) order: the broker's append order; records of one
    produce batch share an append time, and their offsets break the tie."""
    order = Window.orderBy("arrival_time", "partition", "offset")
    seq = (F.lit(base) + F.row_number().over(order) - 1).cast("long")
    return rows.select(seq.alias("seq"), *[c for c in journal.names() if c != "seq"])
