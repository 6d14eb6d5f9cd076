"""Helpers the tests share: lakes and landing streams, journals and policies for the property tests, the
model of a job, a Kafka broker, the Dagster webserver, alert receivers, Spark settings for small data."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout
POLICY_FILE = os.path.join(ROOT, "infra", "policies", "production.yaml")


def target_dir(lake: str, target: str = "production", job: str = "default"):
    """Where a job's target lives in a lake (`replay.io.lake`): the spec's job's by default."""
    from replay.io.lake import Lake

    return Lake(lake).target(job, target)


def hours_from(start: str = "2024-01-01T00:00:00Z"):
    """A code location's hourly partitions from `start` (default: where the generator's arrivals start)."""
    from datetime import datetime

    from assets.partitions import hourly

    return hourly(datetime.fromisoformat(start.replace("Z", "+00:00")))


def copy_table(spark, source: str, dest: str, change=None) -> None:
    """A copy of the Delta table at `source` (with `change(df)` applied), its latest commit's metadata kept: a
    decisions table that stores exceptions stays one (`replay.ops.outputs`), the same rows read from it."""
    from replay.io.store import commit_metadata, default_store

    store = default_store()
    df = store.read(spark, source)
    store.write(change(df) if change else df, dest, mode="overwrite", metadata=commit_metadata(spark, source))
