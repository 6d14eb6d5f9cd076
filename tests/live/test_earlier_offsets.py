"""The live job's bound on earlier offsets (jobs/live/offsets.py): a batch reads the journal's history for repeated
(partition, offset) pairs only when one of its offsets is not above everything its partition had before."""
from __future__ import annotations

from jobs.live.offsets import Bound


def test_a_batch_above_every_earlier_offset_is_cleared():
    assert Bound({0: 5, 1: 9}, floor=2).clears({0: 6, 1: 10, 2: 3})


def test_an_offset_at_or_below_its_partitions_bound_is_not_cleared():
    assert not Bound({0: 5, 1: 9}).clears({0: 6, 1: 9})


def test_a_partition_without_a_high_is_bounded_by_the_floor():
    assert not Bound({0: 5}, floor=2).clears({3: 2})


def test_no_earlier_events_clear_any_batch():
    assert Bound().clears({0: 0, 7: -4})


def test_a_batch_raises_the_bound_of_its_partitions_only():
    after = Bound({0: 5}, floor=2).after({0: 3, 1: 8})
    assert (after.of(0), after.of(1), after.of(2)) == (5, 8, 2)
