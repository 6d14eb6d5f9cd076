"""The Dagster code location of Retrace: one `Definitions` (assets, checks, schedules and sensors
arrive with the orchestration issue; the replay itself is `replay.runner.run`)."""
from __future__ import annotations

import dagster as dg

defs = dg.Definitions()
