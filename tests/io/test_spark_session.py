"""How the project's SparkSession runs: a local driver maps the JVM class archive that set-up recorded
(infra/class_archive.py) and the settings of RETRACE_SPARK_CONF; a live batch of few rows is evaluated without
generated code."""
from __future__ import annotations

import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F

from replay.io import spark as spark_io
from replay.io.store import default_store
from tests.support import ROOT
from tests.support.session_settings import production_settings

# -Xshare:on: the JVM refuses to start unless it maps the archive (same JVM, same class path, same jars)
DRIVER = """
from replay.io.spark import _driver_java_options, get_spark
spark = get_spark("retrace-archive-test",
                  conf={"spark.driver.extraJavaOptions": _driver_java_options() + " -Xshare:on"})
print("rows", spark.range(3).count())
"""


def test_a_local_driver_starts_from_the_class_archive_setup_recorded():
    assert os.path.isfile(spark_io.CLASS_ARCHIVE), f"no class archive at {spark_io.CLASS_ARCHIVE}: run infra/test.sh"
    done = subprocess.run([sys.executable, "-c", DRIVER], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0 and "rows 3" in done.stdout, done.stderr[-3000:]


def test_without_the_archive_a_driver_still_starts(tmp_path):
    """A stale or missing archive costs start-up time, never a failed start."""
    stale = tmp_path / "classes.jsa"
    stale.write_bytes(b"not an archive")
    done = subprocess.run([sys.executable, "-c", DRIVER.replace(' + " -Xshare:on"', "")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT, "RETRACE_CLASS_ARCHIVE": str(stale)})
    assert done.returncode == 0 and "rows 3" in done.stdout, done.stderr[-3000:]


def test_retrace_java_options_reach_a_local_driver():
    """RETRACE_JAVA_OPTIONS (the tests' JIT and collector settings) is added to a local driver's JVM options."""
    probe = DRIVER.replace(' + " -Xshare:on"', "").replace(
        'print("rows", spark.range(3).count())',
        'print("probe", spark.sparkContext._jvm.java.lang.System.getProperty("retrace.probe"))\n'
        'runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()\n'
        'print("args", list(runtime.getInputArguments()))')
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT,
                               spark_io.EXTRA_JAVA_OPTIONS: "-Dretrace.probe=seen -XX:TieredStopAtLevel=1"})
    assert done.returncode == 0 and "probe seen" in done.stdout, done.stderr[-3000:]
    assert "-XX:TieredStopAtLevel=1" in done.stdout and "-Duser.timezone=UTC" in done.stdout, done.stdout


def test_retrace_spark_conf_sets_a_local_drivers_settings_over_its_defaults(tmp_path):
    """RETRACE_SPARK_CONF (a cluster's file, or the tests' tests/support/small_data.conf) reaches every driver."""
    conf = tmp_path / "spark.conf"
    conf.write_text("# shuffles\nspark.sql.shuffle.partitions   3\nspark.sql.adaptive.enabled false\n")
    probe = DRIVER.replace(' + " -Xshare:on"', "").replace(
        'print("rows", spark.range(3).count())',
        'print("conf", spark.conf.get("spark.sql.shuffle.partitions"), spark.conf.get("spark.sql.adaptive.enabled"))')
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT, spark_io.SPARK_CONF: str(conf)})
    assert done.returncode == 0 and "conf 3 false" in done.stdout, done.stderr[-3000:]


def test_a_spark_conf_file_cannot_change_a_setting_results_depend_on(tmp_path):
    conf = tmp_path / "spark.conf"
    conf.write_text("spark.sql.shuffle.partitions 3\nspark.sql.session.timeZone Europe/Paris\n")
    with pytest.raises(ValueError, match=f"{conf}:2: spark.sql.session.timeZone cannot be changed"):
        spark_io.spark_conf(str(conf))


def test_a_spark_conf_file_names_the_line_that_is_not_key_value(tmp_path):
    conf = tmp_path / "spark.conf"
    conf.write_text("spark.sql.shuffle.partitions 3\nspark.sql.adaptive.enabled\n")
    with pytest.raises(ValueError, match=f"{conf}:2: 'spark.sql.adaptive.enabled' is not 'key value'"):
        spark_io.spark_conf(str(conf))


def _ranked(spark, k: int) -> list:
    """A shuffle, a window function and an aggregate (the kinds of operators the engine uses); `k` makes the
    generated code new, so Spark's cache of compiled code cannot answer for it."""
    df = spark.range(200).select((F.col("id") % k).alias("k"), (F.col("id") + k).alias("v"))
    ranked = df.select("k", "v", (F.max("v").over(Window.partitionBy("k").orderBy("v")) * k).alias("m"))
    return (ranked.groupBy("k").agg((F.sum("m") - k).alias("s"), F.count("*").alias("n"))
            .where(F.col("k") < k + 1).orderBy("k").collect())


def _compiling(spark, k: int) -> tuple[list, int]:
    """The rows of _ranked and how many classes Spark compiled (Janino) to compute them."""
    compiled = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    before = compiled.getCount()
    rows = _ranked(spark, k)
    return rows, compiled.getCount() - before


def test_a_few_rows_are_evaluated_without_compiling_code_with_the_same_result(spark):
    with production_settings(spark):  # the test session itself runs without generated code
        _ranked(spark, 5)  # what every query needs (reading rows back to Python) is compiled once, here
        with spark_io.few_rows(spark, 1_000):
            assert spark.conf.get("spark.sql.codegen.factoryMode") == "NO_CODEGEN"
            interpreted, compiles = _compiling(spark, 7)
        generated, compiles_outside = _compiling(spark, 7)
    assert interpreted == generated
    assert compiles <= 1 < 4 <= compiles_outside, (compiles, compiles_outside)


def test_a_few_rows_are_planned_once_not_stage_by_stage(spark):
    """Adaptive execution re-plans a query at each shuffle and runs every stage as a job of its own."""
    grouped = lambda: spark.range(100).groupBy((F.col("id") % 7).alias("k")).count()  # noqa: E731
    with production_settings(spark):
        with spark_io.few_rows(spark, 1_000):
            planned_once = grouped()._jdf.queryExecution().executedPlan().nodeName()
        adaptive = grouped()._jdf.queryExecution().executedPlan().nodeName()
    assert (planned_once, adaptive) == ("HashAggregate", "AdaptiveSparkPlan")


def test_after_a_few_rows_the_session_settings_come_back(spark):
    with production_settings(spark):
        before = {k: spark.conf.get(k, None) for k in spark_io.FEW_ROWS_SETTINGS}
        try:
            with spark_io.few_rows(spark, 1_000):
                raise RuntimeError("a failed step")
        except RuntimeError:
            pass
        assert {k: spark.conf.get(k, None) for k in spark_io.FEW_ROWS_SETTINGS} == before
        assert _compiling(spark, 11)[1] >= 4


def test_many_rows_keep_generated_code(spark):
    with production_settings(spark), spark_io.few_rows(spark, spark_io.FEW_ROWS + 1):
        assert _compiling(spark, 13)[1] >= 4


def test_the_columns_distinct_in_retraces_tables_are_written_without_a_parquet_dictionary(spark, tmp_path):
    """Parquet would keep a dictionary for a watermark column while its values repeat, then give it up; kind,
    with few values, keeps one."""
    rows = spark.range(100).select((F.col("id") % 10).alias("watermark"),
                                   F.when(F.col("id") % 2 == 0, "event").otherwise("clock").alias("kind"))
    default_store().write(rows.coalesce(1), str(tmp_path / "t"), mode="overwrite", metadata={})
    (part,) = [f for f in (tmp_path / "t").iterdir() if f.suffix == ".parquet"]
    chunks = pq.ParquetFile(part).metadata.row_group(0)
    dictionary = {chunks.column(i).path_in_schema: chunks.column(i).has_dictionary_page for i in range(2)}
    assert dictionary == {"watermark": False, "kind": True}


def test_rows_made_on_the_driver_come_back_as_given_in_one_partition_without_an_rdd(spark):
    rows = [(1, 'a "quoted" é', None, 2**62, True, 1.5), (2, None, -3, -(2**62), False, None)]
    schema = "a long, s string, i int, big long, b boolean, d double"
    made = spark_io.driver_rows(spark, rows, schema)
    assert [tuple(r) for r in made.collect()] == rows
    assert made.schema.simpleString() == "struct<a:bigint,s:string,i:int,big:bigint,b:boolean,d:double>"
    assert made.rdd.getNumPartitions() == 1
    assert "ExistingRDD" not in made._jdf.queryExecution().executedPlan().toString()


def test_no_rows_made_on_the_driver_are_an_empty_frame_of_their_schema(spark):
    made = spark_io.driver_rows(spark, [], "a long, s string")
    assert made.collect() == []
    assert made.schema.simpleString() == "struct<a:bigint,s:string>"


def test_a_driver_row_of_another_type_than_its_schema_is_an_error_not_a_null(spark):
    with pytest.raises(Exception, match="MALFORMED_RECORD"):
        spark_io.driver_rows(spark, [("seven",)], "n long").collect()


def test_the_driver_builds_plans_without_capturing_each_calls_python_line(spark):
    """PySpark would walk the stack and make five JVM round trips for every DataFrame and Column call."""
    from pyspark.errors.utils import is_debugging_enabled

    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    assert not is_debugging_enabled()
