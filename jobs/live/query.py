"""The Structured Streaming query that drives a live stream: micro-batches through its `process`
(foreachBatch), with Spark's checkpoint as scratch (the journal is the real one), and a heartbeat whenever no
batch ran for the heartbeat interval while Spark found no new input."""
from __future__ import annotations

import shutil
import tempfile
import time

from pyspark.sql import DataFrame

from jobs.live.report import StreamSummary


def run_query(stream, batches: DataFrame, began: float) -> StreamSummary:
    """Run until the input is drained (`until_idle`), `max_batches` were committed (heartbeats included), or
    the process is stopped; `stream` is a LiveStream. A query that ends flushes what its batches deferred; one
    stopped by an error or a signal leaves the metrics to the next run and loses the lag and diagnostics held."""
    options = stream.options
    scratch = tempfile.mkdtemp(prefix="retrace-stream-")  # Spark's checkpoint: the journal is the real one
    writer = batches.writeStream.foreachBatch(stream.process).option("checkpointLocation", scratch)
    writer = (writer.trigger(availableNow=True) if options.until_idle
              else writer.trigger(processingTime=f"{options.trigger_seconds} seconds"))
    query, beat = writer.start(), options.heartbeat
    try:
        while query.isActive:
            query.awaitTermination(0.2)
            if options.max_batches is not None and len(stream.reports) >= options.max_batches:
                query.stop()
            elif beat and time.monotonic() - stream.idle_since >= beat and _idle(query):
                stream.heartbeat(idle_for=beat)
        query.awaitTermination()
        stream.flush()  # the metrics, lag and diagnostics of the batches since the last flush
    finally:
        if query.isActive:
            query.stop()
        shutil.rmtree(scratch, ignore_errors=True)
        stream.close()
    return StreamSummary.of(stream.reports, time.perf_counter() - began)


def _idle(query) -> bool:
    """Spark found no new input at its last trigger and is not in one now: time moves by heartbeat only then
    (a backlog is input; a heartbeat over it would estimate arrivals past rows still waiting). Not before the
    query has run its first trigger: while it starts, its status says no data is available, whatever waits."""
    status = query.status
    return query.lastProgress is not None and not status["isTriggerActive"] and not status["isDataAvailable"]
