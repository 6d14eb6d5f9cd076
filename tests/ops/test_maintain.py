"""Table maintenance (`replay maintain`): small files compacted, the target's hash unchanged, old checkpoints
pruned to the last N, and vacuum keeps time travel working within the retention."""
from __future__ import annotations

import json
import os

import pytest
from pyspark.sql import functions as F

from replay.io import checkpoints, lake_marker
from replay.io.store import default_store
from replay.ops.hashing import target_hash
from replay.ops.maintain import maintain
from tests.support import target_dir
from tests.support.lakes import replayed_lake


@pytest.fixture(scope="module")
def fragmented(spark, tmp_path_factory):
    """A replayed target whose decisions table (its exceptions) was rewritten as a file per few rows, up to 200."""
    lake = replayed_lake(spark, tmp_path_factory.mktemp("maintenance"), seed=6)
    store, path = default_store(), target_dir(lake, "production").table("decisions")
    stored = store.read(spark, path)
    files = min(200, stored.count())
    store.write(stored.repartitionByRange(files, "seq"), path, mode="overwrite")
    return lake


def test_maintenance_compacts_small_files_keeps_the_hash_and_time_travel(spark, fragmented):
    lake = fragmented
    path = target_dir(lake, "production").table("decisions")
    before_hash, version = target_hash(spark, target_dir(lake)), default_store().version(path)
    rows = spark.read.format("delta").load(path).count()
    files = min(200, rows)  # as the fixture wrote them

    report = maintain(spark, lake, retention="7d")

    decisions = next(t for t in report.tables if t.table == "jobs/default/outputs/production/decisions")
    assert files >= 10 and decisions.files_before == files and decisions.files_after <= 4, decisions
    assert decisions.version_after > decisions.version_before
    assert {"journal", "jobs/default/outputs/production/windows", "jobs/default/outputs/production/metrics"} <= {
        t.table for t in report.tables}
    assert target_hash(spark, target_dir(lake)) == before_hash
    # the 200 files are unreferenced now, but younger than the retention: version `version` still reads
    assert spark.read.format("delta").option("versionAsOf", version).load(path).count() == rows


def test_maintenance_keeps_the_last_checkpoints_of_a_target(spark, tmp_path):
    from replay.io.checkpoints import Checkpoint
    from replay.model.state import State

    lake = str(tmp_path / "lake")
    live = target_dir(lake, "live")
    for batch in range(5):
        checkpoints.save(spark, live, Checkpoint(batch, State(seq=10 * batch), {}, "{}"))
    maintain(spark, lake, keep_checkpoints=2)
    kept = spark.read.format("delta").load(live.table("checkpoints"))
    assert sorted(r["batch"] for r in kept.select("batch").distinct().collect()) == [3, 4]
    assert checkpoints.load(spark, live).batch == 4
    assert checkpoints.load(spark, live, before_seq=25) is None  # batch 2 (seq 20) was pruned
    assert kept.where(F.col("batch") < 3).count() == 0


def test_maintenance_leaves_the_users_files_and_tables_beside_retraces(spark, tmp_path):
    from replay.io.checkpoints import Checkpoint
    from replay.model.state import State

    lake = str(tmp_path / "lake")
    live = target_dir(lake, "live")
    checkpoints.save(spark, live, Checkpoint(0, State(seq=0), {}, "{}"))
    lake_marker.claim(lake)
    theirs = [os.path.join(live.folder, "mine"), os.path.join(lake, "jobs", "default", "mine"),
              os.path.join(lake, "mine")]
    for path in theirs:  # a Delta table of the user's, overwritten once: its first files are unreferenced
        spark.range(3).write.format("delta").save(path)
        spark.range(2).write.format("delta").mode("overwrite").save(path)
    with open(os.path.join(live.folder, "notes.txt"), "w") as f:
        f.write("mine")
    files = lambda: sorted(os.path.join(d, n) for p in theirs for d, _, ns in os.walk(p) for n in ns)  # noqa: E731
    before = files()

    report = maintain(spark, lake, retention="0h")

    assert files() == before
    assert open(os.path.join(live.folder, "notes.txt")).read() == "mine"
    assert {t.table for t in report.tables} == {"jobs/default/outputs/live/checkpoints"}  # one batch: no windows


def test_the_dagster_maintenance_job_records_what_it_did(spark, fragmented):
    import dagster as dg

    from orchestration.maintenance import maintenance_job
    from orchestration.resources import RetraceResource

    result = maintenance_job.execute_in_process(resources={"retrace": RetraceResource(lake=fragmented)})
    assert result.success
    output = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_OUTPUT)
    metadata = output.event_specific_data.metadata
    # journal, journal_files (the landing-file manifest) and the target's five output tables
    assert metadata["tables"].value == 7 and metadata["retention"].value == "7d"
    assert {"files_before", "files_after", "bytes_before", "bytes_after", "files_vacuumed", "tables_detail",
            "report"} <= set(metadata)


def test_maintain_takes_a_lake_path_relative_to_the_working_folder(spark, fragmented, monkeypatch, capsys):
    """Spark SQL's `OPTIMIZE delta.`path`` names no table by a relative path: the command makes it absolute."""
    from replay.cli import main as cli

    monkeypatch.chdir(os.path.dirname(fragmented))
    assert cli.main(["maintain", "--lake", os.path.basename(fragmented)]) == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert "jobs/default/outputs/production/decisions" in {t["table"] for t in report["tables"]}


def test_maintenance_keeps_the_open_windows_the_last_checkpoints_build_on(spark, tmp_path):
    from replay.io.checkpoints import Checkpoint
    from replay.model.state import State

    lake = str(tmp_path / "lake")
    live = target_dir(lake, "live")
    members = lambda k: spark.createDataFrame([(0, k)], "scope int, k long")  # noqa: E731
    cp = Checkpoint(-1, State())
    for batch in range(5):  # batch 0 saves its open windows whole, the others add their batch's member
        state = State(seq=10 * batch, windows=members(batch), windows_added=members(batch))
        cp = Checkpoint(batch, state, {}, "{}", checkpoints.windows_from(cp, batch, state))
        checkpoints.save(spark, live, cp)
        cp = checkpoints.load(spark, live)
    maintain(spark, lake, keep_checkpoints=2)
    assert checkpoints.load(spark, live, before_seq=25) is None  # batch 2's checkpoint was pruned
    resumed = checkpoints.load(spark, live)
    assert resumed.batch == 4 and sorted(r["k"] for r in resumed.state.windows.collect()) == [0, 1, 2, 3, 4]
