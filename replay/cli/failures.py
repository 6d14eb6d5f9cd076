"""Failures a user can cause (a corrupt landing file, a path Spark cannot find, a broken Delta table) as one
line for the terminal, naming the file and what to do; the full trace goes to the command's log file, never the
screen. Secrets are hidden in both (`replay.io.secrets`).

The libraries' own error records are held for that log file too (`held_library_logs`): PySpark logs every
analysis error it raises as a JSON record of ~10 KB (its query-context loggers), and py4j logs a broken call's
traceback through the root logger, both on stderr by default."""
from __future__ import annotations

import logging
import os
import re
import tempfile
import time
import traceback
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import unquote

from replay.io.secrets import redact

# (condition prefix or text in the message, hint); the first that matches wins
HINTS = (
    ("PATH_NOT_FOUND", "check that the path exists and is reachable from the driver and every executor"),
    ("CANNOT_READ_FILE_FOOTER",
     "the file is not valid Parquet: repair it or move it out of the landing, then run again"),
    ("FAILED_READ_FILE",
     "the file cannot be read or is corrupt: repair it or move it out of the landing, then run again"),
    ("CANNOT_MERGE_SCHEMAS", "a field has different types in different files; write them with one type"),
    ("DELTA", "the Delta table is missing or damaged: check the --lake path"),
    ("No such file", "check that the path exists"),
    ("Permission denied", "check the file's permissions for the user running replay"),
)
_WORKER_ERROR = re.compile(r"^[A-Za-z_.]*(?:Error|Exception): (.+)$", re.M)  # the last line of a worker's trace
_CONDITION = re.compile(r"\[([A-Z][A-Z_.]+)\]\s*")
_FILE = re.compile(r"(?:reading file|Path does not exist:|File not found:|file|path)\s+[`']?((?:file:|s3a?://|/)[^`'\n]*?)[`']?(?:\.\s|\.$|\s+SQLSTATE|\n|$)")


def is_user_failure(e: BaseException) -> bool:
    """Spark (JVM or analysis, Delta's included) and file-system errors: things bad input or a wrong path cause."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    return isinstance(e, (PySparkException, Py4JJavaError, OSError))


def condition(e: BaseException) -> str:
    get = getattr(e, "getCondition", None) or getattr(e, "getErrorClass", None)
    try:
        return (get() if get else None) or type(e).__name__
    except Exception:  # noqa: BLE001 - a JVM-side error may not carry a condition
        return type(e).__name__


def named_file(message: str) -> tuple[str, str] | None:
    """The file a Spark, Delta or OS error message names, as written there and as a plain path (`file:` URIs
    percent-decoded: %20 is a space, + stays a plus)."""
    m = _FILE.search(message)
    if not m:
        return None
    raw = m.group(1).rstrip(".")
    return raw, unquote(re.sub(r"^file:(//)?", "", raw)) if raw.startswith("file:") else raw


def one_line(e: BaseException, command: str) -> tuple[str, str]:
    """(the line to print, the log file holding the full trace)."""
    log = write_log(e, command)
    text = redact(str(e))
    cond = condition(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = next((ln for ln in lines if _CONDITION.search(ln)), lines[0] if lines else type(e).__name__)
    found = _CONDITION.search(first)
    if found:  # "[FAILED_READ_FILE.NO_HINT] Encountered error ..." -> the text, and the condition at the end
        cond, first = found.group(1), first[found.end():].strip()
    raised = _WORKER_ERROR.findall(text) if "Python worker" in text else []
    if raised:  # a Python worker's error (a landing the data source reads): its own message, which names the file
        first = raised[-1]
    named = named_file(text)
    if named:
        first = first.replace(named[0], named[1])
    where = named[1] if named else getattr(e, "filename", None)
    if len(first) > 300:
        first = first[:297] + "..."
    hint = next((h for key, h in HINTS if key in cond or key in text), "see the log for the full trace")
    head = f"{where}: " if where and str(where) not in first else ""
    return f"{head}{first} [{cond}]; {hint}; full trace in {log}", log


def write_log(e: BaseException | None, command: str) -> str:
    """The libraries' held records and the full Python (and JVM) trace, secrets hidden, added to the command's
    log file (beside Spark's own lines, replay.io.driver_logs) or, with none named, in a new file under the temp
    dir; returns its path."""
    from replay.io import driver_logs

    trace = redact("".join([*(f"{r}\n" for r in _held.records),
                            *(traceback.format_exception(e) if e is not None else [])]))
    path = driver_logs.current()
    if path:
        driver_logs.append(path, f"replay {command} failed at {time.strftime('%Y-%m-%dT%H:%M:%S')}:\n{trace}")
        return path
    folder = os.path.join(tempfile.gettempdir(), "retrace-logs")
    os.makedirs(folder, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=f"replay-{command}-{time.strftime('%Y%m%dT%H%M%S')}-", suffix=".log",
                                dir=folder)
    with os.fdopen(fd, "w") as f:
        f.write(trace)
    return path


class _Held(logging.Handler):
    """Keeps the last records it is given, formatted, for the failure's log file."""

    def __init__(self, keep: int = 200):
        super().__init__(logging.WARNING)
        self.records: deque[str] = deque(maxlen=keep)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.records.append(self.format(record))
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is dropped, never raised
            pass


_held = _Held()
_held.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
QUERY_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")  # pyspark.errors.exceptions.base


def held_records() -> list[str]:
    return list(_held.records)


@contextmanager
def held_library_logs() -> Iterator[None]:
    """For the block: PySpark's query-context records and the root logger's (py4j's) go to the failure's log
    file (`write_log`), not the terminal. Their handlers come back after it."""
    from pyspark.logger import PySparkLogger

    _held.records.clear()
    root = logging.getLogger()
    loggers = [PySparkLogger.getLogger(name) for name in QUERY_CONTEXT_LOGGERS]  # made as PySpark makes them
    before = [(lg, list(lg.handlers)) for lg in loggers]
    for lg in loggers:
        for h in list(lg.handlers):
            lg.removeHandler(h)
        logging.Logger.addHandler(lg, _held)  # PySparkLogger.addHandler would put its JSON formatter on ours
    root.addHandler(_held)  # a root with a handler is not given a stderr one by logging.exception
    try:
        yield
    finally:
        root.removeHandler(_held)
        for lg, handlers in before:
            lg.removeHandler(_held)
            for h in handlers:
                logging.Logger.addHandler(lg, h)
