"""The live job over a real Kafka broker (tests/support/kafka_broker.py): records produced while the job runs and is
killed with SIGKILL are journaled exactly once with the broker's offsets and append times, and its outputs
equal a replay of its journal; a record that is not JSON is a `malformed` dead letter with its bytes; a
CreateTime topic is refused unless its producer times are trusted; the partition count is the topic's."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
import yaml
from pyspark.sql import functions as F

from replay.io import journal, kafka_source
from replay.io.store import default_store
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.ops.hashing import target_hash
from replay.ops.run import run
from tests.support import ROOT, target_dir
from tests.support.live import stream_topic

POLICY = {"late_arrival_tolerance": "5s", "out_of_order_tolerance": "1s", "idle_timeout": "30s",
          "window": {"kind": "tumbling", "size": "10s"}}
PARTITIONS = 4
PRODUCED = 300


def event(rng: random.Random, now: datetime) -> bytes:
    """A record value: an event a little behind the wall clock, now and then a late one."""
    behind = rng.uniform(0, 2) if rng.random() > 0.1 else rng.uniform(6, 20)
    return json.dumps({"event_time": (now - timedelta(seconds=behind)).isoformat().replace("+00:00", "Z"),
                       "key": f"k{rng.randrange(8)}", "value": round(rng.uniform(1, 50), 2)}).encode()


def produce(broker, topic: str, count: int, seconds: float, seed: int) -> None:
    """`count` events over about `seconds`, spread over the topic's partitions."""
    rng = random.Random(seed)
    producer = broker.producer()
    for i in range(count):
        producer.send(topic, value=event(rng, datetime.now(timezone.utc)), partition=i % PARTITIONS)
        time.sleep(seconds / count)
    producer.flush()
    producer.close()


def stream(broker, topic: str, lake: str, policy_file: str, kill_after: float | None = None) -> int:
    """`replay stream` from the topic in its own process; with `kill_after`, killed (process group, SIGKILL)
    that many seconds after it committed its first micro-batch, so the kill lands while it is working."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("RETRACE_CRASH_AT", None)
    cmd = [sys.executable, "-m", "replay.cli", "stream", "--kafka-bootstrap", broker.bootstrap, "--topic", topic,
           "--lake", lake, "--policy", policy_file, "--clock", "simulated", "--max-records-per-batch", "300",
           "--trigger-seconds", "0.5"]
    if kill_after is None:
        cmd.append("--until-idle")
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    err: list[str] = []
    first_batch = threading.Event()

    def read_stderr():
        for line in proc.stderr:
            err.append(line)
            if line.startswith("batch "):
                first_batch.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        if kill_after is not None:
            deadline = time.monotonic() + 300
            while not first_batch.wait(1) and proc.poll() is None and time.monotonic() < deadline:
                pass
            time.sleep(kill_after)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=600)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if kill_after is None:
        assert proc.returncode == 0, "".join(err)[-3000:]
    return proc.returncode


@pytest.fixture(scope="module")
def killed_lake(kafka_broker, tmp_path_factory):
    """300 events produced to 4 partitions over 30 s while the live job runs, is killed twice at random times
    and restarted."""
    base = tmp_path_factory.mktemp("kafka-crashes")
    lake, policy_file = str(base / "lake"), str(base / "policy.yaml")
    with open(policy_file, "w") as f:
        yaml.safe_dump(POLICY, f)
    topic = kafka_broker.create_topic("events")
    producer = threading.Thread(target=produce, args=(kafka_broker, topic, PRODUCED, 30.0, 5))
    producer.start()
    rng = random.Random(13)
    try:
        for _ in range(2):
            stream(kafka_broker, topic, lake, policy_file, kill_after=rng.uniform(0, 6))
    finally:
        producer.join()
    stream(kafka_broker, topic, lake, policy_file)  # to the end of the topic, no crash
    return topic, lake


def test_records_are_journaled_exactly_once_despite_kills(spark, killed_lake):
    topic, lake = killed_lake
    rows = journal.read(spark, lake).where(kafka_source.of_topic(topic))
    assert rows.count() == PRODUCED
    assert rows.select("partition", "offset").distinct().count() == PRODUCED
    assert rows.where(F.col("source_line") != F.col("offset")).count() == 0


def test_outputs_after_kills_equal_a_replay_of_the_journal(spark, killed_lake):
    _, lake = killed_lake
    run(spark, lake, Job.spec(Policy.from_dict(POLICY)), target="replayed")
    assert target_hash(spark, target_dir(lake, "production")) == target_hash(spark, target_dir(lake, "replayed"))


def test_event_rows_keep_their_record_value_and_the_broker_append_time(spark, killed_lake):
    topic, lake = killed_lake
    rows = journal.read(spark, lake).where(kafka_source.of_topic(topic))
    parsed = F.from_json("payload", "event_time string, key string")
    assert rows.where(F.col("kind") != "event").count() == 0
    assert rows.where(parsed["key"].isNull() | (parsed["key"] != F.col("key"))).count() == 0
    # seq follows the broker's append order: arrival times never decrease along seq
    ordered = [r["arrival_time"] for r in rows.orderBy("seq").select("arrival_time").collect()]
    assert ordered == sorted(ordered)


def test_partition_count_is_read_from_the_topic_and_recorded(spark, kafka_broker, killed_lake):
    topic, lake = killed_lake
    narrow = kafka_broker.create_topic("three-partitions", partitions=3)
    assert kafka_source.describe(spark, kafka_broker.bootstrap, narrow).partitions == 3
    assert journal.declared_partitions(spark, lake, default_store()) == list(range(PARTITIONS))  # no --partitions given


def test_a_record_that_is_not_json_is_a_malformed_dead_letter_with_its_bytes(spark, kafka_broker, tmp_path):
    topic = kafka_broker.create_topic("poison")
    producer = kafka_broker.producer()
    now = datetime.now(timezone.utc)
    producer.send(topic, value=event(random.Random(1), now), partition=0)
    producer.send(topic, value=b"not json {", partition=1)
    producer.send(topic, value=b"\xff\xfe\x00binary", partition=2)
    producer.flush()
    producer.close()
    lake = str(tmp_path / "lake")
    stream_topic(spark, kafka_broker.bootstrap, topic, lake, Policy.from_dict(POLICY), until_idle=True,
                 clock="simulated")
    bad = {r["partition"]: r for r in journal.read(spark, lake).where(F.col("kind") == "malformed").collect()}
    assert bad[1]["payload"] == "not json {"
    assert bad[2]["payload"] == "<9 bytes, not UTF-8, hex: fffe0062696e617279>"  # the bytes, exactly
    assert sorted(bad) == [1, 2]
    dead = default_store().read(spark, target_dir(lake, "production").table("dead_letters"))
    assert {(r["seq"], r["reason"]) for r in dead.collect()} == {(bad[p]["seq"], "malformed") for p in (1, 2)}
    # the lag table: a row per partition of the topic, its backlog in records past the journaled offset
    lag = default_store().read(spark, target_dir(lake, "production").table("lag")).collect()
    assert sorted(r["partition"] for r in lag) == list(range(PARTITIONS))
    assert {(r["backlog"], r["backlog_unit"]) for r in lag} == {(0, "records")}
    assert all(r["bytes"] > 0 for r in lag if r["partition"] < 3)


def test_a_live_run_with_the_sources_punctuation_records_equals_a_replay_of_its_journal(spark, kafka_broker,
                                                                                          tmp_path):
    """Watermark records (`{"type": "wm", "at": time}`) in the topic, read in micro-batches of 3 records under the
    source strategy: they are journaled as punctuations, close windows as they come, and the live outputs hash
    equal to a replay of the journal."""
    topic = kafka_broker.create_topic("punctuated", partitions=2)
    producer = kafka_broker.producer()
    base = datetime(2024, 1, 1, tzinfo=timezone.utc)
    at = lambda s: (base + timedelta(seconds=s)).isoformat().replace("+00:00", "Z")  # noqa: E731
    ev = lambda s: {"event_time": at(s), "key": f"k{s % 3}", "value": float(s)}  # noqa: E731
    wm = lambda s: {"type": "wm", "at": s if isinstance(s, str) else at(s)}  # noqa: E731
    records = [(0, ev(0)), (1, ev(2)), (0, ev(4)), (1, ev(6)), (0, wm(10)), (1, wm(10)), (0, ev(12)), (1, ev(14)),
               (0, wm(20)), (1, wm(20)), (0, ev(22)), (1, wm("never"))]
    for p, value in records:
        producer.send(topic, value=json.dumps(value).encode(), partition=p)
    producer.flush()
    producer.close()
    policy = Policy.from_dict({"watermark": {"strategy": "source"}, "late_arrival_tolerance": None,
                               "early_arrival_tolerance": None, "window": {"kind": "tumbling", "size": "10s"}})
    lake = str(tmp_path / "lake")
    stream_topic(spark, kafka_broker.bootstrap, topic, lake, policy, until_idle=True, clock="simulated",
                 max_records_per_batch=3, fields=journal.SourceFields(punctuation=("type", "wm", "at")))
    counted = journal.read(spark, lake).groupBy("kind").agg(F.count("*").alias("n")).collect()
    kinds = {r["kind"]: r["n"] for r in counted}
    assert (kinds.get("punctuation"), kinds.get("event")) == (5, 7)
    store = default_store()
    dead = store.read(spark, target_dir(lake, "production").table("dead_letters")).collect()
    assert [r["reason"] for r in dead] == ["malformed"]
    windows = store.read(spark, target_dir(lake, "production").table("windows"))
    assert windows.where(F.col("emitted_at").isNotNull()).count() > 0  # punctuations closed windows as they came
    run(spark, lake, Job.spec(policy), target="replayed")
    assert target_hash(spark, target_dir(lake, "production")) == target_hash(spark, target_dir(lake, "replayed"))


def keyed_record(i: int) -> tuple[bytes | None, bytes, list[tuple[str, bytes]]]:
    """Record i of the keyed topic: (key, value, headers). Keys user0-user2 (record 9 has none), a `tenant` header
    (every 4th record has no headers; record 5 repeats `tag`, record 6 has a header not in UTF-8), record 13's value
    not JSON."""
    value = json.dumps({"event_time": f"2024-01-01T00:00:{i:02d}Z", "value": float(i)}).encode()
    headers = [] if i % 4 == 0 else [("tenant", f"t{i % 2}".encode())]
    headers += [("tag", b"a"), ("tag", b"b")] if i == 5 else [("raw", b"\xff\x00")] if i == 6 else []
    return (None if i == 9 else f"user{i % 3}".encode()), (b"not json {" if i == 13 else value), headers


def keyed_payload(i: int) -> dict:
    """What the journal's payload of record i holds: the value, the key as `kafka_key`, the headers as
    `kafka_headers` (a repeated name's values as a list; none: null); record 13 a dead letter's envelope."""
    key, value, headers = keyed_record(i)
    named: dict[str, list[str]] = {}
    for name, v in headers:
        named.setdefault(name, []).append("<2 bytes, not UTF-8, hex: ff00>" if v == b"\xff\x00" else v.decode())
    named = {n: v[0] if len(v) == 1 else v for n, v in named.items()}
    kept = {"kafka_key": key and key.decode(), "kafka_headers": named or None}
    return {"value_text": value.decode(), **kept} if i == 13 else {**json.loads(value), **kept}


def test_a_source_keeping_record_keys_and_headers_journals_them_and_its_jobs_read_them(spark, kafka_broker,
                                                                                        tmp_path):
    """20 records with keys and headers (some without either, a repeated header, a value that is not JSON) read by a
    source that declares `kafka: {key_as: kafka_key, headers_as: kafka_headers}` and `key_field: kafka_key`: the
    spec's job's windows are per Kafka key, a job grouping by a header's value reads it, and both jobs' live outputs
    hash equal to a replay of the journal."""
    from jobs.live import run_stream
    from jobs.live.options import KafkaSource, LiveOptions
    from replay.model.sources import KafkaFields

    topic = kafka_broker.create_topic("keyed", partitions=2)
    producer = kafka_broker.producer()
    for i in range(20):
        key, value, headers = keyed_record(i)
        producer.send(topic, value=value, key=key, headers=headers, partition=i % 2)
    producer.flush()
    producer.close()
    policy = Policy.from_dict({"late_arrival_tolerance": None, "window": {"kind": "tumbling", "size": "10s"}})
    tenants = Job.define("tenants", policy, fields={"tenant": "payload:kafka_headers.tenant::string"},
                         group_by=["tenant"], aggregates={"records": "count(*)"})
    fields = journal.SourceFields(key="kafka_key", kafka=KafkaFields("kafka_key", "kafka_headers"))
    lake = str(tmp_path / "lake")
    run_stream(spark, KafkaSource(kafka_broker.bootstrap, topic), lake, [Job.spec(policy), tenants],
               LiveOptions(until_idle=True, clock="simulated"), fields)
    rows = {r["partition"] + 2 * r["offset"]: r for r in journal.read(spark, lake).collect()}
    assert {i: json.loads(r["payload"]) for i, r in rows.items()} == {i: keyed_payload(i) for i in range(20)}
    assert rows[0]["payload"] == keyed_record(0)[1].decode()[:-1] + ',"kafka_key":"user0","kafka_headers":null}'
    assert [i for i, r in sorted(rows.items()) if r["kind"] == "malformed"] == [13]
    assert all(r["key"] == keyed_payload(i)["kafka_key"] for i, r in rows.items() if i != 13)
    store = default_store()
    windows = store.read(spark, target_dir(lake, "production").table("windows"))
    per_key = {r["key"]: r["n"] for r in windows.groupBy("key").agg(F.sum("count").alias("n")).collect()}
    assert per_key == {"user0": 6, "user1": 6, "user2": 6, None: 1}  # record 9 has no key, 13 is a dead letter
    by_tenant = store.read(spark, target_dir(lake, "production", job="tenants").table("windows"))
    per_tenant = {r["tenant"]: r["n"] for r in by_tenant.groupBy("tenant").agg(F.sum("records").alias("n")).collect()}
    assert per_tenant == {"t0": 5, "t1": 9, None: 5}
    for job in (Job.spec(policy), tenants):
        run(spark, lake, job, target="replayed")
        assert (target_hash(spark, target_dir(lake, "production", job=job.name))
                == target_hash(spark, target_dir(lake, "replayed", job=job.name)))


def test_a_create_time_topic_is_refused_with_a_one_line_reason(spark, kafka_broker, tmp_path):
    topic = kafka_broker.create_topic("producer-clocks", timestamp_type="CreateTime")
    with pytest.raises(ValueError) as refused:
        stream_topic(spark, kafka_broker.bootstrap, topic, str(tmp_path / "lake"), Policy.from_dict(POLICY),
                     until_idle=True)
    message = str(refused.value)
    assert "\n" not in message and "CreateTime" in message and "--trust-create-time" in message
    assert not os.path.exists(tmp_path / "lake")


def test_the_stream_command_refusing_a_topic_creates_no_lake(spark, kafka_broker, tmp_path, monkeypatch, capsys):
    from replay.cli import main as cli
    from tests.support import POLICY_FILE

    monkeypatch.setenv("RETRACE_LOG_DIR", str(tmp_path / "logs"))
    topic = kafka_broker.create_topic("cli-producer-clocks", timestamp_type="CreateTime")
    code = cli.main(["stream", "--kafka-bootstrap", kafka_broker.bootstrap, "--topic", topic,
                     "--lake", str(tmp_path / "lake"), "--policy", POLICY_FILE, "--max-batches", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "CreateTime" in err, err
    assert not os.path.exists(tmp_path / "lake")


def test_a_create_time_topic_is_read_when_producer_times_are_trusted(spark, kafka_broker, tmp_path):
    topic = kafka_broker.create_topic("trusted-clocks", timestamp_type="CreateTime")
    produced_at = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
    producer = kafka_broker.producer()
    producer.send(topic, value=event(random.Random(2), produced_at), partition=0,
                  timestamp_ms=int(produced_at.timestamp() * 1000))
    producer.flush()
    producer.close()
    lake = str(tmp_path / "lake")
    stream_topic(spark, kafka_broker.bootstrap, topic, lake, Policy.from_dict(POLICY), until_idle=True,
                 clock="simulated", trust_create_time=True)
    rows = journal.read(spark, lake).where(F.col("kind") == "event").select(F.unix_micros("arrival_time").alias("t"))
    assert [r["t"] for r in rows.collect()] == [int(produced_at.timestamp()) * 1_000_000]


def test_the_dagster_live_job_reads_a_topic_given_in_its_config(spark, kafka_broker, tmp_path):
    from orchestration.live import live_job
    from orchestration.resources import RetraceResource

    topic = kafka_broker.create_topic("dagster-live")
    produce(kafka_broker, topic, 40, 0.5, seed=8)
    lake = str(tmp_path / "lake")
    config = {"ops": {"live_micro_batches": {"config": {"kafka_bootstrap": kafka_broker.bootstrap, "topic": topic}}}}
    from orchestration.resources import EmailAlertSink, LogFileAlertSink, WebhookAlertSink

    sinks = {"alert_webhook": WebhookAlertSink(), "alert_email": EmailAlertSink(),
             "alert_log": LogFileAlertSink(path=str(tmp_path / "alerts.jsonl"))}
    result = live_job.execute_in_process(run_config=config, resources={"retrace": RetraceResource(lake=lake), **sinks})
    assert result.success
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    assert output.event_specific_data.metadata["summary"].data["rows"] >= 40  # events, and clock rows if any
    assert journal.read(spark, lake).where(kafka_source.of_topic(topic)).count() == 40
