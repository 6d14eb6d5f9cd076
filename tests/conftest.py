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


# `infra/test.sh` runs the suite on two pytest-xdist workers (`--dist loadgroup`): a file is one group, so its
# module fixtures start once; files that share a session fixture are one group, so it starts once.
SHARED_SESSION_FIXTURES = {"test_backfill_webserver.py": "dagster_stack", "test_ui.py": "dagster_stack"}
# Groups known to take minutes go first (longest first), so no worker is left alone with one at the end.
LONG_FIRST = ["test_stream_crashes.py", "dagster_stack", "test_stream.py", "quality", "test_live_jobs.py",
              "test_incremental.py", "test_live_time.py", "test_kafka_stream.py", "test_locks.py",
              "test_engine_matches_model.py", "test_cli.py", "test_cluster.py", "test_verify.py",
              "test_landing.py", "test_advise.py"]


def _group_of(item) -> str:
    """The xdist group of a test: its file, or the name of the session fixture it shares with other files."""
    path = item.path
    if path.parent.name == "quality":  # the clean and late replays are session fixtures of tests/quality
        return "quality"
    return SHARED_SESSION_FIXTURES.get(path.name, path.name)


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group_of(item)))
    rank = {group: n for n, group in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(_group_of(item), len(rank)))  # stable: files keep their order


from tests.dagster_fixtures import dagster_stack, range_backfill  # noqa: E402,F401  (webserver tests share them)
