"""How a live micro-batch's queries are planned. Structured Streaming hands each batch over in a session of its own
(a clone of the driver's), so the settings meant for a batch of few rows (`replay.io.spark.few_rows`) must be made
there. Its outputs do not depend on them: `tests/live/test_live_outputs.py` holds them equal to a replay."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from replay.io import spark as spark_io
from tests.support import ROOT

# A driver of its own, with a local driver's settings (adaptive plans, generated code) and room in Spark's record of
# its SQL executions for every query of the stream (the test session keeps only the last 20); it prints, for each
# query over a micro-batch's rows as the source handed them over (cached: `source, source_line, line`), whether
# its plan was adaptive.
DRIVER = """
import json, re, sys, tempfile
from replay.io.spark import get_spark
from replay.model.policy import Policy
from replay.ops.generate import StreamSpec, generate
from tests.support.live import stream_files

spark = get_spark("retrace-batch-plans", conf={"spark.sql.ui.retainedExecutions": "1000"})
landing, lake = tempfile.mkdtemp(), tempfile.mkdtemp()
generate(landing, StreamSpec(200, partitions=2, keys=5, files=2, seed=3))
policy = Policy.from_dict({"late_arrival_tolerance": "5s", "window": {"kind": "tumbling", "size": "10s"}})
stream_files(spark, landing, lake, policy, until_idle=True, partitions=2, clock="simulated", max_files_per_batch=1)
spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()  # the record is kept by a listener
executions = spark._jsparkSession.sharedState().statusStore().executionsList()
plans = [executions.apply(i).physicalPlanDescription() for i in range(executions.size())]
batch = re.compile(r"Output \\[3\\]: \\[source#\\d+, source_line#\\d+L, line#\\d+\\]")
print(json.dumps(["AdaptiveSparkPlan" in p for p in plans if "InMemoryRelation" in p and batch.search(p)]))
"""


def test_a_small_micro_batchs_own_queries_are_planned_without_adaptive_execution():
    env = {k: v for k, v in os.environ.items() if k != spark_io.SPARK_CONF}  # a local driver's own settings
    done = subprocess.run([sys.executable, "-c", DRIVER], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**env, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr[-3000:]
    adaptive = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(adaptive) >= 4, done.stdout  # two batches: each one's count, its reads, its journal append
    assert not any(adaptive), adaptive
