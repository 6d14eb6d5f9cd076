#!/usr/bin/env bash
# README command 1: set up a fresh machine and run the main job on embedded defaults.
#   - Java 17 and Maven (apt-get, where missing), Python 3.11
#   - .venv at the repo root with the pinned dependencies (infra/constraints.txt) and `replay`
#   - the JVM jars into infra/jars/spark (git-ignored), once: delta-spark, Spark's Kafka source and hadoop-aws
#     (s3a:// paths), on every SparkSession's spark.jars; nothing is downloaded at run time
#   - then `replay demo`: generate a sample stream, ingest it, replay it, print a summary. The first demo also
#     records the JVM class archive (infra/jars/jvm/classes.jsa) as its driver exits, so later local drivers start
#     sooner; it is recorded again when the JVM, the jars or the Python packages change.
# `--no-demo` stops after the installation. `--tests` (the test command, infra/test.sh) also installs what only the
# tests need: the test packages, Debian's chromium and chromium-driver (UI tests), the Kafka broker's and S3Proxy's
# jars (infra/jars/kafka-broker, infra/jars/s3proxy), and the class archive when no demo recorded one.
# Each step is stamped: a second set-up downloads nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
demo=1; tests=""
for arg in "$@"; do
  case "$arg" in
    --no-demo) demo="" ;;
    --tests) tests=1 ;;
    *) echo "setup: unknown option $arg (--no-demo, --tests)" >&2; exit 2 ;;
  esac
done
began=$SECONDS
step() { echo "setup: $1 ($((SECONDS - began)) s)" >&2; }

sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
apt_updated=""
apt_install() {
  [ -n "$apt_updated" ] || { $sudo_cmd apt-get update -q; apt_updated=1; }
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "$@"
}

# the JDK, not only the runtime: set-up compiles the engine's JVM operator (replay/engine/jvm) with its javac
need_java() { ! java -version 2>&1 | grep -q 'version "17' || ! javac -version 2>&1 | grep -q '^javac 17'; }
if need_java; then
  step "installing OpenJDK 17 (the JDK)"
  apt_install openjdk-17-jdk-headless
fi
if ! command -v mvn >/dev/null 2>&1; then
  step "installing Maven"
  apt_install maven
fi
if [ -n "$tests" ] && { [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; }; then
  step "installing Debian's chromium and chromium-driver (the UI tests drive the Dagster UI headless)"
  apt_install chromium chromium-driver
fi

python=$(command -v python3.11 || command -v python3)
"$python" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"Python 3.11 is required, found {sys.version.split()[0]}"'

if [ ! -x .venv/bin/python ]; then
  step "creating .venv"
  "$python" -m venv .venv
fi
# JVM jars, resolved once: a folder that is already complete (its .resolved stamp names the pom's checksum) is left
# alone, so a second set-up asks Maven for nothing. Maven fetches them while pip installs the Python packages
# (neither needs the other; pruning the Spark jars of what pyspark ships needs pyspark, so it waits for pip).
pom_sum() { sha256sum "infra/maven/$1/pom.xml" | cut -d' ' -f1; }
jar_folders=(spark); [ -z "$tests" ] || jar_folders+=(kafka-broker s3proxy)
unresolved=()
for name in "${jar_folders[@]}"; do
  [ "$(cat "infra/jars/$name/.resolved" 2>/dev/null)" = "$(pom_sum "$name")" ] || unresolved+=("$name")
done
fetch_jars() {
  local name=$1 dir=infra/jars/$1
  rm -rf "$dir"
  mvn -q -B -Dstyle.color=never -f "infra/maven/$name/pom.xml" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$PWD/$dir" | sed 's/\x1b\[[0-9;]*m//g'  # Maven's colour codes
}
maven=""
trap 'if [ -n "$maven" ]; then kill "$maven" 2>/dev/null || true; fi' EXIT  # a failed pip stops Maven too
if [ ${#unresolved[@]} -gt 0 ]; then
  step "resolving the ${unresolved[*]} jars with Maven into infra/jars (in the background)"
  ( for name in "${unresolved[@]}"; do fetch_jars "$name"; done ) & maven=$!
fi

# Python packages, installed once: while pyproject.toml and the constraints are unchanged (a stamp in .venv records
# their checksum, one for the main packages and one for the tests'), a second set-up asks PyPI for nothing.
# --no-compile: Python compiles a module the first time it is imported, not all of every package at set-up.
deps=$(cat pyproject.toml infra/constraints.txt | sha256sum | cut -d' ' -f1)
if [ -n "$tests" ] && [ "$(cat .venv/.retrace-installed-tests 2>/dev/null)" != "$deps" ]; then
  step "installing the pinned Python packages and the tests' (pip)"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-compile -c infra/constraints.txt -e '.[test]'
  echo "$deps" > .venv/.retrace-installed
  echo "$deps" > .venv/.retrace-installed-tests
elif [ "$(cat .venv/.retrace-installed 2>/dev/null)" != "$deps" ]; then
  step "installing the pinned Python packages (pip)"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-compile -c infra/constraints.txt -e .
  echo "$deps" > .venv/.retrace-installed
fi
step "installed $(.venv/bin/python -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("pyspark", "delta-spark", "dagster")))')"

if [ -n "$maven" ]; then
  wait "$maven"  # a failed Maven fails the set-up here
  maven=""
  for name in "${unresolved[@]}"; do
    if [ "$name" = spark ]; then .venv/bin/python infra/prune_jars.py infra/jars/spark; fi
    pom_sum "$name" > "infra/jars/$name/.resolved"
  done
  step "resolved the ${unresolved[*]} jars"
fi

# The engine's JVM operator (replay/engine/jvm/**/*.java), compiled for Java 17 against pyspark's own jars (nothing
# to download) into infra/jars/operator/retrace-operator.jar; stamped with its sources' checksum and pyspark's version.
operator=infra/jars/operator
operator_key=$( (cat $(find replay/engine/jvm -name '*.java' | sort); .venv/bin/python -c 'import pyspark; print(pyspark.__version__)') \
  | sha256sum | cut -d' ' -f1)
if [ "$(cat "$operator/.built" 2>/dev/null)" != "$operator_key" ]; then
  step "compiling the engine's JVM operator (javac --release 17)"
  pyspark_jars=$(.venv/bin/python -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
  rm -rf "$operator" && mkdir -p "$operator/classes"
  javac --release 17 -nowarn -cp "$pyspark_jars/*" -d "$operator/classes" \
    $(find replay/engine/jvm -name '*.java' | sort)
  jar cf "$operator/retrace-operator.jar" -C "$operator/classes" .
  rm -rf "$operator/classes"
  echo "$operator_key" > "$operator/.built"
fi

# The JVM class archive is current while the JVM, the jars, the packages and the code that records it are.
archive_key=$( (java -version 2>&1; cat infra/jars/spark/.resolved "$operator/.built"; echo "$deps"; cat infra/class_archive.py \
  replay/io/class_archive.py) | sha256sum | cut -d' ' -f1)
archive_current() { [ "$(cat infra/jars/jvm/.recorded 2>/dev/null)" = "$archive_key" ]; }
mkdir -p infra/jars/jvm

if [ -n "$demo" ]; then
  if archive_current; then
    step "running the demo"
    .venv/bin/replay demo
  else
    step "running the demo; its driver records the JVM class archive as it exits"
    RETRACE_RECORD_CLASS_ARCHIVE="$PWD/infra/jars/jvm/classes.jsa" .venv/bin/replay demo
    echo "$archive_key" > infra/jars/jvm/.recorded
  fi
elif [ -n "$tests" ] && ! archive_current; then
  step "recording the JVM class archive (Spark drivers start seconds sooner)"
  .venv/bin/python infra/class_archive.py > infra/jars/jvm/record.log 2>&1 || { tail -30 infra/jars/jvm/record.log >&2; exit 1; }
  tail -2 infra/jars/jvm/record.log >&2
  echo "$archive_key" > infra/jars/jvm/.recorded
fi
step "done"
