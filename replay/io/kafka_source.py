"""Kafka as the live job's source: a topic's records become journal rows.

Kafka gives `partition` and `offset`, and with `message.timestamp.type=LogAppendTime` the record timestamp
is the broker's append time, the spec's arrival time (broker enqueue time). The record value is the event
payload (JSON with the landing line's other fields); a source that declares `kafka: {key_as, headers_as}` keeps the
record's key and headers in it too, as those top-level fields (`with_key_and_headers`). The journal is the record
of what was read: the job resumes after the highest journaled offset of each partition, so Spark's checkpoint stays
scratch.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from replay.io import journal
from replay.io.lake import Lake
from replay.io.store import TableStore, default_store
from replay.model.sources import DEAD_VALUE, KafkaFields

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


def record_text(column: str | F.Column = "value") -> F.Column:
    """The record value (or another binary column: its key, a header's value) as text: itself when UTF-8, else
    NOT_TEXT (its length and its bytes in hex)."""
    before, after = NOT_TEXT.split("{n}")
    middle, end = after.split("{hex}")
    raw = F.col(column) if isinstance(column, str) else column
    return F.when(raw.isNull(), F.lit(None).cast("string")).when(
        F.is_valid_utf8(raw.cast("string")), raw.cast("string")).otherwise(
        F.concat(F.lit(before), F.octet_length(raw).cast("string"), F.lit(middle), F.lower(F.hex(raw)),
                 F.lit(end)))


def headers_object() -> F.Column:
    """The record's headers (Spark's `headers`: array<struct<key, value binary>>) as a map header name -> its
    value as text (`record_text`), in the order names first appear; a name sent more than once keeps every value,
    as an array in order. Null when the record has no headers."""
    headers = F.col("headers")
    texts = F.transform(headers, lambda h: F.struct(h["key"].alias("name"), record_text(h["value"]).alias("text")))
    names = F.array_distinct(F.transform(headers, lambda h: h["key"]))
    values = F.transform(names, lambda n: F.transform(F.filter(texts, lambda t: t["name"] == n), lambda t: t["text"]))
    one_or_all = F.transform(values, lambda v: F.when(F.size(v) == 1, v[0].cast("variant")).otherwise(
        v.cast("variant")))
    return F.when(F.size(headers) > 0, F.map_from_arrays(names, one_or_all))


def with_key_and_headers(value: F.Column, kafka: KafkaFields) -> tuple[F.Column, F.Column]:
    """(payload text, unparsed) of a record whose source declares `kafka`: the value's JSON object text as sent,
    with the record's key (text, NOT_TEXT when not UTF-8, null when it has none) added as field `key_as` and its
    headers (`headers_object`, null when none) as `headers_as`, after the value's own fields. A value that is not
    a JSON object, or already has a field of either name, is `unparsed` (a malformed dead letter): its payload is
    then `{"value_text": value text, key_as: ..., headers_as: ...}`, so nothing the record held is lost."""
    added = [c.alias(n) for n, c in ((kafka.key_as, record_text("key")), (kafka.headers_as, headers_object()))
             if n is not None]
    ours = [n for n in (kafka.key_as, kafka.headers_as) if n is not None]
    keep_nulls = {"ignoreNullFields": "false"}
    fields = F.to_json(F.struct(*added), keep_nulls)  # {"key_as": ..., "headers_as": ...}
    keys = F.json_object_keys(value)
    # the value's text up to its closing brace, then ours: a value is spliced, never re-serialised
    spliced = F.concat(F.regexp_replace(value, r"\}\s*$", ""), F.when(F.size(keys) > 0, F.lit(",")).otherwise(""),
                       F.substring(fields, 2, 1 << 30))
    # a value with text after its object (`{..} junk`) ends before our fields: they are not among the keys read
    clash = F.exists(keys, lambda k: k.isin(*ours))
    parsed = F.array_contains(F.json_object_keys(spliced), ours[0])
    unparsed = F.coalesce(keys.isNull() | clash | ~parsed, F.lit(True))
    dead = F.to_json(F.struct(value.alias(DEAD_VALUE), *added), keep_nulls)
    return F.when(unparsed, dead).otherwise(spliced), unparsed


def raw_from_records(records: DataFrame, topic: str, names: journal.SourceFields | None = None) -> DataFrame:
    """Kafka records -> the raw shape `journal.normalize` takes: partition, offset and arrival time from
    Kafka, the other fields from the JSON value (`names`: which fields hold the event time and the key);
    a value that is not a JSON object is `unparsed`. A source that declares `names.kafka` journals the record's
    key and headers in the payload beside the value (`with_key_and_headers`; `headers` read only then)."""
    names = names or journal.SourceFields()
    ours = {"partition": F.col("partition").cast("string"), "offset": F.col("offset").cast("string"),
            "arrival_time": F.col("timestamp").cast("string")}
    # the text first, then one parse of it into a struct (as journal.raw_from_lines): an expression that
    # names `from_json(...)` once per field is evaluated once per field
    if names.kafka.declared:
        payload, unparsed = with_key_and_headers(F.col("_value"), names.kafka)
        texts = records.select("*", record_text().alias("_value")).select(
            "*", payload.alias("line"), unparsed.alias("unparsed"))
        lines = texts.select(source_column(topic).alias("source"), F.col("offset").alias("source_line"), "line",
                             *[v.alias(f) for f, v in ours.items()], "unparsed")
        # a dead letter's fields are not read (its envelope is Retrace's, not the record's)
        fields = F.from_json(F.when(~F.col("unparsed"), F.col("line")), names.raw_schema())
        parsed = lines.select("*", fields.alias("_fields"))
    else:
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
