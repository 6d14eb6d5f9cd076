"""A local Spark driver maps the JVM class archive that set-up recorded (infra/class_archive.py)."""
from __future__ import annotations

import os
import subprocess
import sys

from replay.io import spark as spark_io

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# -Xshare:on: the JVM refuses to start unless it maps the archive (same JVM, same class path, same jars)
DRIVER = """
from replay.io.spark import _driver_java_options, get_spark
spark = get_spark("retrace-archive-test", conf={"spark.driver.extraJavaOptions": _driver_java_options() + " -Xshare:on"})
print("rows", spark.range(3).count())
"""


def test_a_local_driver_starts_from_the_class_archive_setup_recorded():
    assert os.path.isfile(spark_io.CLASS_ARCHIVE), f"no class archive at {spark_io.CLASS_ARCHIVE}: run infra/setup.sh"
    done = subprocess.run([sys.executable, "-c", DRIVER], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0 and "rows 3" in done.stdout, done.stderr[-3000:]


def test_without_the_archive_a_driver_still_starts(tmp_path):
    """A stale or missing archive costs start-up time, never a failed start."""
    stale = tmp_path / "classes.jsa"
    stale.write_bytes(b"not an archive")
    done = subprocess.run([sys.executable, "-c", DRIVER.replace(' + " -Xshare:on"', "")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT, "RETRACE_CLASS_ARCHIVE": str(stale)})
    assert done.returncode == 0 and "rows 3" in done.stdout, done.stderr[-3000:]
