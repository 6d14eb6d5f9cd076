"""Retrace assets (see README)."""
