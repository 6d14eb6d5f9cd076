"""The Kafka tests' broker: a real single-node KRaft broker, one per test module (tests/support/kafka_broker.py)."""
from tests.support.kafka_broker import kafka_broker  # noqa: F401
