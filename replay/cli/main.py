"""The `replay` command: generate, ingest, run, hash, verify, diff, advise, maintain (and the demo that `infra/setup.sh` runs)."""
from __future__ import annotations

import argparse
import json
import sys

from replay.cli.failures import is_user_failure, one_line
from replay.model.policy import PolicyError


def _spark():
    from replay.io.spark import get_spark

    return get_spark("retrace")  # its log goes to the command's log file (replay.io.driver_logs), not the terminal


def _job(a):
    """(policy, job) of a command: `--job NAME` from the jobs folder, or the spec's job on `--policy`."""
    from replay.model.jobs import load_folder
    from replay.model.policy import Policy

    if getattr(a, "job", None):
        if getattr(a, "policy", None):
            raise ValueError("give --job or --policy, not both: a job carries its own policy")
        job = load_folder(_jobs_folder(a)).job(a.job)
        return job.policy, job
    if not getattr(a, "policy", None):
        raise ValueError("--policy FILE (the spec's count/sum job) or --job NAME (a job of --jobs DIR) is needed")
    return Policy.from_yaml(a.policy), None


def _jobs_folder(a) -> str:
    import os

    from jobs.catalog import DEFAULT_FOLDER

    return a.jobs or os.environ.get("RETRACE_JOBS") or DEFAULT_FOLDER


def _job_arguments(p: argparse.ArgumentParser, policy_help: str) -> None:
    p.add_argument("--policy", help=policy_help)
    p.add_argument("--job", help="a job of the jobs folder (its name); instead of --policy")
    _jobs_folder_argument(p)


def _jobs_folder_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", metavar="DIR", help="the jobs folder (default $RETRACE_JOBS, else jobs/examples)")


def _job_or_spec_arguments(p: argparse.ArgumentParser) -> None:
    """--job for a command that reads a job's outputs; without it, the spec's count/sum job."""
    p.add_argument("--job", help="a job of the jobs folder (default: the spec's job)")
    _jobs_folder_argument(p)


def cmd_generate(a) -> int:
    from replay.cli.generate import generate

    summary = generate(a.out, a.events, partitions=a.partitions, keys=a.keys, files=a.files, seed=a.seed,
                       fmt=a.format, shape=a.shape)
    print(json.dumps(summary))
    return 0


def cmd_ingest(a) -> int:
    from replay.io import locks
    from replay.io.journal import SourceFields, ingest
    from replay.model.jobs import load_folder

    from replay.cli.progress import progress

    fields = SourceFields(a.event_time_field or "event_time", a.key_field or "key")
    if a.source:
        if a.event_time_field or a.key_field:
            raise ValueError("give --source or --event-time-field/--key-field, not both")
        src = load_folder(_jobs_folder(a)).sources.get(a.source)
        if src is None:
            raise ValueError(f"--source {a.source!r} is not defined in {_jobs_folder(a)}/sources.yaml")
        fields = SourceFields(src.event_time_field, src.key_field)
    with locks.hold(locks.journal_lock(a.lake), "replay ingest", wait=a.wait):  # decided before Spark starts
        spark = _spark()
        with progress(spark, "ingest"):  # ticks on stderr while a step is slow
            r = ingest(spark, a.landing, a.lake, fields=fields,
                       log=lambda line: print(f"[ingest] {line}", file=sys.stderr, flush=True))
    for change in r.changed:
        print(change.line(), file=sys.stderr)
    if not r.files:
        print(f"nothing to ingest: all {r.skipped} landing files are already in the journal")
    else:
        print(f"ingested {len(r.files)} files ({r.skipped} already journaled): {r.rows} rows, {r.events} events, "
              f"{r.malformed} malformed rows kept as kind=malformed, {r.bad_event_time} events without a valid "
              f"event_time (to be quarantined), {r.duplicate_offsets} events repeating an earlier (partition, "
              f"offset) (to be quarantined as duplicate), {r.backward_offsets} events whose offset goes backwards "
              f"in their partition; journal version {r.version}")
    if r.changed and not a.accept_changed:
        print(f"replay ingest: {len(r.changed)} journaled landing files changed (above); landing files are "
              f"immutable once journaled: put new rows in a new file (--accept-changed to go on)", file=sys.stderr)
        return 1
    return 0


def cmd_run(a) -> int:
    from replay.cli.runner import new_run_id, run, summarize
    from replay.model.jobs import job_root

    from replay.cli.runner import check_target
    from replay.io import locks

    policy, job = _job(a)
    root = job_root(a.lake, job)
    with locks.hold(locks.target_lock(root, check_target(a.target)), "replay run", wait=a.wait):
        spark = _spark()
        run_id = new_run_id()
        try:
            s = run(spark, a.lake, policy, target=a.target, start=a.start, end=a.end, run_id=run_id, job=job)
        except KeyboardInterrupt:
            print(f"replay run: interrupted (Ctrl-C); {_run_state(spark, a, root, run_id)}", file=sys.stderr, flush=True)
            return 130
    print(json.dumps({"job": job.name if job else "default", "target": s.target, "seq_from": s.seq_from,
                      "seq_to": s.seq_to, **summarize(spark, root, a.target), "seconds": round(s.seconds, 2)}, indent=2))
    return 0


def _run_state(spark, a, root: str, run_id: str) -> str:
    """One sentence: what an interrupted `replay run` left in its target, and what to run next."""
    from replay.io.runs import describe, table_runs

    chosen = ["--job", a.job] if a.job else ["--policy", a.policy]
    again = " ".join(["replay run", "--lake", a.lake, *chosen, "--target", a.target]
                     + (["--from", a.start] if a.start else []) + (["--to", a.end] if a.end else []))
    try:
        runs = table_runs(spark, root, a.target)
    except Exception as e:  # noqa: BLE001  (the session may be unusable after the interrupt)
        return f"could not read target {a.target!r} ({type(e).__name__}); run `{again}` to make it whole"
    ours = [r.table for r in runs if r.run == run_id]
    if not ours:
        return f"target {a.target!r} is unchanged (no table was committed by this run)"
    if len(ours) == len(runs):
        return f"target {a.target!r} is whole (every table was committed by this run {run_id})"
    return f"target {a.target!r} is half-written ({describe(runs)}; this run was {run_id}): run `{again}` to finish it"


def cmd_stream(a) -> int:
    from jobs.stream import run_kafka_stream, run_stream
    from replay.model.policy import Policy

    from replay.cli.runner import check_target
    from replay.io import locks

    policy = Policy.from_yaml(a.policy)
    jobs, fields = _source_jobs(a)
    watch = {"heartbeat_seconds": a.heartbeat_seconds, "never_seen_delay": a.never_seen_delay,
             "silent_after": a.silent_after, "on_diagnostic": _diagnostic_alerts()}
    with locks.hold(locks.journal_lock(a.lake), "replay stream", wait=a.wait), \
            locks.hold(locks.target_lock(a.lake, check_target(a.target)), "replay stream", wait=a.wait):
        if a.kafka_bootstrap:
            if not a.topic:
                raise ValueError("--topic is needed with --kafka-bootstrap")
            if a.max_files_per_batch or a.max_bytes_per_batch:
                raise ValueError("--max-files-per-batch and --max-bytes-per-batch bound landing files; "
                                 "use --max-records-per-batch with Kafka")
            s = run_kafka_stream(_spark(), a.kafka_bootstrap, a.topic, a.lake, policy, target=a.target,
                                 trust_create_time=a.trust_create_time, max_records_per_batch=a.max_records_per_batch,
                                 max_batches=a.max_batches, clock=a.clock, until_idle=a.until_idle,
                                 partitions=a.partitions, trigger_seconds=a.trigger_seconds, jobs=jobs, fields=fields,
                                 **watch)
        else:
            if a.topic or a.trust_create_time or a.max_records_per_batch:
                raise ValueError("--topic, --trust-create-time and --max-records-per-batch need --kafka-bootstrap")
            s = run_stream(_spark(), a.landing, a.lake, policy, target=a.target,
                           max_files_per_batch=a.max_files_per_batch, max_bytes_per_batch=a.max_bytes_per_batch,
                           max_batches=a.max_batches, clock=a.clock, until_idle=a.until_idle, partitions=a.partitions,
                           trigger_seconds=a.trigger_seconds, jobs=jobs, fields=fields, **watch)
    print(json.dumps({"target": a.target, "batches": s.batches, "rows": s.rows, "clock_rows": s.clock_rows,
                      "seconds": round(s.seconds, 2),
                      "batch_seconds": [round(r.seconds, 2) for r in s.reports]}, indent=2))
    return 0


def _diagnostic_alerts():
    """The live job's diagnostics, alerted through the sinks the code location configures from the environment
    (RETRACE_ALERT_WEBHOOK_URL, RETRACE_ALERT_SMTP_*, RETRACE_ALERT_LOG)."""
    from orchestration.alerting import RESOURCES
    from orchestration.alerts import deliver, diagnostic_alert

    sinks = list(RESOURCES.values())
    return lambda d: deliver(diagnostic_alert(d), sinks)


def _source_jobs(a):
    """The jobs of `--source` (all of the jobs folder's jobs that read it) and its payload fields."""
    from replay.io.journal import SourceFields
    from replay.model.jobs import load_folder

    if not a.source:
        return (), SourceFields()
    catalog = load_folder(_jobs_folder(a))
    if a.source not in catalog.sources:
        raise ValueError(f"--source {a.source!r} is not defined in {_jobs_folder(a)}/sources.yaml; "
                         f"defined: {', '.join(sorted(catalog.sources)) or 'none'}")
    src = catalog.sources[a.source]
    return (tuple(j for _, j in sorted(catalog.jobs.items()) if j.source == a.source),
            SourceFields(src.event_time_field, src.key_field))


def cmd_hash(a) -> int:
    from replay.cli.hashing import target_hash

    from replay.model.jobs import job_root, load_folder

    job = load_folder(_jobs_folder(a)).job(a.job) if a.job else None
    print(target_hash(_spark(), job_root(a.lake, job), a.target))
    return 0


def cmd_verify(a) -> int:
    from replay.cli.runner import check_target
    from replay.cli.verify import verify

    policy, job = _job(a)  # bad input fails here, before Spark starts
    check_target(a.target)
    _range(a)
    report = verify(_spark(), a.lake, policy, start=a.start, end=a.end, target=a.target, job=job)
    print(json.dumps(report.to_dict(), indent=2) if a.json else report.text())
    return 0 if report.identical else 1


def cmd_diff(a) -> int:
    from replay.cli.diff import diff
    from replay.model.jobs import load_folder

    job = load_folder(_jobs_folder(a)).job(a.job) if a.job else None  # the tables alone: no policy needed
    if len(a.target) != 2:
        raise ValueError(f"give --target twice (a and b), got {len(a.target)}")
    _range(a)
    report = diff(_spark(), a.lake, a.target[0], a.target[1], start=a.start, end=a.end, job=job)
    print(json.dumps(report.to_dict(), indent=2) if a.json else report.text())
    return 0 if report.identical else 1


def cmd_advise(a) -> int:
    import os

    from replay.cli import advice_report
    from replay.cli.advise import LATE_GRID, OUT_OF_ORDER_GRID, advise
    from replay.model.durations import parse_duration
    from replay.model.jobs import job_root

    policy, job = _job(a)
    _range(a)
    grids = {}
    for name, text, default in (("--late-grid", a.late_grid, LATE_GRID),
                                ("--out-of-order-grid", a.out_of_order_grid, OUT_OF_ORDER_GRID)):
        grids[name] = tuple(g.strip() for g in text.split(",")) if text else default
        for g in grids[name]:
            if parse_duration(g, name) < 0:
                raise ValueError(f"{name}: {g!r} is negative; tolerances are 0s or more")
    advice = advise(_spark(), a.lake, policy, job=job, start=a.start, end=a.end, completeness=a.completeness,
                    late_grid=grids["--late-grid"], out_of_order_grid=grids["--out-of-order-grid"])
    folder = a.out or os.path.join(job_root(a.lake, job), "advice")
    paths = advice_report.write(advice, folder, with_html=a.html)
    print(advice["snippet"])
    print(json.dumps({"recommended": advice["recommended"], "predicted": advice["predicted"], "files": paths},
                     indent=2))
    return 0


def _range(a) -> None:
    from replay.model.durations import parse_instant

    start, end = (None if b is None else parse_instant(b, n) for b, n in ((a.start, "--from"), (a.end, "--to")))
    if start is not None and end is not None and start >= end:
        raise ValueError(f"--from {a.start} must be before --to {a.end}")


def cmd_maintain(a) -> int:
    from replay.io.maintenance import maintain

    report = maintain(_spark(), a.lake, retention=a.retention, keep_checkpoints=a.keep_checkpoints)
    print(json.dumps(report.to_dict(), indent=2))
    return 0


def cmd_demo(a) -> int:
    from jobs.demo import run_demo

    print(json.dumps(run_demo(a.work, a.events, a.policy), indent=2))
    return 0


def parser() -> argparse.ArgumentParser:
    from replay.cli.advise import LATE_GRID, OUT_OF_ORDER_GRID

    p = argparse.ArgumentParser(prog="replay", description="Deterministic replays of event-time streaming jobs.")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="write a synthetic landing stream")
    g.add_argument("--out", required=True)
    g.add_argument("--events", type=int, required=True)
    g.add_argument("--partitions", type=int, default=8)
    g.add_argument("--keys", type=int, default=1000)
    g.add_argument("--files", type=int, default=100)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    g.add_argument("--shape", choices=("basic", "sensors"), default="basic",
                   help="basic: key and value only; sensors: device readings (key is the device, value its "
                        "temperature) with device, region, site, temperature, pressure, status (ok, alarm, "
                        "test) and meta {firmware, battery} (default: basic)")
    g.set_defaults(fn=cmd_generate)
    i = sub.add_parser("ingest", help="journal new landing files (exactly once)")
    i.add_argument("--landing", required=True, help="a folder or s3://bucket/prefix")
    i.add_argument("--lake", required=True)
    i.add_argument("--source", help="a source of the jobs folder: its payload fields for event time and key")
    _jobs_folder_argument(i)
    i.add_argument("--event-time-field", help="the payload field holding the event time (default event_time)")
    i.add_argument("--key-field", help="the payload field holding the key (default key)")
    i.add_argument("--accept-changed", action="store_true",
                   help="exit 0 although journaled landing files changed (they are reported either way)")
    _wait_argument(i)
    i.set_defaults(fn=cmd_ingest)
    r = sub.add_parser("run", help="replay the journal into a target's output tables")
    r.add_argument("--lake", required=True)
    _job_arguments(r, "policy YAML with the spec's field names (the spec's count/sum job)")
    _range_arguments(r, "replay")
    r.add_argument("--target", default="production")
    _wait_argument(r)
    r.set_defaults(fn=cmd_run)
    s = sub.add_parser("stream", help="the live job: journal and decide landing files or Kafka records in micro-batches")
    source = s.add_mutually_exclusive_group(required=True)
    source.add_argument("--landing", help="landing folder or s3://bucket/prefix")
    source.add_argument("--kafka-bootstrap", metavar="HOST:PORT", help="a Kafka broker to read --topic from")
    s.add_argument("--topic", help="the Kafka topic (with --kafka-bootstrap)")
    s.add_argument("--trust-create-time", action="store_true",
                   help="accept a CreateTime topic: producer timestamps become arrival times")
    s.add_argument("--max-records-per-batch", type=int, help="Kafka: at most this many records per micro-batch")
    s.add_argument("--lake", required=True)
    s.add_argument("--policy", required=True, help="the spec's count/sum job's policy (target --target)")
    s.add_argument("--source", help="a source of the jobs folder: its payload fields, and every job reading it "
                                    "is run on each micro-batch from its own checkpoint")
    _jobs_folder_argument(s)
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
    s.add_argument("--heartbeat-seconds", type=float,
                   help="with no data for this long, journal clock rows and decide them (default: --trigger-seconds; "
                        "0: none; system clock only)")
    s.add_argument("--never-seen-delay", type=float, default=5.0, metavar="SECONDS",
                   help="a partition that never had a row gets clock rows at processing time minus this")
    s.add_argument("--silent-after", type=float, default=300.0, metavar="SECONDS",
                   help="a partition with no event for this long while others progress is not progressing (alerted)")
    _wait_argument(s)
    s.set_defaults(fn=cmd_stream)
    h = sub.add_parser("hash", help="order-independent content hash of a target's outputs")
    h.add_argument("--lake", required=True)
    h.add_argument("--target", default="production")
    _job_or_spec_arguments(h)
    h.set_defaults(fn=cmd_hash)
    v = sub.add_parser("verify", help="replay a range into a scratch target and compare it with a target "
                                      "(exit 0 identical, 1 different, 2 bad input)")
    v.add_argument("--lake", required=True)
    _job_arguments(v, "policy YAML the target was produced with (the spec's count/sum job)")
    _range_arguments(v, "verify")
    v.add_argument("--target", default="production")
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    v.set_defaults(fn=cmd_verify)
    f = sub.add_parser("diff", help="what two targets of a job decided differently: events, windows, dead letters, "
                                    "output delay (exit 0 identical, 1 different, 2 bad input)")
    f.add_argument("--lake", required=True)
    _job_or_spec_arguments(f)
    f.add_argument("--target", action="append", default=[], required=True,
                   help="a target; give it twice: --target production --target whatif")
    _range_arguments(f, "compare")
    f.add_argument("--json", action="store_true", help="print the report as JSON")
    f.set_defaults(fn=cmd_diff)
    e = sub.add_parser("advise", help="profile the journal's lateness and recommend tolerances, each candidate "
                                      "replayed by the engine")
    e.add_argument("--lake", required=True)
    _job_arguments(e, "policy YAML of the spec's count/sum job (the starting point of the sweep)")
    _range_arguments(e, "advise on")
    e.add_argument("--completeness", type=float, default=0.999,
                   help="the share of events a tolerance must keep untouched (default 0.999)")
    e.add_argument("--late-grid", help=f"candidate late tolerances, comma-separated (default {','.join(LATE_GRID)})")
    e.add_argument("--out-of-order-grid", help=f"candidate out-of-order tolerances (default {','.join(OUT_OF_ORDER_GRID)})")
    e.add_argument("--out", metavar="DIR", help="where advice.json and the plots go (default LAKE[/jobs/JOB]/advice)")
    e.add_argument("--html", action="store_true", help="also write advice.html with the plots embedded")
    e.set_defaults(fn=cmd_advise)
    m = sub.add_parser("maintain", help="compact every Delta table of the lake, keep the last checkpoints, "
                                         "vacuum old files")
    m.add_argument("--lake", required=True)
    m.add_argument("--retention", default="7d", help="keep files any version of this age needs (time travel); "
                                                     "e.g. 7d, 12h")
    m.add_argument("--keep-checkpoints", type=int, default=100, help="checkpoints kept per target (the latest)")
    m.set_defaults(fn=cmd_maintain)
    d = sub.add_parser("demo", help="generate, ingest, replay and summarize on embedded defaults")
    d.add_argument("--work", default=".retrace")
    d.add_argument("--events", type=int, default=200_000)
    d.add_argument("--policy")
    d.set_defaults(fn=cmd_demo)
    for command in sub.choices.values():
        command.add_argument("-v", "--verbose", action="store_true",
                             help="print the path of the command's log file (Spark's and Hadoop's lines)")
    return p


def _range_arguments(p: argparse.ArgumentParser, verb: str) -> None:
    """`--from`/`--to`: an arrival-time range [from, to) of the journal (checked by `_range`)."""
    p.add_argument("--from", dest="start", help=f"ISO arrival time; {verb} rows arriving from here on")
    p.add_argument("--to", dest="end", help=f"ISO arrival time; {verb} rows arriving before this")


def _wait_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                   help="when another writer holds the journal or target, wait this long for it "
                        "(default $RETRACE_LOCK_WAIT or 0: refuse at once, naming the holder)")


def main(argv: list[str] | None = None) -> int:
    from replay.io import driver_logs
    from replay.io.locks import LockBusy

    args = parser().parse_args(argv)
    log = driver_logs.name_log(f"replay-{args.command}")  # Spark's lines, Python's warnings, a failure's trace
    if args.verbose:
        print(f"replay {args.command}: log file {log}", file=sys.stderr, flush=True)
    try:
        with driver_logs.warnings_to(log):
            return args.fn(args)
    except (PolicyError, ValueError, FileNotFoundError) as e:  # our own messages: already one clear line
        print(f"replay {args.command}: {e}", file=sys.stderr)
        return 2
    except LockBusy as e:
        print(f"replay {args.command}: {e}", file=sys.stderr)
        return 3
    except Exception as e:  # noqa: BLE001 - Spark, Delta and file-system failures bad input can cause
        if not is_user_failure(e):
            raise
        print(f"replay {args.command}: {one_line(e, args.command)[0]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
