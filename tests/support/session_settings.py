"""The test session's settings for small data, and the production settings they stand in for."""
from __future__ import annotations

import os

from pyspark.sql import SparkSession

from replay.io.spark import FEW_ROWS_SETTINGS, LOCAL, session_settings, spark_conf

# The session's tests run thousands of queries over a few rows each. Per query, compiling generated code (Janino),
# adaptive re-planning and Delta's log replay in two tasks cost more than the rows: the session evaluates row by
# row (as a live batch of few rows does, replay.io.spark.few_rows), plans once and replays a log in one task.
# A 38-test subset took 445 s instead of 563 s (README, Tests). test_determinism checks the hash is the same with
# PRODUCTION. The drivers the tests start run with the same file (RETRACE_SPARK_CONF, tests/conftest.py).
SMALL_DATA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "small_data.conf")
SETTINGS = spark_conf(SMALL_DATA_FILE)
assert FEW_ROWS_SETTINGS.items() <= SETTINGS.items(), "row by row and planned once, as few_rows runs a small live batch"
# What a local driver runs with (replay.io.spark.LOCAL, and Spark's defaults for generated code).
PRODUCTION = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK",
              "spark.sql.adaptive.enabled": LOCAL["spark.sql.adaptive.enabled"],
              "spark.databricks.delta.snapshotPartitions": LOCAL["spark.databricks.delta.snapshotPartitions"]}
SMALL_DATA = {k: SETTINGS[k] for k in PRODUCTION}  # the settings production_settings() switches back


def production_settings(spark: SparkSession):
    """The block runs with generated code, adaptive plans and Delta's log replay as a local driver has them."""
    return session_settings(spark, PRODUCTION)
