"""Where a driver's own output goes: one log file per driver process, so a terminal shows Retrace's lines only.

The JVM that PySpark starts writes Spark's, Hadoop's and Delta's log4j lines, its own warnings (the incubator
module, the loopback address, the native Hadoop library) and its Python workers' stderr to the terminal. Retrace
starts that JVM itself with its stdout and stderr on a file, `.retrace/logs/<name>-<time>-<pid>.log` under the
working folder (RETRACE_LOG_DIR elsewhere), and gives it infra/spark/log4j2.properties. A `replay` command names
its file (`replay_log`) before Spark starts, and writes a failure's trace and Python's warnings to the same file.
"""
from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # replay/io/driver_logs.py
LOG_DIR = "RETRACE_LOG_DIR"
LOG4J_CONFIG = "RETRACE_LOG4J_CONFIG"
DEFAULT_LOG4J_CONFIG = os.path.join(ROOT, "infra", "spark", "log4j2.properties")
KEEP_DAYS = 7  # older log files of the folder are deleted when a new one is named

_current: str | None = None  # this process's log file, once named


def log_dir() -> str:
    return os.environ.get(LOG_DIR) or os.path.join(os.getcwd(), ".retrace", "logs")


def current() -> str | None:
    """This process's log file (named, not necessarily written yet), or None."""
    return _current


def name_log(name: str) -> str:
    """Name this process's log file `<dir>/<name>-<time>-<pid>.log` (the folder is made, old files deleted)."""
    global _current
    folder = log_dir()
    os.makedirs(folder, exist_ok=True)
    _delete_old(folder)
    _current = os.path.join(folder, f"{name}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log")
    return _current


def log_for(name: str) -> str:
    """This process's log file: the one named already, else a new one for `name`."""
    return _current or name_log(name)


def java_options() -> str:
    """The driver JVM's options for its log4j2 configuration."""
    return f"-Dlog4j2.configurationFile={os.environ.get(LOG4J_CONFIG) or DEFAULT_LOG4J_CONFIG}"


def launch_driver(conf: dict[str, str], name: str) -> str | None:
    """Start the driver JVM (PySpark's gateway) with its output on this process's log file; returns the file.
    None when there is nothing to start: a JVM runs already (a session was stopped, or spark-submit started this
    Python with its own JVM), and its output goes where it went."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return None
    path = log_for(name)
    spark_conf = SparkConf(loadDefaults=False)
    spark_conf.setAll(conf.items())
    with open(path, "ab") as out:  # the JVM keeps its own copy of the descriptor
        gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": out, "stderr": out})
    SparkContext._ensure_initialized(gateway=gateway, conf=spark_conf)
    return path


def append(path: str, text: str) -> None:
    with open(path, "a") as f:
        f.write(text if text.endswith("\n") else text + "\n")


@contextmanager
def warnings_to(path: str) -> Iterator[None]:
    """Python's warnings of the block go to `path` instead of stderr: a library's deprecation is for the
    maintainers (the tests fail on them), not for a user running a command."""
    with warnings.catch_warnings():
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: append(
            path, warnings.formatwarning(message, category, filename, lineno, line))
        yield


def _delete_old(folder: str) -> None:
    cutoff = time.time() - KEEP_DAYS * 86400
    for entry in os.scandir(folder):
        try:
            if entry.name.endswith(".log") and entry.stat().st_mtime < cutoff:
                os.remove(entry.path)
        except OSError:  # another process deleted it first
            pass
