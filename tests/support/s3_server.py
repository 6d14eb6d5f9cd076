"""A real S3 API server on 127.0.0.1 for the tests: S3Proxy (from the jars the test command's set-up resolved into
infra/jars/s3proxy) with its filesystem backend in a temporary folder. No Docker, no mock, no network but loopback;
stopped (with its children) at the end."""
from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass

import pytest

from tests.kafka_broker import _stop, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
S3PROXY_JARS = os.path.join(ROOT, "infra", "jars", "s3proxy")
REGION = "us-east-1"


@dataclass
class S3Server:
    endpoint: str  # http://127.0.0.1:PORT
    access_key: str
    secret_key: str
    bucket: str  # made when the server started, named for its port
    folder: str  # the filesystem backend's folder: a bucket is a sub-folder, an object a file
    log: str

    def client(self):
        """A boto3 S3 client of the server (path-style addressing: the bucket is in the path, not the host)."""
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name=REGION,
                            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))

    def spark_conf(self) -> dict[str, str]:
        """The settings that point a session's `s3a://` paths at this server (Hadoop's S3A, as `spark.hadoop.*`)."""
        return {"spark.hadoop.fs.s3a.endpoint": self.endpoint,
                "spark.hadoop.fs.s3a.endpoint.region": REGION,
                "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
                "spark.hadoop.fs.s3a.aws.credentials.provider":
                    "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
                "spark.hadoop.fs.s3a.access.key": self.access_key,
                "spark.hadoop.fs.s3a.secret.key": self.secret_key}


def _properties(folder: str, port: int, access_key: str, secret_key: str) -> str:
    props = {
        "s3proxy.endpoint": f"http://127.0.0.1:{port}",
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": access_key,
        "s3proxy.credential": secret_key,
        "jclouds.provider": "filesystem-nio2",
        "jclouds.identity": access_key,  # S3Proxy requires them; the filesystem backend does not check them
        "jclouds.credential": secret_key,
        "jclouds.filesystem.basedir": os.path.join(folder, "data"),
    }
    path = os.path.join(folder, "s3proxy.properties")
    with open(path, "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in props.items())
    return path


def _logback(folder: str) -> str:
    """Warnings and errors only: without a configuration S3Proxy logs at DEBUG (gigabytes for a listing loop)."""
    path = os.path.join(folder, "logback.xml")
    with open(path, "w") as f:
        f.write('<configuration><appender name="out" class="ch.qos.logback.core.ConsoleAppender"><encoder>'
                "<pattern>%d{HH:mm:ss.SSS} %-5level %logger{30} %msg%n</pattern></encoder></appender>"
                '<root level="WARN"><appender-ref ref="out"/></root></configuration>\n')
    return path


def _wait_until_listening(port: int, proc: subprocess.Popen, log: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"S3Proxy exited with {proc.returncode}; see {log}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"S3Proxy did not listen on 127.0.0.1:{port} within {timeout:.0f}s; see {log}")


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """S3Proxy on a free loopback port with one bucket, its heap capped at 256 MiB."""
    if not os.path.isdir(S3PROXY_JARS):
        raise RuntimeError(f"no S3Proxy jars in {S3PROXY_JARS}: run `bash infra/test.sh` (its set-up resolves them)")
    folder = str(tmp_path_factory.mktemp("s3proxy"))
    os.makedirs(os.path.join(folder, "data"))
    port, access_key, secret_key = free_port(), "retrace-test", "retrace-test-secret"
    props = _properties(folder, port, access_key, secret_key)
    log = os.path.join(folder, "s3proxy.log")
    java = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", f"-Dlogback.configurationFile={_logback(folder)}",
            "-cp", os.path.join(S3PROXY_JARS, "*"), "org.gaul.s3proxy.Main", "--properties", props]
    with open(log, "w") as out:
        proc = subprocess.Popen(java, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_until_listening(port, proc, log)
        # a bucket name per server: Hadoop caches an S3A file system per bucket for the life of the JVM
        server = S3Server(f"http://127.0.0.1:{port}", access_key, secret_key, f"retrace-{port}",
                          os.path.join(folder, "data"), log)
        server.client().create_bucket(Bucket=server.bucket)
        yield server
    finally:
        _stop(proc)
