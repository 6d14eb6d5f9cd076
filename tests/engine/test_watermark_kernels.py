"""The sequential passes' kernels agree with the definitions they compute, row by row: the JVM operators' first
pass (`FirstPass`) and the decide pass's running maxima and their minimum (`Decide`), through Spark."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from replay.engine.decisions import NEG
from replay.engine.kernels import Stretches, chunk_pass, decide_pass
from replay.engine.watermarks import Starts
from replay.model.policy import Policy

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
    """Row by row: each partition's value after and before every row, and the least of all partitions after it."""
    current, after, before, least = list(start), [], [], []
    for g, v in zip(group, values):
        before.append(current[g])
        current[g] = max(current[g], v)
        after.append(current[g])
        least.append(min(current))
    return after, before, least


@st.composite
def chunked(draw):
    """Rows in seq order cut into chunks of `size` seq values, each chunk with every partition's start value."""
    partitions = draw(st.integers(1, 5))
    n = draw(st.integers(1, 30))
    size = draw(st.integers(1, 12))
    group = draw(st.lists(st.integers(0, partitions - 1), min_size=n, max_size=n))
    values = draw(st.lists(VALUES, min_size=n, max_size=n))
    chunks_ = (n - 1) // size + 1
    start = draw(st.lists(st.lists(VALUES, min_size=chunks_, max_size=chunks_), min_size=partitions,
                          max_size=partitions))
    return group, values, start, size


def _expected(group, values, start, size):
    out = []
    for c in range(0, len(group), size):
        after, before, least = _running(group[c:c + size], values[c:c + size], [s[c // size] for s in start])
        out += list(zip(range(c, c + size), after, before, least))
    return out


# clock rows with no late tolerance: each one's contribution to its partition's watermark is its arrival
CLOCKS = Policy.from_dict({"late_arrival_tolerance": "0s"})
CLOCK_ROWS = "seq long, partition int, arrival long, chunk int"


def _clocks(rows):
    """Clock rows as the decide pass reads them (`kernels.decide_pass`)."""
    none = lambda t: F.lit(None).cast(t)  # noqa: E731
    return rows.select("seq", "partition", none("long").alias("offset"), F.lit(1).cast("byte").alias("kind"),
                       "arrival", none("long").alias("et"), none("string").alias("key"), none("double").alias("value"),
                       F.lit(False).alias("duplicate"), "chunk", *(["row"] if "row" in rows.columns else []))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(chunked())
def test_the_decide_pass_keeps_each_partitions_running_maximum_from_its_chunks_start_and_their_minimum(spark, case):
    group, values, start, size = case
    rows = spark.createDataFrame([(i, g, v, i // size) for i, (g, v) in enumerate(zip(group, values))], CLOCK_ROWS)
    starts = Starts(0, {p: start[p] for p in range(len(start))})
    got = decide_pass(_clocks(rows), starts, CLOCKS, "all").select("seq", "wp", "owm").collect()
    assert sorted(tuple(r) for r in got) == [(i, a, m) for i, a, _, m in _expected(group, values, start, size)]


def test_in_stretches_the_decide_pass_leaves_out_the_rows_the_semantics_skip_and_starts_each_stretch_afresh(spark):
    where = Stretches(first=np.array([0, 3]), last=np.array([2, 5]), rows=np.array([3, 3]), maxima=[])
    rows = spark.createDataFrame(
        [(0, 0, 5, True), (1, 1, 7, True), (2, 0, 9, False), (3, 0, 1, True), (4, 1, 2, True), (5, 1, 4, True)],
        "seq long, partition int, arrival long, row boolean").coalesce(1).withColumn("chunk", F.lit(0))
    starts = Starts(0, {0: [NEG, 6], 1: [NEG, 3]})  # per stretch, not per chunk
    got = decide_pass(_clocks(rows), starts, CLOCKS, "all", where).select("seq", "wp", "owm")
    assert sorted(tuple(r) for r in got.collect()) == [(0, 5, NEG), (1, 7, 5), (3, 6, 3), (4, 3, 3), (5, 4, 4)]


def test_a_task_holding_part_of_a_stretch_stops_the_pass_naming_the_seq_around_it(spark):
    where = Stretches(first=np.array([0]), last=np.array([3]), rows=np.array([4]), maxima=[])
    rows = spark.createDataFrame([(0, 0, 5, True), (1, 0, 7, True)],
                                 "seq long, partition int, arrival long, row boolean")
    ran = decide_pass(_clocks(rows.coalesce(1).withColumn("chunk", F.lit(0))), Starts(0, {0: [NEG]}), CLOCKS, "all",
                      where)
    with pytest.raises(Exception, match="holds part of the journal's rows around seq 0"):
        ran.collect()


PASS_ROWS = ("chunk int, file long, partition int, seq long, offset long, hour long, event boolean, row boolean, "
             "floor long, events long")


def _first_pass(spark, rows, tasks=1):
    """`chunk_pass` over `rows` (PASS_ROWS tuples): in one task in seq order, or scattered over `tasks` tasks
    (a round-robin repartition: each task's rows out of seq order, so the operator sorts them)."""
    df = spark.createDataFrame(rows, PASS_ROWS)
    return chunk_pass(df.coalesce(1) if tasks == 1 else df.repartition(tasks))


@st.composite
def journals(draw):
    """Events in seq order (partition, offset, hour), offsets mostly rising, and chunk boundaries in seq."""
    n = draw(st.integers(0, 40))
    partition = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    offset = draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
    hour = sorted(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    size = draw(st.integers(1, 12))
    tasks = draw(st.sampled_from([1, 3]))
    return partition, offset, hour, size, tasks


@settings(max_examples=30, deadline=None, derandomize=True)
@given(journals())
def test_offset_steps_joined_up_count_each_events_step_from_its_partitions_previous_event(spark, journal):
    partition, offset, hour, size, tasks = journal
    expected, last = {}, {}
    for p, o, h in zip(partition, offset, hour):
        if p in last and o <= last[p]:
            b, n = expected.get((p, h), (0, 0))
            expected[(p, h)] = (b + (o < last[p]), n + 1)
        last[p] = o
    rows = [(i // size, 0, p, i, o, h, True, True, NEG, NEG)
            for i, (p, o, h) in enumerate(zip(partition, offset, hour))]
    got = _first_pass(spark, rows, tasks).steps
    assert got == sorted((p, h, b, n) for (p, h), (b, n) in expected.items())


@settings(max_examples=20, deadline=None, derandomize=True)
@given(chunks(), st.integers(1, 12), st.sampled_from([1, 3]))
def test_chunk_maxima_are_each_partitions_greatest_values_over_the_rows_acted_on(spark, chunk, size, tasks):
    group, values, _ = chunk
    acted = [i % 3 != 2 for i in range(len(group))]  # every third row is one the semantics skip
    expected = {}
    for i, (g, v, a) in enumerate(zip(group.tolist(), values.tolist(), acted)):
        if a:
            f, e = expected.get((i // size, g), (NEG, NEG))
            expected[(i // size, g)] = (max(f, v), max(e, v // 2))
    rows = [(i // size, 0, g, i, i, 0, False, a, v, v // 2) for i, (g, v, a) in enumerate(zip(group.tolist(),
                                                                                        values.tolist(), acted))]
    got = _first_pass(spark, rows, tasks).maxima
    assert got == sorted((c, g, f, e) for (c, g), (f, e) in expected.items())


def _census(found):
    s = found.stretches
    return list(zip(s.first.tolist(), s.last.tolist(), s.rows.tolist()))


def test_a_stretch_ends_at_a_gap_in_seq_and_at_a_chunks_end(spark):
    rows = [(c, 0, 0, s, s, 0, True, True, NEG, NEG) for s, c in zip([1, 2, 3, 5, 6, 7], [0, 0, 0, 0, 1, 1])]
    assert _census(_first_pass(spark, rows)) == [(1, 3, 3), (5, 5, 1), (6, 7, 2)]
    assert _census(_first_pass(spark, [])) == []


def test_a_stretch_ends_where_the_file_its_rows_were_read_from_changes(spark):
    rows = [(0, f, 0, s, s, 0, True, True, NEG, NEG) for s, f in zip([1, 2, 3, 4], [9, 9, 8, 8])]
    assert _census(_first_pass(spark, rows)) == [(1, 2, 2), (3, 4, 2)]


def test_rows_of_other_kinds_count_towards_their_stretch_but_not_its_steps_or_maxima(spark):
    rows = [(0, 0, 0, 0, 5, 0, True, True, 10, 1), (0, 0, -1, 1, 0, 0, False, False, 99, 99),
            (0, 0, 0, 2, 3, 0, True, True, 20, 2)]
    found = _first_pass(spark, rows)
    assert _census(found) == [(0, 2, 3)]
    assert found.steps == [(0, 0, 1, 1)]
    assert found.maxima == [(0, 0, 20, 2)]
