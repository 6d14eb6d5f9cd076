import io
import threading
import time

from replay.ops.progress import progress


def test_progress_reports_the_current_step_while_the_body_runs(spark):
    out = io.StringIO()
    with progress(spark, "replay", every=0.05, stream=out) as step:
        step("windows")
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith("[replay]") and "windows: " in line for line in lines)


def test_a_step_names_the_spark_jobs_it_runs_until_the_body_ends(spark):
    sc = spark.sparkContext
    with progress(spark, "replay", every=60) as step:
        step("dead_letters")
        assert sc.getLocalProperty("spark.job.description") == "replay: dead_letters"
    assert sc.getLocalProperty("spark.job.description") is None


def test_blocks_side_by_side_each_count_only_their_own_spark_jobs(spark):
    busy, idle = io.StringIO(), io.StringIO()

    def slow_job():
        with progress(spark, "replay busy", every=0.2, stream=busy) as step:
            step("decisions")
            spark.range(0, 2, 1, 2).mapInPandas(_sleeping, "id long").collect()

    worker = threading.Thread(target=slow_job)
    with progress(spark, "replay idle", every=0.2, stream=idle) as step:
        step("windows")
        worker.start()
        worker.join()
    assert any("stage " in line for line in busy.getvalue().splitlines())
    lines = idle.getvalue().splitlines()
    assert lines and all(line.endswith("windows: working") for line in lines)


def _sleeping(batches):
    for b in batches:
        time.sleep(1.5)
        yield b
