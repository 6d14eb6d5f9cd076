"""The time semantics on Spark, as functions from DataFrames to DataFrames: no I/O, no clock.
`pipeline` chains them; decisions (spec 3), watermarks (4), windows (5), idle timeout (6), metrics (8)."""
