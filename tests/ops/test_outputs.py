"""A target's output tables are read through one module (`replay.ops.outputs`): a table the target lacks is refused
naming the target, the job, the table and the command that makes it."""
from __future__ import annotations

import pytest

from replay.io.lake import Lake
from replay.ops import outputs


@pytest.mark.parametrize("job, how", [("default", "--policy POLICY_FILE"), ("region_alarms", "--job region_alarms")])
def test_a_missing_table_is_named_with_the_command_that_makes_it(spark, lake, job, how):
    where = Lake(lake).target(job, "whatif")
    with pytest.raises(FileNotFoundError) as refused:
        outputs.require(where, ["windows", "decisions"])
    message = str(refused.value)
    assert f"target 'whatif' of job '{job}' has no windows table at {where.table('windows')}" in message
    assert f"`replay run --target whatif --lake {where.lake} {how}`" in message
