"""The live job for the spec's job on a policy, as the tests drive it: whole (`stream_files`, `stream_topic`:
options as keywords) or one micro-batch at a time (`file_stream`)."""
from __future__ import annotations

from jobs.live import run_stream
from jobs.live.files import FileStream
from jobs.live.options import FileSource, KafkaSource, LiveOptions
from replay.model.jobs import Job
from replay.model.policy import Policy


def file_stream(spark, lake: str, policy: Policy, clock: str = "simulated", partitions: int = 4,
                **options) -> FileStream:
    """A live stream whose batches the test hands over (`process(lines)`); `options`: LiveOptions' other fields."""
    return FileStream(spark, lake, [Job.spec(policy)], LiveOptions(clock=clock, partitions=partitions, **options))


def stream_files(spark, landing: str, lake: str, policy: Policy, max_files_per_batch=None, max_bytes_per_batch=None,
                 **options):
    """`replay stream --landing`: `options` are LiveOptions' fields."""
    return run_stream(spark, FileSource(landing, max_files_per_batch, max_bytes_per_batch), lake, [Job.spec(policy)],
                      LiveOptions(**options))


def stream_topic(spark, bootstrap: str, topic: str, lake: str, policy: Policy, trust_create_time: bool = False,
                 max_records_per_batch=None, fields=None, **options):
    """`replay stream --kafka-bootstrap`: `options` are LiveOptions' fields; `fields` the source's SourceFields."""
    return run_stream(spark, KafkaSource(bootstrap, topic, trust_create_time, max_records_per_batch), lake,
                      [Job.spec(policy)], LiveOptions(**options), fields)
