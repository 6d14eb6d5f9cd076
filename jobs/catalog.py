"""The jobs a deployment runs: a folder of YAML job files (`replay.model.jobs.load_folder`), by default the
examples shipped here; `RETRACE_JOBS` points the CLI and the Dagster code location at another folder."""
from __future__ import annotations

import os

DEFAULT_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")


def folder() -> str:
    return os.environ.get("RETRACE_JOBS") or DEFAULT_FOLDER
