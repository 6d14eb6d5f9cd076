"""A lake is only ever a lake (issue 50, item 2): a landing that holds the lake, is the lake, or lies inside it is
refused in one line before anything is read or written, by ingest and by the live job alike."""
from __future__ import annotations

import os

import pytest

from replay.io.journal import ingest
from replay.model.policy import Policy
from replay.ops.generate import StreamSpec, generate
from tests.support.live import stream_files


def _landing(folder) -> str:
    generate(str(folder), StreamSpec(30, partitions=1, keys=3, files=1, seed=2))
    return str(folder)


@pytest.mark.parametrize("where", ["inside", "same", "around"])
def test_ingest_refuses_a_landing_holding_or_inside_its_lake_in_one_line(spark, tmp_path, where):
    landing = _landing(tmp_path / "landing")
    lake = {"inside": os.path.join(landing, "lake"), "same": landing, "around": str(tmp_path)}[where]
    with pytest.raises(ValueError) as refused:
        ingest(spark, landing, lake)
    message = str(refused.value)
    assert "\n" not in message and landing in message and "lake" in message, message
    assert not os.path.exists(os.path.join(landing, "lake", "journal"))
    assert not os.path.exists(os.path.join(str(tmp_path), "journal"))


def test_the_live_job_refuses_a_lake_inside_its_landing_in_one_line(spark, tmp_path):
    landing = _landing(tmp_path / "landing")
    lake = os.path.join(landing, "lake")
    with pytest.raises(ValueError) as refused:
        stream_files(spark, landing, lake, Policy.from_dict({"window": {"kind": "tumbling", "size": "10s"}}),
                     until_idle=True, clock="simulated", partitions=1)
    assert "\n" not in str(refused.value) and landing in str(refused.value)
    assert not os.path.exists(os.path.join(lake, "journal"))
