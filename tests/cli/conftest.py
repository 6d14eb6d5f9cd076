"""The tests' S3 server (S3Proxy), for the standalone cluster's lake on object storage."""
from tests.support.s3_server import s3_server  # noqa: F401
