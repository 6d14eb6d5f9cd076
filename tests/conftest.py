"""One SparkSession per test process (start-up costs ~8 s), with few shuffle partitions and settings for small data
(tests/support/session_settings.py); `infra/test.sh` runs three."""
from __future__ import annotations

import gc
import os

import pytest

from replay.io.spark import EXTRA_JAVA_OPTIONS, SPARK_CONF
from tests.support.session_settings import SMALL_DATA_FILE

# The tests' subprocess drivers (live jobs, CLI and Dagster runs) live for a minute or two on small data: C1 only
# (the C2 compiler took about a third of a short live run's JVM CPU on 2 cores) and the serial collector.
os.environ.setdefault(EXTRA_JAVA_OPTIONS, "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
# Every driver of the run, this session and those the tests start, has the settings for small data (not, say, a
# cluster's file from the developer's shell).
os.environ[SPARK_CONF] = SMALL_DATA_FILE


@pytest.fixture(scope="session")
def spark():
    from replay.io.spark import _driver_java_options, get_spark

    # the status store keeps every SQL execution's plan (1000 by default) even with the UI off: over the
    # ~300 tests the driver's heap filled (93% old generation late in a full run); keep few.
    # Delta keeps every table's log, snapshot and cached state for 60 minutes (10,000 tables): a job touches a
    # few tables, but this session touches thousands, one set per test, and their cached states filled the
    # driver's heap ~50 minutes in ("Not enough memory to build and broadcast the table"); keep the latest 100.
    # This JVM runs thousands of queries over the whole run, so it keeps the default JIT (C2 pays back).
    # Its small-data settings and 2 shuffle partitions come from RETRACE_SPARK_CONF (tests/support/small_data.conf).
    session = get_spark("retrace-tests", conf={"spark.driver.extraJavaOptions": _driver_java_options(extra=""),
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


# `infra/test.sh` runs the suite on three pytest-xdist workers. A group of tests runs on one worker: a file (its
# module fixtures start once), or the files that share a session fixture (it starts once). Test file names are
# unique across the folders, so a file's name is its group.
SHARED_SESSION_FIXTURES = {"test_backfill_webserver.py": "dagster_stack", "test_ui.py": "dagster_stack",
                           "quality": "quality"}  # tests/quality/*: the clean and late replays
# Groups known to take minutes go first (longest first), so no worker is left alone with one at the end.
LONG_FIRST = ["test_live_crashes.py", "dagster_stack", "test_live_outputs.py", "quality", "test_live_fan_out.py",
              "test_replay_continues_from_state.py", "test_live_time.py", "test_kafka_live.py", "test_locks.py",
              "test_engine_matches_model.py", "test_replay_command.py", "test_standalone_cluster.py",
              "test_verify.py", "test_landing_sources.py", "test_s3_lake.py", "test_advise.py"]


def group_of(nodeid: str) -> str:
    """The group of a test, from its node id (tests/quality/test_x.py::test_y -> quality,
    tests/live/test_live_time.py::test_y -> test_live_time.py)."""
    parts = nodeid.split("::", 1)[0].split("/")
    return SHARED_SESSION_FIXTURES.get(parts[-2] if len(parts) > 1 else "",
                                       SHARED_SESSION_FIXTURES.get(parts[-1], parts[-1]))


def pytest_collection_modifyitems(config, items):
    rank = {group: n for n, group in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))  # stable: files keep their order


@pytest.hookimpl(tryfirst=True)  # before xdist's own choice from --dist
def pytest_xdist_make_scheduler(config, log):
    """Whole groups to a worker, in collection order (xdist's loadgroup marks do not work with pytest 9.2)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False  # keep LONG_FIRST, not the groups with most tests first
    return GroupScheduling(config, log)
