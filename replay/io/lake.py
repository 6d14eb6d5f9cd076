"""The lake's layout: the only module that builds the paths of a lake's tables, folders and lock files.

    LAKE/journal, journal_source, journal_files    the journal, its source's partitions, its landing files
    LAKE/journal.lock                              one writer of the journal at a time
    LAKE/jobs/<job>/outputs/<target>/<table>       a job's outputs, checkpoints, lag and diagnostics per target
    LAKE/jobs/<job>/outputs/<target>.lock          one writer of a target at a time
    LAKE/jobs/<job>/advice/                        `replay advise`'s report of the job
    LAKE/quality/                                  the data-quality checks' Great Expectations context
    LAKE/alerts.jsonl                              the alerts' log file (replay.io.alerts), unless set elsewhere
    LAKE/.retrace-lake                             the lake's marker: its layout version (replay.io.lake_marker)

The spec's count/sum job is the job named `default` (`Job.spec`), so its outputs lie where any job's do. A lake
written before jobs had that job's outputs under LAKE/outputs/<target>: `replay migrate` moves them once, and
every other command that finds them refuses (`OldLayout`), naming that command.
"""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass

from replay.io import lake_fs

OUTPUT_TABLES = ("decisions", "windows", "dead_letters", "watermarks", "metrics")
# the checkpoints (`replay.io.checkpoints`); a lake written before kept their open windows and keys in tables of
# their own, still read until a checkpoint replaces them, and pruned and maintained as the others
CHECKPOINT_TABLES = ("checkpoints", "checkpoint_windows", "checkpoint_keys")
LIVE_TABLES = ("lag", "diagnostics")  # the live job's, in its lead job's target
TARGET_TABLES = OUTPUT_TABLES + CHECKPOINT_TABLES + LIVE_TABLES  # every table Retrace writes in a target
JOURNAL_TABLES = ("journal", "journal_source", "journal_files")
MARKER = ".retrace-lake"  # LAKE/.retrace-lake: what makes a folder a lake (replay.io.lake_marker)
LAYOUT = 1  # the layout the marker of a lake in today's layout records; 0: the layout before jobs
TARGET_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_-")
SCRATCH = "_"  # targets and tables whose name starts so are scratch (a verify's replay, a range's decisions)
SCRATCH_RUN = f"{SCRATCH}scratch-"  # a range replay's decisions, kept aside in its target until it commits


class OldLayout(ValueError):
    """The lake holds outputs in the layout before jobs: `replay migrate` moves them."""


def check_target(target: str) -> str:
    """A target's name, which is a folder name: lower-case letters, digits, '_' or '-'."""
    if not target or not set(target) <= TARGET_CHARS:
        raise ValueError(f"target: {target!r} must be lower-case letters, digits, '_' or '-'")
    return target


@dataclass(frozen=True)
class TargetDir:
    """One job's target in a lake: the folder of its tables, and the lock its writer holds."""

    lake: str
    job: str
    target: str

    @property
    def folder(self) -> str:
        return os.path.join(self.lake, "jobs", self.job, "outputs", self.target)

    @property
    def lock(self) -> str:
        return f"{self.folder}.lock"

    def table(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def scratch(self) -> str:
        """A new scratch folder inside the target (a range replay's decisions), removed by its user."""
        return self.table(f"{SCRATCH_RUN}{uuid.uuid4().hex}")

    def scratch_folders(self) -> list[str]:
        """The scratch folders in the target: a run killed before it removed its own leaves one."""
        return [self.table(n) for n in _folders(self.folder) if n.startswith(SCRATCH_RUN)]

    @property
    def label(self) -> str:
        """How reports name it: `<job>/<target>`."""
        return f"{self.job}/{self.target}"


@dataclass(frozen=True)
class Lake:
    """A lake folder and the places in it."""

    root: str

    @property
    def journal(self) -> str:
        return os.path.join(self.root, "journal")

    @property
    def journal_source(self) -> str:
        return os.path.join(self.root, "journal_source")

    @property
    def journal_files(self) -> str:
        return os.path.join(self.root, "journal_files")

    @property
    def journal_lock(self) -> str:
        return os.path.join(self.root, "journal.lock")

    @property
    def marker(self) -> str:
        return os.path.join(self.root, MARKER)

    def layout(self) -> int | None:
        """The layout version the lake's marker records; None without a marker (a lake not made yet, or made
        before markers); a marker that cannot be read is refused naming it."""
        try:
            found = lake_fs.of(self.root).read(self.marker)
            if found is None:
                return None
            layout = json.loads(found[0])["layout"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{self.marker}: the lake's marker cannot be read ({type(e).__name__}: {e}); it holds "
                             f'{{"layout": {LAYOUT}}} in a lake Retrace made') from None
        if not isinstance(layout, int) or isinstance(layout, bool) or layout > LAYOUT:
            raise ValueError(f"{self.marker}: layout {layout!r} is not one this Retrace knows (0 to {LAYOUT}): "
                             f"the lake was made by a newer Retrace")
        return layout

    @property
    def quality(self) -> str:
        return os.path.join(self.root, "quality")

    @property
    def alert_log(self) -> str:
        return os.path.join(self.root, "alerts.jsonl")

    def advice(self, job: str) -> str:
        return os.path.join(self._job_folder(job), "advice")

    def target(self, job: str, target: str) -> TargetDir:
        """Where `target` of job `job` lives; refuses a lake still in the old layout."""
        self.refuse_old_layout()
        return TargetDir(self.root, job, check_target(target))

    def scratch_target(self, job: str, purpose: str) -> TargetDir:
        """A new scratch target of `job` (e.g. `_verify-<id>`): its user removes it (`remove`)."""
        self.refuse_old_layout()
        return TargetDir(self.root, job, f"{SCRATCH}{purpose}-{uuid.uuid4().hex[:12]}")

    def targets(self) -> list[TargetDir]:
        """Every job's targets (folders named as targets are; scratch targets left out), by job and target name."""
        self.refuse_old_layout()
        jobs = os.path.join(self.root, "jobs")
        out = []
        for job in _folders(jobs):
            out += [TargetDir(self.root, job, t) for t in _folders(os.path.join(jobs, job, "outputs"))
                    if not t.startswith(SCRATCH) and set(t) <= TARGET_CHARS]
        return out

    def tables(self) -> list[str]:
        """Every Delta table Retrace writes in the lake: the journal's, then each target's by the names Retrace
        gives them (`TARGET_TABLES`). Anything else in the folder, a table of the user's too, is not listed."""
        out = [p for p in (self.journal, self.journal_source, self.journal_files) if is_table(p)]
        for where in self.targets():
            out += [where.table(t) for t in sorted(TARGET_TABLES) if is_table(where.table(t))]
        return out

    def relative(self, path: str) -> str:
        return lake_fs.relative(path, self.root)

    # -- the layout before jobs ----------------------------------------------------------------------------

    def old_outputs(self) -> str:
        return os.path.join(self.root, "outputs")

    def has_old_layout(self) -> bool:
        """LAKE/outputs in a lake without a marker, or whose marker says layout 0 (a folder of that name in a
        lake of today's layout is not Retrace's)."""
        return lake_fs.of(self.root).is_dir(self.old_outputs()) and self.layout() in (None, 0)

    def refuse_old_layout(self) -> None:
        if self.has_old_layout():
            raise OldLayout(f"{self.root} holds the spec's job's outputs in the layout before jobs "
                            f"({self.old_outputs()}); move them once with `replay migrate --lake {self.root}`")

    def old_moves(self, job: str) -> list[tuple[str, str]]:
        """(from, to) of every entry of the old layout: LAKE/outputs/<entry> (targets, their locks) to job
        `job`'s outputs folder, and LAKE/advice to the job's advice folder."""
        outputs = os.path.join(self._job_folder(job), "outputs")
        moves = [(os.path.join(self.old_outputs(), name), os.path.join(outputs, name))
                 for name in sorted(e.name for e in lake_fs.of(self.root).list(self.old_outputs()))
                 ] if self.has_old_layout() else []
        advice = os.path.join(self.root, "advice")
        return moves + ([(advice, self.advice(job))] if lake_fs.of(self.root).is_dir(advice) else [])

    def _job_folder(self, job: str) -> str:
        return os.path.join(self.root, "jobs", job)


def is_table(path: str) -> bool:
    return lake_fs.of(path).is_dir(os.path.join(path, "_delta_log"))


def _folders(path: str) -> list[str]:
    return [e.name for e in lake_fs.of(path).list(path) if e.is_dir]
