#!/usr/bin/env bash
# README command 1: set up a fresh machine and run the main job on embedded defaults.
#   - Java 17 (installed with apt-get where it is missing), Python 3.11
#   - Debian's chromium and chromium-driver (apt-get, where missing): the UI tests drive the Dagster UI headless
#   - Maven (apt-get, where missing), then the JVM jars into infra/jars/ (git-ignored), once:
#     infra/jars/spark (delta-spark, Spark's Kafka source: on every SparkSession's spark.jars) and
#     infra/jars/kafka-broker (the single-node Kafka broker the tests start); nothing is downloaded at run time
#   - a JVM class archive of Spark's classes (infra/jars/jvm), so every local Spark driver starts sooner
#   - .venv at the repo root with the pinned dependencies (infra/constraints.txt) and `replay`
#   - then `replay demo`: generate a sample stream, ingest it, replay it, print a summary
# `--no-demo` stops after the installation (the test command uses it).
set -euo pipefail
cd "$(dirname "$0")/.."

sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
apt_updated=""
apt_install() {
  [ -n "$apt_updated" ] || { $sudo_cmd apt-get update -q; apt_updated=1; }
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "$@"
}

need_java() { ! java -version 2>&1 | grep -q 'version "17'; }
if need_java; then
  echo "setup: installing OpenJDK 17" >&2
  apt_install openjdk-17-jre-headless
fi

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  echo "setup: installing Debian's chromium and chromium-driver (headless UI tests)" >&2
  apt_install chromium chromium-driver
fi

if ! command -v mvn >/dev/null 2>&1; then
  echo "setup: installing Maven" >&2
  apt_install maven
fi

python=$(command -v python3.11 || command -v python3)
"$python" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"Python 3.11 is required, found {sys.version.split()[0]}"'

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv" >&2
  "$python" -m venv .venv
fi
# Python packages, installed once: while pyproject.toml and the constraints are unchanged (the stamp in .venv
# records their checksum), a second set-up asks PyPI for nothing.
deps=$(cat pyproject.toml infra/constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat .venv/.retrace-installed 2>/dev/null)" != "$deps" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c infra/constraints.txt -e '.[test]'
  echo "$deps" > .venv/.retrace-installed
fi
echo "setup: installed $(.venv/bin/python -c 'import pyspark, dagster, importlib.metadata as m; print("pyspark " + pyspark.__version__ + ", delta-spark " + m.version("delta-spark") + ", dagster " + dagster.__version__)')" >&2

# JVM jars, resolved once: a folder that is already complete (its .resolved stamp names the pom's checksum)
# is left alone, so a second set-up asks Maven for nothing.
resolve_jars() {
  local name=$1 pom=infra/maven/$1/pom.xml dir=infra/jars/$1 sum
  sum=$(sha256sum "$pom" | cut -d' ' -f1)
  if [ "$(cat "$dir/.resolved" 2>/dev/null)" = "$sum" ]; then return; fi
  echo "setup: resolving the $name jars with Maven into $dir" >&2
  rm -rf "$dir"
  mvn -q -B -Dstyle.color=never -f "$pom" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$PWD/$dir" | sed 's/\x1b\[[0-9;]*m//g'  # Maven's colour codes
  if [ "$name" = spark ]; then .venv/bin/python infra/prune_jars.py "$dir"; fi
  echo "$sum" > "$dir/.resolved"
}
resolve_jars spark
resolve_jars kafka-broker

# The JVM class archive (infra/class_archive.py): recorded again when the JVM, the jars or the packages change.
archive_key=$( (java -version 2>&1; cat infra/jars/spark/.resolved; echo "$deps"; cat infra/class_archive.py) | sha256sum | cut -d' ' -f1)
if [ "$(cat infra/jars/jvm/.recorded 2>/dev/null)" != "$archive_key" ]; then
  echo "setup: recording the JVM class archive (Spark drivers start seconds sooner)" >&2
  mkdir -p infra/jars/jvm
  .venv/bin/python infra/class_archive.py > infra/jars/jvm/record.log 2>&1 || { tail -30 infra/jars/jvm/record.log >&2; exit 1; }
  tail -1 infra/jars/jvm/record.log >&2
  echo "$archive_key" > infra/jars/jvm/.recorded
fi

if [ "${1:-}" != "--no-demo" ]; then
  .venv/bin/replay demo
fi
