"""Landing stores (a local folder or `s3://bucket/prefix`) and the Spark data source that reads them.

`Landing.of(uri)` lists landing files in name order and reads them; S3 goes through boto3, whose
endpoint, region and credentials come from the environment or a profile (`AWS_ENDPOINT_URL`,
`AWS_REGION` / `AWS_DEFAULT_REGION`, `AWS_PROFILE`, the usual credential chain), never from code.

The data source `retrace_landing` (`register(spark)`) turns landing files into rows
`(source, source_line, line)`: one row per non-blank JSON line (its 1-based number and raw text, broken
lines included; `.gz` files decompressed first) or per Parquet or CSV row (its index + 1 and the row as JSON
object text; a CSV file has a header, and its cells are text), so one parser
(`journal.raw_from_lines`) handles both. Its streaming reader plans files in name order in bounded
micro-batches (`maxFilesPerBatch`, `maxBytesPerBatch`), each end offset carrying its batch's file list,
so a batch re-planned from Spark's offset log after a crash reads exactly the same files.
"""
from __future__ import annotations

import base64
import csv
import gzip
import io
import json
import os
import re
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from replay.io.lake_fs import s3_client
from replay.model.sources import PLAIN_FIELDS

# Landing file suffixes and the reader each needs (gzip: decompressed first, by its suffix).
FORMATS = {".jsonl": "json", ".json": "json", ".ndjson": "json", ".parquet": "parquet", ".csv": "csv",
           ".jsonl.gz": "json.gz", ".json.gz": "json.gz", ".ndjson.gz": "json.gz", ".csv.gz": "csv.gz"}
NAME = "retrace_landing"
HEAD_BYTES = 1 << 20  # how much of an S3 object is read to find its first row (is_plain)
SCHEMA = "source string, source_line long, line string"
ARROW_SCHEMA = pa.schema([("source", pa.string()), ("source_line", pa.int64()), ("line", pa.string())])
BASE64 = "base64:"  # marks a line that is not UTF-8 text, kept as its bytes in base64
ROWS_PER_BATCH = 10_000  # Arrow batch size for Parquet rows turned into JSON text
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class LandingFile:
    name: str  # relative to the landing folder or prefix: the journal's `source`
    size: int  # bytes
    modified_ns: int | None = None  # an S3 object's LastModified (a local file's mtime is read when observed)


def format_of(name: str) -> str | None:
    """A landing file's format by its suffix: json, json.gz, csv, csv.gz, parquet (None: not a landing file)."""
    base = name.rsplit("/", 1)[-1].lower()
    stem, last = os.path.splitext(base)
    if last == ".gz":
        last = os.path.splitext(stem)[1] + last
    return FORMATS.get(last)


def is_landing_file(name: str) -> bool:
    """A data file (known suffix) that is not hidden or a writer's temporary (`.x`, `_x`)."""
    base = name.rsplit("/", 1)[-1]
    return format_of(base) is not None and not base.startswith((".", "_"))


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


class Landing:
    """Where landing files are: `files()` in name order, `read(name)` their bytes."""

    uri: str

    @staticmethod
    def of(uri: str) -> "Landing":
        """A local folder (a path or `file://` URI) or an S3 prefix (`s3://bucket/prefix`)."""
        if not isinstance(uri, str) or not uri:
            raise ValueError(f"landing {uri!r} is empty; use a folder or s3://bucket/prefix")
        if is_s3(uri):
            return S3Landing(uri)
        if uri.startswith("file://"):
            return LocalLanding(uri[len("file://"):])
        if re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*:/", uri):
            raise ValueError(f"landing {uri!r} is not a local folder or an s3://bucket/prefix URI")
        return LocalLanding(uri)

    def files(self) -> list[LandingFile]:
        raise NotImplementedError

    def read(self, name: str) -> bytes:
        raise NotImplementedError

    def check(self) -> None:
        """Refuse a landing that is plainly not there (a local folder that does not exist), before a command
        creates anything; an S3 prefix is found out by its listing."""

    def where(self, name: str) -> str:
        """How messages name one of its files."""
        return f"{self.uri.rstrip('/')}/{name}"


class LocalLanding(Landing):
    def __init__(self, folder: str):
        self.uri = folder
        self.root = os.path.abspath(folder)

    def check(self) -> None:
        if not os.path.isdir(self.root):
            raise FileNotFoundError(f"landing folder {self.uri} does not exist")

    def files(self) -> list[LandingFile]:
        self.check()
        found = []
        for root, _, names in os.walk(self.root):
            for name in names:
                if is_landing_file(name):
                    path = os.path.join(root, name)
                    found.append(LandingFile(os.path.relpath(path, self.root), os.path.getsize(path)))
        return sorted(found, key=lambda f: f.name)

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def where(self, name: str) -> str:
        return self.path(name)

    def read(self, name: str) -> bytes:
        with open(self.path(name), "rb") as f:
            return f.read()


class S3Landing(Landing):
    """Objects under `s3://bucket/prefix`; names are keys relative to the prefix."""

    def __init__(self, uri: str):
        bucket, _, prefix = uri[len("s3://"):].partition("/")
        if not _BUCKET.match(bucket):
            raise ValueError(f"landing {uri!r} is not an s3://bucket/prefix URI: bucket {bucket!r} is not a "
                             "valid bucket name")
        self.uri, self.bucket = uri, bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        self._client = None

    def __getstate__(self):  # the boto3 client is made again where the landing is unpickled
        return {**self.__dict__, "_client": None}

    @property
    def client(self):
        if self._client is None:
            self._client = s3_client()  # the lake's too (replay.io.lake_fs)
        return self._client

    def check(self) -> None:
        """The bucket is there and readable (one HEAD request), before a command creates anything."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as e:  # noqa: BLE001 - botocore's errors; a HEAD's missing bucket is a bare 404
            code = getattr(e, "response", {}).get("Error", {}).get("Code", "")
            raise self._error(e) if code != "404" else FileNotFoundError(
                f"landing bucket {self.bucket!r} of {self.uri} does not exist") from e

    def files(self) -> list[LandingFile]:
        found = []
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix)
        try:
            for page in pages:
                for obj in page.get("Contents", []):
                    name = obj["Key"][len(self.prefix):]
                    if is_landing_file(name):
                        found.append(LandingFile(name, int(obj["Size"]), _ns(obj.get("LastModified"))))
        except Exception as e:  # noqa: BLE001 - botocore errors are raised by the paginator
            raise self._error(e) from e
        return sorted(found, key=lambda f: f.name)

    def read(self, name: str) -> bytes:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self.prefix + name)["Body"].read()
        except Exception as e:  # noqa: BLE001
            raise self._error(e, name) from e

    def head(self, name: str, size: int) -> bytes:
        """An object's first `size` bytes (one ranged GET)."""
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self.prefix + name,
                                          Range=f"bytes=0-{size - 1}")["Body"].read()
        except Exception as e:  # noqa: BLE001
            raise self._error(e, name) from e

    def _error(self, e: Exception, name: str | None = None) -> Exception:
        code = getattr(e, "response", {}).get("Error", {}).get("Code", "")
        where = f"{self.uri.rstrip('/')}/{name}" if name else self.uri
        if code == "NoSuchBucket":
            return FileNotFoundError(f"landing bucket {self.bucket!r} of {self.uri} does not exist")
        if code in ("NoSuchKey", "404"):
            return FileNotFoundError(f"landing object {where} does not exist")
        if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return PermissionError(f"access to landing {where} denied ({code}); check AWS_PROFILE or the "
                                   "AWS credentials in the environment")
        if _unreachable(e):
            return ConnectionError(f"cannot reach the S3 endpoint for landing {where} ({e}); check AWS_ENDPOINT_URL "
                                   "(or the profile's endpoint) and the network")
        return RuntimeError(f"cannot list or read landing {where}: {e}")


def _ns(when) -> int | None:
    """A datetime (boto3's LastModified, whole seconds in UTC) as nanoseconds since the epoch."""
    if when is None:
        return None
    when = when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when
    return (when - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1) * 1000


def _unreachable(e: Exception) -> bool:
    """botocore's errors for an endpoint that does not answer (refused, timed out, unknown host)."""
    from botocore.exceptions import ConnectionError as EndpointError

    return isinstance(e, EndpointError)


def check_usable(landing: str, lake: str) -> None:
    """Refuse a landing a command cannot use, before it creates anything: one that holds its lake (or lies
    inside it), or a local folder that is not there."""
    check_apart(landing, lake)
    Landing.of(landing).check()


def check_apart(landing: str, lake: str) -> None:
    """A landing and its lake lie apart: a landing holding the lake (or the same folder, or one inside the lake)
    would journal the lake's own files, more at every ingest. Refused in one line, before anything is read."""
    where = _place(landing)
    lake_place = _place(lake)
    if where is None or lake_place is None or where[0] != lake_place[0]:
        return
    a, b = where[1], lake_place[1]
    if a == b:
        problem = "is the lake's own folder"
    elif b.startswith(a.rstrip("/") + "/"):
        problem = "holds the lake"
    elif a.startswith(b.rstrip("/") + "/"):
        problem = "lies inside the lake"
    else:
        return
    raise ValueError(f"landing {landing} {problem} ({lake}): its files would be journaled with the lake's; put the "
                     f"lake and the landing in folders apart")


def _place(uri: str) -> tuple[str, str] | None:
    """(store, absolute path or bucket/key prefix) of a folder or an s3:// or s3a:// URI; None for anything else."""
    if uri.startswith(("s3://", "s3a://")):
        return "s3", uri.split("://", 1)[1].rstrip("/")
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    if re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*:/", uri):
        return None
    return "local", os.path.realpath(os.path.abspath(uri))


def lines(landing: Landing, name: str) -> Iterator[pa.RecordBatch]:
    """The rows `(source, source_line, line)` of one landing file, as Arrow record batches."""
    data = landing.read(name)
    fmt = format_of(name)
    if fmt.endswith(".gz"):
        data, fmt = _gunzip(name, data), fmt[:-len(".gz")]
    if fmt == "json":
        yield _json_lines(name, data)
    elif fmt == "csv":
        yield from _csv_lines(name, data)
    else:
        yield from _parquet_lines(name, data, landing.where(name))


def is_plain(landing: Landing, name: str) -> bool:
    """A file whose first row (the first line that is a JSON object, a CSV's header, a Parquet file's schema)
    has none of the fields partition, offset, arrival_time: an undeclared source places its rows itself
    (sources.PLAIN_BATCH). A file without such a row is not plain (its lines stay malformed as before)."""
    import pyarrow.parquet as pq

    fmt = format_of(name)
    try:
        if fmt == "parquet":
            where = landing.path(name) if isinstance(landing, LocalLanding) else pa.BufferReader(landing.read(name))
            first = set(pq.read_schema(where).names)
        else:
            first = _first_row(landing, name, fmt)
    except (OSError, EOFError, ValueError, zlib.error):  # a broken file: reading it reports it, naming it
        return False
    return first is not None and not first & set(PLAIN_FIELDS)


def _first_row(landing: Landing, name: str, fmt: str) -> set[str] | None:
    """The fields of a text file's first row, reading no further than it (a local file is streamed)."""
    raw = (open(landing.path(name), "rb") if isinstance(landing, LocalLanding)
           else io.BytesIO(landing.head(name, HEAD_BYTES)))
    with raw, (gzip.open(raw) if fmt.endswith(".gz") else raw) as f:
        text = io.TextIOWrapper(f, encoding="utf-8-sig", errors="replace", newline="")
        if fmt.startswith("csv"):
            header = next(csv.reader(text), None)
            return set(header) if header else None
        for line in text:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                return set(row)
    return None


def _gunzip(name: str, data: bytes) -> bytes:
    """A gzip file's content (all its members); a file that is not gzip is refused naming it."""
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise ValueError(f"landing file {name} is not a complete gzip file ({e}); repair it or move it out of the "
                         "landing, then ingest again") from None


def _csv_lines(name: str, data: bytes) -> Iterator[pa.RecordBatch]:
    """CSV with a header: each row as a JSON object of its non-empty cells (as text, named by the header),
    numbered from 1 (the header is not a row). A text that is not UTF-8 is refused naming the file."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"landing file {name} is not UTF-8 text ({e}); CSV landing files must be") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    rows = []
    for cells in reader:
        if not any(c.strip() for c in cells):
            continue  # a blank line
        if len(cells) > len(header):  # kept whole, as a JSON array: not an object, so journaled `malformed`
            rows.append(json.dumps(cells, separators=(",", ":")))
            continue
        rows.append(json.dumps({k: v for k, v in zip(header, cells) if v != ""}, separators=(",", ":")))
    for start in range(0, max(len(rows), 1), ROWS_PER_BATCH):
        part = rows[start:start + ROWS_PER_BATCH]
        yield pa.RecordBatch.from_arrays([
            pa.array([name] * len(part), pa.string()),
            pa.array(range(start + 1, start + len(part) + 1), pa.int64()),
            pa.array(part, pa.string()),
        ], schema=ARROW_SCHEMA)


def _json_lines(name: str, data: bytes) -> pa.RecordBatch:
    """Every line but blank ones (only spaces), numbered from 1, with its raw text (broken or not); lines end at
    `\\n` or `\\r\\n`; a UTF-8 byte order mark at the start is not data. A line that is not UTF-8 is kept as
    `base64:` and its bytes (bytes are never lost; it is journaled `malformed`)."""
    try:
        text = pa.array(data.decode("utf-8-sig").split("\n"), pa.string())  # BOM dropped
        text = pc.replace_substring_regex(text, pattern="\\r\\z", replacement="")  # a CRLF line's \r
    except UnicodeDecodeError:
        text = pa.array([_line_text(line) for line in _split_bytes(data)], pa.string())
    keep = pc.not_equal(pc.utf8_trim(text, " "), "")
    numbers = pa.array(range(1, len(text) + 1), pa.int64()).filter(keep)
    kept = text.filter(keep)
    return pa.RecordBatch.from_arrays([pa.array([name] * len(kept), pa.string()), numbers, kept],
                                      schema=ARROW_SCHEMA)


def _split_bytes(data: bytes) -> list[bytes]:
    """A file's lines as bytes, without their ends (`\\n` or `\\r\\n`) or a UTF-8 byte order mark at its start."""
    data = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    return [line[:-1] if line.endswith(b"\r") else line for line in data.split(b"\n")]


def _line_text(line: bytes) -> str:
    """A line as text: itself when UTF-8, else `base64:` and its bytes."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return BASE64 + base64.b64encode(line).decode("ascii")


def _parquet_lines(name: str, data: bytes, where: str) -> Iterator[pa.RecordBatch]:
    """Each row as a compact JSON object (null fields left out, as Spark's to_json does), numbered from 1. A file
    that is not Parquet is refused naming it (`where`: its path or S3 object)."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"landing file {where} is not a Parquet file that can be read ({' '.join(str(e).split())}); "
                         f"repair it or move it out of the landing") from None
    for start in range(0, table.num_rows, ROWS_PER_BATCH):
        rows = table.slice(start, ROWS_PER_BATCH).to_pylist()
        text = [json.dumps({k: v for k, v in r.items() if v is not None}, separators=(",", ":"), default=str)
                for r in rows]
        yield pa.RecordBatch.from_arrays([
            pa.array([name] * len(rows), pa.string()),
            pa.array(range(start + 1, start + len(rows) + 1), pa.int64()),
            pa.array(text, pa.string()),
        ], schema=ARROW_SCHEMA)


# --- the Spark data source ---------------------------------------------------------------------------


def _names_option(options, key: str) -> list[str] | None:
    raw = options.get(key)
    if raw is None:
        return None
    try:
        names = json.loads(raw)
    except json.JSONDecodeError:
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"option {key}: {raw!r} is not a JSON list of file names")
    return names


def _positive_option(options, key: str) -> int | None:
    raw = options.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"option {key}: {raw!r} is not a positive integer")
    return value


def _landing_option(options) -> Landing:
    uri = options.get("landing")
    if not uri:
        raise ValueError("option landing is missing; set it to a folder or s3://bucket/prefix")
    return Landing.of(uri)


class LandingDataSource(DataSource):
    """Landing files as `(source, source_line, line)` rows; see the module docstring for the options."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> "BatchReader":
        return BatchReader(self.options)

    def streamReader(self, schema) -> "StreamReader":
        return StreamReader(self.options)


class BatchReader(DataSourceReader):
    """One partition per file: the `files` option (exactly those), else every file not in `exclude`."""

    def __init__(self, options):
        self.landing = _landing_option(options)
        self.files = _names_option(options, "files")
        self.exclude = set(_names_option(options, "exclude") or [])

    def partitions(self) -> list[InputPartition]:
        names = self.files if self.files is not None else [f.name for f in self.landing.files()]
        return [InputPartition(n) for n in sorted(names) if n not in self.exclude]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return lines(self.landing, partition.value)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Files in name order, bounded micro-batches, each offset `{"batch": n, "files": [...]}`.

    A file is never planned twice: planned = `exclude` + the files of every offset this reader has seen
    up to the start offset. After a restart the reader knows only the start offset's files, so the
    caller passes the files it has already consumed (e.g. journaled sources) as `exclude`.
    """

    def __init__(self, options):
        self.landing = _landing_option(options)
        self.exclude = frozenset(_names_option(options, "exclude") or [])
        self.max_files = _positive_option(options, "maxFilesPerBatch")
        self.max_bytes = _positive_option(options, "maxBytesPerBatch")
        self.seen: dict[int, list[str]] = {}
        self.target: frozenset[str] | None = None  # the files of an availableNow run

    def initialOffset(self) -> dict:
        return {"batch": -1, "files": []}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_files is not None:
            return ReadMaxFiles(self.max_files)
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = frozenset(f.name for f in self.landing.files())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._remember(start)
        planned = set(self.exclude)
        for batch, names in self.seen.items():
            if batch <= start["batch"]:
                planned.update(names)
        todo = [f for f in self.landing.files()
                if f.name not in planned and (self.target is None or f.name in self.target)]
        if not todo:
            return start
        max_files, max_bytes = self._bounds(limit)
        take, size = [], 0
        for f in todo:
            if take and ((max_files is not None and len(take) >= max_files)
                         or (max_bytes is not None and size + f.size > max_bytes)):
                break
            take.append(f.name)
            size += f.size
        return {"batch": start["batch"] + 1, "files": take}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        self._remember(start)
        self._remember(end)
        if end["batch"] == start["batch"]:
            return []
        if end["batch"] != start["batch"] + 1:
            raise ValueError(f"offsets {start} -> {end} span more than one batch; each end offset "
                             "holds only its own batch's files")
        return [InputPartition(n) for n in end["files"]]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return lines(self.landing, partition.value)

    def commit(self, end: dict) -> None:
        self._remember(end)

    def _remember(self, offset: dict) -> None:
        if offset["files"]:
            self.seen[offset["batch"]] = list(offset["files"])

    def _bounds(self, limit: ReadLimit) -> tuple[int | None, int | None]:
        """The engine's limit wins (ReadAllAvailable means no bound); the other option still applies."""
        if isinstance(limit, ReadAllAvailable):
            return None, None
        if isinstance(limit, ReadMaxFiles):
            return limit.max_files, self.max_bytes
        if isinstance(limit, ReadMaxBytes):
            return self.max_files, limit.max_bytes
        return self.max_files, self.max_bytes


def register(spark) -> None:
    """Register `retrace_landing` with this session, once per set of AWS_* settings.

    Spark's Python workers were started with the environment the JVM had at start-up, so the driver's
    current AWS_* variables (endpoint, region, profile, credentials) are handed to them with the data
    source, the way `spark.executorEnv.*` would: workers reach S3 as the driver does.
    """
    aws = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    key = json.dumps(aws, sort_keys=True)
    if getattr(spark, "_retrace_landing_env", None) == key:
        return
    sc = spark.sparkContext
    saved = dict(sc.environment)
    sc.environment.update(aws)
    try:
        spark.dataSource.register(LandingDataSource)
    finally:
        sc.environment.clear()
        sc.environment.update(saved)
    spark._retrace_landing_env = key


def read_lines(spark, landing: str, files: list[str]):
    """A batch DataFrame `(source, source_line, line)` of exactly these landing files."""
    register(spark)
    return spark.read.format(NAME).option("landing", landing).option("files", json.dumps(files)).load()
