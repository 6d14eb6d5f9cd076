"""Hourly partitions by arrival time, shared by every Retrace asset of a code location, from the hour a job's data
starts (so "% filled" counts the hours the lake can hold, not every hour since a fixed date), and how a run names
the partitions it covers."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import dagster as dg

DAGSTER_RUN = "dagster-"  # how the run id of a replay made by a Dagster run starts (its commits say so)
END_OF_JOURNAL = "end of journal"  # a run's `seq_to` when its range runs to the journal's end (not a seq)
RANGE_TAGS = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")
KEY_FORMAT = "%Y-%m-%d-%H:%M"  # an hourly partition's key (Dagster's)
START_SETTING = "RETRACE_PARTITIONS_START"  # the configured first partition (RetraceResource.partitions_start)


def hourly(start: datetime) -> dg.HourlyPartitionsDefinition:
    """Hourly partitions in UTC from `start`'s hour."""
    return dg.HourlyPartitionsDefinition(start_date=floor_hour(start).strftime(KEY_FORMAT), timezone="UTC")


def partitions_start(lake: str, configured: str = "", now: datetime | None = None) -> datetime:
    """Where a code location's partitions start: the configured time's hour, else the hour of the journal's first
    arrival (from the Delta log's statistics: no Spark at load), else (an empty lake) the current hour. Read when the
    code location loads: reload it after a first ingest into an empty lake."""
    from replay.io.lake import Lake
    from replay.io.store import least_value
    from replay.model.durations import parse_instant

    if configured:
        return floor_hour(_instant(parse_instant(configured, START_SETTING)))
    first = least_value(Lake(lake).journal, "arrival_time")
    if first is not None:
        return floor_hour(_instant(parse_instant(first, "journal arrival_time")))
    return floor_hour(now or datetime.now(timezone.utc))


def floor_hour(d: datetime) -> datetime:
    return d.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def _instant(us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=us)


def hour_window(key: str) -> tuple[datetime, datetime]:
    """An hourly partition key's [start, end), whatever the partitions' start."""
    start = datetime.strptime(key, KEY_FORMAT).replace(tzinfo=timezone.utc)
    return start, start + timedelta(hours=1)


def hour_key(us: int) -> str:
    """The key of the hourly partition holding the instant `us` (microseconds since the epoch)."""
    return floor_hour(_instant(us)).strftime(KEY_FORMAT)


def partition_label(tags: dict) -> str:
    """How a run names its partitions: one key, a range `start...end`, or `all` (no partition)."""
    if tags.get("dagster/partition"):
        return tags["dagster/partition"]
    if all(tags.get(t) for t in RANGE_TAGS):
        return "...".join(tags[t] for t in RANGE_TAGS)
    return "all"
