"""`replay explain`: a window of a job, the events in it and the events whose own time lies in it that it does not
hold, each with its reason, as the target's tables decided them."""
from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from replay.cli import main as cli
from replay.io import journal
from replay.model.durations import format_instant
from replay.ops import outputs
from tests.support import target_dir
from tests.support.lakes import replayed_lake

MINUTE = 60_000_000
# late events dropped, out-of-order ones accepted as they are: some miss their window as late, some as window_closed
WHATIF = """\
early_arrival_tolerance: null
late_arrival_tolerance: 3s
late_arrival_action: drop
out_of_order_tolerance: 1s
out_of_order_action: accept
watermark: {strategy: bounded}
window: {kind: tumbling, size: 1m}
allowed_lateness: 0s
"""


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("explain")
    lake = replayed_lake(spark, root, seed=11)
    policy = root / "whatif.yaml"
    policy.write_text(WHATIF)
    assert cli.main(["run", "--lake", lake, "--policy", str(policy), "--target", "whatif"]) == 0
    return lake


def _explain(capsys, lake, *args) -> tuple[int, str, str]:
    code = cli.main(["explain", "--lake", lake, *args])
    out, err = capsys.readouterr()
    return code, out, err


def _explained(capsys, lake, *args) -> dict:
    code, out, err = _explain(capsys, lake, "--json", "--limit", "100000", *args)
    assert code == 0, err
    return json.loads(out)


def _table(spark, lake, name, target="production"):
    return outputs.read(spark, target_dir(lake, target), name)


def _windows(spark, lake):
    return _table(spark, lake, "windows").select("key", "count", F.unix_micros("window_start").alias("us"))


def _window_of(us: int) -> str:
    return format_instant(us - us % MINUTE)


def test_a_windows_members_are_the_events_its_count_counts(spark, capsys, lake):
    window = _windows(spark, lake).orderBy(F.desc("count"), "us", "key").first()
    start = format_instant(window["us"])
    found = _explained(capsys, lake, "--window", start, "--key", window["key"])
    assert [w["count"] for w in found["windows"]] == [window["count"]]
    assert found["member_count"] == window["count"] == len(found["members"])
    assert {m["key"] for m in found["members"]} == {window["key"]}


def test_every_event_of_the_key_timed_in_the_window_is_in_it_or_missed_it(spark, capsys, lake):
    dropped = _table(spark, lake, "decisions", "whatif").where(F.col("action") == "dropped").orderBy("seq").first()
    assert dropped is not None, "the what-if policy drops no event: the test data has no late event"
    times = journal.read(spark, lake).where(F.col("seq") == dropped["seq"]).select(
        F.unix_micros("event_time").alias("us")).first()
    start = times["us"] - times["us"] % MINUTE
    found = _explained(capsys, lake, "--target", "whatif", "--window", format_instant(start), "--key", dropped["key"])
    timed = {r["seq"] for r in journal.read(spark, lake).where(
        (F.col("kind") == "event") & (F.col("key") == dropped["key"])
        & F.unix_micros("event_time").between(start, start + MINUTE - 1)).collect()}
    members, missed = {m["seq"] for m in found["members"]}, {m["seq"] for m in found["missed"]}
    assert timed <= members | missed and not members & missed


def test_a_late_event_dropped_is_listed_as_missing_its_window_because_late(spark, capsys, lake):
    dropped = _table(spark, lake, "decisions", "whatif").where(
        (F.col("action") == "dropped") & F.array_contains("reasons", "late")).orderBy("seq").first()
    assert dropped is not None, "the what-if policy drops no late event"
    et = journal.read(spark, lake).where(F.col("seq") == dropped["seq"]).select(
        F.unix_micros("event_time").alias("us")).first()["us"]
    found = _explained(capsys, lake, "--target", "whatif", "--window", _window_of(et), "--key", dropped["key"])
    assert {m["seq"]: m["reason"] for m in found["missed"]}[dropped["seq"]] == "late"
    assert dropped["seq"] not in {m["seq"] for m in found["members"]}


def test_an_event_that_came_after_its_window_closed_is_listed_as_missing_it_with_window_closed(spark, capsys, lake):
    letter = (_table(spark, lake, "dead_letters", "whatif").where(F.col("reason") == "window_closed")
              .select("seq", F.unix_micros("window_start").alias("us")).orderBy("seq").first())
    assert letter is not None, "the what-if policy closes no window before an event of it comes"
    key = _table(spark, lake, "decisions", "whatif").where(F.col("seq") == letter["seq"]).first()["key"]
    start = format_instant(letter["us"])
    found = _explained(capsys, lake, "--target", "whatif", "--window", start, "--key", key)
    assert {m["seq"]: m["reason"] for m in found["missed"]}[letter["seq"]] == "window_closed"
    assert letter["seq"] not in {m["seq"] for m in found["members"]}


def test_the_text_names_the_window_then_its_events_then_those_that_missed_it(spark, capsys, lake):
    window = _windows(spark, lake).orderBy("us", "key").first()
    start = format_instant(window["us"])
    code, out, err = _explain(capsys, lake, "--window", start, "--key", window["key"])
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"window [{start}, ") and f"key={window['key']}" in lines[0]
    assert lines[1] == f"in it: {window['count']} events"
    assert any(line.startswith("missed it: ") for line in lines[2:])


def test_a_start_no_window_has_is_refused_naming_it(capsys, lake):
    code, out, err = _explain(capsys, lake, "--window", "1999-01-01T00:00:00Z")
    assert code == 2 and out == ""
    assert "no window of job 'default' in target 'production' starts at 1999-01-01T00:00:00Z" in err


def test_a_group_column_the_windows_lack_is_refused_naming_it(capsys, lake):
    code, out, err = _explain(capsys, lake, "--window", "2024-01-01T00:00:00Z", "--group", "device=d-1")
    assert code == 2 and "--group device: the windows of job 'default' have no such column" in err
