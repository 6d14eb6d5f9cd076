"""The reference model reproduces every vendored conformance case exactly."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings

from replay.conformance import diff
from tests.model import NEG, instant, run_model
from tests.support.examples import examples
from tests.support.journals import journals, policies

CASES = sorted((Path(__file__).parent.parent / "conformance" / "cases").glob("*.json"))


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("case", [_load(p) for p in CASES], ids=[_load(p)["name"] for p in CASES])
def test_model_matches_case(case):
    actual = run_model(case["policy"], case["journal"])
    assert diff(case["expected"], actual) == []


def test_all_cases_found():
    assert len(CASES) >= 38


def _event(offset, time, value=1.0):
    at = f"2024-01-01T00:00:{time:02d}Z"
    return {"partition": 0, "offset": offset, "kind": "event", "arrival_time": at, "event_time": at, "key": None,
            "value": value}


def _punctuation(offset, time):
    at = f"2024-01-01T00:00:{time:02d}Z"
    return {"partition": 0, "offset": offset, "kind": "punctuation", "arrival_time": at, "event_time": at}


def test_a_redelivered_punctuation_is_applied_once():
    """A broker redelivers a punctuation record (same partition and offset): its first copy raised the watermark
    and restarted the count; the repeat changes nothing, so the 2nd event after the first copy punctuates."""
    policy = {"late_arrival_tolerance": None, "early_arrival_tolerance": None,
              "watermark": {"strategy": "punctuated", "every_events": 2}}
    journal = [_punctuation(0, 1), _event(1, 2), _punctuation(0, 1), _event(2, 3)]
    out = run_model(policy, journal)
    assert [d["watermark"] for d in out["decisions"]] == ["2024-01-01T00:00:01Z"] * 3 + ["2024-01-01T00:00:03Z"]
    assert out["dead_letters"] == []


FLUSHED_SESSIONS = [c for c in map(_load, CASES) if (c["policy"].get("window") or {}).get("kind") == "session"
                    and c["policy"].get("flush_at_end", True)]


@pytest.mark.parametrize("case", FLUSHED_SESSIONS, ids=[c["name"] for c in FLUSHED_SESSIONS])
def test_sessions_conserve_events_counting_each_window_closed_event_once(case):
    """Spec section 7 with unwindowed = 0 (and the final flush): an event touching two closed sessions is two
    dead-letter rows but one event, so window_closed counts events here."""
    out = run_model(case["policy"], case["journal"])
    events = sum(1 for r in case["journal"] if r["kind"] == "event")
    lost = sum(1 for d in out["decisions"] if d["action"] in ("dropped", "quarantined"))
    closed = len({d["seq"] for d in out["dead_letters"] if d["reason"] == "window_closed"})
    assert events == sum(w["count"] for w in out["windows"]) + lost + closed


def test_there_are_flushed_session_cases():
    assert len(FLUSHED_SESSIONS) >= 4


def _output_scope(policy, decision):
    return decision["partition"] if policy.get("partitions") == "independent" else None


def _instant(text):
    return NEG if text is None else instant(text)


@settings(max_examples=examples(300), deadline=None, derandomize=True)
@given(policy=policies(features=True), journal=journals(features=True))
def test_the_model_keeps_the_spec_invariants_with_punctuations_field_substreams_and_sessions(policy, journal):
    """On drawn journals with source punctuations (some malformed, some redelivered), the source strategy,
    substreams over a payload field and session windows: a punctuation row is no event (no action, no window);
    every output watermark never decreases; the sessions of a group never overlap; and with sessions and the final
    flush, every event is counted once (section 7, window_closed counted per event)."""
    out = run_model(copy.deepcopy(policy), copy.deepcopy(journal))
    last = {}
    for d in out["decisions"]:
        if d["kind"] == "punctuation":
            assert (d["action"], d["reasons"], d["timestamp"]) == (None, None, None)
        scope = _output_scope(policy, d)
        assert _instant(d["output_watermark"]) >= last.get(scope, NEG)
        last[scope] = _instant(d["output_watermark"])
    if (policy.get("window") or {}).get("kind") != "session":
        return
    spans = {}
    for w in out["windows"]:
        spans.setdefault((w["partition"], w["key"]), []).append((instant(w["window_start"]), instant(w["window_end"])))
    for group in spans.values():
        group.sort()
        assert all(earlier[1] <= later[0] for earlier, later in zip(group, group[1:])), group
    if policy.get("flush_at_end", True):
        events = sum(1 for r in journal if r["kind"] == "event")
        lost = sum(1 for d in out["decisions"] if d["action"] in ("dropped", "quarantined"))
        closed = len({d["seq"] for d in out["dead_letters"] if d["reason"] == "window_closed"})
        assert events == sum(w["count"] for w in out["windows"]) + lost + closed
