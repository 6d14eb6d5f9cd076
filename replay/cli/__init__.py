"""The `replay` command: `arguments` declares each sub-command, `main` calls the operation and prints what it
returns; `failures` turns Spark, Delta and file-system failures into one line and a log file."""
