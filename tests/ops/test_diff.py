"""`replay diff` of two targets: nothing against itself, and against a replay with another late tolerance
exactly the events whose decision changed (checked row by row against the two decisions tables)."""
from __future__ import annotations

import hashlib
import json

import pytest
import yaml
from pyspark.sql import functions as F

from replay.cli.main import main
from tests.support import target_dir
from tests.support.lakes import known_lateness
from replay.ops import outputs

WINDOW = {"kind": "tumbling", "size": "10s"}


@pytest.fixture(scope="module")
def targets(tmp_path_factory, spark):
    root = tmp_path_factory.mktemp("diff")
    landing, lake = str(root / "landing"), str(root / "lake")
    known_lateness(landing)
    assert main(["ingest", "--landing", landing, "--lake", lake]) == 0
    for target, late in (("production", "5s"), ("whatif", "1s")):
        policy = root / f"{target}.yaml"
        policy.write_text(yaml.safe_dump({"window": WINDOW, "late_arrival_tolerance": late}))
        assert main(["run", "--lake", lake, "--policy", str(policy), "--target", target]) == 0
    return {"lake": lake}


def _diff(targets, a, b, *extra) -> int:
    return main(["diff", "--lake", targets["lake"], "--target", a, "--target", b, *extra])


def _report(spark, targets, a, b):
    from replay.model.jobs import Job
    from replay.model.policy import Policy
    from replay.ops.diff import diff

    return diff(spark, targets["lake"], Job.spec(Policy.from_dict({"window": WINDOW})), a, b)


def test_a_target_against_itself_is_identical_and_exits_0(targets, spark):
    assert _diff(targets, "production", "production") == 0
    report = _report(spark, targets, "production", "production")
    assert report.identical and report.changed == 0 and report.transitions == []
    w = report.windows
    assert (w["only_in_a"], w["only_in_b"], w["aggregates_differ"], w["emitted_differ"]) == (0, 0, 0, 0)
    assert w["compared"] > 0 and report.delay["a"] == report.delay["b"]


def test_another_late_tolerance_reports_exactly_the_events_whose_decision_changed(targets, spark):
    from replay.ops.diff import changed_events

    def decided(target):
        rows = (outputs.read(spark, target_dir(targets["lake"], target), "decisions")
                .where(F.col("kind") == "event").select("seq", "action", "reasons", "timestamp").collect())
        return {r["seq"]: (r["action"], list(r["reasons"]), r["timestamp"]) for r in rows}

    a, b = decided("production"), decided("whatif")
    expected = {seq for seq in a if a[seq] != b[seq]}
    tables = {t: outputs.read(spark, target_dir(targets["lake"], t), "decisions")
              for t in ("production", "whatif")}
    found = {r["seq"] for r in changed_events(tables["production"], tables["whatif"]).collect()}
    assert expected and found == expected
    report = _report(spark, targets, "production", "whatif")
    assert report.changed == len(expected) and not report.identical
    assert sum(t["events"] for t in report.transitions) == len(expected)
    assert {(t["from"], t["to"]) for t in report.transitions} <= {("accepted", "adjusted"), ("adjusted", "accepted"),
                                                                   ("adjusted", "adjusted")}
    assert _diff(targets, "production", "whatif") == 1


@pytest.fixture(scope="module")
def json_reports(targets, spark):
    """`replay diff --json` of production and whatif, printed with 2 and with 7 shuffle partitions."""
    import contextlib
    import io

    outputs = []
    before = spark.conf.get("spark.sql.shuffle.partitions")
    for partitions in ("2", "7"):
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                assert _diff(targets, "production", "whatif", "--json") == 1
        finally:
            spark.conf.set("spark.sql.shuffle.partitions", before)
        outputs.append(out.getvalue())
    return outputs


def test_the_diff_report_is_the_same_on_every_run_and_shuffle_partition_count(json_reports):
    first, second = (hashlib.sha256(o.encode()).hexdigest() for o in json_reports)
    assert first == second


def test_a_diff_of_a_target_that_was_never_replayed_names_it(targets, capsys):
    assert _diff(targets, "production", "nowhere") == 2
    assert "target 'nowhere' of job 'default' has no decisions table" in capsys.readouterr().err


def test_the_json_report_counts_windows_and_output_delay_of_both_sides(json_reports):
    report = json.loads(json_reports[0])
    assert report["windows"]["compared"] >= report["windows"]["aggregates_differ"] > 0
    assert set(report["delay"]) == {"a", "b"} and report["delay"]["a"]["windows"] > 0


def test_a_diff_of_session_windows_matches_sessions_by_their_bounds_and_times_each_emitted_one(
        targets, tmp_path, spark):
    """Gaps of 2 s and 30 s cut the same events into different sessions: a session is the same on both sides only
    when its bounds are; each side's output delay covers its emitted sessions, the flushed ones apart."""
    from replay.model.jobs import Job
    from replay.model.policy import Policy
    from replay.ops.diff import diff

    for target, gap in (("short_sessions", "2s"), ("long_sessions", "30s")):
        policy = tmp_path / f"{target}.yaml"
        policy.write_text(yaml.safe_dump({"window": {"kind": "session", "gap": gap}}))
        assert main(["run", "--lake", targets["lake"], "--policy", str(policy), "--target", target]) == 0
    tables = {t: spark.read.format("delta").load(target_dir(targets["lake"], t).table("windows"))
              for t in ("short_sessions", "long_sessions")}
    sessions = {t: df.count() for t, df in tables.items()}
    job = Job.spec(Policy.from_dict({"window": {"kind": "session", "gap": "2s"}}))
    report = diff(spark, targets["lake"], job, "short_sessions", "long_sessions")
    w = report.windows
    both = w["compared"] - w["only_in_a"] - w["only_in_b"]
    assert sessions["short_sessions"] > sessions["long_sessions"]
    assert (w["only_in_a"] + both, w["only_in_b"] + both) == (sessions["short_sessions"], sessions["long_sessions"])
    flushed = tables["short_sessions"].where(F.col("emitted_at").isNull()).count()
    assert (report.delay["a"]["windows"], report.delay["a"]["flushed"]) == (sessions["short_sessions"] - flushed,
                                                                            flushed)
    assert report.delay["a"]["windows"] > 0 and report.delay["a"]["mean"] is not None
    assert diff(spark, targets["lake"], job, "short_sessions", "short_sessions").identical
