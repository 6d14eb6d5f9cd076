"""One SparkSession for the whole test session (start-up costs ~8 s), with few shuffle partitions."""
from __future__ import annotations

import gc

import pytest


@pytest.fixture(scope="session")
def spark():
    from replay.io.spark import get_spark

    # the status store keeps every SQL execution's plan (1000 by default) even with the UI off: over the
    # ~300 tests the driver's heap filled (93% old generation late in a full run); keep few.
    # Delta keeps every table's log, snapshot and cached state for 60 minutes (10,000 tables): a job touches a
    # few tables, but this session touches thousands, one set per test, and their cached states filled the
    # driver's heap ~50 minutes in ("Not enough memory to build and broadcast the table"); keep the latest 100
    session = get_spark("retrace-tests", conf={"spark.sql.shuffle.partitions": "2",
                                                "spark.default.parallelism": "2",
                                                "spark.sql.ui.retainedExecutions": "20",
                                                "spark.ui.retainedJobs": "50", "spark.ui.retainedStages": "50",
                                                "spark.databricks.delta.delta.log.cacheSize": "100"})
    yield session
    session.stop()


@pytest.fixture(scope="module", autouse=True)
def _release_java_objects():
    """After each test module, a full Python collection: py4j's JavaObjects sit in reference cycles, so the
    module's DataFrames, plans and broadcasts stay on the driver's heap until one runs (it seldom does)."""
    yield
    gc.collect()


@pytest.fixture
def lake(tmp_path):
    return str(tmp_path / "lake")


from tests.dagster_fixtures import dagster_stack, range_backfill  # noqa: E402,F401  (webserver tests share them)
