"""A real `dagster-webserver` (and optionally `dagster-daemon`) on 127.0.0.1, for tests that drive the UI or
its GraphQL API. The instance is a temp DAGSTER_HOME with the repo-local `infra/dagster.local.yaml`; the code
location is this checkout's `workspace.yaml`, pointed at a test lake through RETRACE_* variables."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import requests

from tests.support import ROOT

BIN = os.path.join(sys.prefix, "bin")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DagsterServer:
    def __init__(self, url: str, home: str, logs: dict[str, str]):
        self.url, self.home, self.logs = url, home, logs

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        r = requests.post(f"{self.url}/graphql", json={"query": query, "variables": variables or {}}, timeout=60)
        r.raise_for_status()
        body = r.json()
        assert "errors" not in body, body["errors"]
        return body["data"]

    def log_tail(self, chars: int = 3000) -> str:
        out = []
        for name, path in self.logs.items():
            with open(path, errors="replace") as f:
                out.append(f"--- {name} ---\n{f.read()[-chars:]}")
        return "\n".join(out)


LOCATION_QUERY = """
{ workspaceOrError { __typename ... on Workspace { locationEntries { name
    locationOrLoadError { __typename ... on PythonError { message } } } } } }
"""


@contextmanager
def dagster_server(work: str, env: dict[str, str], daemon: bool = False, timeout: float = 240):
    """Start the webserver (and the daemon), wait until the code location is loaded, stop them afterwards."""
    home = os.path.join(work, "dagster_home")
    os.makedirs(home, exist_ok=True)
    shutil.copy(os.path.join(ROOT, "infra", "dagster.local.yaml"), os.path.join(home, "dagster.yaml"))
    _create_storage(home)
    port = free_port()
    full_env = {**os.environ, "DAGSTER_HOME": home, **env}
    logs, procs = {}, []

    def start(name, argv):
        logs[name] = os.path.join(work, f"{name}.log")
        log = open(logs[name], "w")
        procs.append(subprocess.Popen(argv, cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))

    start("webserver", [os.path.join(BIN, "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port),
                        "-w", "workspace.yaml"])
    if daemon:
        start("daemon", [os.path.join(BIN, "dagster-daemon"), "run", "-w", "workspace.yaml"])
    server = DagsterServer(f"http://127.0.0.1:{port}", home, logs)
    try:
        _wait_loaded(server, procs, timeout)
        yield server
    finally:
        for p in procs:  # each in its own session: its code-server children stop with it
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


def _create_storage(home: str) -> None:
    """The instance's SQLite databases, made before its two processes start: otherwise both create them at
    once, and one can fail ("table alembic_version already exists") when the machine is busy."""
    from dagster import DagsterInstance

    DagsterInstance.from_config(home).dispose()


def _wait_loaded(server: DagsterServer, procs, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited with {p.returncode}\n{server.log_tail()}")
        try:
            data = server.graphql(LOCATION_QUERY)
            entries = data["workspaceOrError"].get("locationEntries") or []
            kinds = [e["locationOrLoadError"] and e["locationOrLoadError"]["__typename"] for e in entries]
            if kinds and all(k == "RepositoryLocation" for k in kinds):
                return
            if "PythonError" in kinds:
                raise RuntimeError(f"code location failed to load: {entries}")
            last = kinds
        except requests.RequestException as e:
            last = e
        time.sleep(1)
    raise TimeoutError(f"dagster-webserver not ready after {timeout}s ({last})\n{server.log_tail()}")
