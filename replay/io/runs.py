"""Which run wrote each output table of a target: a target is whole only when every table's latest commit
comes from the same run (`replay run`, or one live micro-batch). An interrupted run leaves a mix."""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from replay.io.lake import OUTPUT_TABLES, TargetDir
from replay.io.store import TableStore, commit_metadata, default_store


class MixedRuns(ValueError):
    """A target's tables come from different runs (a run was interrupted between its table commits)."""


@dataclass(frozen=True)
class TableRun:
    table: str
    run: str | None  # None: no table, or no commit that records a run (written by hand or an older Retrace)
    writer: str | None = None  # the program that wrote it: "replay run", "replay stream"


def writer(metadata: dict | None) -> str | None:
    """Which program made a commit: its `writer`, or, in a commit from before jobs, its `job`."""
    metadata = metadata or {}
    return metadata["writer"] if "writer" in metadata else metadata.get("job")


def table_runs(spark: SparkSession, where: TargetDir, store: TableStore | None = None) -> list[TableRun]:
    """The run recorded by the latest commit of each output table of a target (maintenance commits skipped)."""
    store = store or default_store()
    out = []
    for table in OUTPUT_TABLES:
        path = where.table(table)
        meta = commit_metadata(spark, path) if store.exists(path) else None
        out.append(TableRun(table, (meta or {}).get("run"), writer(meta)))
    return out


def describe(runs: list[TableRun]) -> str:
    """E.g. 'decisions, windows from run 3f2a...; dead_letters, watermarks, metrics from run 9c1d...'."""
    groups: dict[str | None, list[str]] = {}
    for r in runs:
        groups.setdefault(r.run, []).append(r.table)
    return "; ".join(f"{', '.join(tables)} " + (f"from run {run}" if run else "missing or without a run id")
                     for run, tables in groups.items())


def check_whole(spark: SparkSession, where: TargetDir, store: TableStore | None = None,
                runs: list[TableRun] | None = None) -> str | None:
    """The run every output table of the target comes from; MixedRuns when they come from different runs.
    Tables that record no run (hand-written, older) are not counted."""
    runs = runs if runs is not None else table_runs(spark, where, store)
    ids = {r.run for r in runs if r.run is not None}
    if len(ids) > 1:
        raise MixedRuns(f"target {where.target!r} of job {where.job} in {where.lake} is half-written (an interrupted "
                        f"run?): {describe(runs)}; run the same `replay run` (or `replay stream`) again to finish it")
    return ids.pop() if ids else None
