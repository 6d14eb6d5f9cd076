"""(partition, offset) is the broker's identity of an event: a repeat is journaled, then quarantined as
`duplicate` (the first copy in seq order wins); offsets going backwards are reported and counted."""
from __future__ import annotations

import json
import os

from pyspark.sql import functions as F

from replay.io import journal
from replay.io.journal import ingest
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.run import run
from replay.ops.verify import journal_violations
from replay.ops import outputs
from tests.support import target_dir

POLICY = Policy.from_dict({"window": {"kind": "tumbling", "size": "1m"}, "late_arrival_tolerance": "1h"})


def _event(partition: int, offset: int, second: int, value: float) -> str:
    t = f"2024-01-01T00:00:{second:02d}Z"
    return json.dumps({"partition": partition, "offset": offset, "arrival_time": t, "event_time": t,
                       "key": "k", "value": value})


def _write(folder: str, name: str, lines: list[str]) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w") as f:
        f.write("\n".join(lines) + "\n")


def _table(spark, lake: str, name: str):
    return outputs.read(spark, target_dir(lake, "production"), name)


def test_a_repeated_offset_is_journaled_then_quarantined_and_windowed_once(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    _write(landing, "a.jsonl", [_event(0, 0, 1, 1.0), _event(0, 1, 2, 2.0), _event(0, 2, 3, 4.0)])
    _write(landing, "b.jsonl", [_event(0, 1, 4, 2.0), _event(0, 3, 5, 8.0)])  # offset 1 again: a redelivery
    r = ingest(spark, landing, lake)
    assert (r.rows, r.duplicate_offsets, r.backward_offsets) == (5, 1, 1)
    run(spark, lake, Job.spec(POLICY))
    quarantined = _table(spark, lake, "decisions").where(F.col("action") == "quarantined").collect()
    assert [(q["seq"], q["offset"], q["reasons"]) for q in quarantined] == [(3, 1, ["duplicate"])]
    letters = _table(spark, lake, "dead_letters").where(F.col("reason") == "duplicate").collect()
    assert [(d["seq"], d["offset"], d["source"], d["source_line"]) for d in letters] == [(3, 1, "b.jsonl", 1)]
    assert json.loads(letters[0]["payload"])["offset"] == 1  # what was read, kept with the dead letter
    windows = _table(spark, lake, "windows").agg(F.sum("count").alias("n"), F.sum("sum").alias("s")).first()
    assert (windows["n"], windows["s"]) == (4, 15.0)
    metrics = _table(spark, lake, "metrics").agg(F.sum("duplicate_offsets").alias("d"),
                                                 F.sum("backward_offsets").alias("b")).first()
    assert (metrics["d"], metrics["b"]) == (1, 1)


def test_a_later_ingest_counts_repeats_and_backward_offsets_against_the_journal_before_it(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    _write(landing, "a.jsonl", [_event(0, 5, 1, 1.0), _event(1, 0, 2, 1.0), _event(0, 6, 3, 1.0)])
    first = ingest(spark, landing, lake)
    # offset 5 of partition 0 again, twice (both repeats), and below that partition's last offset, 6
    _write(landing, "b.jsonl", [_event(0, 5, 4, 1.0), _event(0, 5, 5, 1.0), _event(1, 1, 6, 1.0), _event(0, 7, 7, 1.0)])
    second = ingest(spark, landing, lake)
    # offset 3 is new to partition 0, but below its last one, 7, which is outside the new offsets' range
    _write(landing, "c.jsonl", [_event(0, 3, 8, 1.0)])
    third = ingest(spark, landing, lake)
    assert [(r.duplicate_offsets, r.backward_offsets) for r in (first, second, third)] == [(0, 0), (2, 1), (0, 1)]
    run(spark, lake, Job.spec(POLICY))  # the engine finds the same, from the whole journal
    metrics = _table(spark, lake, "metrics").agg(F.sum("duplicate_offsets"), F.sum("backward_offsets")).first()
    assert tuple(metrics) == (2, 2)


def test_journal_invariants_name_a_line_journaled_twice(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    _write(landing, "a.jsonl", [_event(0, 0, 1, 1.0), _event(0, 1, 2, 2.0)])
    ingest(spark, landing, lake)
    rows = journal.read(spark, lake)
    assert journal_violations(rows) == []
    doubled = rows.unionByName(rows.where("seq = 1"))  # what two unlocked ingests did: the same line, same seq
    problems = journal_violations(doubled)
    assert [p.split(":")[0] for p in problems] == ["seq not unique", "(source, source_line) not unique"]
    assert "source=a.jsonl, source_line=2 x2 (first at seq 1)" in problems[1]


def _live(spark, landing: str, lake: str):
    """The live job over the landing, a file per batch: batches after the first skip the journal's history
    when their offsets all lie above the earlier ones (jobs/live/offsets.py) and read it when they do not."""
    from replay.io.landing import read_lines
    from tests.support.live import file_stream

    live = file_stream(spark, lake, POLICY, partitions=2)
    for f in journal.landing_files(landing):
        if f not in journal.journaled_sources(spark, lake):
            live.process(read_lines(spark, landing, [f]))
    live.flush()  # the metrics, as a stream that stops writes them


def test_a_live_batch_quarantines_an_offset_an_earlier_batch_had_and_counts_it_backward(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    _write(landing, "a.jsonl", [_event(0, 0, 1, 1.0), _event(0, 1, 2, 2.0), _event(1, 0, 2, 1.0)])
    _write(landing, "b.jsonl", [_event(0, 2, 3, 4.0), _event(1, 1, 3, 1.0)])  # above every earlier offset
    _write(landing, "c.jsonl", [_event(0, 1, 4, 2.0), _event(0, 3, 5, 8.0)])  # offset 1 again: a redelivery
    _live(spark, landing, lake)
    # a new live job (a restart) finds a repeat of a batch it did not decide itself
    _write(landing, "d.jsonl", [_event(1, 1, 6, 1.0), _event(1, 2, 7, 1.0)])
    _live(spark, landing, lake)
    quarantined = _table(spark, lake, "decisions").where(F.col("action") == "quarantined").orderBy("seq").collect()
    assert [(q["partition"], q["offset"], q["reasons"]) for q in quarantined] == [
        (0, 1, ["duplicate"]), (1, 1, ["duplicate"])]
    run(spark, lake, Job.spec(POLICY), target="replayed")
    replayed = lambda name: outputs.read(spark, target_dir(lake, "replayed"), name)  # noqa: E731
    assert sorted(_table(spark, lake, "decisions").collect()) == sorted(replayed("decisions").collect())
    # offset 1 after 2 in partition 0, a batch later: one backward offset, as the replay counts it
    assert sorted(_table(spark, lake, "metrics").collect()) == sorted(replayed("metrics").collect())
    assert _table(spark, lake, "metrics").agg(F.sum("backward_offsets")).first()[0] == 1


def test_a_live_batch_quarantines_an_offset_repeated_within_it_though_none_repeats_an_earlier_batch(spark, tmp_path):
    """A batch's reads say whether its records repeat an offset among themselves (`lag.reads`' `distinct`): each
    job's duplicate check runs only then (or when an earlier batch could hold one)."""
    from jobs.live import lag

    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    _write(landing, "a.jsonl", [_event(0, 0, 1, 1.0), _event(0, 1, 2, 2.0), _event(1, 0, 2, 1.0)])
    _write(landing, "b.jsonl", [_event(0, 2, 3, 4.0), _event(0, 3, 4, 2.0), _event(0, 2, 5, 8.0)])  # 2 twice
    _live(spark, landing, lake)
    journaled = journal.read(spark, lake)
    spans = [lag.reads(journaled.where(F.col("source") == f))[1] for f in ("a.jsonl", "b.jsonl")]
    assert [s["distinct"] for s in spans] == [True, False]
    quarantined = _table(spark, lake, "decisions").where(F.col("action") == "quarantined").collect()
    assert [(q["seq"], q["partition"], q["offset"], q["reasons"]) for q in quarantined] == [(5, 0, 2, ["duplicate"])]
    run(spark, lake, Job.spec(POLICY), target="replayed")
    replayed = outputs.read(spark, target_dir(lake, "replayed"), "decisions")
    assert sorted(_table(spark, lake, "decisions").collect()) == sorted(replayed.collect())


def _duplicates(spark, offsets: list[tuple[int, int]], whole: bool) -> list[int]:
    from replay.engine.pipeline import prepare

    rows = [{"partition": p, "offset": o, "arrival_time": f"2024-01-01T00:00:{i:02d}Z",
             "event_time": f"2024-01-01T00:00:{i:02d}Z", "key": "k", "value": 1} for i, (p, o) in enumerate(offsets)]
    prepared = prepare(journal.from_rows(spark, rows), whole=whole)
    found = sorted(r["seq"] for r in prepared.rows.where("duplicate").collect())
    for df in prepared.cached:
        df.unpersist()
    return found


def test_a_whole_journal_finds_the_same_repeats_whether_or_not_its_offsets_rise_everywhere(spark):
    """A whole journal's check first sorts each partition's offsets by seq (kernels.chunk_pass): offsets that
    rise everywhere repeat nothing, and an offset equal to its predecessor's (not backwards) is still a repeat."""
    rising = [(0, 0), (1, 7), (0, 1), (1, 8), (0, 5)]
    level = [(0, 0), (0, 1), (1, 1), (0, 1), (0, 2)]  # seq 3 repeats seq 1, right after it in partition 0
    backwards = [(0, 0), (0, 3), (1, 3), (0, 1), (0, 3)]  # seq 4 repeats seq 1, after going backwards
    for offsets, repeats in ((rising, []), (level, [3]), (backwards, [4])):
        assert _duplicates(spark, offsets, whole=True) == _duplicates(spark, offsets, whole=False) == repeats


def test_two_lines_of_one_file_with_one_partition_and_offset_pass_ingest_and_verify_alike(spark, tmp_path):
    """Ingest and verify agree on the journal's invariants (issue 50, item 6): a repeat within one landing file is
    a redelivery like one across files, journaled and quarantined as `duplicate`, and the journal verifies."""
    from replay.ops.verify import verify

    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    _write(landing, "a.jsonl", [_event(0, 0, 1, 1.0), _event(0, 1, 2, 2.0), _event(0, 1, 3, 2.0)])
    r = ingest(spark, landing, lake)
    assert (r.rows, r.duplicate_offsets) == (3, 1)
    run(spark, lake, Job.spec(POLICY))
    quarantined = _table(spark, lake, "decisions").where(F.col("action") == "quarantined").collect()
    assert [(q["seq"], q["reasons"]) for q in quarantined] == [(2, ["duplicate"])]
    report = verify(spark, lake, Job.spec(POLICY))
    assert report.journal_violations == [] and report.identical, report.text()
