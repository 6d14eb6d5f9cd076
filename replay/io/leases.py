"""One writer at a time on object storage, where `flock` cannot work: a lease object the store itself arbitrates.

A writer takes the lease by putting the lock's object only if no object has its key (`If-None-Match: *`); the object
names the holder (pid, host, command, since) and when the lease expires. The holder renews it every third of the
lease (`If-Match` on the ETag it last wrote) and deletes it when done. A lease whose expiry has passed (its writer was
killed) is taken over with `If-Match` on the ETag read, so of two writers taking it over only one gets it. Expiry is
each writer's wall clock: clocks must agree to well within the lease (RETRACE_LEASE_SECONDS, default 60).
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from replay.io import lake_fs

LEASE_SECONDS = "RETRACE_LEASE_SECONDS"
_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class LeaseBusy(RuntimeError):
    """Another writer holds the lease (its details are in the message)."""


@dataclass
class _Held:
    tag: str
    command: str
    since: datetime
    depth: int = 1
    stop: threading.Event = field(default_factory=threading.Event)
    renewer: threading.Thread | None = None


_held: dict[str, _Held] = {}
_guard = threading.Lock()


def seconds() -> float:
    """How long a lease lasts without renewal: $RETRACE_LEASE_SECONDS, else 60."""
    value = float(os.environ.get(LEASE_SECONDS, "60"))
    if not value > 0:
        raise ValueError(f"{LEASE_SECONDS}: {value!r} must be more than 0 seconds")
    return value


def holder(path: str) -> str:
    """Who holds (or last held) the lease at `path`, as one phrase."""
    found = lake_fs.of(path).read(path)
    return _describe(_details(found[0]) if found else {})


def acquire(path: str, command: str, wait: float, poll: float = 1.0) -> None:
    """Take the lease at `path` (then renewed until `release`): wait up to `wait` seconds while another writer holds
    it, then raise LeaseBusy naming the holder. Re-entrant within a process (`release` as often)."""
    with _guard:
        mine = _held.get(path)
        if mine is not None:
            mine.depth += 1
            return
    mine = _take(path, command, wait, poll)
    with _guard:
        _held[path] = mine
    mine.renewer = threading.Thread(target=_renew, args=(path, mine), name=f"lease {path}", daemon=True)
    mine.renewer.start()


def check_free(path: str, wait: float, poll: float = 1.0) -> None:
    """Refuse (LeaseBusy, after waiting up to `wait`) while another writer holds an unexpired lease at `path`, without
    writing anything."""
    with _guard:
        if path in _held:
            return
    fs, deadline, said = lake_fs.of(path), time.monotonic() + wait, False
    while True:
        found = fs.read(path)
        if found is None or _expired(_details(found[0])):
            return
        said = _wait_or_refuse(path, _details(found[0]), wait, deadline, said, poll)


def _take(path: str, command: str, wait: float, poll: float) -> _Held:
    fs, deadline, said = lake_fs.of(path), time.monotonic() + wait, False
    while True:
        since = datetime.now(timezone.utc)
        tag = fs.create(path, _body(command, since))
        if tag is not None:
            return _Held(tag, command, since)
        found = fs.read(path)
        if found is None:  # released between the put and the read
            continue
        details = _details(found[0])
        if _expired(details):
            tag = fs.replace(path, _body(command, since), found[1])
            if tag is not None:
                print(f"took over {path}: the lease of {_describe(details)} expired at {details.get('expires')}",
                      file=sys.stderr, flush=True)
                return _Held(tag, command, since)
            continue  # another writer took it over first: read who
        said = _wait_or_refuse(path, details, wait, deadline, said, poll)


def _wait_or_refuse(path: str, details: dict, wait: float, deadline: float, said: bool, poll: float) -> bool:
    if time.monotonic() >= deadline:
        waited = f" after waiting {wait:g}s" if wait > 0 else ""
        raise LeaseBusy(f"{path} is leased by {_describe(details)}{waited}; one writer at a time (retry when it has "
                        f"finished, or pass --wait SECONDS; a killed writer's lease expires at "
                        f"{details.get('expires')})")
    if not said:
        print(f"waiting up to {wait:g}s for {path}, leased by {_describe(details)}", file=sys.stderr, flush=True)
    time.sleep(min(poll, max(0.0, deadline - time.monotonic())) or 0.05)
    return True


def _renew(path: str, mine: _Held) -> None:
    """Renew the lease every third of its length until released; a lease someone else took (this process stalled
    past its expiry) is reported, not fought over."""
    fs, every = lake_fs.of(path), seconds() / 3
    while not mine.stop.wait(every):
        try:
            tag = fs.replace(path, _body(mine.command, mine.since), mine.tag)
        except Exception as e:  # noqa: BLE001 - a store that does not answer once: try again at the next renewal
            print(f"could not renew the lease {path} ({e}); retrying", file=sys.stderr, flush=True)
            continue
        if tag is None:
            print(f"lost the lease {path}: another writer took it over after it expired", file=sys.stderr, flush=True)
            return
        mine.tag = tag


def release(path: str) -> None:
    """Give the lease back (the last of a process's nested `acquire`s deletes it, if it is still this writer's)."""
    with _guard:
        mine = _held[path]
        mine.depth -= 1
        if mine.depth > 0:
            return
        del _held[path]
    mine.stop.set()
    if mine.renewer is not None:
        mine.renewer.join()  # a renewal under way changes the ETag to compare
    fs = lake_fs.of(path)
    found = fs.read(path)
    if found is not None and found[1] == mine.tag:  # still ours: a lease taken over is left to its new holder
        fs.remove(path)


def _body(command: str, since: datetime) -> bytes:
    expires = datetime.now(timezone.utc) + timedelta(seconds=seconds())
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                       "since": since.strftime(_FORMAT), "expires": expires.strftime(_FORMAT)}).encode()


def _details(data: bytes) -> dict:
    try:
        details = json.loads(data or b"{}")
    except ValueError:
        return {}
    return details if isinstance(details, dict) else {}


def _expired(details: dict) -> bool:
    """Whether the lease's expiry has passed; a lease object that records none (not Retrace's) counts as expired."""
    try:
        expires = datetime.strptime(str(details["expires"]), _FORMAT).replace(tzinfo=timezone.utc)
    except (KeyError, ValueError):
        return True
    return datetime.now(timezone.utc) >= expires


def _describe(details: dict) -> str:
    if not details:
        return "another writer (no details recorded)"
    return (f"pid {details.get('pid')} on {details.get('host')} ({details.get('command')!r}, "
            f"since {details.get('since')})")
