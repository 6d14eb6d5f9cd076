"""A target's output tables as their readers see them (hash, verify, diff, explain, show, summarize, the GX checks):
the one place that knows how each is stored. Issue 46 item 1 stores only the decisions with something to say and
derives the others here (docs/architecture.md), so that no reader changes with it."""
from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame, SparkSession

from replay.io.lake import TargetDir
from replay.io.store import TableStore, default_store
from replay.model.jobs import SPEC_JOB


def require(where: TargetDir, names: Iterable[str], store: TableStore | None = None) -> None:
    """Refuses a target without one of the tables `names`, naming it and the command that makes it."""
    store = store or default_store()
    for name in names:
        path = where.table(name)
        if not store.exists(path):
            job = "--policy POLICY_FILE" if where.job == SPEC_JOB else f"--job {where.job}"
            raise FileNotFoundError(f"target {where.target!r} of job {where.job!r} has no {name} table at {path}; "
                                    f"replay it first (`replay run --target {where.target} --lake {where.lake} "
                                    f"{job}`)")


def read(spark: SparkSession, where: TargetDir, name: str, store: TableStore | None = None) -> DataFrame:
    """Output table `name` of the target, every row of it (`require` it first for a clear error)."""
    store = store or default_store()
    return store.read(spark, where.table(name))
