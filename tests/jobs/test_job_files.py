"""Users' jobs: whole payloads in the journal, job files and their refusals, per-job outputs in the layout of every
job's, the spec's job's included."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay.engine import job_sql
from replay.io import journal
from replay.io.lake import OUTPUT_TABLES, Lake
from replay.io.store import default_store
from replay.model.jobs import Job, JobError, load_folder
from replay.model.policy import Policy
from replay.model.sources import KafkaFields
from replay.ops.run import run
from tests.support import ROOT, target_dir

POLICY = {"window": {"kind": "tumbling", "size": "10s"}}
SOURCES = "sensors:\n  event_time_field: ts\n  key_field: device\n"
JOB_YAML = """source: sensors
policy: {window: {kind: tumbling, size: 10s}}
fields: {temperature: "payload:temperature::decimal(6,2)", status: "payload:status::string"}
where: "status <> 'test'"
aggregates: {readings: "count(*)", avg_temperature: "avg(temperature)"}
"""


def reading(i: int, **extra) -> dict:
    return {"partition": i % 2, "offset": i // 2, "arrival_time": f"2024-01-01T00:00:{i:02d}Z",
            "ts": f"2024-01-01T00:00:{i:02d}Z", "device": f"d{i % 3}", "temperature": 20 + i * 0.25,
            "status": "test" if i % 7 == 0 else "ok", **extra}


@pytest.fixture(scope="module")
def sensor_lake(spark, tmp_path_factory):
    """A journal of 30 sensor readings whose time and key are the payload fields `ts` and `device`."""
    base = tmp_path_factory.mktemp("sensors")
    landing, lake = base / "landing", str(base / "lake")
    landing.mkdir()
    (landing / "part-0.jsonl").write_text("\n".join(json.dumps(reading(i)) for i in range(30)) + "\n")
    journal.ingest(spark, str(landing), lake, fields=journal.SourceFields("ts", "device"))
    return lake


def folder(tmp_path, **files) -> str:
    (tmp_path / "sources.yaml").write_text(SOURCES)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return str(tmp_path)


def test_a_landing_line_with_nested_fields_and_unicode_comes_back_whole(spark, tmp_path):
    line = json.dumps(reading(1, site="São Paulo – Zürich ☃", meta={"fw": "1.4.2", "tags": [1, {"ü": None}]}),
                      ensure_ascii=False)
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "part-0.jsonl").write_text(line + "\n", encoding="utf-8")
    journal.ingest(spark, str(tmp_path / "landing"), str(tmp_path / "lake"),
                   fields=journal.SourceFields("ts", "device"))
    row = journal.read(spark, str(tmp_path / "lake")).first()
    assert row["payload"] == line
    assert (row["key"], str(row["event_time"])) == ("d1", "2024-01-01 00:00:01")


def test_a_parquet_landing_keeps_every_column_in_the_payload(spark, tmp_path):
    (tmp_path / "landing").mkdir()
    table = pa.table({"partition": [0], "offset": [0], "arrival_time": ["2024-01-01T00:00:00Z"],
                      "event_time": ["2024-01-01T00:00:00Z"], "key": ["k"], "pressure": [1013.25],
                      "meta": [{"fw": "1.4.2", "battery": 87}]})
    pq.write_table(table, tmp_path / "landing" / "part-0.parquet")
    journal.ingest(spark, str(tmp_path / "landing"), str(tmp_path / "lake"))
    payload = json.loads(journal.read(spark, str(tmp_path / "lake")).first()["payload"])
    assert (payload["pressure"], payload["meta"]) == (1013.25, {"fw": "1.4.2", "battery": 87})


def test_a_job_file_with_an_unknown_field_is_refused_naming_the_file(tmp_path):
    path = folder(tmp_path, **{"hot.yaml": JOB_YAML + "windoww: 1m\n"})
    with pytest.raises(JobError, match=r"hot\.yaml: unknown field 'windoww'"):
        load_folder(path)


def test_a_job_file_naming_a_missing_source_is_refused_naming_the_file(tmp_path):
    path = folder(tmp_path, **{"hot.yaml": JOB_YAML.replace("source: sensors", "source: pumps")})
    with pytest.raises(JobError, match=r"hot\.yaml: source: 'pumps' is not defined"):
        load_folder(path)


def test_a_source_declares_how_its_punctuations_are_recognised(tmp_path):
    (tmp_path / "sources.yaml").write_text(SOURCES + "  punctuation: {field: type, value: 1, time_field: wm}\n")
    source = load_folder(str(tmp_path)).sources["sensors"]
    assert journal.SourceFields.of(source) == journal.SourceFields("ts", "device", punctuation=("type", "1", "wm"))


def test_a_source_punctuation_without_its_time_field_is_refused_naming_the_file_and_field(tmp_path):
    (tmp_path / "sources.yaml").write_text(SOURCES + "  punctuation: {field: type, value: wm}\n")
    with pytest.raises(JobError, match=r"sources\.yaml: source sensors: punctuation: missing field 'time_field'"):
        load_folder(str(tmp_path))


def test_a_kafka_source_declares_the_fields_its_record_keys_and_headers_are_kept_as(tmp_path):
    (tmp_path / "sources.yaml").write_text(SOURCES + "  kafka: {key_as: kafka_key, headers_as: kafka_headers}\n"
                                           "pumps:\n  kafka: {key_as: kafka_key}\nplain: {}\n")
    sources = load_folder(str(tmp_path)).sources
    kept = {name: journal.SourceFields.of(source).kafka for name, source in sources.items()}
    assert kept == {"sensors": KafkaFields("kafka_key", "kafka_headers"), "pumps": KafkaFields("kafka_key"),
                    "plain": KafkaFields()}
    assert not kept["plain"].declared


@pytest.mark.parametrize("declared, refusal", [
    ("{key: kafka_key}", r"source sensors: kafka: unknown field 'key'; known fields: headers_as, key_as"),
    ("{headers_as: meta.headers}", r"source sensors: kafka\.headers_as: 'meta\.headers' is not a top-level field"),
    ("{key_as: k, headers_as: k}", r"source sensors: kafka: key_as and headers_as are both 'k'"),
    ("{key_as: value_text}", r"source sensors: kafka\.key_as: 'value_text' is the field a dead letter keeps"),
    ("kafka_key", r"source sensors: kafka: 'kafka_key' must be a mapping of key_as and/or headers_as"),
])
def test_a_bad_kafka_declaration_is_refused_in_one_line_naming_the_file_source_and_key(tmp_path, declared, refusal):
    (tmp_path / "sources.yaml").write_text(SOURCES + f"  kafka: {declared}\n")
    with pytest.raises(JobError, match=r"sources\.yaml: " + refusal) as refused:
        load_folder(str(tmp_path))
    assert "\n" not in str(refused.value)


def test_a_landing_ingest_of_a_source_keeping_kafka_keys_is_refused_before_the_lake_is_made(tmp_path):
    (tmp_path / "landing").mkdir()
    fields = journal.SourceFields(kafka=KafkaFields("kafka_key"))
    with pytest.raises(ValueError, match=r"kafka: \{key_as, headers_as\} keeps a Kafka record's key"):
        journal.admit(str(tmp_path / "landing"), str(tmp_path / "lake"), fields)
    assert not (tmp_path / "lake").exists()


def test_a_job_may_take_its_substreams_over_one_of_its_fields():
    job = Job.define("hot", {**POLICY, "substream_by": "device"}, fields={"device": "payload:device::string"})
    assert job.policy.substream_by == "device"


def test_a_job_file_with_substreams_over_a_field_it_does_not_have_is_refused_naming_the_file_and_field(tmp_path):
    path = folder(tmp_path, **{"hot.yaml": JOB_YAML.replace("policy: {", "policy: {substream_by: site, ")})
    with pytest.raises(JobError, match=r"hot\.yaml: job hot: policy: substream_by: 'site' is not a field of the job; "
                                       r"use one of key, status, temperature or null"):
        load_folder(path)


def test_a_python_policy_with_substreams_over_a_field_the_job_does_not_have_is_refused():
    import dataclasses

    policy = dataclasses.replace(Policy.from_dict(POLICY), substream_by="site")
    with pytest.raises(JobError, match=r"job hot: policy\.substream_by: 'site' is not a field of the job"):
        Job.define("hot", policy, fields={"device": "payload:device::string"})


def test_the_spec_job_takes_substreams_over_key_or_a_payload_field_it_is_given():
    policy = Policy.from_dict({"substream_by": "device"}, fields=("key", "device"))
    assert Job.spec(policy, ("device",)).fields == (("device", "payload:device::string"),)
    with pytest.raises(JobError, match=r"job default: policy\.substream_by: 'device' is not a field of the job; "
                                       r"use one of key or null"):
        Job.spec(policy)


def test_a_job_with_session_windows_is_accepted():
    job = Job.define("visits", {"window": {"kind": "session", "gap": "5m"}})
    assert job.policy.sessions


def test_a_user_job_with_session_windows_and_an_idle_timeout_is_refused_at_load_naming_the_field():
    with pytest.raises(JobError, match=r"job visits: policy\.idle_timeout: with session windows it is supported "
                                       r"for jobs without where, group_by or transform"):
        Job.define("visits", {"window": {"kind": "session", "gap": "5m"}, "idle_timeout": "1m"},
                   where="value > 0", aggregates={"n": "count(*)"})


@pytest.mark.parametrize("fields, aggregates, refused", [
    ({"u": "uuid()"}, {"n": "count(*)"}, r"job hot: fields\.u: 'uuid\(\)' is not deterministic"),
    ({"t": "payload:t::decimal(6,2)"}, {"x": "first(t)"}, r"job hot: aggregates\.x: 'first\(t\)'"),
    ({"t": "payload:t::decimal(6,2)"}, {"x": "collect_list(t)"},
     r"aggregates\.x: 'collect_list\(t\)' uses CollectList"),
    ({"t": "payload:t::double"}, {"x": "avg(t)"}, r"aggregates\.x: 'avg\(t\)' adds floating-point values"),
    ({"t": "payload:t::decimal(6,2)"}, {"x": "sum(t) + rand()"}, r"aggregates\.x: .* is not deterministic \(rand\)"),
    ({"t": "payload:t::nosuchtype"}, {"n": "count(*)"}, r"job hot: fields\.t: 'payload:t::nosuchtype'"),
    ({"t": "payload:t::decimal(6,2)", "d": "payload:d::string"}, {"x": "max_by(d, t)"},
     r"aggregates\.x: .max_by\(d, t\). picks any one of rows that tie"),
    ({"t": "payload:t::decimal(6,2)"}, {"x": "max(nosuch)"}, r"job hot: aggregates\.x: 'max\(nosuch\)'"),
], ids=["uuid-field", "first", "collect_list", "double-avg", "rand", "bad-type", "max_by-ties", "unknown-column"])
def test_an_expression_that_could_differ_between_runs_or_does_not_type_is_refused_at_load(spark, fields, aggregates,
                                                                                          refused):
    with pytest.raises(JobError, match=refused):
        job_sql.check(spark, Job.define("hot", POLICY, fields=fields, aggregates=aggregates))


def test_a_where_that_is_not_a_condition_is_refused(spark):
    job = Job.define("hot", POLICY, fields={"t": "payload:t::decimal(6,2)"}, where="t + 1")
    with pytest.raises(JobError, match=r"job hot: where: 't \+ 1' is decimal"):
        job_sql.check(spark, job)


def test_a_yaml_job_replays_into_its_own_tables(spark, sensor_lake, tmp_path):
    job = load_folder(folder(tmp_path, **{"hot.yaml": JOB_YAML})).job("hot")
    run(spark, sensor_lake, job, target="t")
    windows = default_store().read(spark, target_dir(sensor_lake, "t", job="hot").table("windows"))
    assert windows.columns == ["window_start", "window_end", "key", "partition", "readings", "avg_temperature",
                               "emitted_at"]
    # readings 0..29 in 10 s windows per device; the 5 with i % 7 == 0 are test readings, filtered out
    assert windows.groupBy().sum("readings").first()[0] == 30 - 5
    assert not os.path.exists(target_dir(sensor_lake, "t").table("windows"))  # the spec's job is untouched


def test_the_spec_jobs_outputs_and_a_users_job_outputs_have_the_same_layout(spark, sensor_lake, tmp_path):
    hot = load_folder(folder(tmp_path, **{"hot.yaml": JOB_YAML})).job("hot")
    spec = Job.spec(Policy.from_dict(POLICY))
    for job in (spec, hot):
        run(spark, sensor_lake, job, target="same")
    tables = {job.name: sorted(os.listdir(Lake(sensor_lake).target(job.name, "same").folder)) for job in (spec, hot)}
    assert tables["default"] == tables["hot"] and set(OUTPUT_TABLES) <= set(tables["hot"])
    assert Lake(sensor_lake).target("default", "same").folder == os.path.join(sensor_lake, "jobs", "default",
                                                                              "outputs", "same")


def test_a_python_job_transforms_the_decided_events(spark, sensor_lake, tmp_path):
    (tmp_path / "warm.py").write_text(
        "from pyspark.sql import functions as F\n"
        "from replay.model.jobs import Job\n"
        "JOB = Job.define('warm', {'window': {'kind': 'tumbling', 'size': '1m'}}, source='sensors',\n"
        "    fields={'temperature': 'payload:temperature::decimal(6,2)'}, group_by=[],\n"
        "    aggregates={'warm': 'count_if(warm)'},\n"
        "    transform=lambda df: df.withColumn('warm', F.col('temperature') >= 25))\n")
    job = load_folder(folder(tmp_path)).job("warm")
    run(spark, sensor_lake, job, target="t")
    windows = default_store().read(spark, target_dir(sensor_lake, "t", job="warm").table("windows"))
    assert [r["warm"] for r in windows.collect()] == [10]  # 20 + i/4 >= 25 for i = 20..29


def test_a_journal_written_without_payloads_is_refused_with_how_to_reingest(spark, tmp_path):
    lake = str(tmp_path / "lake")
    old = journal.from_rows(spark, [reading(0)]).drop("payload").selectExpr("*", "cast(null as string) as payload")
    default_store().write(old.select(*journal.names()), Lake(lake).journal)
    job = Job.define("hot", POLICY, fields={"t": "payload:temperature::decimal(6,2)"})
    with pytest.raises(ValueError, match="written before events were journaled whole .*`replay ingest"):
        run(spark, lake, job)


def test_replay_run_names_an_unknown_job_and_the_defined_ones(tmp_path):
    r = subprocess.run([sys.executable, "-m", "replay.cli", "run", "--lake", str(tmp_path), "--job", "nosuch"],
                       capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 2
    assert "job 'nosuch' is not defined; defined jobs: device_minute, region_alarms" in r.stderr


def test_a_jobs_outputs_hash_the_same_whatever_the_shuffle_partitions(spark, sensor_lake, tmp_path):
    from replay.ops.hashing import target_hash

    job = load_folder(folder(tmp_path, **{"hot.yaml": JOB_YAML})).job("hot")
    before = spark.conf.get("spark.sql.shuffle.partitions")
    hashes = []
    try:
        for n in ("1", "7"):
            spark.conf.set("spark.sql.shuffle.partitions", n)
            run(spark, sensor_lake, job, target=f"shuffle-{n}")
            hashes.append(target_hash(spark, target_dir(sensor_lake, f"shuffle-{n}", job="hot")))
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    assert hashes[0] == hashes[1]
