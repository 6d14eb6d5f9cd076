#!/usr/bin/env bash
# A Spark standalone cluster on this machine, to try a replay on a real cluster: a master and two workers
# (1 core, 1 GiB each) on 127.0.0.1, started with the Spark that pyspark ships (nothing to download).
# It stays in the foreground; Ctrl-C (or SIGTERM) stops all of it. tests/cli/test_standalone_cluster.py starts it too.
#
#   bash infra/spark/local-cluster.sh [DIR]    # DIR (default .retrace/cluster): logs and the workers' folders
#
# Ports: SPARK_MASTER_PORT (default 7077), SPARK_MASTER_WEBUI_PORT (8080), RETRACE_WORKER_WEBUI_PORTS
# ("8081 8082", one per worker). Settings for a replay on it: infra/spark/standalone-test.conf.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
spark_home="$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
dir="$(mkdir -p "${1:-$root/.retrace/cluster}" && cd "${1:-$root/.retrace/cluster}" && pwd)"
master_port="${SPARK_MASTER_PORT:-7077}"
webui_port="${SPARK_MASTER_WEBUI_PORT:-8080}"
read -r -a worker_ports <<< "${RETRACE_WORKER_WEBUI_PORTS:-8081 8082}"

export SPARK_LOCAL_IP=127.0.0.1                              # bind to loopback only
export SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false"  # no REST submission server (fixed port 6066)

stop() {  # every process of the group (the JVMs, their executors and Python workers), then wait for them
    trap '' INT TERM
    trap - EXIT
    kill -TERM 0 2>/dev/null || true
    wait || true
}
trap 'stop; exit 143' INT TERM
trap stop EXIT

"$spark_home/bin/spark-class" org.apache.spark.deploy.master.Master \
    --host 127.0.0.1 --port "$master_port" --webui-port "$webui_port" > "$dir/master.log" 2>&1 &
for i in "${!worker_ports[@]}"; do
    n=$((i + 1))
    mkdir -p "$dir/worker-$n"
    SPARK_WORKER_DIR="$dir/worker-$n" "$spark_home/bin/spark-class" org.apache.spark.deploy.worker.Worker \
        "spark://127.0.0.1:$master_port" --host 127.0.0.1 --cores 1 --memory 1g \
        --webui-port "${worker_ports[$i]}" > "$dir/worker-$n.log" 2>&1 &
done
echo "Spark master spark://127.0.0.1:$master_port (UI http://127.0.0.1:$webui_port) and ${#worker_ports[@]} workers;" \
     "logs in $dir; Ctrl-C stops them"
# one of them exiting (a port in use, a crash) stops the others: the cluster is whole or gone
wait -n || true
echo "local-cluster.sh: a Spark process exited; stopping the cluster (logs in $dir)" >&2
exit 1
