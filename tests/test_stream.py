"""The live job's micro-batches (spec: outputs are a pure function of the journal): whatever the batch
sizes, its outputs equal a replay of its own journal; a replay from a checkpoint gives the same suffix."""
from __future__ import annotations

import os

import pytest
from pyspark.sql import functions as F

from jobs.stream import LiveJob
from replay import journal, runner
from replay.generate import generate
from replay.hashing import target_hash
from replay.policy import Policy
from replay.store import default_store

POLICY = Policy.from_dict({
    "early_arrival_tolerance": "10s", "late_arrival_tolerance": "5s", "out_of_order_tolerance": "1s",
    "window": {"kind": "tumbling", "size": "10s"}, "allowed_lateness": "2s",
})


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("landing"))
    generate(out, 3000, partitions=4, keys=20, files=14, seed=7, rate=20.0)
    return out


def lines_of(spark, landing: str, files: list[str]):
    """A micro-batch as the landing source delivers it: (source, source_line, line) per line."""
    text = spark.read.text([os.path.join(landing, f) for f in files], wholetext=True)
    name = F.element_at(F.split(F.col("_metadata.file_path"), "/"), -1)
    exploded = text.select(name.alias("source"), F.posexplode(F.split("value", "\n")).alias("pos", "line"))
    return exploded.where(F.trim("line") != "").select(
        "source", (F.col("pos") + 1).cast("long").alias("source_line"), "line")


def run_live(spark, landing, lake, per_batch: int, policy=POLICY, clock="simulated") -> LiveJob:
    job = LiveJob(spark, lake, policy, clock=clock, partitions=4)
    files = journal.landing_files(landing)
    for i in range(0, len(files), per_batch):
        job.process(lines_of(spark, landing, files[i:i + per_batch]))
    return job


@pytest.mark.parametrize("per_batch", [1, 7, 14])
def test_live_outputs_equal_a_replay_of_the_live_journal(spark, landing, tmp_path, per_batch):
    lake = str(tmp_path / "lake")
    run_live(spark, landing, lake, per_batch)
    runner.run(spark, lake, POLICY, target="replayed")
    assert target_hash(spark, lake, "production") == target_hash(spark, lake, "replayed")


def test_every_landing_row_is_journaled_exactly_once(spark, landing, tmp_path):
    lake = str(tmp_path / "lake")
    run_live(spark, landing, lake, 5)
    rows = journal.read(spark, lake).where(F.col("source").isNotNull())
    lines = lines_of(spark, landing, journal.landing_files(landing))
    assert rows.count() == lines.count() == rows.select("source", "source_line").distinct().count()

