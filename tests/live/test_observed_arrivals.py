"""The live job records arrivals itself (issue 47, item 1): with `arrival_time: observed` (and `partition: file`,
`offset: line`) plain landing files are journaled with the processing time of the batch that journaled them."""
from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone

from jobs.live import run_stream
from jobs.live.options import FileSource, LiveOptions
from replay.io import journal
from replay.io.journal import SourceFields
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.model.sources import parse
from replay.ops.hashing import target_hash
from replay.ops.run import run
from tests.support import target_dir

POLICY = Policy.from_dict({"window": {"kind": "tumbling", "size": "1s"}})
OBSERVED = SourceFields(origins=parse({"arrival_time": "observed", "partition": "file", "offset": "line"}, "t")[0])


def test_observed_arrivals_increase_lie_between_landing_and_commit_and_replay_to_the_live_outputs(spark, tmp_path):
    landing, lake = tmp_path / "landing", str(tmp_path / "lake")
    now = datetime.now(timezone.utc)
    landed = {}
    for i in range(3):
        path = landing / f"partition={i % 2}" / f"{i:02d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"event_time": (now + timedelta(milliseconds=100 * (3 * i + j))).isoformat(),
                                            "key": f"k{j}", "value": j}) + "\n" for j in range(3)))
        landed[f"partition={i % 2}/{i:02d}.jsonl"] = os.stat(path).st_mtime_ns // 1000
    run_stream(spark, FileSource(str(landing), max_files_per_batch=1), lake, (Job.spec(POLICY),),
               LiveOptions(until_idle=True, partitions=2), OBSERVED)
    done = time.time_ns() // 1000
    rows = [r.asDict() for r in journal.read(spark, lake).where("kind = 'event'").orderBy("seq").collect()]
    assert [(r["source"], r["partition"], r["offset"]) for r in rows] == [  # files in path order
        (name, p, first + j) for name, p, first in [("partition=0/00.jsonl", 0, 0), ("partition=0/02.jsonl", 0, 3),
                                                    ("partition=1/01.jsonl", 1, 0)] for j in range(3)]
    arrivals = [(r["source"], int(r["arrival_time"].replace(tzinfo=timezone.utc).timestamp() * 1e6)) for r in rows]
    per_file = {s: {a for f, a in arrivals if f == s} for s, _ in arrivals}
    assert all(len(a) == 1 for a in per_file.values())  # one batch, one processing time
    times = [next(iter(per_file[s])) for s in sorted(per_file)]
    assert times == sorted(times) and len(set(times)) == 3  # a batch per file, each later
    assert all(landed[s] <= next(iter(per_file[s])) <= done for s in per_file)
    run(spark, lake, Job.spec(POLICY), target="replayed")
    assert target_hash(spark, target_dir(lake, "production")) == target_hash(spark, target_dir(lake, "replayed"))
