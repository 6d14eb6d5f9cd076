"""The test broker's own set-up: a cluster id Kafka's storage tool accepts every time."""

from tests.support.kafka_broker import cluster_id


def test_a_cluster_id_never_starts_with_a_dash_the_storage_tool_would_read_as_an_option():
    ids = [cluster_id() for _ in range(5000)]
    assert not [text for text in ids if text.startswith("-")]
    assert all(len(text) == 22 for text in ids)
