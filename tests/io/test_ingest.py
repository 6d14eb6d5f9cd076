"""Ingesting landing files into the journal (spec section 1): order, exactly once, malformed lines kept."""
from __future__ import annotations

import json
import os
import random

import pytest
from pyspark.sql import functions as F

from replay.io import journal
from replay.io.journal import ingest
from replay.io.lake import Lake
from replay.io.store import default_store
from replay.model.durations import parse_instant
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.generate import StreamSpec, generate
from replay.ops.run import run
from replay.ops import outputs
from tests.support import target_dir


def _landing_lines(landing: str) -> dict[tuple[str, int], str]:
    """(file, 1-based line) -> text of every non-blank line of the JSON-lines files of a landing folder."""
    out = {}
    for name in sorted(os.listdir(landing)):
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(landing, name)) as f:
            for i, line in enumerate(f.read().split("\n"), start=1):
                if line.strip():
                    out[(name, i)] = line
    return out


def _journal_rows(spark, lake: str) -> list[dict]:
    return [r.asDict() for r in journal.read(spark, lake).orderBy("seq").collect()]


@pytest.fixture(scope="module")
def generated(spark, tmp_path_factory):
    """2000 generated events in 5 JSON-lines files, ingested once into a lake."""
    root = tmp_path_factory.mktemp("journal")
    landing, lake = str(root / "landing"), str(root / "lake")
    summary = generate(landing, StreamSpec(2000, partitions=4, keys=50, files=5, seed=3, fmt="jsonl"))
    result = ingest(spark, landing, lake)
    return {"landing": landing, "lake": lake, "summary": summary, "result": result}


def test_ingest_reports_every_file_and_row(generated):
    r = generated["result"]
    assert r.files == [f"part-{i:05d}.jsonl" for i in range(5)]
    assert r.skipped == 0
    assert r.rows == 2000
    assert r.version == 0


def test_seq_is_unique_and_increasing_in_file_and_line_order(spark, generated):
    rows = _journal_rows(spark, generated["lake"])
    by_position = sorted(rows, key=lambda r: (r["source"], r["source_line"]))
    seqs = [r["seq"] for r in by_position]
    assert len(set(seqs)) == len(seqs)
    assert seqs == sorted(seqs)
    assert seqs == list(range(len(seqs)))  # these files have no blank lines: seq = line number across files, from 0


def test_every_landing_line_appears_exactly_once(spark, generated):
    lines = _landing_lines(generated["landing"])
    rows = _journal_rows(spark, generated["lake"])
    assert len(lines) == 2000
    assert len(rows) == len(lines)
    positions = [(r["source"], r["source_line"]) for r in rows]
    assert len(set(positions)) == len(positions)
    assert set(positions) == set(lines)


def test_journal_rows_hold_the_landing_line_fields(spark, generated):
    by_place = {}
    for line in _landing_lines(generated["landing"]).values():
        data = json.loads(line)
        by_place[(data["partition"], data["offset"])] = data
    rows = journal.read(spark, generated["lake"]).where("kind = 'event' AND event_time IS NOT NULL").select(
        "partition", "offset", "key", "value", F.unix_micros("arrival_time").alias("arrival"),
        F.unix_micros("event_time").alias("et")).collect()
    assert len(rows) >= 1990
    for r in rows:
        data = by_place[(r["partition"], r["offset"])]
        assert (r["key"], r["value"]) == (data["key"], data["value"])
        assert r["arrival"] == parse_instant(data["arrival_time"])
        assert r["et"] == parse_instant(data["event_time"])


def test_reingesting_the_same_landing_is_a_no_op(spark, generated):
    path = Lake(generated["lake"]).journal
    version = default_store().version(path)
    before = journal.read(spark, generated["lake"]).count()
    again = ingest(spark, generated["landing"], generated["lake"])
    assert again.files == []
    assert again.skipped == 5
    assert again.rows == 0 and again.version is None
    assert journal.read(spark, generated["lake"]).count() == before
    assert default_store().version(path) == version


def test_a_new_file_is_ingested_alone_with_seq_after_the_previous_max(spark, tmp_path):
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    generate(landing, StreamSpec(300, partitions=2, keys=10, files=2, seed=5))
    first = ingest(spark, landing, lake)
    previous_max = journal.read(spark, lake).agg(F.max("seq")).first()[0]
    assert first.rows == 300 and previous_max == 299
    new_lines = [
        {"partition": 0, "offset": 10_000 + i, "arrival_time": f"2024-01-01T01:00:0{i}Z",
         "event_time": f"2024-01-01T01:00:0{i}Z", "key": "k00001", "value": float(i)}
        for i in range(3)
    ]
    with open(os.path.join(landing, "part-00002.jsonl"), "w") as f:
        f.write("".join(json.dumps(x) + "\n" for x in new_lines))
    second = ingest(spark, landing, lake)
    assert second.files == ["part-00002.jsonl"]
    assert second.skipped == 2 and second.rows == 3
    rows = _journal_rows(spark, lake)
    assert len(rows) == 303
    added = [r for r in rows if r["source"] == "part-00002.jsonl"]
    assert [(r["seq"], r["source_line"], r["offset"]) for r in added] == [
        (previous_max + 1 + i, i + 1, 10_000 + i) for i in range(3)]


def test_a_files_last_non_blank_line_sets_where_the_next_files_seq_starts(spark, tmp_path):
    """A file's lines are counted from its text alone, before any row is parsed: a byte order mark, blank
    lines and lines of spaces take no row, and the lines after a file's last row take no seq."""
    landing, lake = tmp_path / "landing", str(tmp_path / "lake")
    landing.mkdir()
    line = lambda offset: GOOD.replace('"offset": 0', f'"offset": {offset}')  # noqa: E731
    (landing / "a.jsonl").write_text("\n".join(["\ufeff" + line(0), "", "   ", line(1), "  ", "", ""]))
    (landing / "b.jsonl").write_text("\n\n" + line(2) + "\n")
    (landing / "c.jsonl").write_text("  \n\n")
    ingest(spark, str(landing), lake)
    rows = [(r["source"], r["source_line"], r["seq"], r["kind"], r["offset"]) for r in _journal_rows(spark, lake)]
    assert rows == [("a.jsonl", 1, 0, "event", 0), ("a.jsonl", 4, 3, "event", 1), ("b.jsonl", 3, 6, "event", 2),
                    ("c.jsonl", 0, 7, journal.EMPTY, None)]


def test_a_files_line_count_on_the_driver_is_the_last_line_its_rows_are_numbered_to(spark, tmp_path, monkeypatch):
    """The driver counts a local file's lines from its bytes; the rows are split and numbered by Spark. Both
    follow one rule (blank and space-only lines, one `\\r` before `\\n`, a byte order mark, text that is not
    UTF-8), checked on random files with the driver's reads cut at every few bytes."""
    rng = random.Random(7)
    pieces = [b'{"a": 1}', b"", b" ", b"\r", b" \r", b"\r\r", b"\t", b"\xef\xbb\xbf", b"\xc3\xa9", b"\xff",
              b"\xed\xa0\x80"]
    files = []
    for i in range(200):
        text = b"\n".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))) + rng.choice([b"", b"\n"])
        (tmp_path / f"f{i}.jsonl").write_bytes(rng.choice([b"", b"\xef\xbb\xbf"]) + (text or b"\n"))  # not empty
        files.append(f"f{i}.jsonl")
    monkeypatch.setattr(journal, "CHUNK", 3)
    numbered = lambda line, i: F.when(journal._holds_row(line), i + 1).otherwise(0)  # noqa: E731
    by_spark = {r["source"]: r["lines"] if r["readable"] else None for r in journal._json_lines(
        spark, str(tmp_path), files).select(
        "source", F.array_max(F.transform("lines", numbered)).alias("lines"), "readable").collect()}
    assert {f: journal._text_lines(str(tmp_path / f)) for f in files} == by_spark
    assert None in by_spark.values() and 0 in by_spark.values()


# A hand-written landing file: (what the line is, its text).
GOOD = ('{"partition": 0, "offset": 0, "arrival_time": "2024-01-01T00:00:01Z",'
        ' "event_time": "2024-01-01T00:00:00.5Z", "key": "a", "value": 1.5}')
BROKEN_JSON = '{"partition": 0, "offset": 1, "arrival_time": "2024-01-01T00:00:02Z", "event_ti'
NO_PARTITION = ('{"offset": 2, "arrival_time": "2024-01-01T00:00:03Z",'
                ' "event_time": "2024-01-01T00:00:03Z", "key": "a", "value": 1.0}')
BAD_VALUE = ('{"partition": 0, "offset": 3, "arrival_time": "2024-01-01T00:00:04Z",'
             ' "event_time": "2024-01-01T00:00:04Z", "key": "a", "value": "ten"}')
BAD_ARRIVAL = ('{"partition": 0, "offset": 4, "arrival_time": "yesterday",'
               ' "event_time": "2024-01-01T00:00:05Z", "key": "a", "value": 1.0}')
NOT_A_TIME = ('{"partition": 0, "offset": 5, "arrival_time": "2024-01-01T00:00:06Z",'
              ' "event_time": "not-a-time", "key": "a", "value": 2.0}')
LATER = ('{"partition": 0, "offset": 6, "arrival_time": "2024-01-01T00:02:00Z",'
         ' "event_time": "2024-01-01T00:02:00Z", "key": "a", "value": 4.0}')
LINES = [GOOD, BROKEN_JSON, NO_PARTITION, "", BAD_VALUE, BAD_ARRIVAL, NOT_A_TIME, LATER]
MALFORMED = {"broken_json": BROKEN_JSON, "missing_partition": NO_PARTITION, "non_numeric_value": BAD_VALUE,
             "unparseable_arrival_time": BAD_ARRIVAL}


@pytest.fixture(scope="module")
def handwritten(spark, tmp_path_factory):
    """The hand-written file ingested, then replayed with a 1-minute tumbling window."""
    root = tmp_path_factory.mktemp("malformed")
    landing, lake = root / "landing", str(root / "lake")
    landing.mkdir()
    (landing / "part-00000.jsonl").write_text("\n".join(LINES) + "\n")
    result = ingest(spark, str(landing), lake)
    run(spark, lake, Job.spec(Policy.from_dict({"window": {"kind": "tumbling", "size": "1m"}})), target="t")
    read = lambda name: [r.asDict() for r in outputs.read(spark, target_dir(lake, "t"), name).collect()]  # noqa: E731
    return {"result": result, "journal": _journal_rows(spark, lake), "decisions": read("decisions"),
            "dead_letters": read("dead_letters")}


def test_blank_lines_are_not_journaled(handwritten):
    assert handwritten["result"].rows == len([line for line in LINES if line.strip()])
    assert len(handwritten["journal"]) == 7


def test_handwritten_rows_get_unique_seq_increasing_in_line_order(handwritten):
    rows = sorted(handwritten["journal"], key=lambda r: r["source_line"])
    assert [r["source_line"] for r in rows] == [n for n, line in enumerate(LINES, start=1) if line.strip()]
    seqs = [r["seq"] for r in rows]
    assert len(set(seqs)) == len(seqs)
    assert seqs == sorted(seqs)


@pytest.mark.parametrize("what", sorted(MALFORMED))
def test_malformed_line_is_kept_as_malformed_row_with_its_raw_text(handwritten, what):
    line = MALFORMED[what]
    matching = [r for r in handwritten["journal"] if r["payload"] == line]
    assert len(matching) == 1, f"{what}: no journal row holds the raw line"
    assert matching[0]["kind"] == "malformed"


def test_ingest_counts_malformed_rows_and_bad_event_times(handwritten):
    r = handwritten["result"]
    assert (r.events, r.malformed, r.bad_event_time) == (3, 4, 1)


def test_good_line_is_an_event_with_its_whole_line_as_payload(handwritten):
    row = next(r for r in handwritten["journal"] if (r["partition"], r["offset"]) == (0, 0))
    assert row["kind"] == "event" and json.loads(row["payload"])["key"] == "a"
    assert (row["partition"], row["offset"], row["key"], row["value"]) == (0, 0, "a", 1.5)


def test_unparseable_event_time_is_an_event_with_null_event_time_and_raw_payload(handwritten):
    rows = [r for r in handwritten["journal"] if (r["partition"], r["offset"]) == (0, 5)]
    assert len(rows) == 1
    assert rows[0]["kind"] == "event"
    assert rows[0]["event_time"] is None
    assert rows[0]["arrival_time"] is not None
    assert rows[0]["payload"] == NOT_A_TIME


def test_unparseable_event_time_is_quarantined_with_a_dead_letter(handwritten):
    where = (0, 5)  # (partition, offset) of the NOT_A_TIME line
    decisions = [d for d in handwritten["decisions"] if (d["partition"], d["offset"]) == where]
    assert len(decisions) == 1
    assert decisions[0]["kind"] == "event"
    assert decisions[0]["action"] == "quarantined"
    assert decisions[0]["reasons"] == ["invalid_event_time"]
    assert decisions[0]["timestamp"] is None
    letters = [d for d in handwritten["dead_letters"] if (d["partition"], d["offset"]) == where]
    assert [d["reason"] for d in letters] == ["invalid_event_time"]


def test_malformed_rows_are_dead_letters_with_reason_malformed(handwritten):
    malformed = sorted((r["seq"], r["partition"] or -1, r["offset"] or -1)
                       for r in handwritten["journal"] if r["kind"] == "malformed")
    assert len(malformed) == 4
    letters = sorted((d["seq"], d["partition"] or -1, d["offset"] or -1)
                     for d in handwritten["dead_letters"] if d["reason"] == "malformed")
    assert letters == malformed
    assert all(d["kind"] in ("event", "clock") for d in handwritten["decisions"])
    assert len(handwritten["decisions"]) == 3  # the three events; malformed rows get no decision


def test_parquet_landing_ingests_the_same_rows_as_jsonl(spark, tmp_path):
    # seed 0 has no torn ("broken_line") rows in its first 1000 events: a torn JSON line is malformed,
    # while the same row in Parquet is an event with a null event_time, so the two would differ there.
    common = dict(partitions=4, keys=50, files=3, seed=0)
    js = generate(str(tmp_path / "jsonl"), StreamSpec(1000, fmt="jsonl", **common))
    pq = generate(str(tmp_path / "parquet"), StreamSpec(1000, fmt="parquet", **common))
    assert js["malformed_by_kind"]["broken_line"] == 0
    from_js = ingest(spark, str(tmp_path / "jsonl"), str(tmp_path / "lake_jsonl"))
    from_pq = ingest(spark, str(tmp_path / "parquet"), str(tmp_path / "lake_parquet"))  # seq from the footers
    counted = ("rows", "events", "malformed", "bad_event_time")
    assert [getattr(from_pq, c) for c in counted] == [getattr(from_js, c) for c in counted]
    assert from_pq.rows == 1000
    compared = ("seq", "partition", "offset", "kind", "arrival_time", "event_time", "key", "value", "source_line")

    def rows(lake):
        return [tuple(r[c] for c in compared) for r in _journal_rows(spark, lake)]

    from_jsonl, from_parquet = rows(str(tmp_path / "lake_jsonl")), rows(str(tmp_path / "lake_parquet"))
    assert len(from_jsonl) == 1000
    assert from_parquet == from_jsonl
    sources = {r["source"] for r in _journal_rows(spark, str(tmp_path / "lake_parquet"))}
    assert sources == {f"part-{i:05d}.parquet" for i in range(3)}
    assert pq["events"] == js["events"]


def test_missing_landing_folder_raises_file_not_found_naming_it(spark, tmp_path, lake):
    missing = str(tmp_path / "no-such-landing")
    with pytest.raises(FileNotFoundError, match=missing):
        ingest(spark, missing, lake)


def test_an_undecodable_line_keeps_its_bytes(spark, tmp_path):
    """Bytes are never lost (issue 50, item 13): a line that is not UTF-8 is `malformed`, its payload `base64:` and
    the line's own bytes, as a Kafka record's that is not text."""
    import base64

    landing, lake = tmp_path / "landing", str(tmp_path / "lake")
    landing.mkdir()
    bad = GOOD.replace('"key": "a"', '"key": "k\xff\xfe"').encode("latin-1")
    (landing / "part-00000.jsonl").write_bytes(GOOD.encode() + b"\n" + bad + b"\n")
    r = ingest(spark, str(landing), lake)
    assert (r.rows, r.events, r.malformed) == (2, 1, 1)
    row = next(row for row in _journal_rows(spark, lake) if row["source_line"] == 2)
    assert row["kind"] == "malformed"
    assert row["payload"].startswith("base64:") and base64.b64decode(row["payload"][len("base64:"):]) == bad


def test_a_crlf_file_ending_in_a_blank_line_journals_its_lines_and_nothing_else(spark, tmp_path):
    """Windows line ends are line ends (issue 50, item 13): no `\\r` row, no `\\r` in a payload."""
    landing, lake = tmp_path / "landing", str(tmp_path / "lake")
    landing.mkdir()
    second = GOOD.replace('"offset": 0', '"offset": 1')
    (landing / "part-00000.jsonl").write_bytes(f"{GOOD}\r\n{second}\r\n\r\n".encode())
    r = ingest(spark, str(landing), lake)
    assert (r.rows, r.events, r.malformed) == (2, 2, 0)
    assert [(row["source_line"], row["payload"]) for row in _journal_rows(spark, lake)] == [(1, GOOD), (2, second)]


PUNCTUATED = [  # a source that sends watermark records: {"type": "watermark", "wm": time}
    '{"partition": 0, "offset": 0, "arrival_time": "2024-01-01T00:00:01Z", "event_time": "2024-01-01T00:00:01Z",'
    ' "key": "a", "value": 1.0}',
    '{"partition": 0, "offset": 1, "arrival_time": "2024-01-01T00:00:02Z", "type": "watermark",'
    ' "wm": "2024-01-01T00:00:30Z"}',
    '{"partition": 0, "offset": 2, "arrival_time": "2024-01-01T00:00:03Z", "type": "watermark", "wm": "soon"}',
    '{"partition": 0, "offset": 3, "arrival_time": "2024-01-01T00:00:04Z", "event_time": "2024-01-01T00:00:04Z",'
    ' "key": "a", "value": 2.0}',
]


@pytest.fixture(scope="module")
def punctuated(spark, tmp_path_factory):
    """A landing file of a source that declares its punctuations (field `type` = `watermark`, time in `wm`),
    ingested and replayed by the engine."""
    from replay.engine import pipeline

    root = tmp_path_factory.mktemp("punctuated")
    landing, lake = root / "landing", str(root / "lake")
    landing.mkdir()
    (landing / "part-00000.jsonl").write_text("\n".join(PUNCTUATED) + "\n")
    ingest(spark, str(landing), lake, fields=journal.SourceFields(punctuation=("type", "watermark", "wm")))
    out = pipeline.replay(journal.read(spark, lake), Job.spec(Policy.from_dict({"late_arrival_tolerance": None})))
    micros = lambda df, c: df.withColumn(c, F.unix_micros(c)).orderBy("seq").collect()  # noqa: E731
    result = {"journal": [r.asDict() for r in micros(journal.read(spark, lake), "event_time")],
              "decisions": [r.asDict() for r in micros(out.decisions, "timestamp")],
              "dead_letters": [r.asDict() for r in out.dead_letters.collect()]}
    out.unpersist()
    return result


def test_a_declared_punctuation_record_is_journaled_as_a_punctuation_with_its_time(punctuated):
    rows = punctuated["journal"]
    assert [r["kind"] for r in rows] == ["event", "punctuation", "punctuation", "event"]
    assert rows[1]["event_time"] == parse_instant("2024-01-01T00:00:30Z") and rows[1]["key"] is None
    assert rows[2]["event_time"] is None and rows[2]["payload"] == PUNCTUATED[2]


def test_a_punctuation_without_a_valid_time_is_a_malformed_dead_letter(punctuated):
    letters = [(d["offset"], d["reason"], d["payload"]) for d in punctuated["dead_letters"]]
    assert letters == [(2, "malformed", PUNCTUATED[2])]


def test_an_ingested_punctuation_raises_the_watermark_above_the_events(punctuated):
    """The event at 00:00:04 after the punctuation at 00:00:30 is out of order, adjusted to the punctuation."""
    last = punctuated["decisions"][-1]
    assert (last["action"], last["reasons"]) == ("adjusted", ["out_of_order"])
    assert last["timestamp"] == parse_instant("2024-01-01T00:00:30Z")


def _kinds_and_times(spark, lake: str) -> list[tuple]:
    rows = journal.read(spark, lake).orderBy("seq").select("kind", F.unix_micros("event_time").alias("t")).collect()
    return [(r["kind"], r["t"]) for r in rows]


PUNCTUATED_KINDS = [("event", parse_instant("2024-01-01T00:00:01Z")),
                    ("punctuation", parse_instant("2024-01-01T00:00:30Z")), ("punctuation", None),
                    ("event", parse_instant("2024-01-01T00:00:04Z"))]


def test_a_declared_punctuation_in_a_parquet_landing_is_journaled_as_a_punctuation(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    landing, lake = tmp_path / "landing", str(tmp_path / "lake")
    landing.mkdir()
    rows = [json.loads(line) for line in PUNCTUATED]
    names = ["partition", "offset", "arrival_time", "event_time", "key", "value", "type", "wm"]
    pq.write_table(pa.table({n: [r.get(n) for r in rows] for n in names}), landing / "part-00000.parquet")
    ingest(spark, str(landing), lake, fields=journal.SourceFields(punctuation=("type", "watermark", "wm")))
    assert _kinds_and_times(spark, lake) == PUNCTUATED_KINDS


def test_a_declared_punctuation_in_lines_numbered_by_retrace_is_journaled_as_a_punctuation(spark, tmp_path):
    """`offset: line`, `partition: zero`: the punctuation keeps its place among the events."""
    from replay.model.sources import Origins

    landing, lake = tmp_path / "landing", str(tmp_path / "lake")
    landing.mkdir()
    plain = [json.dumps({k: v for k, v in json.loads(line).items() if k not in ("partition", "offset")})
             for line in PUNCTUATED]
    (landing / "part-00000.jsonl").write_text("\n".join(plain) + "\n")
    origins = Origins(partition="zero", offset="line", declared=True)
    ingest(spark, str(landing), lake,
           fields=journal.SourceFields(origins=origins, partitions=(0,), punctuation=("type", "watermark", "wm")))
    assert _kinds_and_times(spark, lake) == PUNCTUATED_KINDS
    offsets = [r["offset"] for r in journal.read(spark, lake).orderBy("seq").collect()]
    assert offsets == [0, 1, 2, 3]
