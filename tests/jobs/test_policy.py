"""The policy value (spec section 2): defaults, validation messages, YAML round trip, immutability. No Spark."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from replay.model.policy import Policy, PolicyError, Punctuated, Session, Source, Window
from tests.support import ROOT

# The defaults column of the spec's table (section 2), in the canonical `to_dict` form.
SPEC_DEFAULTS = {
    "early_arrival_tolerance": "5m",
    "early_arrival_action": "drop",
    "late_arrival_tolerance": "5s",
    "late_arrival_action": "adjust",
    "out_of_order_tolerance": "0s",
    "out_of_order_action": "adjust",
    "substream_by": None,
    "partitions": "merged",
    "watermark": {"strategy": "bounded"},
    "window": None,
    "group_by_key": True,
    "allowed_lateness": "0s",
    "idle_timeout": None,
    "flush_at_end": True,
}


def test_defaults_equal_the_spec_table():
    assert Policy().to_dict() == SPEC_DEFAULTS
    assert Policy.from_dict({}) == Policy()
    assert Policy.from_dict(None) == Policy()


def test_default_durations_are_in_microseconds():
    p = Policy()
    assert p.early_arrival_tolerance == 5 * 60 * 1_000_000
    assert p.late_arrival_tolerance == 5 * 1_000_000
    assert p.out_of_order_tolerance == 0
    assert p.allowed_lateness == 0
    assert p.idle_timeout is None
    assert not p.punctuated and not p.independent


# (case id, raw policy, field the message must name, value the message must name)
BAD_FIELDS = [
    ("bad_duration_string", {"late_arrival_tolerance": "5x"}, "late_arrival_tolerance", "5x"),
    ("duration_not_a_string", {"out_of_order_tolerance": 5}, "out_of_order_tolerance", "5"),
    ("negative_tolerance", {"late_arrival_tolerance": "-5s"}, "late_arrival_tolerance", "-5s"),
    ("negative_allowed_lateness", {"allowed_lateness": "-1s"}, "allowed_lateness", "-1s"),
    ("unknown_early_action", {"early_arrival_action": "accept"}, "early_arrival_action", "accept"),
    ("unknown_late_action", {"late_arrival_action": "ignore"}, "late_arrival_action", "ignore"),
    ("unknown_out_of_order_action", {"out_of_order_action": "reorder"}, "out_of_order_action", "reorder"),
    ("unknown_partitions_mode", {"partitions": "split"}, "partitions", "split"),
    ("unknown_top_level_field", {"late_tolerance": "5s"}, "unknown field", "late_tolerance"),
    ("unknown_window_kind", {"window": {"kind": "sliding", "size": "1m"}}, "window.kind", "sliding"),
    ("session_with_size", {"window": {"kind": "session", "gap": "1m", "size": "1m"}}, "window.size", "1m"),
    ("session_with_hop", {"window": {"kind": "session", "gap": "1m", "hop": "30s"}}, "window.hop", "30s"),
    ("session_with_offset", {"window": {"kind": "session", "gap": "1m", "offset": "5s"}}, "window.offset", "5s"),
    ("session_without_gap", {"window": {"kind": "session"}}, "window.gap", "missing"),
    ("session_gap_zero", {"window": {"kind": "session", "gap": "0s"}}, "window.gap", "0s"),
    ("session_gap_negative", {"window": {"kind": "session", "gap": "-1m"}}, "window.gap", "-1m"),
    ("source_with_every_events", {"watermark": {"strategy": "source", "every_events": 10}},
     "watermark.every_events", "10"),
    ("source_with_every", {"watermark": {"strategy": "source", "every": "30s"}}, "watermark.every", "30s"),
    ("source_with_delay", {"watermark": {"strategy": "source", "delay": "1s"}}, "watermark.delay", "1s"),
    ("unknown_strategy", {"watermark": {"strategy": "adaptive"}}, "watermark.strategy", "adaptive"),
    ("hopping_without_hop", {"window": {"kind": "hopping", "size": "1m"}}, "window.hop", "missing"),
    ("punctuated_without_every", {"watermark": {"strategy": "punctuated", "delay": "1s"}}, "watermark",
     "every_events"),
    ("every_events_zero", {"watermark": {"strategy": "punctuated", "every_events": 0}}, "watermark.every_events",
     "0"),
    ("substream_by_not_a_field_of_the_spec_job", {"substream_by": "region"}, "substream_by", "region"),
    ("group_by_key_not_bool", {"group_by_key": "yes"}, "group_by_key", "yes"),
    ("flush_at_end_not_bool", {"flush_at_end": 1}, "flush_at_end", "1"),
    ("unknown_timestamp_by", {"timestamp_by": "ingest_time"}, "timestamp_by", "ingest_time"),
    ("timestamp_by_null", {"timestamp_by": None}, "timestamp_by", "None"),
]


@pytest.mark.parametrize("raw, field, value", [c[1:] for c in BAD_FIELDS], ids=[c[0] for c in BAD_FIELDS])
def test_bad_field_raises_policy_error_naming_field_and_value(raw, field, value):
    with pytest.raises(PolicyError) as info:
        Policy.from_dict(raw)
    message = str(info.value)
    assert field in message, message
    assert value in message, message


def test_policy_error_is_a_value_error():
    assert issubclass(PolicyError, ValueError)


def test_bad_field_in_yaml_file_names_file_field_and_value(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("late_arrival_tolerance: 5x\n")
    with pytest.raises(PolicyError) as info:
        Policy.from_yaml(path)
    message = str(info.value)
    assert str(path) in message and "late_arrival_tolerance" in message and "5x" in message, message


def test_non_mapping_yaml_file_raises_policy_error(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- late_arrival_tolerance: 5s\n- window: null\n")
    with pytest.raises(PolicyError) as info:
        Policy.from_yaml(path)
    message = str(info.value)
    assert str(path) in message and "mapping" in message and "list" in message, message


def test_missing_yaml_file_raises_policy_error_naming_it(tmp_path):
    path = tmp_path / "nowhere.yaml"
    with pytest.raises(PolicyError) as info:
        Policy.from_yaml(path)
    assert str(path) in str(info.value)


def test_invalid_yaml_syntax_raises_policy_error(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("window: {kind: tumbling\n")
    with pytest.raises(PolicyError) as info:
        Policy.from_yaml(path)
    assert str(path) in str(info.value)



@pytest.mark.parametrize("content, words", [
    (b"", "is empty"),
    (b"   \n# only a comment\n", "is empty"),
    (b"late_arrival_tolerance: 5s\nwindow: {kind: tumbling, size: 1m\xe9}\n", "not UTF-8"),
])
def test_an_empty_or_undecodable_policy_file_is_refused_in_one_line_naming_it(tmp_path, content, words):
    path = tmp_path / "policy.yaml"
    path.write_bytes(content)
    with pytest.raises(PolicyError) as info:
        Policy.from_yaml(path)
    message = str(info.value)
    assert str(path) in message and words in message and "\n" not in message, message


def test_a_policy_directory_is_refused_in_one_line_naming_it(tmp_path):
    with pytest.raises(PolicyError) as info:
        Policy.from_yaml(tmp_path)
    message = str(info.value)
    assert str(tmp_path) in message and "directory" in message and "\n" not in message, message


def test_an_empty_mapping_is_the_spec_defaults(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("{}\n")
    assert Policy.from_yaml(path) == Policy()


ROUND_TRIP_YAML = """\
early_arrival_tolerance: 10s
early_arrival_action: adjust
late_arrival_tolerance: null
late_arrival_action: drop
out_of_order_tolerance: 250ms
out_of_order_action: accept
substream_by: key
partitions: independent
watermark: {strategy: punctuated, every_events: 3, every: 2m, delay: -1us}
window: {kind: hopping, size: 1m, hop: 90s, offset: 15s}
group_by_key: false
allowed_lateness: 1h
idle_timeout: 30s
flush_at_end: false
"""


def test_yaml_file_round_trips_through_to_dict_and_from_dict(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(ROUND_TRIP_YAML)
    p = Policy.from_yaml(path)
    assert p.to_dict() == {
        "early_arrival_tolerance": "10s", "early_arrival_action": "adjust",
        "late_arrival_tolerance": None, "late_arrival_action": "drop",
        "out_of_order_tolerance": "250ms", "out_of_order_action": "accept",
        "substream_by": "key", "partitions": "independent",
        "watermark": {"strategy": "punctuated", "every_events": 3, "every": "2m", "delay": "-1us"},
        "window": {"kind": "hopping", "size": "1m", "hop": "90s", "offset": "15s"},
        "group_by_key": False, "allowed_lateness": "1h", "idle_timeout": "30s", "flush_at_end": False,
    }
    assert Policy.from_dict(p.to_dict()) == p
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(p.to_dict()))
    assert Policy.from_yaml(again) == p


def test_yaml_file_values_are_parsed_into_typed_fields(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(ROUND_TRIP_YAML)
    p = Policy.from_yaml(path)
    assert p.watermark == Punctuated(every_events=3, every=120_000_000, delay=-1)
    assert p.window == Window("hopping", 60_000_000, 90_000_000, 15_000_000)
    assert p.out_of_order_tolerance == 250_000
    assert p.independent and p.punctuated


def test_production_policy_file_round_trips():
    import os

    path = os.path.join(ROOT, "infra", "policies", "production.yaml")
    p = Policy.from_yaml(path)
    assert Policy.from_dict(p.to_dict()) == p
    assert p.window == Window.tumbling(60_000_000)


def test_policy_is_frozen():
    p = Policy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.late_arrival_tolerance = 0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.watermark.strategy = "punctuated"  # type: ignore[misc]
    assert p.late_arrival_tolerance == 5_000_000


def test_negative_punctuation_delay_is_accepted():
    p = Policy.from_dict({"watermark": {"strategy": "punctuated", "every_events": 1, "delay": "-1us"}})
    assert p.watermark == Punctuated(every_events=1, every=None, delay=-1)
    assert p.to_dict()["watermark"] == {"strategy": "punctuated", "every_events": 1, "delay": "-1us"}


def test_timestamp_by_defaults_to_event_time():
    assert Policy().timestamp_by == "event_time"
    assert Policy.from_dict({}).timestamp_by == "event_time"
    assert not Policy().by_arrival


def test_timestamp_by_arrival_time_is_accepted():
    p = Policy.from_dict({"timestamp_by": "arrival_time"})
    assert p.timestamp_by == "arrival_time" and p.by_arrival


def test_timestamp_by_event_time_is_left_out_of_to_dict_so_existing_policy_hashes_stay():
    from replay.model.policy import policy_hash

    explicit = Policy.from_dict({"timestamp_by": "event_time", "window": {"kind": "tumbling", "size": "1m"}})
    assert "timestamp_by" not in explicit.to_dict()
    assert explicit.to_dict() == Policy.from_dict({"window": {"kind": "tumbling", "size": "1m"}}).to_dict()
    assert policy_hash(Policy()) == "e7b91c11c077a7d7"  # the defaults' hash before timestamp_by existed


def test_timestamp_by_arrival_time_is_in_to_dict_and_changes_the_policy_hash():
    from replay.model.policy import policy_hash

    p = Policy.from_dict({"timestamp_by": "arrival_time"})
    assert p.to_dict() == {"timestamp_by": "arrival_time", **SPEC_DEFAULTS}
    assert policy_hash(p) != policy_hash(Policy())


def test_timestamp_by_arrival_time_round_trips_through_yaml(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("timestamp_by: arrival_time\nout_of_order_tolerance: 10s\n")
    p = Policy.from_yaml(path)
    assert p.by_arrival and p.out_of_order_tolerance == 10_000_000
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(p.to_dict()))
    assert Policy.from_yaml(again) == p


def test_timestamp_by_arrival_time_with_a_punctuated_watermark_is_refused_naming_both():
    with pytest.raises(PolicyError) as info:
        Policy.from_dict({"timestamp_by": "arrival_time",
                          "watermark": {"strategy": "punctuated", "every_events": 1}})
    message = str(info.value)
    assert "timestamp_by" in message and "arrival_time" in message and "punctuated" in message, message


def test_timestamp_by_arrival_time_with_a_punctuated_watermark_is_refused_when_built_directly():
    with pytest.raises(PolicyError):
        Policy(timestamp_by="arrival_time", watermark=Punctuated(every_events=1))


def test_timestamp_by_arrival_time_in_a_yaml_file_with_a_punctuated_watermark_names_the_file(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("timestamp_by: arrival_time\nwatermark: {strategy: punctuated, every: 30s}\n")
    with pytest.raises(PolicyError) as info:
        Policy.from_yaml(path)
    message = str(info.value)
    assert str(path) in message and "timestamp_by" in message and "punctuated" in message, message


def test_timestamp_by_arrival_time_keeps_the_arrival_tolerances_it_ignores():
    p = Policy.from_dict({"timestamp_by": "arrival_time", "late_arrival_tolerance": "1s",
                          "substream_by": "key", "partitions": "independent"})
    assert p.late_arrival_tolerance == 1_000_000 and p.substream_by == "key" and p.independent


def test_a_session_window_has_a_gap_and_round_trips():
    p = Policy.from_dict({"window": {"kind": "session", "gap": "90s"}})
    assert p.window == Session(90_000_000) and p.sessions
    assert p.to_dict()["window"] == {"kind": "session", "gap": "90s"}
    assert Policy.from_dict(p.to_dict()) == p


def test_the_source_strategy_takes_no_other_field_and_round_trips():
    p = Policy.from_dict({"watermark": {"strategy": "source"}, "late_arrival_tolerance": None})
    assert p.watermark == Source() and p.source_punctuated and not p.punctuated
    assert p.to_dict()["watermark"] == {"strategy": "source"}
    assert Policy.from_dict(p.to_dict()) == p


def test_timestamp_by_arrival_time_with_the_source_strategy_is_refused_naming_both():
    """The arrival time fixes the watermark (latest arrival - O): there is no room for the source's own."""
    with pytest.raises(PolicyError) as info:
        Policy.from_dict({"timestamp_by": "arrival_time", "watermark": {"strategy": "source"}})
    message = str(info.value)
    assert "timestamp_by" in message and "arrival_time" in message and "'source'" in message, message
    assert "\n" not in message


def test_substream_by_may_name_a_field_the_job_declares():
    p = Policy.from_dict({"substream_by": "device"}, fields=("key", "device"))
    assert p.substream_by == "device"


def test_substream_by_a_field_the_job_does_not_have_names_the_fields_it_has():
    with pytest.raises(PolicyError) as info:
        Policy.from_dict({"substream_by": "devise"}, fields=("key", "device"))
    message = str(info.value)
    assert "substream_by: 'devise'" in message and "device, key" in message, message


def test_substream_by_in_a_yaml_file_for_the_spec_job_names_the_file_and_field(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("substream_by: region\n")
    with pytest.raises(PolicyError) as info:
        Policy.from_yaml(path)
    message = str(info.value)
    assert str(path) in message and "substream_by: 'region'" in message and "\n" not in message, message
