"""Frozen, validated values: durations and instants, the time policy, users' jobs, the engine's carried state."""
