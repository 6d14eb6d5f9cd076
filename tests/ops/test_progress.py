import io
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
