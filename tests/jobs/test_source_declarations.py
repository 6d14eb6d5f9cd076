"""Source declarations (issue 47, item 1): where the journal's partition, offset and arrival time come from,
validated when sources.yaml (or the command line) is read, in one line naming the file, source and field."""
from __future__ import annotations

import pytest

from replay.model.jobs import JobError, load_folder
from replay.model.sources import Origins, SourceError, from_options


def _sources(tmp_path, text: str):
    (tmp_path / "sources.yaml").write_text(text)
    return load_folder(tmp_path).sources


def test_a_source_without_declarations_reads_the_three_fields_of_each_line_as_before(tmp_path):
    src = _sources(tmp_path, "plain:\n  key_field: device\n")["plain"]
    assert src.origins == Origins() and src.origins.from_fields and src.partitions is None
    assert not src.origins.declared  # its plain files are placed by the defaults (sources.PLAIN_BATCH, PLAIN_LIVE)


def test_declaring_the_old_layout_is_a_declaration(tmp_path):
    src = _sources(tmp_path, "old:\n  partition: {field: partition}\n")["old"]
    assert src.origins.from_fields and src.origins.declared  # a plain file's lines stay malformed


def test_declared_origins_and_partitions_are_read_from_sources_yaml(tmp_path):
    src = _sources(tmp_path, "logs:\n  arrival_time: file_modified\n  partition: {hash: device, partitions: 4}\n"
                             "  offset: line\n")["logs"]
    assert (src.origins.arrival, src.origins.partition, src.origins.partition_field, src.origins.offset) == (
        "file_modified", "hash", "device", "line")
    assert src.partitions == (0, 1, 2, 3)


@pytest.mark.parametrize("declaration, field", [
    ("arrival_time: sometimes", "arrival_time"), ("arrival_time: {field: 'a b'}", "arrival_time.field"),
    ("partition: {hash: device, partitions: 0}", "partition.partitions"),
    ("partition: {file: 'x.json'}", "partition.file"), ("offset: {lines: 1}", "offset"),
    ("partitions: [1, 1]", "partitions"),
])
def test_a_bad_declaration_is_refused_in_one_line_naming_the_file_source_and_field(tmp_path, declaration, field):
    with pytest.raises(JobError) as refused:
        _sources(tmp_path, f"logs:\n  {declaration}\n")
    message = str(refused.value)
    assert "\n" not in message and str(tmp_path / "sources.yaml") in message and f"source logs: {field}:" in message


def test_the_command_line_gives_the_same_declaration_as_sources_yaml(tmp_path):
    src = _sources(tmp_path, "logs:\n  arrival_time: {field: ts}\n  partition: {file: '{topic}+{partition}+{x}.json'}\n"
                             "  offset: line\n  partitions: [0, 2]\n")["logs"]
    assert from_options("field:ts", "file:{topic}+{partition}+{x}.json", "line", "0,2") == (src.origins, src.partitions)
    with pytest.raises(SourceError, match="^command line: partition.partitions: 'x'"):
        from_options(None, "hash:device:x", None)


@pytest.mark.parametrize("name, partition", [
    ("3/part-0.json", 3), ("topics/t/partition=12/t+12+0000.json", 12), ("part-0.json", None), ("a/b.json", None)])
def test_partition_file_is_the_files_folder_named_n_or_name_equals_n(name, partition):
    assert Origins(partition="file").file_partition(name) == partition


def test_partition_file_pattern_reads_kafka_connect_names():
    origins = from_options(None, "file:{topic}+{partition}+{start}.json.gz", None)[0]
    assert origins.file_partition("topics/orders/orders+7+0000000042.json.gz") == 7
    assert origins.file_partition("orders-7.json.gz") is None
