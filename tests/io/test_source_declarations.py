"""Plain landing files (issue 47, items 1-2): events that carry no partition, offset or arrival time, as JSON
lines, gzip JSON lines and CSV, journaled with `arrival_time: file_modified`, `partition: file` and
`offset: line`: every line once with those values, a second ingest a no-op, and a replay equal to one of the
same events written the old way (each line carrying the three fields)."""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from replay.io import journal
from replay.io.journal import SourceFields, ingest
from replay.model.policy import Policy
from replay.model.sources import parse
from replay.ops.hashing import target_hash
from replay.ops.run import run
from replay.model.jobs import Job
from tests.support import target_dir

START = datetime(2024, 1, 1, tzinfo=timezone.utc)
# (partition folder, file name, suffix): the landing's files; in path order they are the files' journal order
FILES = [("partition=0", "00-a", ".jsonl"), ("partition=0", "01-b", ".json.gz"), ("partition=1", "02-c", ".csv")]
LINES_PER_FILE = 2
DECLARED = parse({"arrival_time": "file_modified", "partition": "file", "offset": "line"}, "test")[0]
POLICY = Policy.from_dict({"window": {"kind": "tumbling", "size": "1m"}})
LATER = ("partition=0", "09-z", ".jsonl")  # landed after the first ingests
LATER_NAME = f"{LATER[0]}/{LATER[1]}{LATER[2]}"


def _events(index: int) -> list[dict]:
    """The plain events of file `index`: event time, key and value only, in time order within a partition."""
    return [{"event_time": (START + timedelta(seconds=20 * index + 3 * i)).isoformat().replace("+00:00", "Z"),
             "key": f"k{(index + i) % 3}", "value": float(index * 10 + i)} for i in range(LINES_PER_FILE)]


def _modified(index: int) -> datetime:
    """File `index`'s modification time: a second after its last event."""
    return START + timedelta(seconds=20 * index + 3 * (LINES_PER_FILE - 1) + 1)


def _write(path: str, suffix: str, events: list[dict], mtime: datetime) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if suffix == ".csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=["event_time", "key", "value"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(events)
        data = out.getvalue().encode()
    else:
        data = "".join(json.dumps(e) + "\n" for e in events).encode()
        if suffix.endswith(".gz"):
            data = gzip.compress(data, mtime=0)
    with open(path + suffix, "wb") as f:
        f.write(data)
    os.utime(path + suffix, (mtime.timestamp(), mtime.timestamp()))


def _old_way_line(event: dict, partition: int, offset: int, arrival: datetime) -> str:
    return json.dumps({"partition": partition, "offset": offset,
                       "arrival_time": arrival.isoformat().replace("+00:00", "Z"), **event})


@pytest.fixture(scope="module")
def lakes(spark, tmp_path_factory):
    """One journal for the module: the plain landing ingested with the declarations (and once more), the same
    events written the old way ingested by default, both replayed; then a file landing later in each, ingested
    (with the declarations, and without: a plain file among files that carry the three fields)."""
    root = tmp_path_factory.mktemp("declared")
    plain, old = str(root / "plain"), str(root / "old")
    offsets: dict[int, int] = {}
    for index, (folder, name, suffix) in enumerate(FILES):
        partition = int(folder.split("=")[1])
        events = _events(index)
        _write(os.path.join(plain, folder, name), suffix, events, _modified(index))
        os.makedirs(os.path.join(old, folder), exist_ok=True)
        with open(os.path.join(old, folder, name + ".jsonl"), "w") as f:
            for e in events:
                f.write(_old_way_line(e, partition, offsets.get(partition, 0), _modified(index)) + "\n")
                offsets[partition] = offsets.get(partition, 0) + 1
    declared_lake, old_lake = str(root / "declared_lake"), str(root / "old_lake")
    fields = SourceFields(origins=DECLARED)
    first = ingest(spark, plain, declared_lake, fields=fields)
    again = ingest(spark, plain, declared_lake, fields=fields)
    ingest(spark, old, old_lake)
    for lake in (declared_lake, old_lake):
        run(spark, lake, Job.spec(POLICY))
    folder, name, suffix = LATER
    _write(os.path.join(plain, folder, name), suffix, _events(9), _modified(9))
    later = ingest(spark, plain, declared_lake, fields=fields)
    _write(os.path.join(old, "zz-plain"), ".jsonl", _events(8), _modified(8))  # no fields, no declarations
    undeclared = ingest(spark, old, old_lake)
    return {"declared": declared_lake, "old": old_lake, "first": first, "again": again, "later": later,
            "undeclared": undeclared, "journal": _journal(spark, declared_lake),
            "old_journal": _journal(spark, old_lake)}


def _journal(spark, lake: str) -> list[dict]:
    return [r.asDict() for r in journal.read(spark, lake).orderBy("seq").collect()]


def test_every_plain_line_is_journaled_once_with_the_files_partition_mtime_and_line_offset(lakes):
    rows = [r for r in lakes["journal"] if r["source"] != LATER_NAME]
    expected, offsets = [], {}
    for index, (folder, name, suffix) in enumerate(FILES):
        partition = int(folder.split("=")[1])
        for line in range(1, LINES_PER_FILE + 1):
            expected.append((f"{folder}/{name}{suffix}", line, "event", partition, offsets.get(partition, 0),
                             _modified(index).replace(tzinfo=None)))
            offsets[partition] = offsets.get(partition, 0) + 1
    got = [(r["source"], r["source_line"], r["kind"], r["partition"], r["offset"], r["arrival_time"]) for r in rows]
    assert got == expected
    assert lakes["first"].events == len(FILES) * LINES_PER_FILE and lakes["first"].malformed == 0


def test_a_second_ingest_of_the_same_files_is_a_no_op(lakes):
    again = lakes["again"]
    assert again.files == [] and again.version is None and again.skipped == len(FILES)


def test_a_replay_equals_one_of_the_same_events_written_the_old_way(spark, lakes):
    assert (target_hash(spark, target_dir(lakes["declared"]))
            == target_hash(spark, target_dir(lakes["old"])))


def test_a_newly_landed_file_continues_its_partitions_offsets(lakes):
    name = LATER_NAME
    assert lakes["later"].files == [name]
    new = [row for row in lakes["journal"] if row["source"] == name]
    assert [(row["partition"], row["offset"]) for row in new] == [(0, 2 * LINES_PER_FILE + i)
                                                                   for i in range(LINES_PER_FILE)]


def test_an_undeclared_sources_lines_carrying_the_three_fields_are_read_from_them(lakes):
    rows = [r for r in lakes["old_journal"] if r["source"] != "zz-plain.jsonl"]
    carried = [json.loads(r["payload"]) for r in rows]
    assert [(r["partition"], r["offset"], r["arrival_time"]) for r in rows] == [
        (c["partition"], c["offset"], datetime.fromisoformat(c["arrival_time"]).replace(tzinfo=None)) for c in carried]
    assert len(rows) == len(FILES) * LINES_PER_FILE


def test_an_undeclared_sources_plain_file_is_partition_0_offset_by_line_arriving_at_its_mtime(lakes):
    rows = [r for r in lakes["old_journal"] if r["source"] == "zz-plain.jsonl"]
    assert lakes["undeclared"].files == ["zz-plain.jsonl"] and lakes["undeclared"].malformed == 0
    assert [(r["kind"], r["partition"], r["offset"], r["arrival_time"]) for r in rows] == [
        ("event", 0, 2 * LINES_PER_FILE + i, _modified(8).replace(tzinfo=None)) for i in range(LINES_PER_FILE)]


def test_a_declared_partition_list_is_recorded_and_a_different_one_refused(spark, lake):
    assert journal.declare_partitions(spark, lake, (0, 2, 5)) == [0, 2, 5]
    assert journal.declared_partitions(spark, lake) == [0, 2, 5]
    with pytest.raises(ValueError, match="^partitions: 3 differs from the partitions 0,2,5 the journal at "):
        journal.declare_partitions(spark, lake, 3)
