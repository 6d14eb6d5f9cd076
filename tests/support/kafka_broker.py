"""A real single-node Kafka broker (KRaft) on 127.0.0.1 for the tests, from the jars set-up resolved into
infra/jars/kafka-broker: no Docker, no mock, no network but loopback. Stopped (with its children) at the end."""
from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass

import pytest

from tests.support import ROOT

BROKER_JARS = os.path.join(ROOT, "infra", "jars", "kafka-broker")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Broker:
    bootstrap: str
    log: str

    def create_topic(self, name: str, partitions: int = 4, timestamp_type: str = "LogAppendTime") -> str:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="retrace-tests")
        try:
            # retention.ms -1: the broker's retention check (every 5 min) deletes a segment whose newest
            # timestamp is older than 7 days, and a CreateTime test topic holds records stamped in the past
            admin.create_topics([NewTopic(name, partitions, 1, topic_configs={
                "message.timestamp.type": timestamp_type, "retention.ms": "-1"})])
        finally:
            admin.close()
        return name

    def producer(self):
        from kafka import KafkaProducer

        return KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5, acks="all")


def cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (as `kafka-storage random-uuid`).

    Like Kafka's own `Uuid.randomUuid`, never one starting with "-": the storage tool would read it as an option.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _server_properties(folder: str, port: int, controller: int) -> str:
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": os.path.join(folder, "data"),
        "num.partitions": "4",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }
    path = os.path.join(folder, "server.properties")
    with open(path, "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in props.items())
    return path


def _wait_for_port(port: int, proc: subprocess.Popen, log: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the Kafka broker exited with {proc.returncode}; see {log}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"the Kafka broker did not listen on 127.0.0.1:{port} within {timeout:.0f}s; see {log}")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the broker's process group (it and every child), SIGKILL what is left after 20 s."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    try:  # children still in the group after the leader exited
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    """A single-node KRaft broker on free loopback ports, its heap capped at 512 MiB."""
    folder = str(tmp_path_factory.mktemp("kafka"))
    port, controller = free_port(), free_port()
    props = _server_properties(folder, port, controller)
    classpath = os.path.join(BROKER_JARS, "*")
    java = ["java", "-Xmx512m", "-Xms128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
            "-cp", classpath]
    subprocess.run([*java, "kafka.tools.StorageTool", "format", "--standalone", "-t", cluster_id(), "-c", props],
                   check=True, capture_output=True, timeout=120)
    log = os.path.join(folder, "broker.log")
    with open(log, "w") as out:
        proc = subprocess.Popen([*java, "kafka.Kafka", props], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        _wait_for_port(port, proc, log)
        yield Broker(f"127.0.0.1:{port}", log)
    finally:
        _stop(proc)
