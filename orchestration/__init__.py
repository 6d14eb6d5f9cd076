"""Retrace orchestration (see README)."""
