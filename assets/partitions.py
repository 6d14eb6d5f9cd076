"""Hourly partitions by arrival time, shared by every Retrace asset (the generator starts at 2024-01-01)."""
from __future__ import annotations

import dagster as dg

HOURLY = dg.HourlyPartitionsDefinition(start_date="2024-01-01-00:00", timezone="UTC")
