"""The `replay` command's arguments: one sub-command per operation (`main` runs it)."""
from __future__ import annotations

import argparse
from collections.abc import Callable

from replay.ops.advise import LATE_GRID, OUT_OF_ORDER_GRID
from replay.ops.generate import FORMATS, SHAPES


def parser(commands: dict[str, Callable]) -> argparse.ArgumentParser:
    """The parser; each sub-command's `fn` is `commands[name]`."""
    p = argparse.ArgumentParser(prog="replay", description="Deterministic replays of event-time streaming jobs.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, add in (("generate", _generate), ("ingest", _ingest), ("run", _run), ("stream", _stream),
                      ("hash", _hash), ("verify", _verify), ("diff", _diff), ("advise", _advise),
                      ("maintain", _maintain), ("migrate", _migrate), ("demo", _demo)):
        add(sub).set_defaults(fn=commands[name])
    for command in sub.choices.values():
        command.add_argument("-v", "--verbose", action="store_true",
                             help="print the path of the command's log file (Spark's and Hadoop's lines)")
    return p


def _generate(sub) -> argparse.ArgumentParser:
    g = sub.add_parser("generate", help="write a synthetic landing stream")
    g.add_argument("--out", required=True)
    g.add_argument("--events", type=int, required=True)
    g.add_argument("--partitions", type=int, default=8)
    g.add_argument("--keys", type=int, default=1000)
    g.add_argument("--files", type=int, default=100)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--format", choices=FORMATS, default="jsonl")
    g.add_argument("--start", default="2024-01-01T00:00:00Z", help="ISO time of the first arrival")
    g.add_argument("--rate", type=float, default=1000.0, help="arrivals per second (default 1000)")
    g.add_argument("--shape", choices=SHAPES, default="basic",
                   help="basic: key and value only; sensors: device readings (key is the device, value its "
                        "temperature) with device, region, site, temperature, pressure, status (ok, alarm, "
                        "test) and meta {firmware, battery} (default: basic)")
    return g


def _ingest(sub) -> argparse.ArgumentParser:
    i = sub.add_parser("ingest", help="journal new landing files (exactly once)")
    i.add_argument("--landing", required=True, help="a folder or s3://bucket/prefix")
    i.add_argument("--lake", required=True)
    i.add_argument("--source", help="a source of the jobs folder: its payload fields for event time and key")
    _jobs_folder(i)
    i.add_argument("--event-time-field", help="the payload field holding the event time (default event_time)")
    i.add_argument("--key-field", help="the payload field holding the key (default key)")
    i.add_argument("--accept-changed", action="store_true",
                   help="exit 0 although journaled landing files changed (they are reported either way)")
    _wait(i)
    return i


def _run(sub) -> argparse.ArgumentParser:
    r = sub.add_parser("run", help="replay the journal into a target of a job")
    r.add_argument("--lake", required=True)
    _job_or_policy(r, "policy YAML with the spec's field names (the spec's count/sum job)")
    _range(r, "replay")
    r.add_argument("--target", default="production")
    _wait(r)
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
    s.add_argument("--max-records-per-batch", type=int, help="Kafka: at most this many records per micro-batch")
    s.add_argument("--lake", required=True)
    s.add_argument("--policy", required=True, help="the spec's count/sum job's policy")
    s.add_argument("--source", help="a source of the jobs folder: its payload fields, and every job reading it "
                                    "is run on each micro-batch from its own checkpoint")
    _jobs_folder(s)
    s.add_argument("--target", default="production")
    s.add_argument("--max-files-per-batch", type=int)
    s.add_argument("--max-bytes-per-batch", type=int)
    s.add_argument("--max-batches", type=int, help="stop after this many micro-batches")
    s.add_argument("--trigger-seconds", type=float, default=1.0, help="seconds between micro-batch starts")
    s.add_argument("--clock", choices=("system", "simulated"), default="system",
                   help="processing time for estimated arrivals: the wall clock, or derived from the data")
    s.add_argument("--until-idle", action="store_true",
                   help="stop when every landing file (or every record the topic held at start) is journaled")
    s.add_argument("--partitions", type=int,
                   help="the source's partition count (needed the first time; recorded with the journal)")
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
    h.add_argument("--lake", required=True)
    h.add_argument("--target", default="production")
    _job_of_tables(h)
    return h


def _verify(sub) -> argparse.ArgumentParser:
    v = sub.add_parser("verify", help="replay a range into a scratch target and compare it with a target "
                                      "(exit 0 identical, 1 different, 2 bad input)")
    v.add_argument("--lake", required=True)
    _job_or_policy(v, "policy YAML the target was produced with (the spec's count/sum job)")
    _range(v, "verify")
    v.add_argument("--target", default="production")
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    return v


def _diff(sub) -> argparse.ArgumentParser:
    f = sub.add_parser("diff", help="what two targets of a job decided differently: events, windows, dead letters, "
                                    "output delay (exit 0 identical, 1 different, 2 bad input)")
    f.add_argument("--lake", required=True)
    _job_of_tables(f)
    f.add_argument("--target", action="append", default=[], required=True,
                   help="a target; give it twice: --target production --target whatif")
    _range(f, "compare")
    f.add_argument("--json", action="store_true", help="print the report as JSON")
    return f


def _advise(sub) -> argparse.ArgumentParser:
    e = sub.add_parser("advise", help="profile the journal's lateness and recommend tolerances, each candidate "
                                      "replayed by the engine")
    e.add_argument("--lake", required=True)
    _job_or_policy(e, "policy YAML of the spec's count/sum job (the starting point of the sweep)")
    _range(e, "advise on")
    e.add_argument("--completeness", type=float, default=0.999,
                   help="the share of events a tolerance must keep untouched (default 0.999)")
    e.add_argument("--late-grid", help=f"candidate late tolerances, comma-separated (default {','.join(LATE_GRID)})")
    e.add_argument("--out-of-order-grid",
                   help=f"candidate out-of-order tolerances (default {','.join(OUT_OF_ORDER_GRID)})")
    e.add_argument("--out", metavar="DIR", help="where advice.json and the plots go (default LAKE/jobs/JOB/advice)")
    e.add_argument("--html", action="store_true", help="also write advice.html with the plots embedded")
    return e


def _maintain(sub) -> argparse.ArgumentParser:
    m = sub.add_parser("maintain", help="compact every Delta table of the lake, keep the last checkpoints, "
                                         "vacuum old files")
    m.add_argument("--lake", required=True)
    m.add_argument("--retention", default="7d", help="keep files any version of this age needs (time travel); "
                                                     "e.g. 7d, 12h")
    m.add_argument("--keep-checkpoints", type=int, default=100, help="checkpoints kept per target (the latest)")
    return m


def _migrate(sub) -> argparse.ArgumentParser:
    m = sub.add_parser("migrate", help="move a lake written before jobs (LAKE/outputs/<target>) to today's layout "
                                        "(LAKE/jobs/default/outputs/<target>), once")
    m.add_argument("--lake", required=True)
    return m


def _demo(sub) -> argparse.ArgumentParser:
    d = sub.add_parser("demo", help="generate, ingest, replay and summarize on embedded defaults")
    d.add_argument("--work", default=".retrace")
    d.add_argument("--events", type=int, default=200_000)
    d.add_argument("--policy")
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
    p.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                   help="when another writer holds the journal or target, wait this long for it "
                        "(default $RETRACE_LOCK_WAIT or 0: refuse at once, naming the holder)")
