"""Where Retrace's data lives and how Spark runs, as one Dagster resource (configurable per deployment)."""
from __future__ import annotations

import os

import dagster as dg

from jobs.demo import DEFAULT_POLICY

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {"lake": "RETRACE_LAKE", "landing": "RETRACE_LANDING", "policy_file": "RETRACE_POLICY",
       "spark_conf_file": "RETRACE_SPARK_CONF", "partitions": "RETRACE_PARTITIONS", "source": "RETRACE_SOURCE"}


class RetraceResource(dg.ConfigurableResource):
    """The lake, the landing source and the production policy; Spark is the shared local or cluster session."""

    lake: str = os.path.join(ROOT, ".retrace", "lake")
    landing: str = os.path.join(ROOT, ".retrace", "landing")
    policy_file: str = DEFAULT_POLICY
    spark_conf_file: str = ""  # a spark-defaults style file (e.g. infra/spark/cluster.conf); empty = local
    partitions: int = 8  # the landing source's partition count, for the live job (the generator makes 8)
    source: str = ""  # the landing's source in the jobs folder (its payload fields; the live job runs its jobs)

    @classmethod
    def from_env(cls, environ=None) -> "RetraceResource":
        """The defaults, overridden by RETRACE_LAKE, RETRACE_LANDING, RETRACE_POLICY, RETRACE_SPARK_CONF, RETRACE_PARTITIONS
        (read when the code location loads, so a test or a deployment points it at its own folders)."""
        environ = os.environ if environ is None else environ
        return cls(**{field: environ[var] for field, var in ENV.items() if environ.get(var)})

    def spark(self):
        from replay.io.spark import get_spark

        return get_spark("retrace-dagster", conf_file=self.spark_conf_file or None)

    def source_fields(self):
        """Which payload fields hold the event time and the key: the source's, else the spec's names."""
        from replay.io.journal import SourceFields

        if not self.source:
            return SourceFields()
        src = self._catalog().sources.get(self.source)
        if src is None:
            raise ValueError(f"RETRACE_SOURCE: {self.source!r} is not a source of the jobs folder")
        return SourceFields(src.event_time_field, src.key_field)

    def source_jobs(self) -> tuple:
        """The jobs of the jobs folder that read the landing's source (the live job runs them all)."""
        if not self.source:
            return ()
        return tuple(j for _, j in sorted(self._catalog().jobs.items()) if j.source == self.source)

    def _catalog(self):
        from jobs.catalog import folder
        from replay.model.jobs import load_folder

        return load_folder(folder())

    def policy(self, override: dict | None = None):
        """The production policy, or a what-if policy: the file's fields updated with `override`."""
        from replay.model.policy import Policy

        base = Policy.from_yaml(self.policy_file)
        return base if not override else Policy.from_dict({**base.to_dict(), **override})
