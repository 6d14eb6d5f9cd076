"""`replay advise` gives advice a user can act on: with a latency budget, the most complete tolerance whose windows
are emitted within it; with a target no candidate meets, a first line that says so; and output delays of every
window a live run would emit, measured on an ingested journal (no clock rows) with the clock rows a live run would
journal, the windows it cannot measure counted with the reason.

Journal A, one partition: an event every second (event time i s, arrival 0.5 s later); every tenth event (i % 10 ==
5) is 3 s below the latest earlier event time, and one in a hundred (i % 100 == 55) 20 s below it. So an
out-of-order tolerance O touches 60 (O < 3 s), 6 (3 s <= O < 20 s) or 0 events of 600, and a 10 s window [e-10, e)
closes at the event with time e + O (a regular one for O in 0, 2, 6, 30 s), which arrives O + 0.5 s after e.
"""
from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest
import yaml

from replay.cli.main import main
from replay.model.durations import format_instant

START = datetime(2024, 1, 1, tzinfo=timezone.utc)
EVENTS = 600


def _line(partition: int, offset: int, event_s: float, arrival_s: float) -> str:
    at = lambda s: format_instant(round((START + timedelta(seconds=s)).timestamp() * 1e6))  # noqa: E731
    return json.dumps({"partition": partition, "offset": offset, "arrival_time": at(arrival_s),
                       "event_time": at(event_s), "key": "k", "value": 1.0})


def _ingested(root, name: str, lines: list[str]) -> str:
    landing, lake = str(root / f"{name}-landing"), str(root / f"{name}-lake")
    os.makedirs(landing)
    with open(os.path.join(landing, "part-0.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    assert main(["ingest", "--landing", landing, "--lake", lake]) == 0
    return lake


def _shift(i: int) -> int:
    return 21 if i % 100 == 55 else 4 if i % 10 == 5 else 0


@pytest.fixture(scope="module")
def out_of_order(tmp_path_factory, spark):
    root = tmp_path_factory.mktemp("budget")
    lake = _ingested(root, "a", [_line(0, i, i - _shift(i), i + 0.5) for i in range(EVENTS)])
    policy = root / "policy.yaml"
    policy.write_text(yaml.safe_dump({"window": {"kind": "tumbling", "size": "10s"}}))
    return lake, str(policy), root


def _advise(capsys, lake, policy, folder, *args) -> tuple[list[str], dict]:
    capsys.readouterr()
    assert main(["advise", "--lake", lake, "--policy", policy, "--late-grid", "1m", "--out", str(folder), *args]) == 0
    return capsys.readouterr().out.splitlines(), json.load(open(os.path.join(folder, "advice.json")))


def test_with_a_latency_budget_the_advice_is_the_most_complete_tolerance_within_it(out_of_order, capsys):
    lake, policy, root = out_of_order
    lines, advice = _advise(capsys, lake, policy, root / "budget", "--out-of-order-grid", "0s,2s,6s,30s",
                            "--latency-budget", "7s")
    sweep = {r["tolerance"]: r for r in advice["out_of_order_sweep"]}
    # by hand: events touched, and every measured window's delay (O + 0.5 s)
    assert {t: r["out_of_order"] for t, r in sweep.items()} == {"0s": 60, "2s": 60, "6s": 6, "30s": 0}
    assert {t: (r["delay"]["p50"], r["delay"]["p99"]) for t, r in sweep.items()} == {
        "0s": (0.5, 0.5), "2s": (2.5, 2.5), "6s": (6.5, 6.5), "30s": (30.5, 30.5)}
    assert advice["recommended"]["out_of_order_tolerance"] == "6s"  # 30s touches none, but emits 30.5 s late
    assert lines[0].startswith("within the latency budget 7s (p99), the most complete: late_arrival_tolerance 1m, "
                               "out_of_order_tolerance 6s"), lines[0]
    assert "does NOT meet (out-of-order) completeness 0.999" in lines[0]


def test_with_a_target_no_candidate_meets_the_first_line_says_so(out_of_order, capsys):
    lake, policy, root = out_of_order
    lines, advice = _advise(capsys, lake, policy, root / "unreachable", "--out-of-order-grid", "0s",
                            "--completeness", "0.9999")
    assert lines[0].startswith("NO CANDIDATE MEETS COMPLETENESS 0.9999: the largest out-of-order tolerance tried "
                               "still touches too many events"), lines[0]
    assert advice["notes"] == ["no out_of_order_tolerance candidate meets completeness 0.9999; the largest tried "
                               "is given"]


def test_the_windows_a_live_run_would_emit_are_measured_on_an_ingested_journal(tmp_path, capsys, spark):
    """Two partitions; partition 1 sends for 20 s and then falls silent. Without clock rows its watermark would
    hold every later window until the final flush; a live run's clock rows (every second, arrival = the tick) move
    its floor to tick - L (L = 2 s), so every window [e-10, e) with e from 20 s on closes at the tick e + 2 s: a
    delay of 2 s. The window [290, 300) is still open when the rows end: not measured, and said why."""
    lines = [_line(p, i, i, i + 0.5) for i in range(300) for p in (0, 1) if p == 0 or i < 20]
    lake = _ingested(tmp_path, "b", lines)
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"window": {"kind": "tumbling", "size": "10s"}}))
    _, advice = _advise(capsys, lake, str(policy), tmp_path / "advice", "--late-grid", "2s",
                        "--out-of-order-grid", "0s")
    delay = advice["predicted"]["delay"]
    assert (delay["windows"], delay["p50"], delay["max"]) == (29, 2.0, 2.0)  # e = 10 s closes at 0.5 s
    assert delay["unmeasured"] == 1 and "still open when the range's rows end" in delay["unmeasured_reason"]
    assert advice["live_clock"]["added"] == 2 * 299  # a tick a second from 1 s to 299 s, both partitions


def test_a_sessions_output_delay_is_measured_from_its_end(tmp_path, capsys, spark):
    """One event every 5 s (arrival 0.5 s later), gap 2 s: each event is a session [5i, 5i + 2). A live run's clock
    tick at 5i + 4 moves the floor to tick - L (L = 2 s) = 5i + 2, the session's end, before the next event arrives
    (5i + 5.5): a delay of 2 s after its end (4 s after its start or its event). The last session is still open when
    the rows end."""
    lake = _ingested(tmp_path, "s", [_line(0, i, 5 * i, 5 * i + 0.5) for i in range(40)])
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"window": {"kind": "session", "gap": "2s"}}))
    _, advice = _advise(capsys, lake, str(policy), tmp_path / "advice", "--late-grid", "2s",
                        "--out-of-order-grid", "0s")
    delay = advice["predicted"]["delay"]
    assert (delay["windows"], delay["p50"], delay["max"], delay["unmeasured"]) == (39, 2.0, 2.0, 1)
