"""Where each journal column of a source comes from (issue 47): a frozen, validated declaration.

Real landing files carry no partition, offset or arrival time, so a source says how Retrace records them:
`arrival_time` is a payload field, the landing file's modification time (`file_modified`: a blob's
LastModified, as Azure Stream Analytics uses) or the processing time at which the live job journals the row
(`observed`: as a broker stamps its enqueue time); `partition` is a field, the file's path (`file`) or a hash of
a field into N partitions; `offset` is a field or the row's position in its partition (`line`). The journal
records the values used, so a replay never looks at a clock or a file system again. Without declarations a
source reads the fields `partition`, `offset` and `arrival_time` of each line, as before, in a file whose first row
has any of them; a plain file (its first row has none) is placed as PLAIN_BATCH (ingest) or PLAIN_LIVE says.
A Kafka source may also keep each record's key and headers as payload fields (`kafka: {key_as, headers_as}`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ARRIVALS = ("field", "file_modified", "observed")
PARTITIONS = ("field", "file", "hash")
OFFSETS = ("field", "line")
DEFAULT_FILE_PATTERN = "{partition}/*"  # a sub-folder named N or NAME=N (Kafka Connect's `partition=N`)
MAX_PARTITIONS = 1 << 16
KAFKA_KEYS = ("headers_as", "key_as")
DEAD_VALUE = "value_text"  # a Kafka dead letter's field for the record value (beside its key and headers)


class SourceError(ValueError):
    """A source declaration is wrong; the message names the source, the field and the value."""


@dataclass(frozen=True)
class Origins:
    """How a source's rows get their partition, offset and arrival time; the default is today's landing layout
    (the fields `partition`, `offset` and `arrival_time` of each line)."""

    arrival: str = "field"
    arrival_field: str = "arrival_time"
    partition: str = "field"
    partition_field: str = "partition"  # the field read (`field`) or hashed (`hash`)
    file_pattern: str = DEFAULT_FILE_PATTERN  # `file`: where `{partition}` is in the file's path
    hash_partitions: int | None = None  # `hash`: into this many partitions
    offset: str = "field"
    offset_field: str = "offset"
    declared: bool = False  # the source says where at least one column comes from (else: PLAIN_* for plain files)

    @property
    def from_fields(self) -> bool:
        """All three columns come from the line's own fields (the layout Retrace's generator writes)."""
        return self.arrival == self.partition == self.offset == "field"

    def columns(self) -> tuple[str, str, str]:
        """The payload fields read for partition, offset and arrival (the ones not taken from a field keep the
        column's name: such a field of the line is then not used)."""
        return (self.partition_field if self.partition in ("field", "hash") else "partition",
                self.offset_field if self.offset == "field" else "offset",
                self.arrival_field if self.arrival == "field" else "arrival_time")

    def describe(self) -> dict:
        """The declaration as plain values (recorded with each journal commit that used it)."""
        arrival = {"field": self.arrival_field} if self.arrival == "field" else self.arrival
        partition = ({"field": self.partition_field} if self.partition == "field" else {"value": 0}
                     if self.partition == "zero"
                     else {"hash": self.partition_field, "partitions": self.hash_partitions}
                     if self.partition == "hash" else {"file": self.file_pattern})
        offset = {"field": self.offset_field} if self.offset == "field" else self.offset
        return {"arrival_time": arrival, "partition": partition, "offset": offset}

    def file_partition(self, name: str) -> int | None:
        """`partition: file`: the partition of the landing file `name` (relative to the landing), None when its
        path does not match the pattern."""
        m = _file_regex(self.file_pattern).fullmatch(name if "/" in self.file_pattern else name.rsplit("/", 1)[-1])
        extra = name.count("/") - self.file_pattern.count("/")
        if m is None and "/" in self.file_pattern and extra > 0:  # a pattern of folders matches the path's last parts
            m = _file_regex("*/" * extra + self.file_pattern).fullmatch(name)
        return int(m.group("partition")) if m else None


@dataclass(frozen=True)
class KafkaFields:
    """The top-level payload fields a Kafka record's key and headers are journaled as (`kafka: {key_as, headers_as}`
    in sources.yaml); None: not kept, and the payload is the record value alone, as before."""

    key_as: str | None = None
    headers_as: str | None = None

    @property
    def declared(self) -> bool:
        return self.key_as is not None or self.headers_as is not None


def parse_kafka(raw: Any, where: str) -> KafkaFields:
    """A source's `kafka: {key_as: NAME, headers_as: NAME}` (either optional), checked; `where` starts any error."""
    if raw is None:
        return KafkaFields()
    if not isinstance(raw, dict) or not raw:
        raise SourceError(f"{where}: kafka: {raw!r} must be a mapping of key_as and/or headers_as, e.g. "
                          "{key_as: kafka_key, headers_as: kafka_headers}")
    unknown = sorted(set(raw) - set(KAFKA_KEYS))
    if unknown:
        raise SourceError(f"{where}: kafka: unknown field {unknown[0]!r}; known fields: {', '.join(KAFKA_KEYS)}")
    names = {k: _field_name(v, where, f"kafka.{k}") for k, v in sorted(raw.items())}
    if len(set(names.values())) < len(names):
        raise SourceError(f"{where}: kafka: key_as and headers_as are both {names['key_as']!r}; give two names")
    for k, v in names.items():
        if v == DEAD_VALUE:
            raise SourceError(f"{where}: kafka.{k}: {v!r} is the field a dead letter keeps the record value in; "
                              "name it otherwise")
    return KafkaFields(names.get("key_as"), names.get("headers_as"))


# An undeclared source's plain file (its first row has none of the fields partition, offset, arrival_time): one
# partition, 0; offsets in file then line order; the arrival its modification time (a batch ingest of files that
# landed earlier) or, in the live job on the system clock, the time the row is journaled.
PLAIN_FIELDS = ("partition", "offset", "arrival_time")
PLAIN_BATCH = Origins(arrival="file_modified", partition="zero", offset="line")
PLAIN_LIVE = Origins(arrival="observed", partition="zero", offset="line")


def _file_regex(pattern: str) -> re.Pattern:
    """`{partition}`: digits (a folder may read `NAME=N`); any other `{name}` or `*`: any text without `/`."""
    out, i = [], 0
    for m in re.finditer(r"\{(\w+)\}|\*", pattern):
        out.append(re.escape(pattern[i:m.start()]))
        if m.group(1) == "partition":
            prefix = "(?:[^/=]*=)?" if m.start() == 0 or pattern[m.start() - 1] == "/" else ""
            out.append(prefix + r"(?P<partition>\d+)")
        else:
            out.append(r"[^/]*?")
        i = m.end()
    out.append(re.escape(pattern[i:]))
    return re.compile("".join(out))


def parse(spec: dict[str, Any], where: str) -> tuple[Origins, tuple[int, ...] | None]:
    """The origins and declared partitions of a source's mapping (`arrival_time`, `partition`, `offset`,
    `partitions`); `where` (e.g. "sources.yaml: sensors") starts any error."""
    arrival, arrival_field = _arrival(spec.get("arrival_time"), where)
    partition, partition_field, pattern, buckets = _partition(spec.get("partition"), where)
    offset, offset_field = _offset(spec.get("offset"), where)
    origins = Origins(arrival, arrival_field, partition, partition_field, pattern, buckets, offset, offset_field,
                      declared=any(spec.get(k) is not None for k in ("arrival_time", "partition", "offset")))
    declared = _partitions(spec.get("partitions"), where)
    if buckets is not None:
        if declared is None:
            declared = tuple(range(buckets))
        elif declared != tuple(range(buckets)):
            raise SourceError(f"{where}: partitions: {spec.get('partitions')!r} disagrees with partition.partitions "
                              f"{buckets} (a hash into {buckets} partitions makes partitions 0 to {buckets - 1})")
    return origins, declared


def _field_name(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str) or not IDENT.match(value):
        raise SourceError(f"{where}: {what}: {value!r} is not a top-level field name")
    return value


def _one_key(raw: Any, where: str, what: str, keys: tuple[str, ...], usage: str) -> tuple[str, Any]:
    if isinstance(raw, dict) and len(raw) == 1 and next(iter(raw)) in keys:
        return next(iter(raw.items()))
    raise SourceError(f"{where}: {what}: {raw!r} is not one of {usage}")


def _arrival(raw: Any, where: str) -> tuple[str, str]:
    usage = "observed, file_modified, {field: NAME}"
    if raw is None:
        return "field", "arrival_time"
    if raw in ("observed", "file_modified"):
        return raw, "arrival_time"
    _, name = _one_key(raw, where, "arrival_time", ("field",), usage)
    return "field", _field_name(name, where, "arrival_time.field")


def _partition(raw: Any, where: str) -> tuple[str, str, str, int | None]:
    usage = "file, {file: PATTERN with {partition}}, {field: NAME}, {hash: FIELD, partitions: N}"
    if raw is None:
        return "field", "partition", DEFAULT_FILE_PATTERN, None
    if raw == "file":
        return "file", "partition", DEFAULT_FILE_PATTERN, None
    if isinstance(raw, dict) and set(raw) == {"hash", "partitions"}:
        n = raw["partitions"]
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PARTITIONS:
            raise SourceError(f"{where}: partition.partitions: {n!r} must be an integer from 1 to {MAX_PARTITIONS}")
        return "hash", _field_name(raw["hash"], where, "partition.hash"), DEFAULT_FILE_PATTERN, n
    kind, value = _one_key(raw, where, "partition", ("field", "file"), usage)
    if kind == "field":
        return "field", _field_name(value, where, "partition.field"), DEFAULT_FILE_PATTERN, None
    if not isinstance(value, str) or value.count("{partition}") != 1 or value.startswith("/"):
        raise SourceError(f"{where}: partition.file: {value!r} must be a relative path pattern with one "
                          "{partition} part, e.g. '{topic}+{partition}+{start}.json'")
    return "file", "partition", value, None


def _offset(raw: Any, where: str) -> tuple[str, str]:
    if raw is None:
        return "field", "offset"
    if raw == "line":
        return "line", "offset"
    _, name = _one_key(raw, where, "offset", ("field",), "line, {field: NAME}")
    return "field", _field_name(name, where, "offset.field")


def _partitions(raw: Any, where: str) -> tuple[int, ...] | None:
    """A count N (partitions 0 to N-1) or a list of partition numbers."""
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool) and 1 <= raw <= MAX_PARTITIONS:
        return tuple(range(raw))
    if (isinstance(raw, list) and raw and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in raw)
            and len(set(raw)) == len(raw)):
        return tuple(sorted(raw))
    raise SourceError(f"{where}: partitions: {raw!r} must be a count (1 to {MAX_PARTITIONS}) or a list of distinct "
                      "partition numbers (0 or more)")


def from_options(arrival: str | None, partition: str | None, offset: str | None,
                 partitions: str | None = None) -> tuple[Origins, tuple[int, ...] | None]:
    """The same declaration from command-line options: `--arrival-time observed|file_modified|field:NAME`,
    `--partition file|file:PATTERN|field:NAME|hash:FIELD:N`, `--offset line|field:NAME`, `--partitions N|0,2,5`."""
    spec: dict[str, Any] = {}
    if arrival is not None:
        spec["arrival_time"] = _option(arrival)
    if partition is not None:
        head, _, rest = partition.partition(":")
        if head == "hash":
            name, _, n = rest.rpartition(":")
            spec["partition"] = {"hash": name, "partitions": int(n) if n.isdigit() else n}
        else:
            spec["partition"] = _option(partition)
    if offset is not None:
        spec["offset"] = _option(offset)
    if partitions is not None:
        parts = partitions.split(",")
        if "," in partitions:
            spec["partitions"] = [int(p) if p.strip().isdigit() else p for p in parts]
        else:
            spec["partitions"] = int(partitions) if partitions.isdigit() else partitions
    return parse(spec, "command line")


def _option(text: str) -> Any:
    """`field:NAME` -> {field: NAME}, `file:PATTERN` -> {file: PATTERN}; anything else as it is."""
    head, sep, rest = text.partition(":")
    return {head: rest} if sep and head in ("field", "file") else text
