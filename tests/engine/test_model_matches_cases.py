"""The reference model reproduces every vendored conformance case exactly."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay.conformance import diff
from tests.model import run_model

CASES = sorted((Path(__file__).parent.parent / "conformance" / "cases").glob("*.json"))


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("case", [_load(p) for p in CASES], ids=[_load(p)["name"] for p in CASES])
def test_model_matches_case(case):
    actual = run_model(case["policy"], case["journal"])
    assert diff(case["expected"], actual) == []


def test_all_cases_found():
    assert len(CASES) >= 16
