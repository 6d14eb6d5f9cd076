"""What the engine carries from one stretch of the journal to the next: everything a later row's
decisions depend on, so a micro-batch (or a replay from a checkpoint) continues exactly where the rows
before it left off. Small values live on the driver; open windows and substream maxima are DataFrames."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from pyspark.sql import DataFrame

NEG = -(2**62)  # -infinity for watermarks, in microseconds; far below any real instant and safe to subtract from

WINDOWS_SCHEMA = "scope int, group_key string, k long, count long, sum decimal(38,12)"
KEYS_SCHEMA = "partition int, key string, e long"


@dataclass(frozen=True)
class PartitionState:
    """One source partition after its last row."""

    floor: int = NEG        # bounded: max over its rows of arrival - L
    events: int = NEG       # bounded, no substreams: max over its passed events of t - O
    wp: int = NEG           # its partition watermark
    counted: int = 0        # punctuated: events counted towards every_events
    ref: int | None = None  # punctuated `every`: the timestamp of the last reference event


@dataclass(frozen=True)
class ScopeState:
    """One output scope (a partition when independent, else the merged source) after its last row."""

    owm: int = NEG                 # output watermark, idle-timeout raises included
    raised: int = NEG              # the highest idle-timeout raise so far
    last_event: int | None = None  # idle timeout: the latest event arrival


@dataclass(frozen=True)
class State:
    """The engine's state after journal row `seq` (-1: before the journal starts)."""

    seq: int = -1
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    scopes: dict[int, ScopeState] = field(default_factory=dict)
    windows: DataFrame | None = None  # open windows (WINDOWS_SCHEMA): what has been counted, not emitted
    keys: DataFrame | None = None     # substreams: max t - O per (partition, key) (KEYS_SCHEMA)
    # the rows of `windows` that the last stretch added (a job's members of windows still open), when the engine
    # tells them apart: a checkpoint then saves these alone, not every open window's members again
    windows_added: DataFrame | None = None

    @property
    def empty(self) -> bool:
        return self.seq < 0

    def partition(self, p: int) -> PartitionState:
        return self.partitions.get(p, PartitionState())

    def scope(self, s: int) -> ScopeState:
        return self.scopes.get(s, ScopeState())

    def advanced(self, seq: int) -> "State":
        """The same state, having seen rows the semantics ignore (malformed) up to `seq`."""
        return replace(self, seq=max(self.seq, seq))
