"""The live job's micro-batches as a Dagster job, and the sensor that runs it when landing data arrives."""

import dataclasses
import os

import dagster as dg

from orchestration.resources import EmailAlertSink, LogFileAlertSink, RetraceResource, WebhookAlertSink

IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
             dg.DagsterRunStatus.STARTED]


class LiveSource(dg.Config):
    """Where the live job reads: the resource's landing folder (default), or a Kafka topic."""

    kafka_bootstrap: str = ""  # HOST:PORT of a broker; empty = the landing folder
    topic: str = ""
    trust_create_time: bool = False  # accept a CreateTime topic (producer clocks as arrival times)
    max_records_per_batch: int = 0  # Kafka: records per micro-batch, 0 = no bound


@dg.op(description="Run the streaming job's micro-batches until the landing folder (or the Kafka topic, as it "
                   "was when the run started) is drained.")
def live_micro_batches(context: dg.OpExecutionContext, config: LiveSource, retrace: RetraceResource,
                       alert_webhook: WebhookAlertSink, alert_email: EmailAlertSink, alert_log: LogFileAlertSink):
    # the live job; imported lazily so the code location loads without it
    from jobs.live import run_stream
    from jobs.live.diagnostics import alert_on
    from jobs.live.options import FileSource, KafkaSource, LiveOptions

    kafka = bool(config.kafka_bootstrap)  # a topic's partition count is the topic's
    options = LiveOptions(until_idle=True, clock="system", partitions=None if kafka else retrace.partitions,
                          on_diagnostic=alert_on([alert_webhook, alert_email, alert_log], context.log.warning))
    if kafka:
        if not config.topic:
            raise dg.Failure("live job config: topic is needed with kafka_bootstrap")
        source = KafkaSource(config.kafka_bootstrap, config.topic, config.trust_create_time,
                             config.max_records_per_batch or None)
    else:
        source = FileSource(retrace.landing)
    result = run_stream(retrace.spark(), source, retrace.lake, retrace.live_jobs(), options, retrace.source_fields())
    summary, lag = dataclasses.asdict(result), lag_metadata(result.reports)
    if lag:  # on the journal asset's page: how far behind the live run was
        yield dg.AssetObservation(asset_key="journal", metadata=lag)
    yield dg.Output(None, metadata={"summary": dg.MetadataValue.json(_plain(summary)), **lag})


def lag_metadata(reports) -> dict:
    """The run's processing lag as metadata: the last batch's backlog and delays, the worst processing-time
    delay, and a table of every batch (the whole record is the target's `lag` table)."""
    if not reports:
        return {}
    last = reports[-1]
    delays = [r.processing_delay_s for r in reports if r.processing_delay_s is not None]
    fmt = lambda v: "n/a" if v is None else f"{v:.1f}"  # noqa: E731
    rows = ["| batch | trigger | rows | clock rows | backlog | processing delay (s) | arrival delay (s) | seconds |",
            "|---|---|---|---|---|---|---|---|"]
    rows += [f"| {r.batch} | {r.trigger} | {r.rows} | {r.clock_rows} | {'n/a' if r.backlog is None else r.backlog} "
             f"| {fmt(r.processing_delay_s)} | {fmt(r.watermark_delay_s)} | {r.seconds:.1f} |" for r in reports[-50:]]
    out = {"batches": len(reports), "backlog": last.backlog, "batch_seconds": round(last.seconds, 2),
           "lag": dg.MetadataValue.md("\n".join(rows))}
    if delays:
        out["processing_delay_s"] = round(delays[-1], 1)
        out["max_processing_delay_s"] = round(max(delays), 1)
    if last.watermark_delay_s is not None:
        out["arrival_delay_s"] = round(last.watermark_delay_s, 1)
    return {k: v for k, v in out.items() if v is not None}


def _plain(value):
    """JSON-safe copy of a summary (numbers, strings, lists, dicts; anything else as its repr)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if isinstance(value, (int, float, str, bool)) or value is None else repr(value)


@dg.job(name="live", description="Micro-batches of the live streaming job over new landing data.",
        tags={"retrace/kind": "live"})
def live_job():
    live_micro_batches()


def landing_signature(landing: str) -> str | None:
    """What the landing folder holds, cheaply: file count, last name, newest modification time."""
    from replay.io.journal import landing_files

    if not os.path.isdir(landing):
        return None
    files = landing_files(landing)
    if not files:
        return None
    newest = max(os.path.getmtime(os.path.join(landing, f)) for f in files)
    return f"{len(files)}:{files[-1]}:{newest:.3f}"


@dg.sensor(job=live_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.STOPPED,
           description="Runs the live job when the landing folder changes (one run at a time).")
def landing_sensor(context: dg.SensorEvaluationContext, retrace: RetraceResource):
    signature = landing_signature(retrace.landing)
    if signature is None:
        return dg.SkipReason(f"no landing files in {retrace.landing}")
    if signature == context.cursor:
        return dg.SkipReason("no new landing data")
    running = context.instance.get_run_records(dg.RunsFilter(job_name="live", statuses=IN_FLIGHT), limit=1)
    if running:
        return dg.SkipReason(f"live run {running[0].dagster_run.run_id} is still in flight")
    context.update_cursor(signature)
    return dg.RunRequest(run_key=f"landing-{signature}")
