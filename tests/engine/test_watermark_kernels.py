"""The watermark pass's numpy kernels agree with the definitions they vectorize, row by row (no Spark)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.engine.decisions import NEG
from replay.engine.kernels import (
    Stretches,
    by_stretch,
    chunk_maxima,
    chunk_steps,
    grouped_running_max,
    joined_up,
    minimum_of_steps,
    stretches,
)

VALUES = st.one_of(st.just(NEG), st.integers(-1_000, 1_000), st.integers(-2**61, 2**61))


@st.composite
def chunks(draw):
    """A chunk's rows in seq order: each row's partition and contribution, and every partition's start value."""
    partitions = draw(st.integers(1, 6))
    n = draw(st.integers(0, 40))
    group = np.array(draw(st.lists(st.integers(0, partitions - 1), min_size=n, max_size=n)), dtype=np.int64)
    values = np.array(draw(st.lists(VALUES, min_size=n, max_size=n)), dtype=np.int64)
    start = np.array(draw(st.lists(VALUES, min_size=partitions, max_size=partitions)), dtype=np.int64)
    return group, values, start


def _running(group, values, start):
    """Row by row: each partition's value after and before every row."""
    current, after, before = list(start), [], []
    for g, v in zip(group, values):
        before.append(current[g])
        current[g] = max(current[g], v)
        after.append(current[g])
    return after, before, current


@settings(max_examples=300, deadline=None, derandomize=True)
@given(chunks())
def test_grouped_running_max_is_each_partitions_maximum_from_its_start(chunk):
    group, values, start = chunk
    after, before, _ = _running(group, values, start)
    wp, w_before = grouped_running_max(group, values, start[group])
    assert wp.tolist() == after
    assert w_before.tolist() == before


@settings(max_examples=300, deadline=None, derandomize=True)
@given(chunks())
def test_minimum_of_steps_is_the_least_partition_value_after_each_row(chunk):
    group, values, start = chunk
    after, before, end = _running(group, values, start)
    current, expected = list(start), []
    for g, a in zip(group, after):
        current[g] = a
        expected.append(min(current))
    got = minimum_of_steps(np.array(after, dtype=np.int64), np.array(before, dtype=np.int64), min(end))
    assert got.tolist() == expected


def test_a_partition_without_rows_in_the_chunk_holds_the_minimum_at_its_start_value():
    group, values, start = np.array([0, 0]), np.array([5, 9]), np.array([NEG, 3])
    wp, before = grouped_running_max(group, values, start[group])
    assert minimum_of_steps(wp, before, min(9, 3)).tolist() == [3, 3]


@st.composite
def journals(draw):
    """Events in seq order (partition, offset, hour), offsets mostly rising, and chunk boundaries in seq."""
    n = draw(st.integers(0, 40))
    partition = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    offset = draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
    hour = sorted(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    size = draw(st.integers(1, 12))
    return partition, offset, hour, size


@settings(max_examples=300, deadline=None, derandomize=True)
@given(journals())
def test_offset_steps_per_chunk_joined_up_count_each_events_step_from_its_partitions_previous_event(journal):
    partition, offset, hour, size = journal
    expected, last = {}, {}
    for p, o, h in zip(partition, offset, hour):
        if p in last and o <= last[p]:
            b, n = expected.get((p, h), (0, 0))
            expected[(p, h)] = (b + (o < last[p]), n + 1)
        last[p] = o
    seq = np.arange(len(partition), dtype=np.int64)
    rows = []
    for chunk in range(0, len(seq), size):  # chunk by chunk, rows in a shuffled order as a task gets them
        within = np.random.default_rng(chunk).permutation(seq[chunk:chunk + size])
        columns = [np.array(c, dtype=np.int64)[within] for c in (partition, seq, offset, hour)]
        rows += [(chunk // size, *r) for r in chunk_steps(*columns)]
    assert joined_up(rows) == sorted((p, h, b, n) for (p, h), (b, n) in expected.items())


@settings(max_examples=200, deadline=None, derandomize=True)
@given(chunks())
def test_chunk_maxima_are_each_partitions_greatest_values(chunk):
    group, values, _ = chunk
    expected = {}
    for g, v, w in zip(group.tolist(), values.tolist(), (-values).tolist()):
        a, b = expected.get(g, (NEG, NEG))
        expected[g] = (max(a, v), max(b, w))
    assert chunk_maxima(group, values, -values) == sorted((g, a, b) for g, (a, b) in expected.items())


def test_a_stretch_ends_at_a_gap_in_seq_and_at_a_chunks_end():
    seq, chunk = np.array([1, 2, 3, 5, 6, 7, 7]), np.array([0, 0, 0, 0, 1, 1, 1])
    assert stretches(seq, chunk) == [(0, 3), (3, 4), (4, 6), (6, 7)]
    assert stretches(seq[:0], chunk[:0]) == []


def test_a_stretch_ends_where_the_file_its_rows_were_read_from_changes():
    seq, chunk, file = np.array([1, 2, 3, 4]), np.zeros(4, dtype=np.int64), np.array([9, 9, 8, 8])
    assert stretches(seq, chunk, file) == [(0, 2), (2, 4)]


def test_a_tasks_rows_come_out_stretch_by_stretch_without_the_rows_the_semantics_skip_in_any_order_read():
    where = Stretches(first=np.array([0, 3, 5]), last=np.array([2, 4, 8]), rows=np.array([3, 2, 4]), maxima=[])
    seq, row = np.arange(9), np.array([True, True, False, True, True, True, True, False, True])
    for order in (np.arange(9), np.array([8, 0, 4, 2, 6, 1, 7, 3, 5])):
        table = pa.table({"seq": seq[order], "row": row[order]})
        got = {i: sorted(part.column("seq").to_pylist()) for i, part in by_stretch(table.to_batches(4), where)}
        assert got == {0: [0, 1], 1: [3, 4], 2: [5, 6, 8]}
