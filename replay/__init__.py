"""Retrace: deterministic replays of event-time streaming decisions on Spark."""
