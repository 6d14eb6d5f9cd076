"""One SparkSession for the whole test session (start-up costs ~8 s), with few shuffle partitions."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from replay.spark import get_spark

    session = get_spark("retrace-tests", conf={"spark.sql.shuffle.partitions": "2",
                                                "spark.default.parallelism": "2"})
    yield session
    session.stop()


@pytest.fixture
def lake(tmp_path):
    return str(tmp_path / "lake")


from tests.dagster_fixtures import dagster_stack, range_backfill  # noqa: E402,F401  (webserver tests share them)
