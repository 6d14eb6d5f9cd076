"""The conformance cases (tests/conformance/cases): every case through the engine, one case of each kind of time
feature through the replay runner and its Delta tables too, and the `--check` CLI (the runner's path as well)."""
from __future__ import annotations

import copy
import glob
import json
import os
import subprocess
import sys

import pytest

from replay.conformance import diff, engine_case, run_case
from tests.support import ROOT

CASES = sorted(glob.glob(os.path.join(ROOT, "tests", "conformance", "cases", "*.json")))


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _load(path: str) -> dict:
    with open(path) as f:
        case = json.load(f)
    case.setdefault("name", _stem(path))
    return case


def _check(*paths: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replay.conformance", *paths, "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_there_are_conformance_cases():
    assert len(CASES) >= 10


# through the runner too (about three times the engine's time per case): one case of each kind of time feature
RUNNER_CASES = ("asa_ordering_policy_drop", "atlas_idle_timeout", "cti_every_ten_events_delay_drop",
                "drop_policies_and_quarantine", "hopping_overlap", "partitions_independent",
                "session_closed_and_late_events_touching_it", "source_strategy_with_late_tolerance",
                "substreams_over_a_payload_field_raised_by_a_punctuation", "asa_watermark_substreams",
                "window_closed_dead_letters", "arrival_time_tumbling")


@pytest.mark.parametrize("path", CASES, ids=[_stem(p) for p in CASES])
def test_case_matches_expected(spark, path):
    case = _load(path)
    problems = diff(case["expected"], engine_case(spark, copy.deepcopy(case)))
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("name", RUNNER_CASES)
def test_case_matches_expected_through_the_runner(spark, name):
    case = _load(next(p for p in CASES if _stem(p) == name))
    problems = diff(case["expected"], run_case(spark, copy.deepcopy(case)))
    assert problems == [], "\n".join(problems)


def test_check_cli_passes_two_cases_with_one_json_line_each():
    paths = [p for p in CASES if _stem(p) in ("cti_every_event_no_delay", "partitions_independent")]
    assert len(paths) == 2
    r = _check(*paths)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert len(lines) == 3, r.stdout
    outputs = [json.loads(line) for line in lines[:2]]
    assert [o["name"] for o in outputs] == [_load(p)["name"] for p in paths]
    for o in outputs:
        assert set(o) >= {"decisions", "windows", "dead_letters"}
    assert lines[-1] == "2 passed, 0 failed"


def test_check_cli_fails_a_case_with_a_wrong_window_count(tmp_path):
    case = _load(next(p for p in CASES if _stem(p) == "cti_every_event_minus_one_tick"))
    assert case["expected"]["windows"], "the case needs a window to tamper with"
    case["expected"]["windows"][0]["count"] += 1
    wrong = tmp_path / "wrong_count.json"
    wrong.write_text(json.dumps(case))
    r = _check(str(wrong))
    assert r.returncode == 1, r.stderr[-3000:]
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert lines[-1] == "0 passed, 1 failed"
    assert "count expected" in r.stderr


def test_a_case_with_substreams_over_a_payload_field_runs_the_spec_job_given_that_field():
    """A case's journal row is the event as it landed: its fields beyond the journal's are payload fields, and
    `substream_by` may name one; the spec's job then reads it from the payload."""
    from replay.conformance import case_job

    job = case_job(_load(os.path.join(ROOT, "tests", "conformance", "cases", "substreams_over_a_payload_field.json")))
    assert job.policy.substream_by == "device" and job.name == "default"
    assert job.fields == (("device", "payload:device::string"),)


def test_a_case_with_substreams_over_a_field_no_row_carries_is_refused():
    from replay.conformance import case_job
    from replay.model.policy import PolicyError

    case = {"policy": {"substream_by": "device"}, "journal": [{"partition": 0, "offset": 0, "kind": "event",
                                                               "arrival_time": "2024-01-01T00:00:00Z"}]}
    with pytest.raises(PolicyError, match="substream_by: 'device' is not a field of the job; use one of key or null"):
        case_job(case)
