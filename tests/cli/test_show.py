"""`replay show`: a target's windows, decisions or dead letters as a user reads them, chosen by time range and key,
as a table or JSON lines; the rows are the table's own, first ones first."""
from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from replay.cli import main as cli
from replay.model.durations import format_instant
from replay.ops import outputs
from tests.support import target_dir
from tests.support.lakes import replayed_lake


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    return replayed_lake(spark, tmp_path_factory.mktemp("show"), seed=8)


def _show(capsys, lake, *args) -> tuple[int, str, str]:
    code = cli.main(["show", "--lake", lake, *args])
    out, err = capsys.readouterr()
    return code, out, err


def _json_rows(capsys, lake, *args) -> list[dict]:
    code, out, err = _show(capsys, lake, "--json", *args)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def _table(spark, lake, name):
    return outputs.read(spark, target_dir(lake, "production"), name)


def test_windows_of_a_key_are_its_first_windows_by_start(spark, capsys, lake):
    key = _table(spark, lake, "windows").where(F.col("key").isNotNull()).orderBy("key").first()["key"]
    rows = _json_rows(capsys, lake, "--key", key, "--limit", "3")
    expected = (_table(spark, lake, "windows").where(F.col("key") == key).orderBy("window_start")
                .select(F.unix_micros("window_start").alias("us")).limit(3).collect())
    assert [r["window_start"] for r in rows] == [format_instant(r["us"]) for r in expected]
    assert {r["key"] for r in rows} == {key}


def test_decisions_are_those_arriving_in_the_range_in_seq_order(spark, capsys, lake):
    decisions = (_table(spark, lake, "decisions").select("seq", F.unix_micros("arrival_time").alias("us"))
                 .orderBy("seq").collect())
    start, end = decisions[10]["us"], decisions[-10]["us"]
    rows = _json_rows(capsys, lake, "--table", "decisions", "--from", format_instant(start), "--to",
                      format_instant(end), "--limit", "100000")
    expected = [d["seq"] for d in decisions if start <= d["us"] < end]
    assert [r["seq"] for r in rows] == expected and expected


def test_the_table_says_how_many_rows_matched_beyond_the_limit(spark, capsys, lake):
    code, out, err = _show(capsys, lake, "--table", "decisions", "--limit", "5")
    assert code == 0, err
    lines = out.splitlines()
    total = _table(spark, lake, "decisions").count()
    assert lines[0].split()[:3] == ["seq", "partition", "offset"]
    assert len(lines) == 2 + 5 + 1
    assert lines[-1] == f"5 of {total} rows (--limit to see more)"


def test_a_target_never_replayed_is_one_line_naming_its_table(capsys, lake):
    code, out, err = _show(capsys, lake, "--target", "whatif")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [err.strip()]
    assert "target 'whatif' of job 'default' has no windows table" in err and "replay run --target whatif" in err


def test_a_range_that_ends_before_it_starts_is_refused_before_spark_reads_anything(capsys, lake):
    code, _, err = _show(capsys, lake, "--from", "2024-01-02T00:00:00Z", "--to", "2024-01-01T00:00:00Z")
    assert code == 2 and "--from 2024-01-02T00:00:00Z must be before --to 2024-01-01T00:00:00Z" in err
