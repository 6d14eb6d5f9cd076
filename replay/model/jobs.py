"""Users' streaming jobs: a frozen, validated value (time policy, fields, filter, grouping, aggregates),
loaded from YAML files or built in Python, and checked against Spark before anything runs.

A job reads one source's journal. Its fields are Spark SQL expressions over the journal row, where
`payload` is the event as it landed (a VARIANT: `payload:temperature::decimal(6,2)`); its `where` and
optional Python `transform` act on the decided events before windowing; its aggregates are Spark SQL
aggregate expressions over a window's members. The spec's own job (`count` and `sum` of `value` per key)
is `Job.spec(policy)`: the demo, the conformance runner and every job without a name run it.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from replay.model.policy import SUBSTREAM_COLUMNS, Policy, PolicyError, substream_error
from replay.model.sources import KafkaFields, Origins, SourceError, parse_kafka
from replay.model.sources import parse as parse_origins

NAME = re.compile(r"^[a-z][a-z0-9_]*$")  # a job's name: also a folder name and a Dagster asset prefix
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SPEC_JOB = "default"
SPEC_AGGREGATES = (("count", "count(*)"), ("sum", "cast(sum(cast(value as decimal(38,12))) as double)"))
# Columns of the decisions and windows tables that a field or aggregate may not shadow.
RESERVED = frozenset({
    "seq", "partition", "offset", "kind", "action", "reasons", "timestamp", "watermark", "output_watermark",
    "arrival_time", "event_time", "key", "value", "partition_watermark", "payload", "source", "source_line",
    "window_start", "window_end", "emitted_at", "scope", "k", "close_seq",
})
JOB_KEYS = {"name", "source", "policy", "fields", "where", "group_by", "aggregates"}
SOURCE_KEYS = {"event_time_field", "key_field", "partitions", "punctuation", "description", "arrival_time",
               "partition", "offset", "kafka"}
PUNCTUATION_KEYS = {"field", "value", "time_field"}
SOURCES_FILE = "sources.yaml"
COUNTS = ("count(*)", "count(1)")  # an aggregate that counts a window's members


class JobError(ValueError):
    """A job definition is wrong; the message names the file or job, the field and the value."""


@dataclass(frozen=True)
class Source:
    """One journal: which payload fields hold the event time and the key (`TIMESTAMP BY`, `OVER`), where its
    partition, offset and arrival time come from (`origins`), its partitions when declared, and (a Kafka topic)
    which payload fields its records' keys and headers are kept as."""

    name: str = SPEC_JOB
    event_time_field: str = "event_time"
    key_field: str = "key"
    partitions: tuple[int, ...] | None = None
    origins: Origins = Origins()
    # how the source's own punctuations (StreamInsight adapter CTIs, watermark records) are recognised: a record
    # whose `field` holds `value` is a punctuation, its time in `time_field` (spec 4); None: the source sends none
    punctuation: tuple[str, str, str] | None = None
    kafka: KafkaFields = KafkaFields()  # the payload fields a Kafka record's key and headers are kept as

    def __post_init__(self):
        for what in ("event_time_field", "key_field"):
            if not IDENT.match(str(getattr(self, what))):
                raise JobError(f"source {self.name}: {what}: {getattr(self, what)!r} is not a top-level field name")
        if self.punctuation is not None:
            field, _, time_field = self.punctuation
            for what, v in (("field", field), ("time_field", time_field)):
                if not IDENT.match(str(v)):
                    raise JobError(f"source {self.name}: punctuation.{what}: {v!r} is not a top-level field name")

    @staticmethod
    def punctuation_of(name: str, raw: Any) -> tuple[str, str, str] | None:
        """`punctuation: {field: F, value: V, time_field: T}` of sources.yaml, checked (None when absent)."""
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise JobError(f"source {name}: punctuation: must be a mapping of field, value, time_field, got {raw!r}")
        unknown = sorted(set(raw) - PUNCTUATION_KEYS)
        missing = sorted(PUNCTUATION_KEYS - set(raw))
        if unknown or missing:
            raise JobError(f"source {name}: punctuation: {'unknown' if unknown else 'missing'} field "
                           f"{(unknown or missing)[0]!r}; give field, value and time_field")
        if raw["value"] is None or isinstance(raw["value"], (dict, list)):
            raise JobError(f"source {name}: punctuation.value: {raw['value']!r} must be a string, number or boolean")
        value = raw["value"]
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)  # as JSON text reads it
        return (raw["field"], text, raw["time_field"])


@dataclass(frozen=True)
class Job:
    """A streaming job: build it with `Job.define` (validated) or `Job.spec` (the spec's count/sum)."""

    name: str
    policy: Policy
    source: str = SPEC_JOB
    fields: tuple[tuple[str, str], ...] = ()
    where: str | None = None
    group_by: tuple[str, ...] | None = None  # None: `key` when the policy groups by key, else one group
    aggregates: tuple[tuple[str, str], ...] = SPEC_AGGREGATES
    transform: Callable[[Any], Any] | None = field(default=None, compare=False)
    origin: str = "python"  # where it was defined: a file path, or "python"

    @classmethod
    def spec(cls, policy: Policy, payload_fields: tuple[str, ...] = ()) -> "Job":
        """The spec's job (section 5): count and exact sum of `value` per key and window. `payload_fields`: the
        payload fields (read as strings) it also has, for a `substream_by` naming one (a conformance case's
        journal rows carry them); `substream_by` may name `key` or one of them."""
        fields = tuple((n, f"payload:{n}::string") for n in payload_fields)
        problem = substream_error(policy.substream_by, SUBSTREAM_COLUMNS + tuple(payload_fields))
        if problem:
            raise JobError(f"job {SPEC_JOB}: policy.{problem}")
        return cls(SPEC_JOB, policy, fields=fields)

    @classmethod
    def define(cls, name: str, policy: Policy | dict, *, source: str = SPEC_JOB, fields: dict | None = None,
               where: str | None = None, group_by: list[str] | tuple[str, ...] | None = None,
               aggregates: dict | None = None, transform: Callable[[Any], Any] | None = None) -> "Job":
        """A job from plain values, validated (names, shapes); `job_sql.check` then validates it against Spark.
        A loader names the file it came from (`origin`) in front of any error."""
        if not isinstance(name, str) or not NAME.match(name) or name == SPEC_JOB:
            raise JobError(f"name: {name!r} must be lower-case letters, digits or '_', starting with a letter"
                           f" (and not {SPEC_JOB!r})")
        fields_ = _named(fields or {}, "fields", name)
        # substreams over `key` or a field (not a transform's output: watermarks are decided before transforms)
        policy = _windowed_policy(name, policy, SUBSTREAM_COLUMNS + tuple(n for n, _ in fields_))
        aggregates_ = _named(aggregates if aggregates is not None else dict(SPEC_AGGREGATES), "aggregates", name)
        if not aggregates_:
            raise JobError(f"job {name}: aggregates: give at least one, e.g. {{events: 'count(*)'}}")
        if where is not None and (not isinstance(where, str) or not where.strip()):
            raise JobError(f"job {name}: where: {where!r} must be a Spark SQL boolean expression")
        group = _grouping(name, group_by, fields_, transform)
        clash = {n for n, _ in aggregates_} & (set(group or ("key",)) | RESERVED)
        if clash:
            raise JobError(f"job {name}: aggregates: {sorted(clash)[0]!r} is already a column of the windows")
        if transform is not None and not callable(transform):
            raise JobError(f"job {name}: transform: {transform!r} is not a function of a DataFrame")
        job = cls(name, policy, source, fields_, where, group, aggregates_, transform)
        if policy.sessions and policy.idle_timeout is not None and not job.windows_every_event_by_key:
            raise JobError(f"job {name}: policy.idle_timeout: with session windows it is supported for jobs "
                           "without where, group_by or transform; leave it out")
        return job

    @property
    def grouping(self) -> tuple[str, ...]:
        """The columns windows are grouped by."""
        if self.group_by is not None:
            return self.group_by
        return ("key",) if self.policy.group_by_key else ()

    @property
    def field_names(self) -> tuple[str, ...]:
        """The names of its fields: the columns its decided rows carry."""
        return tuple(n for n, _ in self.fields)

    @property
    def is_spec(self) -> bool:
        """The spec's job shape: its windows can continue from a checkpoint's partial counts and sums."""
        return (not self.fields and self.where is None and self.transform is None and self.group_by is None
                and self.aggregates == SPEC_AGGREGATES)

    @property
    def windows_every_event_by_key(self) -> bool:
        """No where, transform or group_by: the windows take every kept event, grouped as the spec's job's are (by
        key, or not at all), whatever the fields and aggregates. The idle timeout's pass over sessions needs it."""
        return self.where is None and self.transform is None and self.group_by is None

    @property
    def counting_aggregate(self) -> str | None:
        """The aggregate that counts a window's members (`count(*)`), if the job has one."""
        return next((n for n, e in self.aggregates if "".join(e.lower().split()) in COUNTS), None)

    @property
    def conserves(self) -> bool:
        """Spec 7's balance holds on its tables: every kept event reaches its windows (no `where`, no
        `transform`) and an aggregate counts the members."""
        return self.where is None and self.transform is None and self.counting_aggregate is not None

    def fingerprint(self) -> dict:
        """The definition, as plain values (a checkpoint made for another definition is not continued)."""
        t = self.transform
        return {"name": self.name, "fields": list(map(list, self.fields)), "where": self.where,
                "group_by": list(self.grouping), "aggregates": list(map(list, self.aggregates)),
                "transform": None if t is None else f"{getattr(t, '__module__', '')}.{getattr(t, '__qualname__', t)}"}

    def signature(self) -> str:
        """What a checkpoint's state depends on, as canonical JSON: the policy, and the definition of a job whose
        open windows hold their members (in the spec's shape they hold partial counts and sums, which depend on
        the policy alone: the form of every checkpoint written before jobs, which stays valid)."""
        if self.is_spec:
            return json.dumps(self.policy.to_dict(), sort_keys=True)
        return json.dumps({**self.fingerprint(), "policy": self.policy.to_dict()}, sort_keys=True)

    def describe(self) -> str:
        return f"job {self.name}" + (f" ({self.origin})" if self.origin != "python" else "")


def _windowed_policy(name: str, policy: Policy | dict, substreams: tuple[str, ...]) -> Policy:
    """The job's policy, checked: a window, and substreams over `key` or one of the job's fields."""
    if isinstance(policy, dict):
        try:
            policy = Policy.from_dict(policy, fields=substreams)
        except PolicyError as e:
            raise JobError(f"job {name}: policy: {e}") from None
    problem = substream_error(policy.substream_by, substreams)
    if problem:
        raise JobError(f"job {name}: policy.{problem}")
    if policy.window is None:
        raise JobError(f"job {name}: policy.window: a job needs windows (e.g. {{kind: tumbling, size: 1m}})")
    return policy


def _grouping(name: str, group_by, fields: tuple, transform) -> tuple[str, ...] | None:
    if group_by is None:
        return None
    if isinstance(group_by, str) or not all(isinstance(g, str) for g in group_by):
        raise JobError(f"job {name}: group_by: {group_by!r} must be a list of column names")
    known = {"key"} | {n for n, _ in fields}
    unknown = [g for g in group_by if g not in known and transform is None]
    if unknown:
        raise JobError(f"job {name}: group_by: {unknown[0]!r} is not a field; known: {', '.join(sorted(known))}")
    return tuple(group_by)


def _named(raw: Any, what: str, job: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, dict):
        raise JobError(f"job {job}: {what}: must be a mapping of name: Spark SQL expression, got {raw!r}")
    out = []
    for n, e in raw.items():
        if not isinstance(n, str) or not IDENT.match(n):
            raise JobError(f"job {job}: {what}: {n!r} is not a column name (letters, digits, '_')")
        if what == "fields" and n in RESERVED:
            raise JobError(f"job {job}: {what}: {n!r} is a journal or decisions column; name the field otherwise")
        if not isinstance(e, str) or not e.strip():
            raise JobError(f"job {job}: {what}.{n}: {e!r} must be a Spark SQL expression")
        out.append((n, e))
    return tuple(out)


@dataclass(frozen=True)
class Catalog:
    """The sources and jobs of a folder of YAML files."""

    sources: dict[str, Source]
    jobs: dict[str, Job]

    def job(self, name: str) -> Job:
        if name not in self.jobs:
            raise JobError(f"job {name!r} is not defined; defined jobs: {', '.join(sorted(self.jobs)) or 'none'}")
        return self.jobs[name]

    def source_of(self, job: Job) -> Source:
        return self.sources.get(job.source, Source(job.source))

    def reading(self, source: str) -> tuple[Job, ...]:
        """The jobs that read `source`, by name."""
        return tuple(job for _, job in sorted(self.jobs.items()) if job.source == source)


def load_folder(folder: str | os.PathLike) -> Catalog:
    """`sources.yaml` (source name -> payload field names), one job per other `*.yaml` file, and the `Job`
    values (`JOB`, or a list `JOBS`) of every `*.py` file: jobs that need a Python `transform`."""
    folder = Path(folder)
    if not folder.is_dir():
        raise JobError(f"jobs folder {folder} does not exist")
    sources = _load_sources(folder / SOURCES_FILE)
    jobs: dict[str, Job] = {}
    for path in sorted(folder.glob("*.yaml")):
        if path.name == SOURCES_FILE:
            continue
        _add(jobs, load_job(path, sources), path)
    for path in sorted(folder.glob("*.py")):
        for job in _python_jobs(path):
            if job.source not in sources:
                raise JobError(f"{path}: job {job.name}: source {job.source!r} is not defined in "
                               f"{folder / SOURCES_FILE}; defined: {', '.join(sorted(sources)) or 'none'}")
            _add(jobs, job, path)
    return Catalog(sources, jobs)


def _add(jobs: dict[str, Job], job: Job, path: Path) -> None:
    if job.name in jobs:
        raise JobError(f"{path}: name: {job.name!r} is also the name of the job in {jobs[job.name].origin}")
    jobs[job.name] = job


def _python_jobs(path: Path) -> list[Job]:
    """The `JOB` or `JOBS` of a Python job file (imported under a private module name)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"retrace_jobs_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except JobError as e:
        raise JobError(f"{path}: {e}") from None
    found = list(getattr(module, "JOBS", [])) + ([module.JOB] if hasattr(module, "JOB") else [])
    if not found or not all(isinstance(j, Job) for j in found):
        raise JobError(f"{path}: define JOB = Job.define(...) (or a list JOBS) in it")
    return [replace(j, origin=str(path)) if j.origin == "python" else j for j in found]


def load_job(path: Path, sources: dict[str, Source] | None = None) -> Job:
    """One job file; a missing source or an unknown key is a one-line error naming the file."""
    raw = _yaml(path)
    unknown = sorted(set(raw) - JOB_KEYS)
    if unknown:
        raise JobError(f"{path}: unknown field {unknown[0]!r}; known fields: {', '.join(sorted(JOB_KEYS))}")
    name = raw.get("name", path.stem)
    source = raw.get("source")
    if source is None:
        raise JobError(f"{path}: source: missing; name the source the job reads")
    if sources is not None and source not in sources:
        raise JobError(f"{path}: source: {source!r} is not defined in {path.parent / SOURCES_FILE}; "
                       f"defined: {', '.join(sorted(sources)) or 'none'}")
    if not isinstance(raw.get("policy"), dict):
        raise JobError(f"{path}: policy: must be a mapping of the spec's policy fields, got {raw.get('policy')!r}")
    try:
        job = Job.define(name, raw["policy"], source=source, fields=raw.get("fields"), where=raw.get("where"),
                         group_by=raw.get("group_by"), aggregates=raw.get("aggregates"))
    except JobError as e:
        raise JobError(f"{path}: {e}") from None
    return replace(job, origin=str(path))


def _load_sources(path: Path) -> dict[str, Source]:
    if not path.exists():
        return {}
    raw = _yaml(path)
    out = {}
    for name, spec in raw.items():
        if not isinstance(name, str) or not NAME.match(name):
            raise JobError(f"{path}: source name {name!r} must be lower-case letters, digits or '_'")
        spec = spec or {}
        if not isinstance(spec, dict):
            raise JobError(f"{path}: {name}: must be a mapping of {', '.join(sorted(SOURCE_KEYS))}")
        unknown = sorted(set(spec) - SOURCE_KEYS)
        if unknown:
            raise JobError(f"{path}: {name}: unknown field {unknown[0]!r}; known fields: "
                           f"{', '.join(sorted(SOURCE_KEYS))}")
        try:
            origins, partitions = parse_origins(spec, f"source {name}")
            out[name] = Source(name, spec.get("event_time_field", "event_time"), spec.get("key_field", "key"),
                               partitions, origins, Source.punctuation_of(name, spec.get("punctuation")),
                               parse_kafka(spec.get("kafka"), f"source {name}"))
        except (JobError, SourceError) as e:
            raise JobError(f"{path}: {e}") from None
    return out


def _yaml(path: Path) -> dict:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise JobError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
    except UnicodeDecodeError:
        raise JobError(f"{path}: not UTF-8 text") from None
    if not isinstance(raw, dict):
        raise JobError(f"{path}: must hold a mapping, got {type(raw).__name__}")
    return raw
