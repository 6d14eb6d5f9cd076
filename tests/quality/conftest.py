"""Streams replayed once per test session through the test code location (real Dagster instance, real
Spark and Delta), and local alert receivers."""
from __future__ import annotations

from dataclasses import dataclass

import dagster as dg
import pytest

from orchestration.resources import EmailAlertSink, LogFileAlertSink, RetraceResource, WebhookAlertSink
from tests.support.quality_location import POLICY_FILE, clean_landing, late_landing, materialize
from tests.support.receivers import HttpReceiver, SmtpReceiver


@dataclass
class Stream:
    lake: str
    retrace: RetraceResource
    instance: dg.DagsterInstance
    result: dg.ExecuteInProcessResult
    summary: dict

    def evaluations(self) -> dict:
        return {e.check_name: e for e in self.result.get_asset_check_evaluations()}


def _replayed(spark, tmp_path_factory, name: str, landing_of):
    """A stream replayed and checked in one run on a SQLite Dagster instance (what DAGSTER_HOME gives)."""
    root = tmp_path_factory.mktemp(name)
    landing, lake = str(root / "landing"), str(root / "lake")
    summary = landing_of(landing)
    retrace = RetraceResource(lake=lake, landing=landing, policy_file=POLICY_FILE)
    with dg.instance_for_test() as instance:
        result = materialize(retrace, instance)
        assert result.success, "the replay run itself must succeed; only checks may fail"
        yield Stream(lake, retrace, instance, result, summary)


@pytest.fixture(scope="session")
def clean(spark, tmp_path_factory):
    """The generated stream (about 3% late events), ingested, replayed and checked in one run."""
    yield from _replayed(spark, tmp_path_factory, "quality-clean", clean_landing)


@pytest.fixture(scope="session")
def late(spark, tmp_path_factory):
    """The same stream with 80% of its events 2 to 8 minutes late."""
    yield from _replayed(spark, tmp_path_factory, "quality-late", late_landing)


@pytest.fixture
def http_receiver():
    receiver = HttpReceiver()
    yield receiver
    receiver.close()


@pytest.fixture
def smtp_receiver():
    receiver = SmtpReceiver()
    yield receiver
    receiver.close()


@pytest.fixture
def sinks(http_receiver, tmp_path) -> dict:
    """The webhook sink pointed at the local HTTP receiver and a log file; email off."""
    return {"alert_webhook": WebhookAlertSink(url=http_receiver.url), "alert_email": EmailAlertSink(),
            "alert_log": LogFileAlertSink(path=str(tmp_path / "alerts.jsonl"))}
