"""Whether a folder is a lake: a lake carries a marker of its own (LAKE/.retrace-lake, its layout version), written
by the first command that writes into it. A command refuses a folder that holds anything else, so a `--lake`
pointing at a user's folder is never taken over (and never vacuumed by `replay maintain`).

A lake made before markers has none: a folder holding only what Retrace's layout puts in a lake (`replay.io.lake`:
the journal's and targets' Delta tables, locks, advice, the quality context, the alert log) is taken for one, and
the first writing command marks it. Paths are checked before anything is created.
"""
from __future__ import annotations

import json
import os
import re

from replay.io.lake import JOURNAL_TABLES, LAYOUT, MARKER, SCRATCH, TARGET_CHARS, TARGET_TABLES, Lake, is_table

SHOWN = 3  # foreign files a refusal names
LOGS = ".retrace"  # the commands' log folder when run in the lake folder (replay.io.driver_logs)


class NotALake(ValueError):
    """The folder holds files Retrace did not write and no marker."""


def check(root: str) -> None:
    """Refuse, in one line, a lake path Retrace cannot use: one holding ':' (Hadoop paths cannot), a file, a
    marker of a newer Retrace, or a non-empty folder without a marker that holds files Retrace did not write.
    A folder that does not exist yet, or is empty, passes (the first writing command makes the lake)."""
    if _is_uri(root):
        return
    if ":" in root:
        raise ValueError(f"lake {root}: ':' cannot be in a lake's path (Hadoop reads a path segment holding it as a "
                         f"URI); choose a folder without ':'")
    if not os.path.exists(root):
        return
    if not os.path.isdir(root):
        raise NotALake(f"{root} is a file, not a lake folder; choose another --lake")
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
    if _is_uri(root) or Lake(root).layout() is not None:
        return
    os.makedirs(root, exist_ok=True)
    layout = 0 if Lake(root).has_old_layout() else LAYOUT  # a lake before jobs: `replay migrate` moves it
    mark(root, layout)


def mark(root: str, layout: int = LAYOUT) -> None:
    """Write the lake's marker (replaced if it is there: `replay migrate` moves a lake to today's layout)."""
    path = Lake(root).marker
    temp = f"{path}.{os.getpid()}.tmp"
    with open(temp, "w") as f:
        f.write(json.dumps({"retrace": "lake", "layout": layout}) + "\n")
    os.replace(temp, path)


def foreign(root: str) -> list[str]:
    """The files of folder `root` (relative, sorted) that Retrace's layout does not explain."""
    out = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name in JOURNAL_TABLES:
            ok = is_table(path)
        elif name in ("journal.lock", "alerts.jsonl"):
            ok = os.path.isfile(path)
        elif name in ("quality", "advice", LOGS):
            ok = os.path.isdir(path)
        elif name == "outputs":  # the layout before jobs
            out += _outputs(root, path)
            continue
        elif name == "jobs" and os.path.isdir(path):
            out += _jobs(root, path)
            continue
        else:
            ok = False
        if not ok:
            out += _files(root, path)
    return out


def _jobs(root: str, folder: str) -> list[str]:
    out = []
    for job in sorted(os.listdir(folder)):
        path = os.path.join(folder, job)
        if not os.path.isdir(path):
            out += _files(root, path)
            continue
        for name in sorted(os.listdir(path)):
            inside = os.path.join(path, name)
            if name == "outputs":
                out += _outputs(root, inside)
            elif not (name == "advice" and os.path.isdir(inside)):
                out += _files(root, inside)
    return out


def _outputs(root: str, folder: str) -> list[str]:
    """A job's outputs folder: targets (their tables, a range run's scratch), their locks, scratch targets."""
    if not os.path.isdir(folder):
        return _files(root, folder)
    out = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        target = name[:-len(".lock")] if name.endswith(".lock") else name
        if not set(target) <= TARGET_CHARS | {"_"} or not target:
            out += _files(root, path)
        elif name.endswith(".lock"):
            out += [] if os.path.isfile(path) else _files(root, path)
        elif not os.path.isdir(path):
            out += _files(root, path)
        elif not name.startswith(SCRATCH):  # a scratch target (a verify's) is Retrace's whole
            for table in sorted(os.listdir(path)):
                inside = os.path.join(path, table)
                if not (table.startswith(SCRATCH) or table in TARGET_TABLES and is_table(inside)):
                    out += _files(root, inside)
    return out


def _files(root: str, path: str) -> list[str]:
    """`path` relative to `root`, or the files under it when it is a folder (the folder itself when empty)."""
    if not os.path.isdir(path):
        return [os.path.relpath(path, root)]
    found = []
    for folder, subfolders, names in os.walk(path):  # the first few are enough to name (a big folder is not walked)
        subfolders.sort()
        found += [os.path.relpath(os.path.join(folder, n), root) for n in sorted(names)]
        if len(found) > SHOWN:
            break
    return found or [os.path.relpath(path, root) + "/"]


def _is_uri(root: str) -> bool:
    return re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://", root) is not None
