"""The Dagster assets and their checks: the shared journal, and per job (made by factories over
`replay.model.jobs.Job`) its outputs, checks and advice. The code location (`orchestration/`) imports them."""
