"""The `replay` command: each sub-command reads its arguments, calls one operation (`replay.ops`, the journal's
ingest, the live job) and prints what it returns. Bad input is one line on stderr and exit 2; a lock held by
another writer, exit 3; Ctrl-C, one line saying what the command left, exit 130. No secret is printed."""
from __future__ import annotations

import json
import shlex
import sys

from replay.cli import interrupts
from replay.cli.arguments import parser
from replay.cli.failures import held_library_logs, held_records, is_user_failure, one_line, write_log
from replay.io import faults
from replay.io.secrets import redact
from replay.model.policy import PolicyError


def _spark():
    from replay.io.spark import get_spark

    spark = get_spark("retrace")  # its log goes to the command's log file (replay.io.driver_logs), not the terminal
    interrupts.ctrl_c.install()  # over the handler SparkContext installs: Ctrl-C cancels Spark's jobs cleanly
    return spark


def _say(label: str):
    """A printer of progress lines on stderr, e.g. `[advise] ...`."""
    return lambda line: print(f"[{label}] {line}" if label else line, file=sys.stderr, flush=True)


def _job(a):
    """The job of a command: `--job NAME` from the jobs folder, or the spec's job on `--policy FILE`."""
    from replay.model.jobs import Job
    from replay.model.policy import Policy
    from replay.ops.catalog import catalog

    if getattr(a, "job", None):
        if getattr(a, "policy", None):
            raise ValueError("give --job or --policy, not both: a job carries its own policy")
        return catalog(a.jobs).job(a.job)
    if not getattr(a, "policy", None):
        raise ValueError("--policy FILE (the spec's count/sum job) or --job NAME (a job of --jobs DIR) is needed")
    return Job.spec(Policy.from_yaml(a.policy))


def _job_of_tables(a):
    """The job whose tables a command reads (`--job NAME`, else the spec's job): its name and aggregates matter,
    not its policy."""
    from replay.model.jobs import Job
    from replay.model.policy import Policy
    from replay.ops.catalog import catalog

    return catalog(a.jobs).job(a.job) if a.job else Job.spec(Policy.from_dict({}))


def cmd_generate(a) -> int:
    from replay.ops.generate import StreamSpec, generate

    spec = StreamSpec(a.events, partitions=a.partitions, keys=a.keys, files=a.files, seed=a.seed, fmt=a.format,
                      start=a.start, rate=a.rate, shape=a.shape)
    print(json.dumps(generate(a.out, spec, overwrite=a.overwrite, log=_say(""))))
    return 0


def cmd_ingest(a) -> int:
    from replay.io import locks
    from replay.io.journal import SourceFields, admit, ingest
    from replay.io.lake import Lake
    from replay.ops.catalog import catalog
    from replay.ops.ingested import interrupted_ingest, journal_version
    from replay.ops.progress import progress

    fields = _fields_of_options(a, a.event_time_field or "event_time", a.key_field or "key", a.partitions)
    if a.source:
        if a.event_time_field or a.key_field or _origin_options(a) or a.partitions:
            raise ValueError("give --source or --event-time-field/--key-field/--arrival-time/--partition/--offset/"
                             "--partitions, not both")
        src = catalog(a.jobs).sources.get(a.source)
        if src is None:
            raise ValueError(f"--source {a.source!r} is not a source of the jobs folder (its sources.yaml)")
        fields = SourceFields.of(src)
    admit(a.landing, a.lake, fields)  # nothing is made in the lake before its input is checked
    with locks.hold(Lake(a.lake).journal_lock, "replay ingest", wait=a.wait):  # decided before Spark starts
        again = shlex.join(["replay", "ingest", "--landing", a.landing, "--lake", a.lake,
                            *(["--source", a.source] if a.source else [])])
        interrupts.on_stop(lambda: f"the journal is untouched: Spark had not started; `{again}` journals the files")
        spark = _spark()
        before = journal_version(spark, a.lake)
        interrupts.on_stop(lambda: interrupted_ingest(spark, a.lake, before, again))
        with progress(spark, "ingest"):  # ticks on stderr while a step is slow
            faults.interrupt_point("ingest")  # for the tests: a Ctrl-C here, or (ingest+<seconds>) during the ingest
            r = ingest(spark, a.landing, a.lake, fields=fields, log=_say("ingest"))
    for change in r.changed:
        print(change.line(), file=sys.stderr)
    print(_ingested(r))
    if r.changed and not a.accept_changed:
        print(f"replay ingest: {len(r.changed)} journaled landing files changed (above); landing files are "
              f"immutable once journaled: put new rows in a new file (--accept-changed to go on)", file=sys.stderr)
        return 1
    return 0


def _origin_options(a) -> bool:
    return any(getattr(a, o) is not None for o in ("arrival_time", "partition", "offset"))


def _fields_of_options(a, event_time: str = "event_time", key: str = "key", partitions: str | None = None):
    """The source given by options: payload fields and where partition, offset and arrival time come from."""
    from replay.io.journal import SourceFields
    from replay.model import sources

    origins, declared = sources.from_options(a.arrival_time, a.partition, a.offset, partitions)
    return SourceFields(event_time, key, origins, declared)


def _ingested(r) -> str:
    if not r.files:
        return f"nothing to ingest: all {r.skipped} landing files are already in the journal"
    return (f"ingested {len(r.files)} files ({r.skipped} already journaled): {r.rows} rows, {r.events} events, "
            f"{r.malformed} malformed rows kept as kind=malformed, {r.bad_event_time} events without a valid "
            f"event_time (to be quarantined), {r.duplicate_offsets} events repeating an earlier (partition, "
            f"offset) (to be quarantined as duplicate), {r.backward_offsets} events whose offset goes backwards "
            f"in their partition; journal version {r.version}")


def cmd_run(a) -> int:
    from replay.io import locks
    from replay.io.lake import Lake
    from replay.ops.run import admit, interrupted, new_run_id, run
    from replay.ops.summarize import summarize

    job = _job(a)
    where = Lake(a.lake).target(job.name, a.target)
    _check_range(a)
    locks.check_free(where.lock, wait=a.wait)  # a busy target is refused before Spark starts, and made no file
    interrupts.on_stop(lambda: f"target {where.target!r} is unchanged: nothing was written")
    spark = _spark()
    admit(spark, a.lake, job)  # a job Spark refuses, or a lake with no journal, leaves no file in the lake
    with locks.hold(where.lock, "replay run", wait=a.wait):
        run_id = new_run_id()
        again = " ".join(["replay run", "--lake", a.lake, *(["--job", a.job] if a.job else ["--policy", a.policy]),
                          "--target", a.target, *(["--from", a.start] if a.start else []),
                          *(["--to", a.end] if a.end else [])])
        interrupts.on_stop(lambda: interrupted(spark, where, run_id, again))
        s = run(spark, a.lake, job, target=a.target, start=a.start, end=a.end, run_id=run_id, hashed=a.hash)
    print(json.dumps({"job": job.name, "target": s.target, "seq_from": s.seq_from, "seq_to": s.seq_to,
                      "journal_version": s.journal_version, **summarize(spark, where, job),
                      **({"output_hash": s.output_hash} if a.hash else {}), "seconds": round(s.seconds, 2)}, indent=2))
    return 0


def cmd_stream(a) -> int:
    from jobs.live import run_stream, writer_locks
    from jobs.live.diagnostics import alert_on
    from jobs.live.kafka import check_topic
    from jobs.live.options import FileSource, KafkaSource, LiveOptions
    from replay.io import landing as landings
    from replay.io.alerts import sinks_from_env

    jobs, fields = _stream_jobs(a)
    options = LiveOptions(target=a.target, clock=a.clock, until_idle=a.until_idle, max_batches=a.max_batches,
                          trigger_seconds=a.trigger_seconds, partitions=_stream_partitions(a.partitions),
                          heartbeat_seconds=a.heartbeat_seconds, never_seen_delay=a.never_seen_delay,
                          silent_after=a.silent_after,
                          on_diagnostic=alert_on(list(sinks_from_env(a.lake).values())))
    if a.kafka_bootstrap:
        if a.max_files_per_batch or a.max_bytes_per_batch:
            raise ValueError("--max-files-per-batch and --max-bytes-per-batch bound landing files; "
                             "use --max-records-per-batch with Kafka")
        source = KafkaSource(a.kafka_bootstrap, a.topic or "", a.trust_create_time, a.max_records_per_batch)
        check_topic(_spark(), source)  # a topic refused before any lock is made (the broker needs Spark's JVM)
    else:
        if a.topic or a.trust_create_time or a.max_records_per_batch:
            raise ValueError("--topic, --trust-create-time and --max-records-per-batch need --kafka-bootstrap")
        source = FileSource(a.landing, a.max_files_per_batch, a.max_bytes_per_batch)
        landings.check_usable(a.landing, a.lake)  # before any lock is made
    with writer_locks(a.lake, jobs, a.target, "replay stream", wait=a.wait):  # decided before Spark starts
        s = run_stream(_spark(), source, a.lake, jobs, options, fields)
    print(json.dumps({"target": a.target, "batches": s.batches, "rows": s.rows, "clock_rows": s.clock_rows,
                      "seconds": round(s.seconds, 2), "batch_seconds": [round(r.seconds, 2) for r in s.reports]},
                     indent=2))
    return 0


def _stream_partitions(text: str | None) -> tuple[int, ...] | None:
    """`--partitions N|P,P,...` as the partitions (checked as sources.yaml's `partitions`)."""
    from replay.model import sources

    return None if text is None else sources.from_options(None, None, None, text)[1]


def _stream_jobs(a):
    """The spec's job on `--policy`, then every job of the jobs folder that reads `--source`, and the source's
    payload fields."""
    from replay.io.journal import SourceFields
    from replay.model.jobs import Job
    from replay.model.policy import Policy
    from replay.ops.catalog import catalog

    spec = Job.spec(Policy.from_yaml(a.policy))
    if not a.source:
        return (spec,), _fields_of_options(a)
    if _origin_options(a):
        raise ValueError("give --source or --arrival-time/--partition/--offset, not both")
    found = catalog(a.jobs)
    if a.source not in found.sources:
        raise ValueError(f"--source {a.source!r} is not a source of the jobs folder (its sources.yaml); "
                         f"defined: {', '.join(sorted(found.sources)) or 'none'}")
    src = found.sources[a.source]
    return ((spec, *found.reading(a.source)), SourceFields.of(src))


def cmd_hash(a) -> int:
    from replay.io.lake import Lake
    from replay.ops.hashing import target_hash

    where = Lake(a.lake).target(_job_of_tables(a).name, a.target)  # bad input fails here, before Spark starts
    print(target_hash(_spark(), where))
    return 0


def cmd_show(a) -> int:
    from replay.io.lake import check_target
    from replay.ops.show import Query, show

    job = _job_of_tables(a)  # bad input fails here, before Spark starts
    check_target(a.target)
    _check_range(a)
    shown = show(_spark(), a.lake, job, a.target, Query(a.table, a.start, a.end, a.key, a.limit))
    if a.json:
        for row in shown.rows:
            print(json.dumps(row, default=str))  # exact sums are decimals: as their text
    else:
        print(shown.text())
    return 0


def cmd_explain(a) -> int:
    from replay.io.lake import check_target
    from replay.ops.explain import Question, explain

    job = _job_of_tables(a)  # bad input fails here, before Spark starts
    check_target(a.target)
    groups = [("key", a.key)] if a.key is not None else []
    for given in a.group:
        column, sep, value = given.partition("=")
        if not sep or not column:
            raise ValueError(f"--group {given!r}: give COLUMN=VALUE, e.g. --group device=d-7")
        groups.append((column, value))
    found = explain(_spark(), a.lake, job, a.target, Question(a.window, tuple(groups), a.partition, a.limit))
    print(json.dumps(found.as_dict(), default=str) if a.json else found.text())
    return 0


def cmd_verify(a) -> int:
    from replay.io.lake import check_target
    from replay.ops.verify import verify

    job = _job(a)  # bad input fails here, before Spark starts
    check_target(a.target)
    _check_range(a)
    report = verify(_spark(), a.lake, job, start=a.start, end=a.end, target=a.target)
    print(json.dumps(report.to_dict(), indent=2) if a.json else report.text())
    return 0 if report.identical else 1


def cmd_diff(a) -> int:
    from replay.ops.diff import diff

    job = _job_of_tables(a)
    if len(a.target) != 2:
        raise ValueError(f"give --target twice (a and b), got {len(a.target)}")
    _check_range(a)
    report = diff(_spark(), a.lake, job, a.target[0], a.target[1], start=a.start, end=a.end)
    print(json.dumps(report.to_dict(), indent=2) if a.json else report.text())
    return 0 if report.identical else 1


def cmd_advise(a) -> int:
    from replay.io.lake import Lake
    from replay.ops import advice_report
    from replay.ops.advise import Sweep, advise

    job = _job(a)
    _check_range(a)
    advice_report.check_folder(a.out or Lake(a.lake).advice(job.name))  # before the sweep, not after it
    grid = lambda text, default: tuple(g.strip() for g in text.split(",")) if text else default  # noqa: E731
    sweep = Sweep(a.completeness, grid(a.late_grid, Sweep.late_grid),
                  grid(a.out_of_order_grid, Sweep.out_of_order_grid), a.latency_budget, a.heartbeat)
    advice = advise(_spark(), a.lake, job, start=a.start, end=a.end, sweep=sweep, log=_say("advise"))
    paths = advice_report.write(advice, a.out or Lake(a.lake).advice(job.name), with_html=a.html)
    print(advice["verdict"])  # first: what the advice is, or that no candidate meets the target or the budget
    print(advice["snippet"])
    print(json.dumps({"recommended": advice["recommended"], "predicted": advice["predicted"], "files": paths},
                     indent=2))
    return 0


def _check_range(a) -> None:
    from replay.model.durations import parse_instant

    start, end = (None if b is None else parse_instant(b, n) for b, n in ((a.start, "--from"), (a.end, "--to")))
    if start is not None and end is not None and start >= end:
        raise ValueError(f"--from {a.start} must be before --to {a.end}")


def cmd_maintain(a) -> int:
    from replay.ops.maintain import maintain

    report = maintain(_spark(), a.lake, retention=a.retention, keep_checkpoints=a.keep_checkpoints)
    print(json.dumps(report.to_dict(), indent=2))
    return 0


def cmd_migrate(a) -> int:
    from replay.ops.migrate import migrate

    print(migrate(a.lake))
    return 0


def cmd_doctor(a) -> int:
    import os

    from replay.ops.doctor import doctor

    checks = doctor(lake=a.lake or os.environ.get("RETRACE_LAKE"),
                    landing=a.landing or os.environ.get("RETRACE_LANDING"))
    for check in checks:
        print(check.line())
    return 1 if any(c.verdict == "fail" for c in checks) else 0


def cmd_demo(a) -> int:
    from replay.ops.demo import run_demo

    print(json.dumps(run_demo(a.work, a.events, a.policy, log=_say("")), indent=2))
    return 0


COMMANDS = {"generate": cmd_generate, "ingest": cmd_ingest, "run": cmd_run, "stream": cmd_stream, "hash": cmd_hash,
            "show": cmd_show, "explain": cmd_explain, "verify": cmd_verify, "diff": cmd_diff, "advise": cmd_advise,
            "maintain": cmd_maintain, "migrate": cmd_migrate, "demo": cmd_demo, "doctor": cmd_doctor}


def _say_error(command: str, line: str) -> None:
    print(redact(f"replay {command}: {line}"), file=sys.stderr, flush=True)


def _interrupted(stop: interrupts.CtrlC) -> str:
    """What the interrupted command left (its `on_stop`), or that it stopped."""
    try:
        return stop.explain() if stop.explain else "stopped before it finished; run it again"
    except Exception as e:  # noqa: BLE001 - the report of an interruption must not fail in turn
        return f"stopped before it finished (what it left could not be read: {type(e).__name__}); run it again"


def main(argv: list[str] | None = None) -> int:
    from replay.io import driver_logs, lake_marker
    from replay.io.locks import LockBusy
    from replay.ops.progress import report_on

    args = parser(COMMANDS).parse_args(argv)
    log = driver_logs.name_log(f"replay-{args.command}")  # Spark's lines, Python's warnings, a failure's trace
    if args.verbose:
        print(f"replay {args.command}: log file {log}", file=sys.stderr, flush=True)
    report_on(sys.stderr)  # long Spark steps tick on stderr, while the command runs
    stop = interrupts.start()
    try:
        with driver_logs.warnings_to(log), held_library_logs():  # PySpark's and py4j's error records: the log file
            if getattr(args, "lake", None) and args.command != "doctor":  # doctor reports on it instead
                lake_marker.check(args.lake)  # a folder that is not a lake is refused, whatever the command
            return args.fn(args)
    except BaseException as e:  # noqa: BLE001 - sorted below; what is not ours to report is raised again
        if stop.received:  # after a Ctrl-C, whatever unwinds is the interruption (a cancelled job's error too)
            stop.settle()
            _say_error(args.command, f"interrupted (Ctrl-C); {_interrupted(stop)}")
            return 130
        if isinstance(e, (PolicyError, ValueError, FileNotFoundError, FileExistsError)):  # our own: one clear line
            more = f"; Spark's report in {write_log(None, args.command)}" if held_records() else ""
            _say_error(args.command, f"{e}{more}")
            return 2
        if isinstance(e, LockBusy):
            _say_error(args.command, str(e))
            return 3
        if isinstance(e, Exception) and is_user_failure(e):  # Spark, Delta and file-system failures bad input causes
            _say_error(args.command, one_line(e, args.command)[0])
            return 2
        raise
    finally:
        stop.restore()
        report_on(None)  # `main` called in a process that goes on (a test) leaves no ticker pointed at its stderr


if __name__ == "__main__":
    sys.exit(main())
