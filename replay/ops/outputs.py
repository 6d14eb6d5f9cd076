"""A target's output tables as their readers see them (hash, verify, diff, explain, show, summarize, the GX checks,
a live job's flush): the one place that knows how each is stored.

A target stores only the decisions with something to say (`pipeline.exceptions`, issue 46); the others are a
function of the journal and the policy, derived here by the decide pass (`pipeline.decide`). The table's latest
commit says what it stores (`stored`), which seq ranges its runs decided and how (`decided`: the policy, fields
and source partitions of each range): the view is the stored rows and, in those ranges, the derived rows that are
not exceptions. It equals, row for row, the table a target stored before (one row per journal row); a table
without `stored` (an older Retrace's) is read as it is."""
from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from replay.engine import pipeline
from replay.io import checkpoints, journal
from replay.io.lake import TargetDir
from replay.io.store import TableStore, commit_metadata, default_store
from replay.model.jobs import SPEC_JOB, Job
from replay.model.policy import SUBSTREAM_COLUMNS, Policy

EXCEPTIONS = "exceptions"  # a decisions commit's `stored`: the table holds the exceptions of the ranges it covers


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
    """Output table `name` of the target, every row of it (`require` it first for a clear error); the decisions
    as their full view (`decisions`)."""
    store = store or default_store()
    if name == "decisions":
        return decisions(spark, where, store)
    return store.read_current(spark, where.table(name))


def decisions(spark: SparkSession, where: TargetDir, store: TableStore | None = None, lo: int | None = None,
              hi: int | None = None) -> DataFrame:
    """The target's decisions, a row per journal row its runs decided (of seq [lo, hi) when given): the stored
    exceptions, and the rows the decide pass gives for the rest of the ranges the table covers, each range as the
    run that covered it decided (computed once, as a local checkpoint)."""
    store = store or default_store()
    path = where.table("decisions")
    stored = store.read_current(spark, path)
    meta = commit_metadata(spark, path) or {}
    if lo is not None or hi is not None:
        stored = stored.where(F.col("seq").between(lo or 0, (hi if hi is not None else 2**62) - 1))
    groups = [g for g in ({**g, "covers": _clipped(g["covers"], lo, hi)} for g in decided_ranges(meta)) if g["covers"]]
    view, cached = stored, []
    for group in groups:
        found = _derived(spark, where, store, meta["job"], group)
        if found is not None:
            derived, more = found
            view, cached = view.unionByName(derived.select(*stored.columns)), cached + more
    if not cached:
        return view
    try:  # computed once: a reader queries it several times, and the passes' cached frames are freed now
        return view.localCheckpoint(eager=True)
    finally:
        for df in cached:
            df.unpersist()


def _derived(spark: SparkSession, where: TargetDir, store: TableStore, job_name: str, group: dict):
    """(the rows the decide pass gives in the group's ranges that are not exceptions, the pass's cached frames);
    None when it decides nothing. From the target's latest checkpoint before the first range, when that was made
    for the same job and policy."""
    covers = group["covers"]
    first, end = covers[0][0], covers[-1][1]
    rows = journal.read(spark, where.lake, store).where(F.col("seq") < end)
    cp = checkpoints.load(spark, where, store, before_seq=first) if first > 0 else None
    if cp is not None and cp.policy != group["signature"]:
        cp = None  # made for another definition: start from the journal's start
    rows, continuing = pipeline.Continuing.after(rows, cp and cp.state)
    found = pipeline.decide(rows, decided_by(job_name, group), since_seq=first, partitions=group["partitions"],
                            continuing=continuing)
    if found is None:
        return None
    derived, cached = found
    return derived.where(~pipeline.exceptional() & _within(covers)), cached


def exceptions(spark: SparkSession, where: TargetDir, store: TableStore | None = None) -> DataFrame:
    """The target's decisions with something to say (`pipeline.exceptions`), without deriving the others: every
    one is stored, whatever an older Retrace stored besides."""
    store = store or default_store()
    return pipeline.exceptions(store.read(spark, where.table("decisions")))


HOW = ("decided_by", "signature", "partitions")  # what a covered range was decided with, besides the journal


def decided_by(job_name: str, how: dict) -> Job:
    """The job as its decisions depend on it (policy and fields), from what a decisions commit records of a range."""
    decided = how["decided_by"]
    policy = Policy.from_dict(decided["policy"], fields=SUBSTREAM_COLUMNS + tuple(n for n, _ in decided["fields"]))
    return Job(job_name, policy, fields=tuple(tuple(f) for f in decided["fields"]))


def decided_ranges(meta: dict) -> list[dict]:
    """The seq ranges a decisions table covers, grouped by how they were decided (`covers`, and the `HOW` keys);
    none unless it stores exceptions. A commit of stop 61 recorded one group, at the top level."""
    if meta.get("stored") != EXCEPTIONS:
        return []
    if "decided" in meta:
        return meta["decided"]
    return [{"covers": meta.get("covers") or [], **{k: meta.get(k) for k in HOW}}]


def stored_metadata(job: Job, partitions: list[int] | None, before: dict | None, lo: int, hi: int) -> dict:
    """What a decisions commit of seq [lo, hi) records besides its run: that it stores exceptions, and the ranges
    the table covers after it, grouped by how they were decided: those `before` recorded, less [lo, hi), and
    [lo, hi) as `job` with the source's `partitions` decided it (a range replay with another policy, or after a
    partition was declared, leaves the earlier ranges as they were decided)."""
    partitions = None if partitions is None else list(partitions)
    how = {"decided_by": {"policy": job.policy.to_dict(), "fields": [list(f) for f in job.fields]},
           "signature": job.signature(), "partitions": partitions}
    groups = [{**g, "covers": rest} for g in decided_ranges(before or {})
              if (rest := _without(g["covers"], lo, hi))]
    same = [g for g in groups if (g["signature"], g["partitions"]) == (how["signature"], partitions)]
    if same:
        same[0]["covers"] = merged([*same[0]["covers"], [lo, hi]])
    else:
        groups.append({**how, "covers": [[lo, hi]]})
    return {"stored": EXCEPTIONS, "covers": merged([r for g in groups for r in g["covers"]]), "decided": groups}


def merged(ranges: list[list[int]]) -> list[list[int]]:
    """Seq ranges [lo, hi) as the fewest disjoint ones, in order."""
    out: list[list[int]] = []
    for lo, hi in sorted(r for r in ranges if r[0] < r[1]):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def _clipped(covers: list[list[int]], lo: int | None, hi: int | None) -> list[list[int]]:
    lo, hi = lo or 0, hi if hi is not None else 2**62
    return merged([[max(a, lo), min(b, hi)] for a, b in covers])


def _without(covers: list[list[int]], lo: int, hi: int) -> list[list[int]]:
    """The seq ranges less [lo, hi)."""
    return merged([piece for a, b in covers for piece in ([a, min(b, lo)], [max(a, hi), b])])


def _within(covers: list[list[int]]):
    seq = F.col("seq")
    cond = F.lit(False)
    for a, b in covers:
        cond = cond | ((seq >= a) & (seq < b))
    return cond
