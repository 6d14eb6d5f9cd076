"""One place that builds the SparkSession, so local runs, tests and clusters agree on settings."""
from __future__ import annotations

import glob
import json
import os
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from replay.io import class_archive, driver_logs

# The jars infra/setup.sh resolves with Maven (delta-spark, Spark's Kafka source); RETRACE_JARS points
# elsewhere, e.g. at a folder shipped to a cluster. Nothing is resolved at run time.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # replay/io/spark.py
JARS = os.environ.get("RETRACE_JARS") or os.path.join(ROOT, "infra", "jars", "spark")
# Spark's classes, parsed once by set-up's demo (replay/io/class_archive.py) or infra/class_archive.py (the tests'
# set-up): a local driver maps them and starts seconds sooner. Without the file, or when it no longer matches the JVM
# or jars, the driver loads them itself.
# The engine's JVM operator (replay/engine/jvm), compiled by set-up; RETRACE_OPERATOR_JAR points elsewhere.
OPERATOR_JAR = (os.environ.get("RETRACE_OPERATOR_JAR")
                or os.path.join(ROOT, "infra", "jars", "operator", "retrace-operator.jar"))
CLASS_ARCHIVE = os.environ.get("RETRACE_CLASS_ARCHIVE") or os.path.join(ROOT, "infra", "jars", "jvm", "classes.jsa")
DRIVER_JAVA_OPTIONS = "-Duser.timezone=UTC"
# More options for a local driver's JVM, e.g. the tests' "-XX:TieredStopAtLevel=1" (see tests/conftest.py).
EXTRA_JAVA_OPTIONS = "RETRACE_JAVA_OPTIONS"
# A spark-defaults style file of settings over the local ones, for every driver (the `replay` command, the live
# job, Dagster's runs): a cluster's (infra/spark/cluster.conf), or the tests' small-data settings.
SPARK_CONF = "RETRACE_SPARK_CONF"
DELTA = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # idempotent commits (txnAppId) look up the table's transactions: keep them in the checksum file
    "spark.databricks.delta.setTransactionsInCrc.writeOnCommit": "true",
    # a range replay that adds and removes no rows of a table still commits, so the table records the run
    # (replay/io/runs.py tells a whole target from a half-written one by each table's latest run id)
    "spark.databricks.delta.skipRecordingEmptyCommits": "false",
}
# Speed only (a settings file may change it): new tables checkpoint their log every 50 commits, not every 10. A live
# batch commits to seven tables, which reached their 10th commit in the same batch and wrote seven log checkpoints in
# it (about 1 s each: a 1,000-event batch took 11.3 s instead of 4, the live p95); a reader replays at most 49 JSON
# commits after a checkpoint. The tables written every live batch get intervals of their own, so their checkpoints
# fall in different batches (store.LOG_CHECKPOINT_EVERY).
DELTA_LOG = {"spark.databricks.delta.properties.defaults.checkpointInterval": "50"}

# PySpark 4 records the Python line of every DataFrame and Column call for its error messages: a walk of the stack
# and five round trips to the JVM per call. A live batch built its plans with about 6,000 round trips per job, a
# quarter of them these. Errors keep their message and SQL context, without the Python line.
PYTHON_API = {"spark.python.sql.dataFrameDebugging.enabled": "false"}

# Settings that make results independent of the wall clock and the machine's time zone.
DETERMINISM = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.ansi.enabled": "true",
    # Delta readers expect microsecond timestamps, not Spark's legacy INT96.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
}
# Columns whose values are mostly distinct over a table: seq, offsets, times, watermarks, values, raw text. Parquet
# builds a dictionary for a column chunk while its first values repeat, and writes plain once the dictionary is
# full: work for nothing. Without them a 10M replay's decisions write took 3 s (12%) less and a 10M journal copy 1 s
# (7%), for files 4-6% larger. By column name, in every table Retrace writes; partition, kind, action, key, ...
# keep their dictionaries.
DISTINCT_COLUMNS = ("seq", "offset", "source_line", "arrival_time", "event_time", "timestamp", "watermark",
                    "output_watermark", "partition_watermark", "value", "payload")
PARQUET = {f"spark.hadoop.parquet.enable.dictionary#{c}": "false" for c in DISTINCT_COLUMNS}
LOCAL = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    # Input splits: enough tasks that every core stays busy to the end of a scan (a 10M-row landing
    # read as 5 tasks on 2 cores left one core idle for a third of the ingest).
    "spark.sql.files.minPartitionNum": "16",
    # Listing the files a read names: on the driver, not as a Spark job of one task per file once there are
    # more than 32 (a local disk answers at once; for an ingest of 100 landing files the job took about 1 s per
    # read warm, more cold)
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "10000",
    "spark.sql.adaptive.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "4g",
    # Delta rebuilds a table's state in 50 tasks by default: 2 s per idempotent commit on 2 cores, 1 s with 2
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
}
# Hadoop's local file system without its native library forks `chmod` for every file it creates and `readlink` for
# every rename (Delta's log and checksums): about 300 processes a live batch, from the driver's JVM. The operator
# jar's replacement answers through java.nio (replay/engine/jvm/retrace/io/NoForkLocalFileSystem.java); spark-submit
# opens local files before `spark.jars` are loaded, so the jar is on the driver's class path from its start.
NO_FORK_FILES = {
    "spark.driver.extraClassPath": OPERATOR_JAR,
    "spark.hadoop.fs.file.impl": "retrace.io.NoForkLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "retrace.io.NoForkLocalFileSystem$Fs",
}


def get_spark(app_name: str = "retrace", conf: dict[str, str] | None = None,
              conf_file: str | None = None) -> SparkSession:
    """The active session, or a new one: local[*] unless SPARK_MASTER, spark-submit or the settings file says
    otherwise. The file (`conf_file`, else RETRACE_SPARK_CONF's) goes over the local settings, `conf` over all."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    settings = {"spark.app.name": app_name, **PARQUET, **DELTA_LOG, **PYTHON_API}  # a settings file may change these
    master = os.environ.get("SPARK_MASTER")
    if master:
        settings["spark.master"] = master
    elif not os.environ.get("SPARK_HOME_SUBMITTED"):
        settings.update({"spark.master": "local[*]", **LOCAL, "spark.driver.extraJavaOptions": _driver_java_options()})
    conf_file = conf_file or os.environ.get(SPARK_CONF)
    from_file = spark_conf(conf_file) if conf_file else {}
    # a settings file may name a cluster's master (infra/spark/cluster.conf): its executors keep their file systems
    local = from_file.get("spark.master", settings.get("spark.master", "")).startswith("local")
    if local and os.path.isfile(OPERATOR_JAR):
        settings.update(NO_FORK_FILES)
    settings.update(from_file)
    # Python workers run the interpreter of the driver, so they see the same packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings.update({**DETERMINISM, **DELTA, "spark.jars": ",".join(jars()), **(conf or {})})
    # the driver's log4j configuration, whoever set its other JVM options (a caller, a cluster's settings file)
    java = settings.get("spark.driver.extraJavaOptions", "")
    settings["spark.driver.extraJavaOptions"] = " ".join(filter(None, [java, driver_logs.java_options()]))
    started = driver_logs.launch_driver(settings, app_name)  # its output to a log file, not the terminal
    if started and class_archive.recording():  # the archive is written as the driver exits: wait for it then
        class_archive.finish_at_exit(class_archive.recording())
    spark = SparkSession.builder.config(map=settings).getOrCreate()
    if not started and os.environ.get("PYSPARK_GATEWAY_PORT"):  # spark-submit's JVM, with its own log4j settings
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_conf(path: str) -> dict[str, str]:
    """`key value` lines of a spark-defaults style file (# comments); `spark.master` also sets the master. Not
    the DETERMINISM and DELTA settings: results depend on them, so a file cannot change them."""
    conf = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) != 2:
                raise ValueError(f"{path}:{n}: {line!r} is not 'key value'")
            if parts[0] in DETERMINISM or parts[0] in DELTA:
                raise ValueError(f"{path}:{n}: {parts[0]} cannot be changed: Retrace's results depend on it")
            conf[parts[0]] = parts[1].strip()
    return conf


def _driver_java_options(extra: str | None = None) -> str:
    """The local driver's JVM options: UTC, `extra` (None: RETRACE_JAVA_OPTIONS) and the class archive."""
    extra = os.environ.get(EXTRA_JAVA_OPTIONS, "") if extra is None else extra
    options = " ".join(filter(None, [DRIVER_JAVA_OPTIONS, extra.strip()]))
    recording = class_archive.recording()  # set-up's demo records the archive (replay/io/class_archive.py)
    if recording:
        return f"{options} {class_archive.record_options(recording)}"
    if not os.path.isfile(CLASS_ARCHIVE):
        return options
    # -Xlog: a stale archive is skipped without a warning on every start
    return f"{options} -XX:SharedArchiveFile={CLASS_ARCHIVE} -Xlog:cds=off -Xlog:cds+dynamic=off"


# A live micro-batch of up to this many rows is evaluated without generated code (see few_rows).
FEW_ROWS = 50_000
FEW_ROWS_SETTINGS = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN",
                     "spark.sql.adaptive.enabled": "false"}


@contextmanager
def few_rows(spark: SparkSession, rows: int) -> Iterator[None]:
    """Queries in the block evaluate row by row, not with generated code, and are planned once, when `rows` is
    small: a live batch of 1,000 events spent most of its executors' time compiling each stage's code (Janino),
    which costs more than the rows (its batches took 8-9% less time without it), and adaptive execution ran each
    of its queries' shuffles and broadcasts as a Spark job of its own (a job's windows write: 11 jobs, 4 without).
    `spark`: the session the queries run in (a micro-batch's DataFrame is in the stream's own session, not the
    driver's); its settings come back after."""
    if rows > FEW_ROWS:
        yield
        return
    with session_settings(spark, FEW_ROWS_SETTINGS):
        yield


def one_job(spark: SparkSession) -> AbstractContextManager[None]:
    """Queries in the block run each as one Spark job, without adaptive execution: for an aggregate of a micro-batch
    into a few rows, before its size is known (adaptive execution made three jobs of it, one per stage)."""
    return session_settings(spark, {"spark.sql.adaptive.enabled": "false"})


def driver_rows(spark: SparkSession, rows: list[tuple], schema: str) -> DataFrame:
    """A few rows made on the driver (`schema`: "name type, ..."; numbers, strings, booleans, nulls) as a DataFrame
    of one partition, planned as one literal read by `from_json`. Why: `createDataFrame` ships a list through an
    RDD of pickled rows, a Spark job of its own each time a plan reads it (a checkpoint's commit of ten rows took
    0.29-0.40 s that way, 0.15-0.22 s this way); FAILFAST, so a value of another type is an error, not a null."""
    names = [f.split()[0] for f in schema.split(", ")]
    text = json.dumps([dict(zip(names, row, strict=True)) for row in rows], allow_nan=False)
    parsed = F.from_json(F.lit(text), f"array<struct<{schema}>>", {"mode": "FAILFAST"})
    return spark.range(0, 1, 1, 1).select(F.inline(parsed))  # no rows: an empty array, the same schema


@contextmanager
def session_settings(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """`settings` for the block; the session's own come back after it, even when a step fails."""
    before = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


_S3A_DONE: dict[str, str] = {}  # bucket -> the AWS_* settings its S3A file system was configured with


def s3a_settings(bucket: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """Hadoop S3A's settings for `bucket` (per-bucket `fs.s3a.bucket.B.*` keys) from the AWS_* environment, as the S3
    landing's boto3 client reads it: AWS_ENDPOINT_URL(_S3) (an S3-compatible store: path-style addressing, TLS as
    the URL says), AWS_REGION / AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN).
    Without keys S3A's own chain applies (environment, instance role)."""
    env = os.environ if env is None else env
    at, out = f"fs.s3a.bucket.{bucket}.", {}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        out.update({"endpoint": endpoint, "path.style.access": "true",
                    "connection.ssl.enabled": str(endpoint.lower().startswith("https:")).lower()})
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        out["endpoint.region"] = region
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        out.update({"access.key": env["AWS_ACCESS_KEY_ID"], "secret.key": env["AWS_SECRET_ACCESS_KEY"]})
        token = env.get("AWS_SESSION_TOKEN")
        out["aws.credentials.provider"] = ("org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider" if token else
                                           "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
        if token:
            out["session.token"] = token
    return {at + k: v for k, v in out.items()}


def use_object_store(spark: SparkSession, path: str) -> None:
    """Point Hadoop's S3A at the store of an s3a:// `path` with the environment's AWS_* settings (nothing for a local
    path), before Spark or Delta first opens its bucket: S3A keeps a bucket's file system, and its settings, for the
    life of the JVM. Set on the running session, so a driver started before the environment was set sees them too;
    executors get them with each job's Hadoop configuration."""
    if not path.startswith("s3a://"):
        return
    bucket = path[len("s3a://"):].split("/", 1)[0]
    settings = s3a_settings(bucket)
    key = repr(sorted(settings.items()))
    if _S3A_DONE.get(bucket) == key:
        return
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for k, v in settings.items():
        conf.set(k, v)
    _S3A_DONE[bucket] = key


def jars(folder: str = JARS) -> list[str]:
    """The jar files of `folder` and the engine's operator; a clear error when set-up has not made them."""
    found = sorted(glob.glob(os.path.join(folder, "*.jar")))
    if not any(os.path.basename(j).startswith("delta-spark_") for j in found):
        raise RuntimeError(f"no delta-spark jar in {folder}: run `bash infra/setup.sh --no-demo` once to resolve "
                           "the JVM jars with Maven (or point RETRACE_JARS at a folder that has them)")
    if not os.path.isfile(OPERATOR_JAR):
        raise RuntimeError(f"no engine operator at {OPERATOR_JAR}: run `bash infra/setup.sh --no-demo` once to "
                           "compile it (or point RETRACE_OPERATOR_JAR at one)")
    return [*found, OPERATOR_JAR]
