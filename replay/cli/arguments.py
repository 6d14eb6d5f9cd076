"""The `replay` command's arguments: one sub-command per operation (`main` runs it). Every option says what it is
(`replay <command> --help`); a value out of range is refused by the parser, naming the option."""
from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from importlib import metadata

from replay.ops.advise import LATE_GRID, OUT_OF_ORDER_GRID
from replay.ops.generate import FORMATS, SHAPES


def parser(commands: dict[str, Callable]) -> argparse.ArgumentParser:
    """The parser; each sub-command's `fn` is `commands[name]`."""
    p = argparse.ArgumentParser(prog="replay", description="Deterministic replays of event-time streaming jobs.")
    p.add_argument("--version", action=_Version, help="print the versions of Retrace and what it runs on, and exit")
    sub = p.add_subparsers(dest="command", required=True)
    for name, add in (("generate", _generate), ("ingest", _ingest), ("run", _run), ("stream", _stream),
                      ("hash", _hash), ("show", _show), ("explain", _explain), ("verify", _verify), ("diff", _diff),
                      ("advise", _advise), ("maintain", _maintain), ("migrate", _migrate), ("demo", _demo),
                      ("doctor", _doctor)):
        add(sub).set_defaults(fn=commands[name])
    for command in sub.choices.values():
        command.add_argument("-v", "--verbose", action="store_true",
                             help="print the path of the command's log file (Spark's and Hadoop's lines)")
    return p


class _Version(argparse.Action):
    """--version: one line, as it is (argparse's own action wraps it to the terminal's width)."""

    def __init__(self, option_strings, dest, help=None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version())
        parser.exit()


def version() -> str:
    """Retrace's version and those of what it runs on, e.g. `replay 0.1.0 (pyspark 4.2.0, ...)`."""
    def of(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "not installed"

    python = ".".join(map(str, sys.version_info[:3]))
    return (f"replay {of('retrace')} (pyspark {of('pyspark')}, delta-spark {of('delta-spark')}, "
            f"dagster {of('dagster')}, Python {python})")


def _seconds(text: str) -> float:
    """A number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more seconds")
    return value


def _positive(text: str) -> int:
    """A whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


def _folder(text: str) -> str:
    """A local folder as an absolute path: Spark SQL resolves a table path (`delta.`lake/x``) on its own terms,
    so a relative `--lake` would name no table. A URI (s3a://bucket/prefix) is kept as it is."""
    return text.rstrip("/") if re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://", text) else os.path.abspath(text)


def _lake(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--lake", required=required, metavar="DIR", type=_folder,
                   help="the lake folder, or s3a://BUCKET/PREFIX on object storage: the journal, every job's "
                        "targets, their locks (created by the first ingest or stream)")


def _target(p: argparse.ArgumentParser, what: str = "the target") -> None:
    p.add_argument("--target", default="production",
                   help=f"{what}: a name for one set of a job's outputs, under LAKE/jobs/JOB/outputs/ "
                        "(lower-case letters, digits, _ and -; default production)")


def _generate(sub) -> argparse.ArgumentParser:
    g = sub.add_parser("generate", help="write a synthetic landing stream",
                       description="Write a synthetic landing stream: N events arriving at --rate per second from "
                                   "--start, so they span N / rate seconds of arrival (and of event time). Choose "
                                   "--rate for the windows you want to see: the default 1000/s makes 5,000 events "
                                   "last 5 s, not one 5-minute window; --events 20000 --rate 10 spans 33 minutes, "
                                   "about 6 such windows.")
    g.add_argument("--out", required=True, metavar="DIR", help="the landing folder to write part-* files into")
    g.add_argument("--overwrite", action="store_true",
                   help="replace the part-* files the folder already holds (without it, such a folder is refused)")
    g.add_argument("--events", type=_positive, required=True, help="how many events to write")
    g.add_argument("--partitions", type=_positive, default=8, help="source partitions (default 8)")
    g.add_argument("--keys", type=_positive, default=1000, help="distinct keys (default 1000)")
    g.add_argument("--files", type=_positive, default=100, help="landing files to spread the events over (default 100)")
    g.add_argument("--seed", type=int, default=0, help="random seed: the same seed writes the same files (default 0)")
    g.add_argument("--format", choices=FORMATS, default="jsonl", help="file format (default jsonl)")
    g.add_argument("--start", default="2024-01-01T00:00:00Z", metavar="ISO",
                   help="arrival time of the first event, e.g. 2026-11-28T09:00:00Z; event times are near their "
                        "arrivals (default 2024-01-01T00:00:00Z)")
    g.add_argument("--rate", type=float, default=1000.0, metavar="PER_SECOND",
                   help="mean arrivals per second (a Poisson process over all partitions): the stream spans "
                        "--events / --rate seconds (default 1000)")
    g.add_argument("--shape", choices=SHAPES, default="basic",
                   help="basic: key and value only; sensors: device readings (key is the device, value its "
                        "temperature) with device, region, site, temperature, pressure, status (ok, alarm, "
                        "test) and meta {firmware, battery} (default: basic)")
    return g


def _ingest(sub) -> argparse.ArgumentParser:
    i = sub.add_parser("ingest", help="journal new landing files (exactly once)")
    i.add_argument("--landing", required=True, help="a folder or s3://bucket/prefix")
    _lake(i)
    i.add_argument("--source", help="a source of the jobs folder: its payload fields for event time and key")
    _jobs_folder(i)
    i.add_argument("--event-time-field", help="the payload field holding the event time (default event_time)")
    i.add_argument("--key-field", help="the payload field holding the key (default key)")
    _origins(i, "file_modified")
    i.add_argument("--partitions", metavar="N|P,P,...",
                   help="the source's partitions: a count or a list; rows of others are journaled malformed")
    i.add_argument("--accept-changed", action="store_true",
                   help="exit 0 although journaled landing files changed (they are reported either way)")
    _wait(i)
    return i


def _origins(p: argparse.ArgumentParser, arrival: str) -> None:
    """Where the journal's partition, offset and arrival time come from (as a source of sources.yaml says)."""
    p.add_argument("--arrival-time", metavar="HOW",
                   help=f"observed, file_modified or field:NAME (e.g. {arrival}; default field:arrival_time)")
    p.add_argument("--partition", metavar="HOW",
                   help="file (a sub-folder N or NAME=N), file:PATTERN (with {partition}), field:NAME or "
                        "hash:FIELD:N (default field:partition)")
    p.add_argument("--offset", metavar="HOW", help="line (the row's position in its partition) or field:NAME "
                                                    "(default field:offset)")


def _run(sub) -> argparse.ArgumentParser:
    r = sub.add_parser("run", help="replay the journal into a target of a job")
    _lake(r)
    _job_or_policy(r, "policy YAML with the spec's field names (the spec's count/sum job)")
    _range(r, "replay")
    _target(r, "the target to write")
    _wait(r)
    r.add_argument("--hash", action="store_true",
                   help="print the target's output hash too (as `replay hash` does; after a whole replay, from the "
                        "rows at hand)")
    return r


def _stream(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("stream", help="the live job: journal and decide landing files or Kafka records in "
                                      "micro-batches")
    source = s.add_mutually_exclusive_group(required=True)
    source.add_argument("--landing", help="landing folder or s3://bucket/prefix")
    source.add_argument("--kafka-bootstrap", metavar="HOST:PORT", help="a Kafka broker to read --topic from")
    s.add_argument("--topic", help="the Kafka topic (with --kafka-bootstrap)")
    s.add_argument("--trust-create-time", action="store_true",
                   help="accept a CreateTime topic: producer timestamps become arrival times")
    s.add_argument("--max-records-per-batch", type=_positive,
                   help="Kafka: at most this many records per micro-batch")
    _lake(s)
    s.add_argument("--policy", required=True, help="the spec's count/sum job's policy")
    s.add_argument("--source", help="a source of the jobs folder: its payload fields, and every job reading it "
                                    "is run on each micro-batch from its own checkpoint")
    _jobs_folder(s)
    _target(s, "the target every job's micro-batches are committed to")
    s.add_argument("--max-files-per-batch", type=_positive, help="landing: at most this many files per micro-batch")
    s.add_argument("--max-bytes-per-batch", type=_positive, metavar="BYTES",
                   help="landing: at most this many bytes of files per micro-batch (at least one file)")
    s.add_argument("--max-batches", type=_positive, help="stop after this many micro-batches")
    s.add_argument("--trigger-seconds", type=float, default=1.0, help="seconds between micro-batch starts")
    s.add_argument("--clock", choices=("system", "simulated"), default="system",
                   help="processing time for estimated arrivals: the wall clock, or derived from the data")
    s.add_argument("--until-idle", action="store_true",
                   help="stop when every landing file (or every record the topic held at start) is journaled")
    s.add_argument("--partitions", metavar="N|P,P,...",
                   help="the source's partitions, a count or a list (needed the first time; recorded with the journal)")
    _origins(s, "observed")
    _watch(s)
    _wait(s)
    return s


def _watch(s: argparse.ArgumentParser) -> None:
    """How the live job watches time without data."""
    s.add_argument("--heartbeat-seconds", type=float,
                   help="with no data for this long, journal clock rows and decide them (default: --trigger-seconds; "
                        "0: none; system clock only)")
    s.add_argument("--never-seen-delay", type=float, default=5.0, metavar="SECONDS",
                   help="a partition that never had a row gets clock rows at processing time minus this")
    s.add_argument("--silent-after", type=float, default=300.0, metavar="SECONDS",
                   help="a partition with no event for this long while others progress is not progressing (alerted)")


def _hash(sub) -> argparse.ArgumentParser:
    h = sub.add_parser("hash", help="order-independent content hash of a target's outputs")
    _lake(h)
    _target(h, "the target to hash")
    _job_of_tables(h)
    return h


def _show(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("show", help="print a few rows of a target's windows, decisions or dead letters, for a time "
                                    "range and a key")
    _lake(s)
    _job_of_tables(s)
    _target(s, "the target to read")
    s.add_argument("--table", choices=("windows", "decisions", "dead_letters"), default="windows",
                   help="which table (default windows)")
    s.add_argument("--from", dest="start", help="ISO time: windows starting, or rows arriving, from here on")
    s.add_argument("--to", dest="end", help="ISO time: windows starting, or rows arriving, before this")
    s.add_argument("--key", help="only the rows of this key")
    s.add_argument("--limit", type=_positive, default=20, help="print at most this many rows (default 20)")
    s.add_argument("--json", action="store_true", help="print one JSON object per row instead of a table")
    return s


def _explain(sub) -> argparse.ArgumentParser:
    e = sub.add_parser("explain", help="a window of a job: the events in it, and the events whose time lies in it "
                                       "that it does not hold, with the reason")
    _lake(e)
    _job_of_tables(e)
    _target(e, "the target to read")
    e.add_argument("--window", required=True, metavar="ISO", help="the window's start, e.g. 2024-01-01T00:01:00Z")
    e.add_argument("--key", help="the window of this key (the spec's job, or a job grouped by key)")
    e.add_argument("--group", action="append", default=[], metavar="COLUMN=VALUE",
                   help="the window of this value of a group_by column (repeat for each)")
    e.add_argument("--partition", type=int, help="the window of this partition (windows per partition)")
    e.add_argument("--limit", type=_positive, default=50, help="print at most this many events of each kind")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    return e


def _verify(sub) -> argparse.ArgumentParser:
    v = sub.add_parser("verify", help="replay a range into a scratch target and compare it with a target "
                                      "(exit 0 identical, 1 different, 2 bad input)")
    _lake(v)
    _job_or_policy(v, "policy YAML the target was produced with (the spec's count/sum job)")
    _range(v, "verify")
    _target(v, "the target to compare with a replay")
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    return v


def _diff(sub) -> argparse.ArgumentParser:
    f = sub.add_parser("diff", help="what two targets of a job decided differently: events, windows, dead letters, "
                                    "output delay (exit 0 identical, 1 different, 2 bad input)")
    _lake(f)
    _job_of_tables(f)
    f.add_argument("--target", action="append", default=[], required=True,
                   help="a target; give it twice: --target production --target whatif")
    _range(f, "compare")
    f.add_argument("--json", action="store_true", help="print the report as JSON")
    return f


def _advise(sub) -> argparse.ArgumentParser:
    e = sub.add_parser("advise", help="profile the journal's lateness and recommend tolerances, each candidate "
                                      "replayed by the engine")
    _lake(e)
    _job_or_policy(e, "policy YAML of the spec's count/sum job (the starting point of the sweep)")
    _range(e, "advise on")
    e.add_argument("--completeness", type=float, default=0.999,
                   help="the share of events a tolerance must keep untouched (default 0.999)")
    e.add_argument("--late-grid", help=f"candidate late tolerances, comma-separated (default {','.join(LATE_GRID)})")
    e.add_argument("--out-of-order-grid",
                   help=f"candidate out-of-order tolerances (default {','.join(OUT_OF_ORDER_GRID)})")
    e.add_argument("--latency-budget", metavar="DURATION",
                   help="recommend the most complete candidates whose windows are emitted within this (p99 of the "
                        "output delay a live run would have), e.g. 30s; default: the smallest that meets "
                        "--completeness")
    e.add_argument("--heartbeat", default="1s", metavar="DURATION",
                   help="an ingested journal has no clock rows: output delays are measured with those of a live run "
                        "keeping up with a heartbeat this often (default 1s, the live job's trigger)")
    e.add_argument("--out", metavar="DIR", help="where advice.json and the plots go (default LAKE/jobs/JOB/advice)")
    e.add_argument("--html", action="store_true", help="also write advice.html with the plots embedded")
    return e


def _maintain(sub) -> argparse.ArgumentParser:
    m = sub.add_parser("maintain", help="compact every Delta table of the lake, keep the last checkpoints, "
                                         "vacuum old files")
    _lake(m)
    m.add_argument("--retention", default="7d", help="keep files any version of this age needs (time travel); "
                                                     "e.g. 7d, 12h")
    m.add_argument("--keep-checkpoints", type=_positive, default=100,
                   help="checkpoints kept per target (the latest; default 100)")
    return m


def _migrate(sub) -> argparse.ArgumentParser:
    m = sub.add_parser("migrate", help="move a lake written before jobs (LAKE/outputs/<target>) to today's layout "
                                        "(LAKE/jobs/default/outputs/<target>), once")
    _lake(m)
    return m


def _demo(sub) -> argparse.ArgumentParser:
    d = sub.add_parser("demo", help="generate, ingest, replay and summarize on embedded defaults")
    d.add_argument("--work", default=".retrace", metavar="DIR",
                   help="where the demo's landing and lake go (default .retrace)")
    d.add_argument("--events", type=_positive, default=200_000, help="events to generate (default 200000)")
    d.add_argument("--policy", help="policy YAML of the spec's job (default infra/policies/production.yaml)")
    return d


def _doctor(sub) -> argparse.ArgumentParser:
    d = sub.add_parser("doctor", help="check Java, the jars, the lake (writable, locks) and S3 credentials: one "
                                      "verdict per line (exit 0 when nothing fails)")
    d.add_argument("--lake", metavar="DIR", help="the lake to check (default $RETRACE_LAKE, else none)")
    d.add_argument("--landing", help="the landing folder or s3://bucket/prefix to check (default $RETRACE_LANDING, "
                                     "else none)")
    return d


def _job_or_policy(p: argparse.ArgumentParser, policy_help: str) -> None:
    """--job NAME (a job of the jobs folder) or --policy FILE (the spec's count/sum job on that policy)."""
    p.add_argument("--policy", help=policy_help)
    p.add_argument("--job", help="a job of the jobs folder (its name); instead of --policy")
    _jobs_folder(p)


def _job_of_tables(p: argparse.ArgumentParser) -> None:
    """--job for a command that reads a job's outputs; without it, the spec's count/sum job."""
    p.add_argument("--job", help="a job of the jobs folder (default: the spec's job, `default`)")
    _jobs_folder(p)


def _jobs_folder(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", metavar="DIR", help="the jobs folder (default $RETRACE_JOBS, else jobs/examples)")


def _range(p: argparse.ArgumentParser, verb: str) -> None:
    """`--from`/`--to`: an arrival-time range [from, to) of the journal."""
    p.add_argument("--from", dest="start", help=f"ISO arrival time; {verb} rows arriving from here on")
    p.add_argument("--to", dest="end", help=f"ISO arrival time; {verb} rows arriving before this")


def _wait(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", type=_seconds, default=None, metavar="SECONDS",
                   help="when another writer holds the journal or target, wait this long for it "
                        "(default $RETRACE_LOCK_WAIT or 0: refuse at once, naming the holder)")
