"""One writer at a time: an exclusive OS file lock per journal and per target, in the lake folder (where:
`replay.io.lake`).

`fcntl.flock` locks belong to an open file and the kernel releases them when the process dies (even by
SIGKILL), so a crashed writer never leaves a stale lock. The holder writes who it is (pid, host, command,
since when) into the lock file just after taking it and clears it as it lets go, so a refused writer names the
holder (waiting a moment for a holder that has just taken the lock to say who it is), never a finished writer.
Locks are re-entrant within a process (the CLI takes a lock before Spark starts; the library function it calls
takes it again).

A lake on object storage (s3a://) has no file locks: its lock paths are leases there (replay.io.leases), taken and
refused the same way.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone

from replay.io import lake_fs, leases

_held: dict[str, tuple[int, int]] = {}  # lock path -> (fd, depth) held by this process
_guard = threading.Lock()


class LockBusy(RuntimeError):
    """Another process holds the lock (its details are in the message)."""


def holder(path: str, patience: float = 2.0) -> str:
    """Who holds the lock, as one phrase, from the lock file. A holder writes its details just after taking the
    lock: an empty file is re-read for up to `patience` seconds before the holder is called unknown."""
    if lake_fs.is_object_store(path):
        return leases.holder(path)
    deadline = time.monotonic() + patience
    while not (h := _details(path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not h:
        return "another process (no details recorded yet)"
    return f"pid {h.get('pid')} on {h.get('host')} ({h.get('command')!r}, since {h.get('since')})"


def _details(path: str) -> dict:
    try:
        with open(path) as f:
            return json.loads(f.read() or "{}")
    except (OSError, ValueError):
        return {}  # missing, or read between the holder's truncate and write


@contextmanager
def hold(path: str, command: str | None = None, wait: float | None = None, poll: float = 0.2):
    """Hold the exclusive lock at `path` for the block. When another process holds it, wait up to `wait`
    seconds (default: $RETRACE_LOCK_WAIT, else 0; saying so on stderr), then raise LockBusy naming the holder."""
    if lake_fs.is_object_store(path):
        with _lease(path, command or " ".join(sys.argv), _wait(wait)):
            yield
        return
    path, wait = os.path.abspath(path), _wait(wait)
    with _guard:
        if path in _held:  # re-entrant within this process
            fd, depth = _held[path]
            _held[path] = (fd, depth + 1)
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield
        finally:
            _release(path)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _acquire(fd, path, wait, poll)
    except BaseException:
        os.close(fd)
        raise
    details = {"pid": os.getpid(), "host": socket.gethostname(), "command": command or " ".join(sys.argv),
               "since": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(details).encode(), 0)
    os.fsync(fd)
    with _guard:
        _held[path] = (fd, 1)
    try:
        yield
    finally:
        _release(path)


def check_free(path: str, wait: float | None = None, poll: float = 0.2) -> None:
    """Refuse (LockBusy, after waiting as `hold` does) when another process holds the lock at `path`, without
    creating its file: a writer that must start Spark to validate its input learns of a busy lock first, and a
    command refused after that leaves nothing behind. `hold` decides for good."""
    if lake_fs.is_object_store(path):
        try:
            return leases.check_free(path, _wait(wait))
        except leases.LeaseBusy as e:
            raise LockBusy(str(e)) from None
    path, wait = os.path.abspath(path), _wait(wait)
    with _guard:
        if path in _held:
            return
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # no writer ever held it
    try:
        _acquire(fd, path, wait, poll)
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def _lease(path: str, command: str, wait: float):
    try:
        leases.acquire(path, command, wait)
    except leases.LeaseBusy as e:
        raise LockBusy(str(e)) from None
    try:
        yield
    finally:
        leases.release(path)


def _wait(wait: float | None) -> float:
    """The seconds to wait for a busy lock: `wait`, else $RETRACE_LOCK_WAIT, else 0."""
    return float(os.environ.get("RETRACE_LOCK_WAIT", "0")) if wait is None else wait


def _acquire(fd: int, path: str, wait: float, poll: float) -> None:
    deadline, said = time.monotonic() + wait, False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                waited = f" after waiting {wait:g}s" if wait > 0 else ""
                raise LockBusy(f"{path} is locked by {holder(path)}{waited}; one writer at a time "
                               f"(retry when it has finished, or pass --wait SECONDS)") from None
            if not said:
                print(f"waiting up to {wait:g}s for {path}, held by {holder(path)}", file=sys.stderr, flush=True)
                said = True
            time.sleep(poll)


def _release(path: str) -> None:
    with _guard:
        fd, depth = _held[path]
        if depth > 1:
            _held[path] = (fd, depth - 1)
            return
        del _held[path]
    os.ftruncate(fd, 0)  # the details go with the lock: a later refusal never names a finished writer
    os.close(fd)  # closing the last descriptor releases the flock; the (empty) file stays
