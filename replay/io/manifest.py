"""Landing files are immutable once journaled: what each file was when it was journaled, and the check.

A small side table, `LAKE/journal_files` (source, size, mtime_ns, checksum), one row per journaled landing
file; mtime_ns is the modification time (an S3 object's LastModified) that `arrival_time: file_modified` used.
The checksum is the whole file's SHA-256 (`sha256:...`), and every listing of journaled files checks it,
whatever the modification time says (a writer may keep it; issue 50, item 3). The cost: every ingest and every
live start reads each journaled local file once more, at the disk's (or page cache's) speed, two files at a
time (hashlib hashes outside the GIL). Checksums recorded before (bare hex: the SHA-256 of the size and the
first and last 64 KiB) are checked as they were recorded. An S3 object has its size and LastModified only. A
changed file is reported, never re-read: the journal keeps what was read.
"""
from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyspark.sql import SparkSession

from replay.io import landing as landings
from replay.io.lake import Lake
from replay.io.spark import driver_rows
from replay.io.store import TableStore, default_store

SCHEMA = "source string, size long, mtime_ns long, checksum string"
SAMPLE = 64 * 1024  # what the checksums recorded before whole-file ones covered, at each end
WHOLE = "sha256:"  # the prefix of a whole-file checksum
HASHING_THREADS = 2
BLOCK = 1 << 20


@dataclass(frozen=True)
class Recorded:
    source: str
    size: int
    mtime_ns: int | None
    checksum: str | None


@dataclass(frozen=True)
class Change:
    source: str
    what: str  # e.g. "size 120 -> 186 bytes (grew)"

    def line(self) -> str:
        return (f"warning: landing file {self.source} changed after it was journaled: {self.what}; the journal "
                f"keeps what was read then and the change is not journaled (write new rows to a new file)")


def checksum(path: str) -> str:
    """The whole file's SHA-256, read in 1 MiB blocks: any change of its content shows."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            h.update(block)
    return WHOLE + h.hexdigest()


def sampled_checksum(path: str, size: int) -> str:
    """The checksum recorded before whole-file ones: SHA-256 of the size and the first and last 64 KiB."""
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(SAMPLE))
        if size > SAMPLE:
            f.seek(max(SAMPLE, size - SAMPLE))
            h.update(f.read(SAMPLE))
    return h.hexdigest()


def _stat_and_hash(path: str, sampled_size: int | None = None) -> tuple[os.stat_result, str] | None:
    """(stat, checksum) of a local file (`sampled_size`: the old sampled checksum instead); None when it is gone."""
    try:
        st = os.stat(path)
        return st, (checksum(path) if sampled_size is None else sampled_checksum(path, sampled_size))
    except FileNotFoundError:
        return None


def _hash_all(jobs: list[tuple[str, int | None]]) -> list[tuple[os.stat_result, str] | None]:
    """`_stat_and_hash` of each (path, sampled_size), two files at a time."""
    if len(jobs) < 2:
        return [_stat_and_hash(*j) for j in jobs]
    with ThreadPoolExecutor(HASHING_THREADS) as pool:
        return list(pool.map(lambda j: _stat_and_hash(*j), jobs))


def observe(source: landings.Landing, names: list[str]) -> dict[str, Recorded]:
    """What the named landing files are now (missing files are left out)."""
    if not names:
        return {}  # no listing of the landing
    listed = {f.name: f for f in source.files()}
    sizes = {n: f.size for n, f in listed.items()}
    present = [n for n in names if n in sizes]
    if not isinstance(source, landings.LocalLanding):  # an object's LastModified: `arrival_time: file_modified`
        return {n: Recorded(n, sizes[n], listed[n].modified_ns, None) for n in present}
    out = {}
    for name, found in zip(present, _hash_all([(source.path(n), None) for n in present])):
        if found is not None:
            st, sha = found
            out[name] = Recorded(name, st.st_size, st.st_mtime_ns, sha)
    return out


def load(spark: SparkSession, lake: str, store: TableStore | None = None) -> dict[str, Recorded]:
    store = store or default_store()
    if not store.exists(Lake(lake).journal_files):
        return {}
    return {r["source"]: Recorded(r["source"], r["size"], r["mtime_ns"], r["checksum"])
            for r in store.read(spark, Lake(lake).journal_files).collect()}


def record(spark: SparkSession, lake: str, files: dict[str, Recorded], store: TableStore | None = None, *,
           new: bool = False) -> None:
    """Add (or replace) the rows of `files`; the table is small (a row per landing file), so it is rewritten.
    `new`: none of `files` is recorded yet (a live batch's, just journaled), so their rows are appended."""
    if not files:
        return
    store = store or default_store()
    rows = files if new else {**load(spark, lake, store), **files}
    df = driver_rows(spark, [(r.source, r.size, r.mtime_ns, r.checksum) for _, r in sorted(rows.items())], SCHEMA)
    store.write(df, Lake(lake).journal_files, mode="append" if new else "overwrite")


def check_journaled(spark: SparkSession, lake: str, source: landings.Landing, journaled: list[str],
                    store: TableStore | None = None) -> list[Change]:
    """The journaled landing files that changed since they were recorded; those without a row (a run stopped before
    recording them, or a lake from before the manifest) are recorded as they are now."""
    recorded = load(spark, lake, store)
    changed = changes(source, recorded, journaled)
    record(spark, lake, observe(source, [f for f in journaled if f not in recorded]), store, new=True)
    return changed


def changes(source: landings.Landing, recorded: dict[str, Recorded], names: list[str] | None = None,
            sizes_only: bool = False) -> list[Change]:
    """Journaled files (of `names`, default all recorded) that differ from what was recorded: size, or content
    (the checksum, computed again at every check whatever the modification time says); a file gone is not a change."""
    names = sorted(recorded if names is None else set(names) & set(recorded))
    now = {f.name: f.size for f in source.files()}
    out, same_size = [], []
    for name in names:
        was = recorded[name]
        if name not in now:
            continue
        if now[name] != was.size:
            grew = "grew" if now[name] > was.size else "shrank"
            out.append(Change(name, f"size {was.size} -> {now[name]} bytes ({grew})"))
        elif not (sizes_only or not isinstance(source, landings.LocalLanding) or was.checksum is None):
            same_size.append(name)
    jobs = [(source.path(n), None if recorded[n].checksum.startswith(WHOLE) else recorded[n].size) for n in same_size]
    for name, found in zip(same_size, _hash_all(jobs)):
        if found is not None and found[1] != recorded[name].checksum:
            out.append(Change(name, f"content changed (same size {recorded[name].size} bytes, checksum differs)"))
    return sorted(out, key=lambda c: c.source)
