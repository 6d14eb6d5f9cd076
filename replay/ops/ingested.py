"""What an interrupted `replay ingest` left in the journal, in one sentence. An ingest adds all its rows in one Delta
commit of the journal near its end (`replay.io.journal.ingest`), then records the landing files it read
(`journal_files`); so the journal either has none of its rows or all of them, and its version says which."""
from __future__ import annotations

from pyspark.sql import SparkSession

from replay.io.lake import Lake
from replay.io.store import default_store


def journal_version(spark: SparkSession, lake: str) -> int | None:
    """The journal's latest version (None: no journal yet)."""
    return default_store().version(Lake(lake).journal)


def interrupted_ingest(spark: SparkSession, lake: str, before: int | None, again: str) -> str:
    """`before`: the journal's version when the ingest started; `again`: the command that finishes the work."""
    try:
        now = journal_version(spark, lake)
    except Exception as e:  # noqa: BLE001 - the session may be unusable after the interrupt
        return (f"could not read the journal to say what is left ({type(e).__name__}); `{again}` journals only the "
                "files not journaled yet")
    if now == before:
        state = "no journal yet" if before is None else f"still version {before}"
        return (f"the journal is untouched ({state}): an ingest adds its rows in one commit at its end and it had "
                f"not committed; `{again}` journals the files")
    return (f"the journal holds this ingest's rows (version {now}, committed before the interrupt); `{again}` "
            "finishes recording the landing files' checksums and journals no file twice")
