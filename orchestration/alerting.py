"""Placeholder: the alert sensors and their resources arrive with the quality work."""
from __future__ import annotations

SENSORS: list = []
RESOURCES: dict = {}
