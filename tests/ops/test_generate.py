"""The synthetic landing generator (`replay.ops.generate`) on its own: no Spark, a few thousand events."""
from __future__ import annotations

import hashlib
import json
import os
import re

import pyarrow.parquet as pq
import pytest

from replay.cli import main as cli
from replay.ops.generate import FIRMWARES, REGIONS, SITES, StreamSpec, generate

BASIC = ["partition", "offset", "arrival_time", "event_time", "key", "value"]
SENSOR = BASIC + ["device", "region", "site", "temperature", "pressure", "status", "meta"]
SMALL = dict(partitions=4, keys=50, seed=34)  # seed 34: 3000 events hold one malformed row of each kind

# Recorded from the generator at commit 6cd9c73, before shapes existed: its output (the basic shape) must
# not change. jsonl: the files' bytes; parquet: the schema and rows (the file bytes also name the writer).
BASIC_JSONL_SHA256 = "b00050f6e360bc11a98f39e63f69868fb94c09a1636c603fcdafc73dc782cdf0"
BASIC_PARQUET_SHA256 = "f75f70d3569528e4c6e903e4961e5cc32b861ead4c1407741947afecad579e18"


def _files(folder) -> list[str]:
    return [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.startswith("part-")]


def jsonl_rows(folder) -> tuple[list[dict], list[str]]:
    """(parsed rows, lines that do not parse) of a jsonl landing, in file and line order."""
    rows, broken = [], []
    for path in _files(folder):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    broken.append(line)
    return rows, broken


def parquet_rows(folder) -> list[dict]:
    return [r for path in _files(folder) for r in pq.read_table(path).to_pylist()]


@pytest.fixture(scope="module")
def sensors(tmp_path_factory):
    """3000 sensor events as jsonl in 3 files and as parquet in 2 files, from one seed."""
    root = tmp_path_factory.mktemp("sensors")
    summary = generate(str(root / "jsonl"), StreamSpec(3000, files=3, fmt="jsonl", shape="sensors", **SMALL))
    generate(str(root / "parquet"), StreamSpec(3000, files=2, fmt="parquet", shape="sensors", **SMALL))
    rows, broken = jsonl_rows(root / "jsonl")
    return {"root": root, "summary": summary, "rows": rows, "broken": broken,
            "parquet": parquet_rows(root / "parquet")}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_the_basic_shape_is_the_default_and_unchanged(tmp_path, fmt):
    generate(str(tmp_path), StreamSpec(3000, files=3, fmt=fmt, **SMALL))
    h = hashlib.sha256()
    for path in _files(tmp_path):
        if fmt == "jsonl":
            h.update(open(path, "rb").read())
        else:
            table = pq.read_table(path)
            h.update(str(table.schema).encode())
            h.update(json.dumps(table.to_pylist()).encode())
    assert h.hexdigest() == (BASIC_JSONL_SHA256 if fmt == "jsonl" else BASIC_PARQUET_SHA256)


def test_sensor_rows_have_the_basic_fields_then_the_payload_fields_in_order(sensors):
    full = [r for r in sensors["rows"] if "event_time" in r]
    assert len(full) == 3000 - 2  # one row lacks event_time, one line is torn
    assert all(list(r) == SENSOR for r in full)
    assert all(list(r["meta"]) == ["firmware", "battery"] for r in full)


def test_sensor_fields_have_their_types_and_sane_ranges(sensors):
    rows = sensors["rows"]
    for r in rows:
        assert r["device"] == r["key"] and re.fullmatch(r"k\d{5}", r["key"])
        assert r["value"] == r["temperature"] and isinstance(r["temperature"], float)
        assert 14 <= r["temperature"] <= 79 and round(r["temperature"], 2) == r["temperature"]
        assert isinstance(r["pressure"], float) and 985 <= r["pressure"] <= 1040
        assert round(r["pressure"], 1) == r["pressure"]
        assert r["region"] in REGIONS and r["site"] == SITES[REGIONS.index(r["region"])]
        assert r["status"] in ("ok", "alarm", "test")
        assert r["meta"]["firmware"] in FIRMWARES and re.fullmatch(r"\d+\.\d+\.\d+", r["meta"]["firmware"])
        assert type(r["meta"]["battery"]) is int and 0 <= r["meta"]["battery"] <= 100


def test_alarm_is_exactly_a_spiked_temperature_and_test_rows_are_about_one_percent(sensors):
    rows = sensors["rows"]
    alarms = [r["temperature"] for r in rows if r["status"] == "alarm"]
    normal = [r["temperature"] for r in rows if r["status"] != "alarm"]
    assert alarms and min(alarms) >= 36 and max(normal) <= 34
    assert 10 <= sum(r["status"] == "test" for r in rows) <= 60


def test_the_summary_counts_the_statuses_of_all_events(sensors):
    statuses = [r["status"] for r in sensors["parquet"]]  # parquet: the torn jsonl line's reading too
    assert sensors["summary"]["status"] == {s: statuses.count(s) for s in ("ok", "alarm", "test")}


def test_a_device_always_reports_from_one_region_with_one_firmware(sensors):
    seen: dict[str, set] = {}
    for r in sensors["rows"]:
        seen.setdefault(r["device"], set()).add((r["region"], r["site"], r["meta"]["firmware"]))
    assert len(seen) > 10 and all(len(v) == 1 for v in seen.values())
    assert len({v for vs in seen.values() for v in vs}) > 3  # devices differ


def test_sites_are_written_as_raw_utf8(sensors):
    data = b"".join(open(p, "rb").read() for p in _files(sensors["root"] / "jsonl"))
    assert "Zürich".encode() in data or "São Paulo".encode() in data or "東京".encode() in data
    assert b"\\u" not in data


def test_sensors_jsonl_and_parquet_give_the_same_events(sensors):
    by_place = {(r["partition"], r["offset"]): r for r in sensors["parquet"]}
    assert len(by_place) == len(sensors["parquet"]) == 3000
    for r in sensors["rows"]:  # a row without event_time in jsonl has a null one in parquet
        assert by_place.pop((r["partition"], r["offset"])) == {"event_time": None, **r}
    [torn] = sensors["broken"]
    [(place, rest)] = by_place.items()
    assert rest["event_time"] is None and torn.startswith(
        f'{{"partition":{place[0]},"offset":{place[1]},"arrival_time":"{rest["arrival_time"]}","event_time":"')


def test_sensors_have_the_events_of_the_basic_shape(sensors, tmp_path):
    generate(str(tmp_path), StreamSpec(3000, files=3, fmt="parquet", **SMALL))
    basic = [{k: r[k] for k in BASIC if k != "value"} for r in parquet_rows(tmp_path)]
    assert [{k: r[k] for k in BASIC if k != "value"} for r in sensors["parquet"]] == basic


def test_a_shorter_sensors_run_is_a_prefix_of_a_longer_one(sensors, tmp_path):
    generate(str(tmp_path), StreamSpec(1000, files=1, fmt="parquet", shape="sensors", **SMALL))
    assert parquet_rows(tmp_path) == sensors["parquet"][:1000]


def test_an_unknown_shape_is_refused_naming_it(tmp_path):
    with pytest.raises(ValueError, match="shape must be one of .*'sensor'"):
        generate(str(tmp_path), StreamSpec(10, files=1, shape="sensor"))
    assert not os.path.exists(tmp_path / "part-00000.jsonl")


def test_replay_generate_shape_sensors_writes_sensor_rows(tmp_path, capsys):
    out = tmp_path / "landing"
    assert cli.main(["generate", "--out", str(out), "--events", "200", "--files", "2", "--shape", "sensors"]) == 0
    assert json.loads(capsys.readouterr().out)["shape"] == "sensors"
    rows, _ = jsonl_rows(out)
    assert rows and all("temperature" in r and "meta" in r for r in rows)
