#!/usr/bin/env bash
# README command 2: run the tests (sets up .venv first if it is missing). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/replay ] || bash infra/setup.sh --no-demo
exec .venv/bin/python -m pytest "$@"
