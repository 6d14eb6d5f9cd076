"""Whether a folder is a lake: a lake carries a marker of its own (LAKE/.retrace-lake, its layout version), written
by the first command that writes into it. A command refuses a folder that holds anything else, so a `--lake`
pointing at a user's folder is never taken over (and never vacuumed by `replay maintain`).

A lake made before markers has none: a folder holding only what Retrace's layout puts in a lake (`replay.io.lake`:
the journal's and targets' Delta tables, locks, advice, the quality context, the alert log) is taken for one, and
the first writing command marks it. Paths are checked before anything is created. A lake on object storage
(s3a://bucket/prefix) is checked the same way, its keys read as files (replay.io.lake_fs).
"""
from __future__ import annotations

import json
import os

from replay.io import lake_fs
from replay.io.lake import JOURNAL_TABLES, LAYOUT, MARKER, SCRATCH, TARGET_CHARS, TARGET_TABLES, Lake, is_table

SHOWN = 3  # foreign files a refusal names
LOGS = ".retrace"  # the commands' log folder when run in the lake folder (replay.io.driver_logs)


class NotALake(ValueError):
    """The folder holds files Retrace did not write and no marker."""


def check(root: str) -> None:
    """Refuse, in one line, a lake path Retrace cannot use: a URI other than s3a://, a local path holding ':' (Hadoop
    paths cannot), a file, a marker of a newer Retrace, or a non-empty folder without a marker that holds files
    Retrace did not write. A folder that does not exist yet, or is empty, passes (the first writing command makes
    the lake)."""
    lake_fs.check_uri(root)
    if not lake_fs.is_uri(root) and ":" in root:
        raise ValueError(f"lake {root}: ':' cannot be in a lake's path (Hadoop reads a path segment holding it as a "
                         f"URI); choose a folder without ':'")
    fs = lake_fs.of(root)
    if fs.is_file(root):
        raise NotALake(f"{root} is a file, not a lake folder; choose another --lake")
    if not fs.is_dir(root):
        return
    if Lake(root).layout() is not None:
        return
    found = foreign(root)
    if found:
        shown = " ".join(found[:SHOWN]) + (" ..." if len(found) > SHOWN else "")
        raise NotALake(f"{root} is not a Retrace lake: it holds files Retrace did not write ({shown}) and no {MARKER} "
                       f"marker; choose an empty or new folder for --lake")


def claim(root: str) -> None:
    """`check`, then make the lake folder and its marker when it has none yet (a new lake, or one made before
    markers): called by every writing command just before it creates its first file in the lake."""
    check(root)
    if Lake(root).layout() is not None:
        return
    layout = 0 if Lake(root).has_old_layout() else LAYOUT  # a lake before jobs: `replay migrate` moves it
    mark(root, layout)


def mark(root: str, layout: int = LAYOUT) -> None:
    """Write the lake's marker whole (replaced if it is there: `replay migrate` moves a lake to today's layout)."""
    lake_fs.of(root).write(Lake(root).marker, (json.dumps({"retrace": "lake", "layout": layout}) + "\n").encode())


def foreign(root: str) -> list[str]:
    """The files of folder `root` (relative, sorted) that Retrace's layout does not explain."""
    fs, out = lake_fs.of(root), []
    for entry in fs.list(root):
        name, path = entry.name, os.path.join(root, entry.name)
        if name in JOURNAL_TABLES:
            ok = is_table(path)
        elif name in ("journal.lock", "alerts.jsonl"):
            ok = not entry.is_dir
        elif name in ("quality", "advice", LOGS):
            ok = entry.is_dir
        elif name == "outputs":  # the layout before jobs
            out += _outputs(fs, root, path)
            continue
        elif name == "jobs" and entry.is_dir:
            out += _jobs(fs, root, path)
            continue
        else:
            ok = False
        if not ok:
            out += _files(fs, root, path)
    return out


def _jobs(fs: lake_fs.LakeFS, root: str, folder: str) -> list[str]:
    out = []
    for job in fs.list(folder):
        path = os.path.join(folder, job.name)
        if not job.is_dir:
            out += _files(fs, root, path)
            continue
        for entry in fs.list(path):
            inside = os.path.join(path, entry.name)
            if entry.name == "outputs":
                out += _outputs(fs, root, inside)
            elif not (entry.name == "advice" and entry.is_dir):
                out += _files(fs, root, inside)
    return out


def _outputs(fs: lake_fs.LakeFS, root: str, folder: str) -> list[str]:
    """A job's outputs folder: targets (their tables, a range run's scratch), their locks, scratch targets."""
    if not fs.is_dir(folder):
        return _files(fs, root, folder)
    out = []
    for entry in fs.list(folder):
        name, path = entry.name, os.path.join(folder, entry.name)
        target = name[:-len(".lock")] if name.endswith(".lock") else name
        if not set(target) <= TARGET_CHARS | {"_"} or not target:
            out += _files(fs, root, path)
        elif name.endswith(".lock"):
            out += _files(fs, root, path) if entry.is_dir else []
        elif not entry.is_dir:
            out += _files(fs, root, path)
        elif not name.startswith(SCRATCH):  # a scratch target (a verify's) is Retrace's whole
            for table in fs.list(path):
                inside = os.path.join(path, table.name)
                if not (table.name.startswith(SCRATCH) or table.name in TARGET_TABLES and is_table(inside)):
                    out += _files(fs, root, inside)
    return out


def _files(fs: lake_fs.LakeFS, root: str, path: str) -> list[str]:
    """`path` relative to `root`, or the files under it when it is a folder (the folder itself when empty)."""
    if not fs.is_dir(path):
        return [lake_fs.relative(path, root)]
    found, folders = [], [path]
    while folders and len(found) <= SHOWN:  # the first few are enough to name (a big folder is not walked)
        folder = folders.pop()  # depth first, in name order, as os.walk goes
        entries = fs.list(folder)
        found += [lake_fs.relative(os.path.join(folder, e.name), root) for e in entries if not e.is_dir]
        folders += [os.path.join(folder, e.name) for e in reversed(entries) if e.is_dir]
    return found or [lake_fs.relative(path, root) + "/"]
