"""Hourly partitions by arrival time, shared by every Retrace asset (the generator starts at 2024-01-01), and how
a run names the partitions it covers."""
from __future__ import annotations

import dagster as dg

HOURLY = dg.HourlyPartitionsDefinition(start_date="2024-01-01-00:00", timezone="UTC")
DAGSTER_RUN = "dagster-"  # how the run id of a replay made by a Dagster run starts (its commits say so)
END_OF_JOURNAL = "end of journal"  # a run's `seq_to` when its range runs to the journal's end (not a seq)
RANGE_TAGS = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")


def partition_label(tags: dict) -> str:
    """How a run names its partitions: one key, a range `start...end`, or `all` (no partition)."""
    if tags.get("dagster/partition"):
        return tags["dagster/partition"]
    if all(tags.get(t) for t in RANGE_TAGS):
        return "...".join(tags[t] for t in RANGE_TAGS)
    return "all"
