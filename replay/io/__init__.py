"""The edges: the SparkSession, Delta tables, the journal and its sources (landing stores, Kafka),
checkpoints, locks, and table maintenance."""
