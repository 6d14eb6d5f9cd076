"""What the journal held before a live batch, per partition, kept in memory by the live job: an upper bound on
its event offsets. A batch whose every offset lies above the bound repeats no earlier (partition, offset), so its
duplicate check reads no history from the journal. Why: that reads the journal's newest version, and rebuilding
its state from the Delta log took about 1.8 s of a 26 s live batch in the crash tests' stream. The bound is read
from the journal once per process and then follows the batches.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F



@dataclass(frozen=True)
class Bound:
    """Event offsets up to a seq are at most `highs[p]` in partition p, and at most `floor` in any other
    (None: there are none)."""

    highs: dict[int, int] = field(default_factory=dict)
    floor: int | None = None

    def of(self, partition: int) -> int | None:
        return self.highs.get(partition, self.floor)

    def clears(self, first_offsets: dict[int, int]) -> bool:
        """Whether every partition's least offset in a batch lies above the bound (no repeat is possible)."""
        return all(self.of(p) is None or lo > self.of(p) for p, lo in first_offsets.items())

    def after(self, last_offsets: dict[int, int]) -> "Bound":
        """The bound once a batch with these greatest offsets per partition is journaled too."""
        highs = dict(self.highs)
        for p, hi in last_offsets.items():
            highs[p] = hi if self.of(p) is None else max(self.of(p), hi)
        return Bound(highs, self.floor)


@dataclass
class _At:
    """What is known of the journal up to one seq: the bound (None: not read yet)."""

    bound: Bound | None = None


class EarlierRows:
    """What the journal held up to the last few seqs a job's checkpoint was at (the spec job's and its users'
    jobs', which decide the same batches)."""

    KEEP = 4

    def __init__(self):
        self._at: dict[int, _At] = {}
        self._lock = threading.Lock()  # the jobs on the source decide a batch side by side

    def history(self, journaled: DataFrame, seq: int, span: dict) -> DataFrame | None:
        """The journal rows up to `seq` that could hold the batch's (partition, offset) pairs (`span`:
        `lag.reads`), or None when none can."""
        first = span["first_offsets"]
        if not first:  # no events: nothing to repeat
            return None
        with self._lock:  # measured once, whichever job asks first
            at = self._get(seq)
            if at.bound is None:
                at.bound = _measure(journaled, seq, min(first.values()))
            clear = at.bound.clears(first)
        return None if clear else journaled.where(F.col("seq") <= seq).where(F.col("offset").between(*span["offsets"]))

    def advance(self, seq: int, to_seq: int, span: dict) -> None:
        """The batch of `span`, after `seq`, was decided: what is known at `seq` follows to `to_seq`."""
        with self._lock:
            at = self._at.get(seq)
            if at is not None:
                self._keep(to_seq, _At(None if at.bound is None else at.bound.after(span["last_offsets"])))

    def _get(self, seq: int) -> _At:
        return self._at[seq] if seq in self._at else self._keep(seq, _At(Bound()) if seq < 0 else _At())

    def _keep(self, seq: int, at: _At) -> _At:
        """Store what is known at `seq`, forgetting all but the KEEP latest seqs (and `seq` itself)."""
        self._at[seq] = at
        for old in sorted(self._at)[:-self.KEEP]:
            if old != seq:
                del self._at[old]
        return at


def _measure(journaled: DataFrame, seq: int, least: int) -> Bound:
    """The greatest event offset per partition up to `seq` among offsets from `least` on (Delta skips the files
    below it); a partition with none there has only offsets below `least`."""
    records = F.col("kind").isin("event", "punctuation")  # the broker's records: a punctuation has an offset too
    found = (journaled.where((F.col("seq") <= seq) & records & (F.col("offset") >= least))
             .groupBy("partition").agg(F.max("offset").alias("high")).collect())
    return Bound({r["partition"]: r["high"] for r in found}, least - 1)
