"""Retrace's operations as a library: run, verify, diff, advise, hash, summarize, maintain, migrate, generate and
the demo. Each takes a SparkSession (where it needs one) and returns a result; none prints, so the CLI, the live
job and the Dagster code location share them."""
