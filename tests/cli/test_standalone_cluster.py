"""A replay on a real Spark standalone cluster (a master and two 1-core workers on 127.0.0.1, started by
infra/spark/local-cluster.sh from pyspark's own launcher) of a lake on the tests' S3 server (an s3a:// lake: nothing
shared between the driver and the executors but the store) gives the same hash as the same replay in local mode on a
local lake.

Kept short on 2 cores: 3,000 events; the cluster starts while the lakes are made; only the cluster replay is a
`replay run` subprocess (a driver of its own), and it runs while the local lake is journaled and replayed in this
process, on the test session's Spark (2 shuffle partitions; the cluster replay has 4, as `replay run` has
locally)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

import pytest

from replay.cli import main as cli
from replay.io.spark import SPARK_CONF
from tests.support import ROOT
from tests.support.kafka_broker import free_port
from tests.support.s3_server import REGION

POLICY_FILE = os.path.join(ROOT, "infra", "policies", "production.yaml")
CLUSTER_SCRIPT = os.path.join(ROOT, "infra", "spark", "local-cluster.sh")
CLUSTER_CONF = os.path.join(ROOT, "infra", "spark", "standalone-test.conf")
WORKERS = 2


@dataclass
class Cluster:
    master: str  # spark://127.0.0.1:PORT
    webui: str  # http://127.0.0.1:PORT, the master's UI (and its /json/ status)
    folder: str  # the script's logs and the workers' folders (worker-1, worker-2)
    proc: subprocess.Popen  # the script, leader of the cluster's process group

    def status(self) -> dict:
        return _json(f"{self.webui}/json/")

    def wait_for_workers(self, timeout: float = 120) -> None:
        """Until the master lists every worker alive; a clear failure, with the logs, when the script exits or
        the workers do not register in time."""
        def registered():
            if self.proc.poll() is not None:
                raise AssertionError(f"infra/spark/local-cluster.sh exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                return self.status()["aliveworkers"] == WORKERS
            except OSError:  # the master's UI is not listening yet
                return False
            except ValueError:  # listening, but its pages not yet in place: an HTML page answers /json/
                return False

        _poll(registered, timeout, f"{WORKERS} workers to register with {self.master}", self)

    def logs(self) -> str:
        """The tail of every log of the cluster, for a failure message."""
        names = ["local-cluster.out", "master.log"] + [f"worker-{n}.log" for n in range(1, WORKERS + 1)]
        return "\n".join(f"--- {name}\n{_tail(os.path.join(self.folder, name))}" for name in names)


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory):
    """The cluster of infra/spark/local-cluster.sh on free ports, starting (a test waits for its workers before
    using it, so the start-up overlaps other work); its whole process group (master, workers, executors) is
    stopped at the end."""
    folder = str(tmp_path_factory.mktemp("cluster"))
    port, webui = free_port(), free_port()
    env = {**os.environ, "SPARK_MASTER_PORT": str(port), "SPARK_MASTER_WEBUI_PORT": str(webui),
           "RETRACE_WORKER_WEBUI_PORTS": " ".join(str(free_port()) for _ in range(WORKERS)),
           "PYTHON": sys.executable}
    with open(os.path.join(folder, "local-cluster.out"), "w") as out:
        proc = subprocess.Popen(["bash", CLUSTER_SCRIPT, folder], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # its own process group, stopped as one
    try:
        yield Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{webui}", folder, proc)
    finally:
        _stop_group(proc)


@pytest.fixture
def aws(s3_server, monkeypatch):
    """The S3 server's AWS_* settings in the environment, as a user sets them (and the processes started see them)."""
    for name in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in {"AWS_ENDPOINT_URL": s3_server.endpoint, "AWS_REGION": REGION,
                        "AWS_ACCESS_KEY_ID": s3_server.access_key,
                        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key}.items():
        monkeypatch.setenv(name, value)
    return s3_server


def test_a_replay_on_a_standalone_cluster_of_an_s3_lake_has_the_same_hash_as_local_mode(standalone_cluster, aws,
                                                                                        spark, tmp_path, capsys):
    landing, s3_lake, local_lake = _landing(tmp_path, capsys), f"s3a://{aws.bucket}/lake", str(tmp_path / "lake")
    _replay(capsys, "ingest", "--landing", landing, "--lake", s3_lake)
    standalone_cluster.wait_for_workers()

    on_cluster = ClusterReplay.start(standalone_cluster, s3_lake, "cluster", str(tmp_path))
    try:  # meanwhile, the same replay in local mode on a local lake
        _replay(capsys, "ingest", "--landing", landing, "--lake", local_lake)
        local = json.loads(_replay(capsys, "run", "--lake", local_lake, "--policy", POLICY_FILE, "--target",
                                   "local"))
        cluster_summary = on_cluster.summary()
    finally:
        on_cluster.stop()

    app = _finished_app(standalone_cluster)
    _assert_tasks_ran_on_every_worker(standalone_cluster, app)
    assert cluster_summary["events"] == local["events"] == 3000
    assert cluster_summary["windows"] == local["windows"] > 0
    assert _replay(capsys, "hash", "--lake", s3_lake, "--target", "cluster") == \
        _replay(capsys, "hash", "--lake", local_lake, "--target", "local")


def _replay(capsys, *args: str) -> str:
    """A `replay` command run in this process (on the test session's Spark); what it printed on stdout."""
    capsys.readouterr()
    assert cli.main(list(args)) == 0, capsys.readouterr().err[-3000:]
    return capsys.readouterr().out


def _landing(tmp_path, capsys) -> str:
    """3,000 events on 4 partitions in 4 landing files (`replay generate`)."""
    landing = str(tmp_path / "landing")
    _replay(capsys, "generate", "--out", landing, "--events", "3000", "--partitions", "4", "--files", "4",
            "--seed", "3")
    return landing


@dataclass
class ClusterReplay:
    """`replay run` as a user runs it on the cluster, in the background: SPARK_MASTER, and the settings file
    through pyspark's launcher (replay/io/spark.py skips its local-mode settings when SPARK_MASTER is set)."""
    cluster: Cluster
    proc: subprocess.Popen
    out: str
    err: str

    @classmethod
    def start(cls, cluster: Cluster, lake: str, target: str, folder: str) -> "ClusterReplay":
        # the cluster's settings (CLUSTER_CONF), not the tests' small-data file
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYSPARK_GATEWAY_", "SPARK_HOME_SUBMITTED")) and k != SPARK_CONF}
        env.update({"SPARK_MASTER": cluster.master, "SPARK_LOCAL_IP": "127.0.0.1",
                    "PYSPARK_SUBMIT_ARGS": f"--properties-file {CLUSTER_CONF} pyspark-shell"})
        out, err = os.path.join(folder, f"run-{target}.out"), os.path.join(folder, f"run-{target}.err")
        with open(out, "w") as o, open(err, "w") as e:  # files, not pipes: nobody reads them until it ends
            proc = subprocess.Popen([sys.executable, "-m", "replay.cli", "run", "--lake", lake, "--policy",
                                     POLICY_FILE, "--target", target], cwd=ROOT, env=env, stdout=o, stderr=e,
                                    start_new_session=True)
        return cls(cluster, proc, out, err)

    def summary(self, timeout: float = 600) -> dict:
        """The run's printed summary, once it exited 0."""
        code = self.proc.wait(timeout=timeout)
        assert code == 0, f"replay run on {self.cluster.master} exited {code}:\n{_tail(self.err, 60)}\n" \
                          f"{self.cluster.logs()}"
        return json.loads(_read(self.out))

    def stop(self) -> None:
        if self.proc.poll() is None:  # the test failed before the run ended
            _stop_group(self.proc)


def _finished_app(cluster: Cluster) -> dict:
    """The one application the cluster ran (the replay), once the master lists it as finished."""
    def finished():
        status = cluster.status()
        return status["completedapps"] if not status["activeapps"] and status["completedapps"] else None

    apps = _poll(finished, 60, "the master to list the replay as a completed application", cluster)
    assert [(a["name"], a["state"]) for a in apps] == [("retrace", "FINISHED")], apps
    return apps[0]


def _assert_tasks_ran_on_every_worker(cluster: Cluster, app: dict) -> None:
    """Each worker ran an executor of the app (its status) that finished tasks (the executor's log): the replay
    was computed on the cluster, not in the driver."""
    for worker in cluster.status()["workers"]:
        executors = _json(f"{worker['webuiaddress']}/json/")
        ran = [e for e in executors["executors"] + executors["finishedexecutors"] if e["appid"] == app["id"]]
        assert ran, f"worker {worker['id']} ran no executor of {app['id']}: {executors}"
    for n in range(1, WORKERS + 1):
        folder = os.path.join(cluster.folder, f"worker-{n}", app["id"])
        logs = "".join(_read(os.path.join(folder, e, "stderr")) for e in sorted(os.listdir(folder)))
        assert "Finished task" in logs, f"no task finished on the executors in {folder}:\n{logs[-2000:]}"


def _poll(check, timeout: float, what: str, cluster: Cluster):
    """The first truthy result of `check()`, tried every half second for `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"waited {timeout:.0f} s for {what}:\n{cluster.logs()}")


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group (the cluster script stops its children and waits), SIGKILL what is left."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:  # a JVM that ignored SIGTERM, or outlived its parent
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _tail(path: str, lines: int = 30) -> str:
    return "\n".join(_read(path).splitlines()[-lines:]) or "(empty)"
