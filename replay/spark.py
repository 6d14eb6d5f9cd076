"""One place that builds the SparkSession, so local runs, tests and clusters agree on settings."""
from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

# Settings that make results independent of the wall clock and the machine's time zone.
DETERMINISM = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.ansi.enabled": "true",
    # Delta readers expect microsecond timestamps, not Spark's legacy INT96.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
}
LOCAL = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    # Input splits: enough tasks that every core stays busy to the end of a scan (a 10M-row landing
    # read as 5 tasks on 2 cores left one core idle for a third of the ingest).
    "spark.sql.files.minPartitionNum": "16",
    "spark.sql.adaptive.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "4g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
}


def get_spark(app_name: str = "retrace", conf: dict[str, str] | None = None) -> SparkSession:
    """The active session, or a new one: local[*] unless SPARK_MASTER / spark-submit says otherwise."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    master = os.environ.get("SPARK_MASTER")
    if master:
        builder = builder.master(master)
    elif not os.environ.get("SPARK_HOME_SUBMITTED"):
        builder = builder.master("local[*]")
        for k, v in LOCAL.items():
            builder = builder.config(k, v)
    # Python workers run the interpreter of the driver, so they see the same packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for k, v in {**DETERMINISM, **(conf or {})}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
