#!/usr/bin/env bash
# README command 2: lint, then run the tests. Extra arguments go to pytest.
# First the set-up with what only the tests need (infra/setup.sh --no-demo --tests: the test packages and linters,
# Chromium and ChromeDriver, the Kafka broker's and S3Proxy's jars, the class archive); every step is stamped, so
# after the first time this takes seconds and downloads nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/setup.sh --no-demo --tests
# lint first (a second or two): ruff's style, and import-linter's contract that Retrace's layers import downwards
# only (pyproject.toml)
.venv/bin/ruff check .
PYTHONPATH=$PWD .venv/bin/lint-imports
# three workers (pytest-xdist) on two cores: a test's time is partly one JVM starting, a driver between Spark jobs or
# a subprocess waited for, so a third worker fills what two leave idle (2026-11-28: 47 min with three, 72 with two);
# RETRACE_TEST_WORKERS=0 runs the suite in this process
exec .venv/bin/python -m pytest -n "${RETRACE_TEST_WORKERS:-3}" "$@"
