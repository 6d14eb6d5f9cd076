"""The live job (`jobs/live/`) and the example jobs a deployment starts from (`jobs/examples/`: YAML job files
and their sources)."""
