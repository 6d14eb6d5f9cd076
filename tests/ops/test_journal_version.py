"""A run reads one version of the journal (issue 50, item 11): the version it started from, or the one it is
pinned to, whatever is ingested meanwhile; every commit of its outputs records that version.

One small landing (300 events in 2 files): the first file journaled (version 0) and replayed into `before`, then
the second journaled (version 1)."""
from __future__ import annotations

import os
import shutil

import pytest
from pyspark.sql import functions as F

from replay.io import journal
from replay.io.lake import OUTPUT_TABLES
from replay.io.store import commit_metadata
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.generate import StreamSpec, generate
from replay.ops.hashing import target_hash
from replay.ops.run import run
from tests.support import POLICY_FILE, target_dir
from replay.ops import outputs


@pytest.fixture(scope="module")
def versions(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("journal_version")
    generated, landing, lake = root / "generated", root / "landing", str(root / "lake")
    generate(str(generated), StreamSpec(300, partitions=2, keys=10, files=2, seed=5, rate=0.3))
    first, second = sorted(os.listdir(generated))
    os.makedirs(landing)
    shutil.copy(generated / first, landing / first)
    v0 = journal.ingest(spark, str(landing), lake).version
    job = Job.spec(Policy.from_yaml(POLICY_FILE))
    before = run(spark, lake, job, target="before")
    shutil.copy(generated / second, landing / second)
    v1 = journal.ingest(spark, str(landing), lake).version
    assert v1 > v0
    return {"lake": lake, "job": job, "v0": v0, "v1": v1, "before": before}


def _recorded(spark, lake, target):
    return {name: commit_metadata(spark, target_dir(lake, target).table(name))["journal_version"]
            for name in OUTPUT_TABLES}


def test_every_commit_of_a_run_records_the_journal_version_it_read(spark, versions):
    lake, v0 = versions["lake"], versions["v0"]
    assert versions["before"].journal_version == v0
    assert _recorded(spark, lake, "before") == {name: v0 for name in OUTPUT_TABLES}
    decided = outputs.read(spark, target_dir(lake, "before"), "decisions").agg(F.max("seq")).first()[0]
    assert decided == journal.read(spark, lake, version=v0).agg(F.max("seq")).first()[0]


def test_a_run_pinned_to_an_earlier_journal_version_replays_that_version(spark, versions):
    lake, v0 = versions["lake"], versions["v0"]
    summary = run(spark, lake, versions["job"], target="pinned", journal_version=v0)
    assert summary.journal_version == v0 and _recorded(spark, lake, "pinned") == {name: v0 for name in OUTPUT_TABLES}
    assert target_hash(spark, target_dir(lake, "pinned")) == target_hash(spark, target_dir(lake, "before"))
    assert journal.read(spark, lake).count() > journal.read(spark, lake, version=v0).count()  # v1 adds rows


def test_a_journal_version_the_journal_does_not_have_is_refused_in_one_line(spark, versions):
    lake, v1 = versions["lake"], versions["v1"]
    with pytest.raises(ValueError) as refused:
        run(spark, lake, versions["job"], target="future", journal_version=v1 + 1)
    assert str(refused.value) == f"journal version {v1 + 1}: the journal at {lake}/journal has versions 0 to {v1}"
    assert not os.path.exists(target_dir(lake, "future").lock)  # refused before anything is made
