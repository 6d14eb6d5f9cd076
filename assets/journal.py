"""The `journal` asset: every landing file journaled, exactly once (`replay.io.journal.ingest`).

Partitioned like the outputs (hours of arrival) so that a range selected in the asset graph can include
it; ingesting is idempotent and takes every new landing file whatever the range, because `seq` (the
journal's order) must follow the landing files' order.
"""

import dagster as dg


def journal_asset(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    """The `journal` asset on the code location's hourly partitions."""
    return dg.asset(
        key="journal",
        partitions_def=partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        group_name="retrace",
        kinds={"spark", "delta"},
        description="The arrival journal (Delta): one row per observed event or estimated arrival time, in seq order.",
        required_resource_keys={"retrace"},
    )(_ingested)


def _ingested(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    from pyspark.sql import functions as F

    from replay.io import journal as journal_table

    retrace = context.resources.retrace
    spark = retrace.spark()
    r = journal_table.ingest(spark, retrace.landing, retrace.lake, fields=retrace.source_fields())
    for change in r.changed:  # journaled landing files are immutable: a change is reported, never re-read
        context.log.warning(change.line())
    window = context.partition_time_window
    rows = journal_table.read(spark, retrace.lake).where(
        (F.col("arrival_time") >= F.lit(window.start)) & (F.col("arrival_time") < F.lit(window.end))).count()
    return dg.MaterializeResult(metadata={
        "files_ingested": len(r.files), "files_already_journaled": r.skipped, "rows_ingested": r.rows,
        "malformed_rows": r.malformed, "changed_landing_files": len(r.changed),
        "duplicate_offsets": r.duplicate_offsets, "backward_offsets": r.backward_offsets,
        **({"journal_version": r.version} if r.version is not None else {}),
        "rows_in_range": rows, "landing": dg.MetadataValue.path(retrace.landing),
        "lake": dg.MetadataValue.path(retrace.lake),
    })
