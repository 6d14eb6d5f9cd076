"""`replay migrate`: move a lake written before jobs to today's layout, once.

Before jobs, the spec's count/sum job wrote LAKE/outputs/<target>/<table> (and its lock LAKE/outputs/<target>.lock,
its advice LAKE/advice/); it is now the job named `default`, whose outputs lie where every job's do
(`replay.io.lake`). The Delta tables are moved as folders: their logs name their files relative to the table,
and their checkpoints were made with the policy alone, which is still the spec's job's signature.
"""
from __future__ import annotations

import os
from contextlib import ExitStack

from replay.io import lake_marker, locks
from replay.io.lake import Lake
from replay.model.jobs import SPEC_JOB


def migrate(lake: str) -> str:
    """Move the old layout's entries under the spec's job; returns what was done, as one line. Holds the
    journal's lock and every old target's, so no writer runs meanwhile; refuses when a place is taken."""
    place = Lake(lake)
    if not os.path.isdir(lake):
        raise FileNotFoundError(f"no lake at {lake}")
    lake_marker.claim(lake)  # a lake made before markers is marked with the layout it is in
    if not place.has_old_layout():
        return f"{lake} is in today's layout: nothing to move"
    moves = place.old_moves(SPEC_JOB)
    taken = [to for _, to in moves if os.path.exists(to)]
    if taken:
        raise ValueError(f"{taken[0]} exists already; move it aside, then run `replay migrate --lake {lake}` again")
    old_locks = [src for src, _ in moves if src.endswith(".lock")]
    with ExitStack() as held:
        held.enter_context(locks.hold(place.journal_lock, "replay migrate"))
        for path in old_locks:
            held.enter_context(locks.hold(path, "replay migrate"))
        for src, to in moves:
            os.makedirs(os.path.dirname(to), exist_ok=True)
            os.rename(src, to)
        os.rmdir(place.old_outputs())
        lake_marker.mark(lake)  # today's layout
    moved = [os.path.relpath(src, lake) for src, _ in moves if not src.endswith(".lock")]
    return (f"moved {', '.join(moved) or 'nothing'} of {lake} to {os.path.join('jobs', SPEC_JOB)}/ "
            f"(the spec's job is the job named {SPEC_JOB!r})")
