"""Placeholder: the data-quality asset checks (Great Expectations) arrive with the quality work."""
from __future__ import annotations

CHECKS: list = []
