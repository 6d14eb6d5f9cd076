"""Where Retrace's data lives and how Spark runs, as one Dagster resource (configurable per deployment)."""
from __future__ import annotations

import os

import dagster as dg

from jobs.demo import DEFAULT_POLICY

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RetraceResource(dg.ConfigurableResource):
    """The lake, the landing source and the production policy; Spark is the shared local or cluster session."""

    lake: str = os.path.join(ROOT, ".retrace", "lake")
    landing: str = os.path.join(ROOT, ".retrace", "landing")
    policy_file: str = DEFAULT_POLICY

    def spark(self):
        from replay.spark import get_spark

        return get_spark("retrace-dagster")

    def policy(self, override: dict | None = None):
        """The production policy, or a what-if policy: the file's fields updated with `override`."""
        from replay.policy import Policy

        base = Policy.from_yaml(self.policy_file)
        return base if not override else Policy.from_dict({**base.to_dict(), **override})
