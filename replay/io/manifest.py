"""Landing files are immutable once journaled: what each file was when it was journaled, and the check.

A small side table, `LAKE/journal_files` (source, size, mtime_ns, checksum), one row per journaled landing
file. The checksum is a SHA-256 of the file's size and its first and last 64 KiB, so recording and checking
it never reads a whole file again; it is recomputed only when the modification time moved. An S3 object has
its size only. A changed file is reported, never re-read: the journal keeps what was read.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from pyspark.sql import SparkSession

from replay.io import landing as landings
from replay.io.lake import Lake
from replay.io.store import TableStore, default_store

SCHEMA = "source string, size long, mtime_ns long, checksum string"
SAMPLE = 64 * 1024


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


def checksum(path: str, size: int) -> str:
    """SHA-256 of the size and the first and last 64 KiB: cheap, and catches appends, truncations and
    rewrites of either end (not a same-size edit in the middle of a large file)."""
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(SAMPLE))
        if size > SAMPLE:
            f.seek(max(SAMPLE, size - SAMPLE))
            h.update(f.read(SAMPLE))
    return h.hexdigest()


def observe(source: landings.Landing, names: list[str]) -> dict[str, Recorded]:
    """What the named landing files are now (missing files are left out)."""
    sizes = {f.name: f.size for f in source.files()}
    out = {}
    for name in names:
        if name not in sizes:
            continue
        if isinstance(source, landings.LocalLanding):
            path = source.path(name)
            try:
                st = os.stat(path)
                out[name] = Recorded(name, st.st_size, st.st_mtime_ns, checksum(path, st.st_size))
            except FileNotFoundError:
                continue
        else:
            out[name] = Recorded(name, sizes[name], None, None)
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
    df = spark.createDataFrame([(r.source, r.size, r.mtime_ns, r.checksum) for _, r in sorted(rows.items())],
                               SCHEMA)
    store.write(df.coalesce(1), Lake(lake).journal_files, mode="append" if new else "overwrite")


def changes(source: landings.Landing, recorded: dict[str, Recorded], names: list[str] | None = None,
            sizes_only: bool = False) -> list[Change]:
    """Journaled files (of `names`, default all recorded) that differ from what was recorded: size, or
    content (checksum, looked at only when the modification time moved); a file gone is not a change."""
    names = sorted(recorded if names is None else set(names) & set(recorded))
    now = {f.name: f.size for f in source.files()}
    out = []
    for name in names:
        was = recorded[name]
        if name not in now:
            continue
        if now[name] != was.size:
            grew = "grew" if now[name] > was.size else "shrank"
            out.append(Change(name, f"size {was.size} -> {now[name]} bytes ({grew})"))
            continue
        if sizes_only or not isinstance(source, landings.LocalLanding) or was.checksum is None:
            continue
        path = source.path(name)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        if st.st_mtime_ns != was.mtime_ns and checksum(path, st.st_size) != was.checksum:
            out.append(Change(name, f"content changed (same size {was.size} bytes, checksum differs)"))
    return out
