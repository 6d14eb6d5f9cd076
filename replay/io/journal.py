"""The journal (spec section 1): an append-only Delta table of every row the job observed.

Ingest reads a landing (a folder, or `s3://bucket/prefix` through `replay.io.landing`) of JSON-lines or
Parquet files on the executors, assigns `seq` in (file name, line) order, and commits once; files
already in the journal (by name relative to the landing) are skipped, so ingesting twice is a no-op. Lines that
cannot be placed (bad JSON, no partition, offset or arrival time) are
kept as `kind = malformed` rows with their raw text, never dropped.
"""
from __future__ import annotations

import codecs
import json
import os
from dataclasses import dataclass

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from replay.io import landing as landings
from replay.io import lake_marker, locks, manifest
from replay.io.lake import Lake, is_table
from replay.io.paths import relative_name, spark_path
from replay.io.spark import driver_rows
from replay.io.store import TableStore, default_store
from replay.model.sources import PLAIN_BATCH, KafkaFields, Origins

SCHEMA = (
    "seq long, partition int, offset long, kind string, arrival_time timestamp, event_time timestamp, "
    "key string, value double, payload string, source string, source_line long"
)
FIELDS = ("partition", "offset", "arrival_time", "event_time", "key", "value")
RAW = ", ".join(f"{f} string" for f in FIELDS)
FORMATS = landings.FORMATS
EMPTY = "empty"  # the kind of the one row that journals a landing file without lines
KAFKA_ONLY = ("kafka: {key_as, headers_as} keeps a Kafka record's key and headers (`replay stream --kafka-bootstrap`); "
              "landing files have neither: declare it only on a Kafka topic's source")


@dataclass(frozen=True)
class SourceFields:
    """The payload fields that hold the event time and the key (`TIMESTAMP BY`, `OVER` in Azure Stream
    Analytics); the other spec columns (partition, offset, arrival_time, value) keep their names."""

    event_time: str = "event_time"
    key: str = "key"
    origins: Origins = Origins()  # where partition, offset and arrival time come from
    partitions: tuple[int, ...] | None = None  # the source's partitions, when declared
    # (field, value, time field): a record whose field holds the value is a punctuation the source sent, its time
    # in the time field (`Source.punctuation`); None: the source sends none
    punctuation: tuple[str, str, str] | None = None
    kafka: KafkaFields = KafkaFields()  # the payload fields a Kafka record's key and headers are journaled as

    @classmethod
    def of(cls, source) -> "SourceFields":
        """A `replay.model.jobs.Source`'s fields and declarations."""
        return cls(source.event_time_field, source.key_field, source.origins, source.partitions, source.punctuation,
                   source.kafka)

    def columns(self) -> tuple[str, ...]:
        """The landing field read for each of FIELDS."""
        return (*self.origins.columns(), self.event_time, self.key, "value")

    def marks(self) -> dict[str, str]:
        """The raw columns (`punctuation_mark`, `punctuation_time`) -> the landing field read for each."""
        if self.punctuation is None:
            return {}
        return {"punctuation_mark": self.punctuation[0], "punctuation_time": self.punctuation[2]}

    def raw_schema(self) -> str:
        """The `from_json` schema that reads those fields as text (each once)."""
        return ", ".join(f"`{c}` string" for c in dict.fromkeys((*self.columns(), *self.marks().values())))

    def recognised(self, raw: DataFrame) -> DataFrame:
        """`raw` (normalize's shape) with `punctuation`: the row is a punctuation the source sent, and
        `punctuation_time`, the text of its time (none without a declared punctuation)."""
        if self.punctuation is None:
            none = F.lit(None).cast("string")
            return raw.withColumn("punctuation", F.lit(False)).withColumn("punctuation_time", none)
        mark = F.coalesce(F.col("punctuation_mark") == F.lit(self.punctuation[1]), F.lit(False))
        return raw.withColumn("punctuation", mark).drop("punctuation_mark")


@dataclass(frozen=True)
class IngestResult:
    files: list[str]
    skipped: int
    rows: int
    events: int
    malformed: int
    bad_event_time: int
    version: int | None
    changed: list[manifest.Change] = ()  # journaled landing files that changed since (reported, not re-read)
    duplicate_offsets: int = 0  # new events whose (partition, offset) appeared earlier (quarantined by the engine)
    backward_offsets: int = 0  # new events whose offset is below the previous event's in their partition


def read(spark: SparkSession, lake: str, store: TableStore | None = None, version: int | None = None) -> DataFrame:
    """The journal's rows; at `version` when given, so that every pass of a run reads the one version it started
    from (an ingest committing meanwhile is not half-seen). Without it, each query reads the latest version."""
    store = store or default_store()
    path = Lake(lake).journal
    if not store.exists(path):
        raise _no_journal(lake)
    return store.read(spark, path, None if version is None else pinned_version(lake, store, version))


def pinned_version(lake: str, store: TableStore | None = None, wanted: int | None = None) -> int:
    """The journal version a run reads: `wanted` (refused in one line when the journal has no such version), else
    the latest."""
    store = store or default_store()
    path = Lake(lake).journal
    if not store.exists(path):
        raise _no_journal(lake)
    latest = store.version(path)
    if wanted is not None and not 0 <= wanted <= latest:
        raise ValueError(f"journal version {wanted}: the journal at {path} has versions 0 to {latest}")
    return latest if wanted is None else wanted


def require(lake: str) -> None:
    """Refuse a local lake with no journal, without Spark: a replay of nothing fails before it creates a file."""
    if "://" not in lake and not is_table(Lake(lake).journal):
        raise _no_journal(lake)


def _no_journal(lake: str) -> FileNotFoundError:
    return FileNotFoundError(f"no journal at {Lake(lake).journal}; run `replay ingest --landing DIR --lake {lake}` "
                             f"first")


def admit(landing: str, lake: str, fields: SourceFields | None = None) -> None:
    """What an ingest checks before it creates anything: declarations a batch ingest can follow, a landing it can
    use, a lake that is one (a new lake gets its marker). The CLI calls it before it takes the journal's lock and
    starts Spark."""
    if fields is not None and fields.kafka.declared:
        raise ValueError(KAFKA_ONLY)
    if fields is not None and fields.origins.arrival == "observed":
        raise ValueError("arrival_time: observed is the live job's (`replay stream`): a batch ingest of files that "
                         "landed earlier takes file_modified or {field: NAME}")
    landings.check_usable(landing, lake)  # a lake inside its landing is refused untouched
    lake_marker.claim(lake)  # a folder that is not a lake is refused


def require_payloads(rows: DataFrame, lake: str) -> None:
    """A job's fields read the payload: a journal written before events were journaled whole has none."""
    old = rows.where((F.col("kind") == "event") & F.col("payload").isNull()).select("seq", "source").first()
    if old is not None:
        raise ValueError(f"the journal at {Lake(lake).journal} was written before events were journaled whole "
                         f"(event seq {old['seq']} from {old['source']} has no payload), so a job's fields cannot be "
                         f"read from it; move {Lake(lake).journal} aside and run `replay ingest --landing <landing> "
                         f"--lake {lake}` again")


def landing_files(landing: str) -> list[str]:
    """Landing files by name (the order they are journaled in), relative to the folder or S3 prefix."""
    return [f.name for f in landings.Landing.of(landing).files()]


def ingest(spark: SparkSession, landing: str, lake: str, store: TableStore | None = None,
           log=None, fields: SourceFields | None = None) -> IngestResult:
    """Journal every landing file not journaled yet, in one commit (a folder or s3://bucket/prefix), holding
    the journal's lock (one writer at a time); journaled files that changed since are reported.

    `log(line)`, when given, hears what is done: files listed, lines parsed, rows written.
    `fields`: which payload fields hold the event time and the key (default `event_time`, `key`)."""
    admit(landing, lake, fields)
    with locks.hold(Lake(lake).journal_lock, "ingest"):
        return _ingest(spark, landing, lake, store or default_store(), log or (lambda line: None),
                       fields or SourceFields())


def _ingest(spark: SparkSession, landing: str, lake: str, store: TableStore, say,
            fields: SourceFields) -> IngestResult:
    path = Lake(lake).journal
    source = landings.Landing.of(landing)
    listed = source.files()
    files = [f.name for f in listed]
    zero = {f.name for f in listed if f.size == 0}
    base, done, existing = 0, set(), None
    if store.exists(path):
        existing = store.read(spark, path)
        stats = existing.agg(F.max("seq").alias("hi"), F.collect_set("source").alias("sources")).first()
        base = (stats["hi"] + 1) if stats["hi"] is not None else 0
        done = set(stats["sources"])
    new = [f for f in files if f not in done]
    say(f"{len(files)} landing files listed in {landing}, {len(new)} not journaled yet")
    changed = manifest.check_journaled(spark, lake, source, [f for f in files if f in done], store)
    if not new:
        return IngestResult([], len(files), 0, 0, 0, 0, None, changed)
    observed = manifest.observe(source, new)  # before reading: a file growing while it is read shows as changed
    to_read = [f for f in new if f not in zero]  # a 0-byte file is not even a valid Parquet file
    raw, lines, cached = None, {}, None
    if isinstance(source, landings.LocalLanding) and to_read and not any(":" in source.path(f) for f in to_read):
        lines = {f: n for f, n in _line_counts(source, to_read).items() if n is not None}
        if lines:
            raw = _read_raw(spark, source.root, list(lines), fields)
    others = [f for f in to_read if f not in lines]  # S3, gzip, CSV, a name Hadoop cannot open (`:`), not UTF-8
    if others:  # read by Retrace's own data source: count each file's lines first, on parsed rows kept
        cached = raw_from_lines(landings.read_lines(spark, landing, others), fields).persist()
        counted = {r["source"]: r["lines"]
                   for r in cached.groupBy("source").agg(F.max("source_line").alias("lines")).collect()}
        say(f"parsed {sum(counted.values())} lines of {len(others)} files")
        raw, lines = cached if raw is None else raw.unionByName(cached), {**lines, **counted}
    rows = None
    if raw is not None:
        plain = set() if fields.origins.declared else {f for f in lines if landings.is_plain(source, f)}
        if plain:
            say(f"{len(plain)} files without partition, offset and arrival_time fields: partition 0, offset by line, "
                "arrival at the file's modification time")
        line_offsets = fields.origins.offset == "line" or plain
        following = next_offsets(existing) if line_offsets and base else {}
        modified = {f: r.mtime_ns for f, r in observed.items()}
        rows = normalize(place_undeclared(spark, raw, fields.origins, PLAIN_BATCH, plain, new, modified, following),
                         fields.partitions)
    empty = [f for f in new if not lines.get(f)]
    if empty:  # a file with no lines is journaled as one `empty` row, so it is read once
        rows = _empty_rows(spark, empty) if rows is None else rows.unionByName(_empty_rows(spark, empty))
        lines = {**lines, **{f: 1 for f in empty}}
    say(f"writing the rows of {len(new)} files to {path}")
    version = store.write(with_seq(spark, rows, new, lines, base), path,
                          metadata={"writer": "replay ingest", "table": "journal", "seq_from": base, "files": len(new),
                                    **({} if fields.origins.from_fields else {"origins": fields.origins.describe()})})
    if cached is not None:
        cached.unpersist()
    event = F.col("kind") == "event"
    counts = store.read(spark, path).where(F.col("seq") >= base).agg(
        F.count(F.when(F.col("kind") != EMPTY, 1)).alias("rows"),
        F.count(F.when(event, 1)).alias("events"),
        F.count(F.when(F.col("kind") == "malformed", 1)).alias("malformed"),
        F.count(F.when(event & F.col("event_time").isNull(), 1)).alias("bad"),
        F.min(F.when(event, F.col("offset"))).alias("low"), F.max(F.when(event, F.col("offset"))).alias("high"),
        F.collect_set(F.when(event, F.col("partition"))).alias("partitions"),
    ).first()
    manifest.record(spark, lake, observed, store)
    duplicate, backward = offset_identity(store.read(spark, path), base, counts["partitions"],
                                          (counts["low"], counts["high"]))
    say(f"wrote {counts['rows']} rows of {len(new)} files: journal version {version}; done")
    return IngestResult(new, len(files) - len(new), counts["rows"], counts["events"], counts["malformed"],
                        counts["bad"], version, changed, duplicate, backward)


def offset_identity(journal: DataFrame, base: int, partitions: list[int], offsets: tuple) -> tuple[int, int]:
    """How many new events (seq >= `base`, in `partitions`, their offsets from `offsets[0]` to `offsets[1]`)
    repeat the (partition, offset) of an earlier seq (duplicate), and how many have an offset below the
    previous event's in their partition, in seq order (backward). Only events with offsets in the new ones'
    range and each partition's last event before them are read, so an ingest's cost does not grow with the
    journal behind it; both are counted in one pass (one shuffle by partition, two sorts)."""
    if offsets[0] is None:  # no new events
        return 0, 0
    events, new = journal.where(F.col("kind") == "event").select("seq", "partition", "offset"), F.col("seq") >= base
    in_range = F.col("offset").between(*offsets)
    near = events.where(new | in_range).unionByName(last_events_before(journal, base, partitions).where(~in_range))
    within = Window.partitionBy("partition")
    repeat = F.lag("offset").over(within.orderBy("offset", "seq")) == F.col("offset")  # a copy after the first
    backward = F.col("offset") < F.lag("offset").over(within.orderBy("seq"))
    found = near.select(new.alias("new"), repeat.alias("repeat"), backward.alias("backward")).where("new").agg(
        F.count(F.when(F.col("repeat"), 1)), F.count(F.when(F.col("backward"), 1))).first()
    return found[0], found[1]


def last_events_before(events: DataFrame, first: int, partitions: list) -> DataFrame:
    """Each of `partitions`' last event before seq `first` (partition, seq, offset), from rows with `kind`,
    looking back over growing seq ranges so that only recent files are read unless a partition has been
    silent for long."""
    return events.sparkSession.createDataFrame(last_events(events, first, partitions), LAST_EVENTS)


LAST_EVENTS = "partition int, seq long, offset long"


def last_events(events: DataFrame, first: int, partitions: list) -> list[tuple[int, int, int]]:
    """last_events_before's rows, on the driver."""
    events = events.where(F.col("kind").isin("event", "punctuation"))  # the records with the broker's offsets
    found, span, top = [], 1024, first
    need = set(partitions)
    while need and top > 0:
        bottom = max(0, first - span)
        got = (events.where((F.col("seq") >= bottom) & (F.col("seq") < top) & F.col("partition").isin(sorted(need)))
               .groupBy("partition").agg(F.max("seq").alias("seq"), F.max_by("offset", "seq").alias("offset"))
               .collect())
        found += [(r["partition"], r["seq"], r["offset"]) for r in got]
        need -= {r["partition"] for r in got}
        top, span = bottom, span * 8
    return found


def _empty_rows(spark: SparkSession, files: list[str]) -> DataFrame:
    """One `kind = empty` row per landing file without lines (its source_line 0): the file is journaled."""
    schema = ", ".join(c for c in SCHEMA.split(", ") if not c.startswith("seq "))
    return spark.createDataFrame([(None, None, EMPTY, None, None, None, None, None, f, 0) for f in files], schema)


def _format(name: str) -> str:
    """A landing file's format ("json", "parquet", "csv", "json.gz", "csv.gz"), from its suffix."""
    return landings.format_of(name)


def _line_counts(source: landings.Landing, files: list[str]) -> dict[str, int | None]:
    """Each local landing file's last line that holds a row (0: none), without parsing a row: a Parquet file's
    row count from its footer, a JSON-lines file's last non-blank line from its bytes alone. So seq is assigned
    in the same pass that parses and writes the rows (before: the parsed JSON rows were cached and counted
    first, which cost more than the parse). None: a text file that is not UTF-8, which Retrace's data source
    reads instead (it keeps an undecodable line's bytes; Spark's text reader would replace them)."""
    counts = {f: _footer(os.path.join(source.root, f)).num_rows for f in files if _format(f) == "parquet"}
    counts.update({f: _text_lines(os.path.join(source.root, f)) for f in files if _format(f) == "json"})
    return counts  # other formats (CSV, gzip) are read and counted by Retrace's data source


CHUNK = 1 << 23  # bytes read at a time when a local text file's lines are counted


def _text_lines(path: str) -> int | None:
    """A local JSON-lines file's last line that holds a row (`_holds_row`'s rule on the lines `_json_lines`
    splits), None if it is not UTF-8. Counted on the driver (bytes counted in C, then a walk back over the
    trailing blank lines), like a Parquet footer: a Spark job over the files' whole text cost 1.6 s warm and
    4.3 s in a fresh driver for the demo's 20 files."""
    decoder, newlines = codecs.getincrementaldecoder("utf-8")(), 0
    with open(path, "rb") as f:
        try:
            while chunk := f.read(CHUNK):
                if not (chunk.isascii() and not decoder.getstate()[0]):  # ASCII is UTF-8, checked 10x faster
                    decoder.decode(chunk)
                newlines += chunk.count(b"\n")
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return None
        return _last_row_line(f, f.tell(), newlines)


def _last_row_line(f, size: int, newlines: int) -> int:
    """The 1-based number of the file's last line that holds a row (0: none), read backwards from its end."""
    buf, pos, end, index = b"", size, 0, newlines  # index: the 0-based number of the line ending at buf[end]
    while True:
        cut = buf.rfind(b"\n", 0, end)
        while cut >= 0:
            if _bytes_hold_row(buf[cut + 1:end]):
                return index + 1
            end, index, cut = cut, index - 1, buf.rfind(b"\n", 0, cut)
        if pos == 0:
            return 1 if _bytes_hold_row(buf[:end].removeprefix(b"\xef\xbb\xbf")) else 0
        step = min(CHUNK, pos)
        pos -= step
        f.seek(pos)
        buf = f.read(step) + buf[:end]
        end = len(buf)


def _bytes_hold_row(line: bytes) -> bool:
    """`_holds_row` on a line's bytes: without one trailing `\\r`, something other than spaces."""
    return line.removesuffix(b"\r").strip(b" ") != b""


def _json_lines(spark: SparkSession, root: str, files: list[str]) -> DataFrame:
    """(source, lines, readable): each JSON-lines file under folder `root` as one row, its text split into lines
    (at `\\n` or `\\r\\n`), without a UTF-8 byte order mark (not data); `readable`: the file is UTF-8. What the
    line count and the rows both read."""
    text = spark.read.text([spark_path(os.path.join(root, f)) for f in files], wholetext=True)
    lines = F.split(F.regexp_replace("value", "^\ufeff", ""), "\n")
    return text.select(relative_name(root).alias("source"),
                       F.transform(lines, lambda line: F.regexp_replace(line, "\\r\\z", "")).alias("lines"),
                       F.is_valid_utf8("value").alias("readable"))


def _holds_row(line: Column) -> Column:
    """A line holds a row unless it is blank (spaces only): the rule the line count and the rows share."""
    return F.trim(line) != ""


def _footer(path: str):
    """A Parquet file's footer; a file that has none is refused naming it (it cannot be split into rows)."""
    try:
        return pq.read_metadata(path)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise ValueError(f"landing file {path} is not a Parquet file ({' '.join(str(e).split())}); repair it or "
                         "move it out of the landing, then ingest again") from None


def _read_raw(spark: SparkSession, landing: str, files: list[str], names: SourceFields) -> DataFrame:
    """(source, source_line, line, raw string fields) for every non-blank line or Parquet row.

    Parquet files are read in groups of one schema, each field cast to string per group: a field typed
    differently in two files (string here, double there) is read from each as it is, never unified."""
    parts = []
    by_format: dict[str, list[str]] = {}
    for f in files:
        by_format.setdefault(_format(f), []).append(f)
    root = os.path.abspath(landing)
    rel = relative_name(root)
    if "json" in by_format:
        lines = _json_lines(spark, root, by_format["json"])
        lines = lines.select("source", F.posexplode("lines").alias("pos", "line")).where(_holds_row(F.col("line")))
        parts.append(raw_from_lines(lines.select(
            "source", (F.col("pos") + 1).cast("long").alias("source_line"), "line"), names))
    for group in _by_schema(root, by_format.get("parquet", [])):
        table = spark.read.parquet(*[spark_path(os.path.join(root, f)) for f in group])
        cols = set(table.columns)
        read = [*zip(FIELDS, names.columns()), *names.marks().items()]  # journal columns, then punctuation marks
        fields = [(F.col(c).cast("string") if c in cols else F.lit(None).cast("string")).alias(f) for f, c in read]
        line = F.to_json(F.struct(*[F.col(f) for f in table.columns]))
        parts.append(names.recognised(table.select(
            rel.alias("source"), (F.col("_metadata.row_index") + 1).alias("source_line"), line.alias("line"),
            *fields)))
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def _by_schema(root: str, files: list[str]) -> list[list[str]]:
    """Parquet files grouped by their footer's schema (one group when the landing is uniform)."""
    groups: dict[str, list[str]] = {}
    for f in files:
        schema = _footer(os.path.join(root, f)).schema.to_arrow_schema()
        key = schema.remove_metadata().to_string(show_field_metadata=False)
        groups.setdefault(key, []).append(f)
    return list(groups.values())


def raw_from_lines(lines: DataFrame, names: SourceFields | None = None) -> DataFrame:
    """`(source, source_line, line)` rows (JSON object text) -> the raw shape `normalize` takes.

    A line that is not a JSON object parses to null fields, so `normalize` keeps it as `malformed`.
    Each line is parsed once, into a struct, and the fields taken from it in the next projection: written as
    `from_json(line)[field]` in one projection, Spark parsed the line once per field (2.6x the time at 1M lines).
    """
    names = names or SourceFields()
    parsed = lines.select("source", "source_line", "line", F.from_json("line", names.raw_schema()).alias("_fields"))
    return names.recognised(parsed.select(
        "source", "source_line", "line", *[F.col("_fields")[c].alias(f) for f, c in zip(FIELDS, names.columns())],
        *[F.col("_fields")[c].alias(m) for m, c in names.marks().items()]))


def place(spark: SparkSession, raw: DataFrame, origins: Origins, files: list[str], modified: dict[str, int | None],
          following: dict[int, int], observed: int | None = None) -> DataFrame:
    """The raw rows' partition, offset and arrival time (as text) where the source's `origins` say: the
    fields read (the default, unchanged), the file's modification time (`modified`: ns per file) or the
    processing time `observed` (us), the file's path or a field's hash, the row's position in its partition:
    `following[p]` (0 when absent) for the first row of partition p, then one more per row in the order of
    `files`, then of lines. A line that is not a JSON object is `unparsed` (malformed), whatever the origins."""
    if origins.from_fields:
        return raw
    per_file = driver_rows(
        spark,
        [(f, i, None if modified.get(f) is None else modified[f] // 1000,
          origins.file_partition(f) if origins.partition == "file" else None) for i, f in enumerate(files)],
        "source string, _rank long, _modified long, _file_partition int")
    rows = raw.join(F.broadcast(per_file), "source", "left")
    unparsed = F.json_object_keys("line").isNull()
    arrival = {"field": F.col("arrival_time"),
               "file_modified": F.timestamp_micros("_modified").cast("string"),
               "observed": F.timestamp_micros(F.lit(observed).cast("long")).cast("string")}[origins.arrival]
    partition = {"field": F.col("partition"), "file": F.col("_file_partition").cast("string"), "zero": F.lit("0"),
                 "hash": F.pmod(F.xxhash64(F.col("partition")), F.lit(origins.hash_partitions)).cast("string")
                 }[origins.partition]
    if origins.partition == "hash":
        partition = F.when(F.col("partition").isNotNull(), partition)
    rows = rows.select("*", unparsed.alias("unparsed"), arrival.alias("_arrival"), partition.alias("_partition"))
    offset = F.col("offset")
    if origins.offset == "line":
        placed = F.col("_partition").try_cast("int")
        numbered = placed.isNotNull() & ~F.col("unparsed") & F.col("_arrival").isNotNull()
        starts = driver_rows(spark, sorted(following.items()), "_p int, _start long")
        rows = rows.withColumn("_p", placed).withColumn("_numbered", numbered).join(
            F.broadcast(starts), "_p", "left")
        within = Window.partitionBy("_p", "_numbered").orderBy("_rank", "source_line")
        offset = F.when(F.col("_numbered"),
                        F.coalesce("_start", F.lit(0)) + F.row_number().over(within) - 1).cast("string")
    return rows.select("source", "source_line", "line", F.col("_partition").alias("partition"),
                       offset.alias("offset"), F.col("_arrival").alias("arrival_time"), "event_time", "key", "value",
                       "punctuation", "punctuation_time", "unparsed")


def place_undeclared(spark: SparkSession, raw: DataFrame, origins: Origins, plain_origins: Origins, plain: set[str],
                     files: list[str], modified: dict[str, int | None], following: dict[int, int],
                     observed: int | None = None) -> DataFrame:
    """`place` with the source's origins, except an undeclared source's `plain` files (their first row has none
    of the three fields), placed by `plain_origins` (sources.PLAIN_BATCH or PLAIN_LIVE)."""
    if not plain:
        return place(spark, raw, origins, files, modified, following, observed)
    placed = place(spark, raw.where(F.col("source").isin(sorted(plain))), plain_origins,
                   [f for f in files if f in plain], modified, following, observed)
    if plain.issuperset(files):
        return placed
    rest = raw.where(~F.col("source").isin(sorted(plain))).withColumn("unparsed", F.lit(False))
    return placed.unionByName(rest.select(*placed.columns))


def next_offsets(journal: DataFrame) -> dict[int, int]:
    """Each partition's offset after the last one journaled (`offset: line` continues from it)."""
    last = journal.where(F.col("partition").isNotNull() & F.col("offset").isNotNull()).groupBy("partition").agg(
        F.max("offset").alias("last")).collect()
    return {r["partition"]: r["last"] + 1 for r in last}


def normalize(raw: DataFrame, partitions: list[int] | None = None) -> DataFrame:
    """Typed journal columns, and every row's text whole in `payload`; rows that cannot be placed become
    `malformed` (also rows of a partition the source does not have, when its `partitions` are known, and rows
    a source marks `unparsed`). A row `punctuation` (`SourceFields.recognised`) is a punctuation the source sent,
    its time from `punctuation_time` (one without a valid time is kept so: the engine makes it a `malformed`
    dead letter, spec 4)."""
    punctuation = F.col("punctuation") if "punctuation" in raw.columns else F.lit(False)
    partition = F.col("partition").try_cast("int")
    offset = F.col("offset").try_cast("long")
    arrival = F.col("arrival_time").try_cast("timestamp")
    event_time = F.col("event_time").try_cast("timestamp")
    if "punctuation" in raw.columns:
        event_time = F.when(punctuation, F.col("punctuation_time").try_cast("timestamp")).otherwise(event_time)
    value = F.col("value").try_cast("double")
    malformed = (
        partition.isNull() | offset.isNull() | arrival.isNull()
        | (F.col("value").isNotNull() & value.isNull())
    )
    if partitions is not None:
        malformed = malformed | ~partition.isin(*partitions)
    if "unparsed" in raw.columns:
        malformed = malformed | F.col("unparsed")
    return raw.select(
        partition.alias("partition"),
        offset.alias("offset"),
        F.when(malformed, "malformed").when(punctuation, "punctuation").otherwise("event").alias("kind"),
        arrival.alias("arrival_time"),
        event_time.alias("event_time"),
        F.when(~punctuation, F.col("key")).alias("key"),
        value.alias("value"),
        F.col("line").alias("payload"),
        "source",
        "source_line",
    )


def with_seq(spark: SparkSession, rows: DataFrame, files: list[str], lines: dict[str, int], base: int) -> DataFrame:
    """seq = base + (lines in earlier files) + line - 1: the order of file names, then lines."""
    starts, acc = [], base
    for f in files:
        starts.append((f, acc))
        acc += lines.get(f, 0)
    offsets = driver_rows(spark, starts, "source string, start long")
    seq = F.col("start") + F.greatest(F.col("source_line"), F.lit(1)) - 1  # an `empty` row's line is 0
    return rows.join(F.broadcast(offsets), "source").select(seq.alias("seq"), *[c for c in names() if c != "seq"])


def declared_partitions(spark: SparkSession, lake: str, store: TableStore | None = None) -> list[int] | None:
    """The source's partitions as the live job declared them (None: a batch-ingested journal, whose
    partitions are the ones that appear in it). A journal started before lists were recorded has a count."""
    store = store or default_store()
    if not store.exists(Lake(lake).journal_source):
        return None
    row = store.read(spark, Lake(lake).journal_source).first().asDict()
    listed = row.get("partition_list")
    return sorted(listed) if listed is not None else list(range(row["partitions"]))


def declare_partitions(spark: SparkSession, lake: str, declared: int | tuple[int, ...] | list[int] | None,
                       store: TableStore | None = None) -> list[int]:
    """Record the source's partitions (a count N: 0 to N-1, or a list; a broker's are known up front) the first
    time; later runs must agree."""
    store = store or default_store()
    wanted = None if declared is None else (list(range(declared)) if isinstance(declared, int)
                                            else sorted(declared))
    known = declared_partitions(spark, lake, store)
    if known is not None:
        if wanted is not None and wanted != known:
            raise ValueError(f"partitions: {_shown(declared)} differs from the partitions {_shown(known)} the "
                             f"journal at {lake} was started with")
        return known
    if not wanted or wanted[0] < 0:
        raise ValueError(f"partitions: {declared!r}; the source's partitions (a count of at least 1, `--partitions "
                         f"N`, or a list of partition numbers) are needed to start a journal")
    store.write(spark.createDataFrame([(len(wanted), wanted)], "partitions int, partition_list array<int>"),
                Lake(lake).journal_source, mode="overwrite")
    return wanted


def _shown(partitions) -> str:
    """A count as it is, a list as `0,2,5` (0 to N-1 as the count N)."""
    if isinstance(partitions, int):
        return str(partitions)
    listed = sorted(partitions)
    return str(len(listed)) if listed == list(range(len(listed))) else ",".join(map(str, listed))


def journaled_sources(spark: SparkSession, lake: str, store: TableStore | None = None) -> set[str]:
    """The landing files already in the journal."""
    store = store or default_store()
    if not store.exists(Lake(lake).journal):
        return set()
    return {r["source"] for r in store.read(spark, Lake(lake).journal).select("source").distinct().collect()
            if r["source"] is not None}


def names() -> list[str]:
    """The journal's column names, in order."""
    return [c.split()[0] for c in SCHEMA.split(", ")]


def from_rows(spark: SparkSession, rows: list[dict]) -> DataFrame:
    """A journal DataFrame from rows in the conformance shape (their index is their seq)."""
    out = []
    for i, r in enumerate(rows):
        event_time = r.get("event_time")
        payload = json.dumps(r) if r.get("kind", "event") == "event" else None
        out.append({
            "seq": i, "partition": r["partition"], "offset": r["offset"], "kind": r.get("kind", "event"),
            "arrival_time": r["arrival_time"], "event_time": event_time, "key": r.get("key"),
            "value": None if r.get("value") is None else float(r["value"]), "payload": payload,
            "source": "inline", "source_line": i + 1,
        })
    typed = SCHEMA.replace("arrival_time timestamp", "arrival_time string").replace(
        "event_time timestamp", "event_time string")
    df = spark.createDataFrame(out, typed)
    return df.select(
        *[F.col(c).try_cast("timestamp").alias(c) if c in ("arrival_time", "event_time") else F.col(c)
          for c in names()]
    )
