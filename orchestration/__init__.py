"""The Dagster code location: `definitions.py` (one `Definitions`), Dagster jobs, schedules, sensors and resources;
it imports `assets/`, never the reverse."""
