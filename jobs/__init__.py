"""Retrace jobs (see README)."""
