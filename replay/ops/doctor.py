"""`replay doctor`: what Retrace needs from the machine, each checked in one verdict (`ok`, `warn`, `fail`) with what
to do: Java, the jars (Spark's own, Retrace's resolved jars, the JVM operator's when it is built), the lake (writable,
and whether its lock works), and S3 credentials when the lake or the landing is on S3. Nothing starts Spark and
nothing is created: a lake that does not exist yet is judged by the folder that would hold it.
"""
from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass

from replay.io import lake_marker
from replay.io import spark as spark_settings
from replay.io.secrets import redact

SUPPORTED_JAVA = (17, 21)  # what Spark 4.2 runs on; set-up installs 17
SPARK_POM = os.path.join(spark_settings.ROOT, "infra", "maven", "spark", "pom.xml")
# the jars Retrace's Spark sessions need beyond pyspark's own (infra/maven/spark/pom.xml and their runtime)
NEEDED_JARS = ("delta-spark_2.13-", "delta-storage-", "spark-sql-kafka-0-10_2.13-")
OPERATOR_JAR = spark_settings.OPERATOR_JAR
SETUP = "bash infra/setup.sh --no-demo"


@dataclass(frozen=True)
class Check:
    name: str
    verdict: str  # ok, warn or fail
    text: str  # what was found and, unless ok, what to do

    def line(self) -> str:
        return f"{self.verdict:<4}  {self.name}: {redact(self.text)}"


def doctor(lake: str | None = None, landing: str | None = None) -> list[Check]:
    """Every check, in order; the lake's and S3's only when a lake or an S3 path is given."""
    checks = [java(), spark_jars(), retrace_jars(), operator_jar()]
    if lake:
        checks += [lake_writable(lake), lake_locks(lake)]
    s3 = [p for p in (lake, landing) if p and _on_s3(p)]
    if s3:
        checks.append(s3_credentials(s3))
    return checks


def java() -> Check:
    """The `java` Spark starts: $JAVA_HOME/bin/java, else the first on PATH (as spark-submit finds it)."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not found or not os.access(found, os.X_OK):
        where = f"$JAVA_HOME/bin/java ({found})" if home else "PATH"
        return Check("java", "fail", f"no java in {where}; install Java 17 (`{SETUP}` installs it) or set JAVA_HOME")
    try:
        said = subprocess.run([found, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("java", "fail", f"{found} does not run ({e}); reinstall Java 17 or set JAVA_HOME")
    m = re.search(r'version "(\d+)(?:\.(\d+))?[^"]*"', said)
    if not m:
        return Check("java", "fail", f"{found} did not say its version ({said.strip()[:120]!r})")
    major = int(m.group(1)) if m.group(1) != "1" else int(m.group(2) or 0)  # "1.8.0" is Java 8
    where = f"{m.group(0).split(chr(34))[1]} at {os.path.realpath(found)}"
    if major in SUPPORTED_JAVA:
        return Check("java", "ok", where)
    if major < min(SUPPORTED_JAVA):
        return Check("java", "fail", f"{where}: Spark 4.2 needs Java 17 or 21; install Java 17 and set JAVA_HOME")
    return Check("java", "warn", f"{where}: Spark 4.2 is tested on Java 17 and 21; set JAVA_HOME to a Java 17")


def spark_jars() -> Check:
    """pyspark's own jars (Spark itself)."""
    import pyspark

    folder = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    core = glob.glob(os.path.join(folder, "spark-core_*.jar"))
    if not core:
        return Check("spark jars", "fail", f"no spark-core jar in {folder}: reinstall pyspark ({SETUP})")
    broken = _broken_jars(core + glob.glob(os.path.join(folder, "spark-sql_*.jar")))
    if broken:
        return Check("spark jars", "fail", f"{broken} in {folder} cannot be opened: reinstall pyspark ({SETUP})")
    return Check("spark jars", "ok", f"pyspark {pyspark.__version__}: {len(os.listdir(folder))} jars in {folder}")


def retrace_jars(folder: str | None = None) -> Check:
    """The jars set-up resolves with Maven (replay.io.spark.JARS, or $RETRACE_JARS): the ones Retrace needs are
    there, each opens, and the folder's stamp says set-up finished resolving it from today's pom."""
    folder = folder or spark_settings.JARS
    redo = (f"remove {folder} and run `{SETUP}`" if folder == spark_settings.JARS and not os.environ.get("RETRACE_JARS")
            else f"copy the jars of infra/jars/spark into {folder} again")
    if not os.path.isdir(folder):
        return Check("retrace jars", "fail", f"{folder} does not exist: {redo}")
    jars = sorted(glob.glob(os.path.join(folder, "*.jar")))
    missing = [n.rstrip("-") for n in NEEDED_JARS if not any(os.path.basename(j).startswith(n) for j in jars)]
    if missing:
        return Check("retrace jars", "fail", f"{folder} lacks {', '.join(missing)}: {redo}")
    broken = _broken_jars(jars)
    if broken:
        return Check("retrace jars", "fail", f"{broken} in {folder} cannot be opened (cut short?): {redo}")
    stamp = os.path.join(folder, ".resolved")
    if folder == spark_settings.JARS and os.path.isfile(SPARK_POM):
        if not os.path.isfile(stamp):
            return Check("retrace jars", "warn", f"{len(jars)} jars in {folder}, but set-up did not finish resolving "
                                                 f"them (no .resolved stamp): {redo}")
        if open(stamp).read().strip() != _sha256(SPARK_POM):
            return Check("retrace jars", "warn", f"{folder} was resolved from an older infra/maven/spark/pom.xml: "
                                                 f"run `{SETUP}`")
    return Check("retrace jars", "ok", f"{len(jars)} jars in {folder}, each readable")


def operator_jar(path: str = OPERATOR_JAR) -> Check:
    """The engine's JVM operator (replay/engine/jvm), which set-up compiles: every replay runs it."""
    if not os.path.isfile(path):
        return Check("operator jar", "fail", f"no {path}: run `{SETUP}` (it compiles it), or unset "
                                             "RETRACE_OPERATOR_JAR")
    broken = _broken_jars([path])
    if broken:
        return Check("operator jar", "fail", f"{path} cannot be opened: remove it and run `{SETUP}`")
    with zipfile.ZipFile(path) as z:
        classes = [n for n in z.namelist() if n.endswith(".class")]
    if not classes:
        return Check("operator jar", "fail", f"{path} holds no classes: remove it and run `{SETUP}`")
    return Check("operator jar", "ok", f"{path}: {len(classes)} classes")


def lake_writable(lake: str) -> Check:
    """A file can be made and removed in the lake (or, before the lake exists, in the folder that would hold it)."""
    if _on_s3(lake):
        return Check("lake", "ok", f"{lake} is on S3: checked with the S3 credentials below")
    folder, note = _existing(lake)
    if not os.path.isdir(folder):
        return Check("lake", "fail", f"{folder} is a file, not a folder: choose another --lake")
    try:
        lake_marker.check(lake)  # a folder of the user's that every command would refuse
    except ValueError as e:
        return Check("lake", "fail", str(e))
    try:
        fd, probe = tempfile.mkstemp(prefix=".doctor-", dir=folder)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        return Check("lake", "fail", f"cannot write in {folder} ({e.strerror or e}): give the user running replay "
                                     f"write access to it, or choose another --lake")
    return Check("lake", "ok", f"{lake} is writable{note}")


def _lease_check(lake: str) -> Check:
    """On object storage a lock is a lease (replay.io.leases): the store must refuse a second put-if-absent."""
    from replay.io import lake_fs

    probe = f"{lake.rstrip('/')}/.doctor-lease-{os.getpid()}"
    try:
        fs = lake_fs.of(lake)
        first = fs.create(probe, b"{}")
        second = fs.create(probe, b"{}") if first is not None else None
        fs.remove(probe)
    except Exception as e:  # noqa: BLE001 - the store's errors: a bad scheme, denied, unreachable
        return Check("lake locks", "fail", f"cannot put a lease object in {lake} ({redact(str(e))[:200]})")
    if first is None or second is not None:
        return Check("lake locks", "fail", f"the store of {lake} does not honour conditional puts (If-None-Match: *): "
                                           "its leases cannot keep two writers apart; run one writer at a time")
    return Check("lake locks", "ok", f"the store of {lake} refuses a second put-if-absent: leases exclude writers")


def lake_locks(lake: str) -> Check:
    """One writer at a time: the lake's lock files exclude each other (`fcntl.flock`, replay.io.locks)."""
    if _on_s3(lake):
        return _lease_check(lake)
    folder, _ = _existing(lake)
    if not os.path.isdir(folder):
        return Check("lake locks", "fail", f"{folder} is a file, not a folder: choose another --lake")
    try:
        fd, probe = tempfile.mkstemp(prefix=".doctor-lock-", dir=folder)
    except OSError as e:
        return Check("lake locks", "fail", f"cannot make a lock file in {folder} ({e.strerror or e})")
    second = -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        second = os.open(probe, os.O_RDWR)  # another open file: as another writer would hold it
        try:
            fcntl.flock(second, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return Check("lake locks", "ok", f"file locks (flock) exclude each other in {folder}")
        return Check("lake locks", "fail", f"file locks (flock) do not exclude each other in {folder} (a network or "
                                           "FUSE file system?): two writers could both commit; put the lake on a "
                                           "local disk or NFSv4")
    except OSError as e:
        return Check("lake locks", "fail", f"file locks (flock) fail in {folder} ({e.strerror or e}): put the lake on "
                                           "a local disk or NFSv4")
    finally:
        for d in (second, fd):
            if d >= 0:
                os.close(d)
        os.remove(probe)


def s3_credentials(paths: list[str]) -> Check:
    """AWS credentials are found (environment, profile, role) and can list each S3 path's bucket."""
    import boto3
    from botocore.config import Config

    session = boto3.session.Session()
    credentials = session.get_credentials()
    if credentials is None:
        return Check("s3", "fail", f"no AWS credentials for {', '.join(paths)}: set AWS_PROFILE, or AWS_ACCESS_KEY_ID "
                                   "and AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT_URL for an S3-compatible store)")
    client = session.client("s3", region_name=session.region_name or os.environ.get("AWS_REGION"),
                            config=Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 1}))
    for path in paths:
        bucket, _, prefix = re.sub(r"^s3a?://", "", path).partition("/")
        try:
            client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
        except Exception as e:  # noqa: BLE001 - botocore's errors: denied, no bucket, unreachable endpoint
            code = getattr(e, "response", {}).get("Error", {}).get("Code", type(e).__name__)
            return Check("s3", "fail", f"credentials from {credentials.method} cannot list {path} ({code}: "
                                       f"{redact(str(e))[:200]}); check the credentials, AWS_ENDPOINT_URL and the "
                                       "bucket")
    return Check("s3", "ok", f"credentials from {credentials.method} list {', '.join(paths)}")


def _on_s3(path: str) -> bool:
    return path.startswith(("s3://", "s3a://"))


def _existing(path: str) -> tuple[str, str]:
    """The path itself when it exists, else its nearest existing parent (and a note saying so); a file in the way
    is returned as it is (the caller refuses it)."""
    if os.path.exists(path):
        return path, ""
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    return parent, f" (it does not exist yet: the first ingest or stream creates it in {parent})"


def _broken_jars(jars: list[str]) -> str | None:
    """The first jar whose zip directory cannot be read (a cut-short download), by name."""
    for jar in jars:
        try:
            with zipfile.ZipFile(jar) as z:
                z.infolist()
        except (OSError, zipfile.BadZipFile):
            return os.path.basename(jar)
    return None


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
