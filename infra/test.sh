#!/usr/bin/env bash
# README command 2: lint, then run the tests (sets up .venv first if it is missing or lacks the linters). Extra
# arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/replay ] && [ -x .venv/bin/lint-imports ] || bash infra/setup.sh --no-demo
# lint first (a second or two): ruff's style, and import-linter's contract that Retrace's layers import downwards
# only (pyproject.toml)
.venv/bin/ruff check .
PYTHONPATH=$PWD .venv/bin/lint-imports
# two workers (pytest-xdist): much of a test's time is one JVM starting or one driver between Spark jobs, so a
# second worker uses the core the first leaves idle; RETRACE_TEST_WORKERS=0 runs the suite in this process
exec .venv/bin/python -m pytest -n "${RETRACE_TEST_WORKERS:-2}" "$@"
