"""The jobs a deployment runs: a folder of job files (`replay.model.jobs.load_folder`), by default the examples
shipped in `jobs/examples/`; `RETRACE_JOBS` points the CLI, the live job and the Dagster code location at another."""
from __future__ import annotations

import os

from replay.model.jobs import Catalog, load_folder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_FOLDER = os.path.join(ROOT, "jobs", "examples")


def folder(chosen: str | None = None) -> str:
    """The jobs folder: `chosen` (e.g. --jobs DIR), else $RETRACE_JOBS, else the examples."""
    return chosen or os.environ.get("RETRACE_JOBS") or DEFAULT_FOLDER


def catalog(chosen: str | None = None) -> Catalog:
    return load_folder(folder(chosen))
