"""What the live job observes of each batch, next to the lead job's outputs: its processing lag per partition
(`lag`) and the diagnostics it shows (`diagnostics`), alerted as they start. Observations of the wall clock, not
outputs: a replay does not remake them, and `replay hash` leaves them out."""
from __future__ import annotations

import sys

from jobs.live import diagnostics, lag
from jobs.live.report import BatchReport
from replay.io import secrets


def record(live, report: BatchReport, read: list[lag.PartitionRead], late: diagnostics.LateEvents | None, now: int,
           backlog: tuple[dict, str]) -> None:
    """Hold the batch's lag rows and diagnostics for the next flush (`deferred.Observations`), and alert the
    diagnostics that start. `now`: the batch's processing time, which diagnostics judge by (the simulated
    clock gives data time); `backlog`: per partition (or under None for the whole source), and its unit."""
    lead, cp = live.lead, live.lead.cp
    last_arrival = {p: s.last_arrival for p, s in cp.source.items()}
    rows = lag.rows_of(report, read, live.source_partitions, cp.state, lead.job.policy.independent, last_arrival,
                       *backlog)
    live.observed.add("lag", rows, report.batch)
    seen = {p: cp.source[p].seen_at if p in cp.source else live.started_at for p in live.source_partitions}
    found = live.watchdog.not_progressing(report.batch, now, seen, never={p for p in seen if p not in cp.source})
    if late is not None:
        found += live.watchdog.late_input(report.batch, now, late)
    live.observed.add("diagnostics", [d.row() for d in found], report.batch)
    for d in found:
        if d.started:
            print(f"diagnostic {d.kind}: {d.message}", file=sys.stderr, flush=True)
            _alert(live.options.on_diagnostic, d)


def _alert(on_diagnostic, d: diagnostics.Diagnostic) -> None:
    if on_diagnostic is None:
        return
    try:
        on_diagnostic(d)
    except Exception as e:  # noqa: BLE001 - an alert that cannot be sent must not stop the job
        print(f"diagnostic {d.kind}: alert not sent ({secrets.redact(str(e))})", file=sys.stderr, flush=True)
