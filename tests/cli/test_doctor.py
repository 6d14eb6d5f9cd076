"""`replay --version` and `replay doctor` (issue 49.4): versions in one line; each of Java, the jars, the lake and S3
credentials judged in one line (`ok`/`warn`/`fail` and what to do), exit 0 when nothing fails. Real `replay`
processes; nothing here starts Spark."""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys

from replay.io import spark as spark_settings

REPLAY = os.path.join(sys.prefix, "bin", "replay")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VERDICT = re.compile(r"^(ok|warn|fail) +[a-z0-9 ]+: \S")


def replay(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([REPLAY, *args], env={**os.environ, "PYTHONPATH": ROOT, **(env or {})},
                          capture_output=True, text=True, timeout=120)


def test_version_prints_retrace_and_what_it_runs_on_in_one_line():
    r = replay("--version")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"replay \S+ \(pyspark 4\.2\.\d+, delta-spark \S+, dagster \S+, Python 3\.\d+\.\d+\)\n",
                        r.stdout), r.stdout


def test_doctor_on_a_sound_install_and_a_new_lake_says_ok_line_by_line_and_exits_0(tmp_path):
    r = replay("doctor", "--lake", str(tmp_path / "lake"))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert all(VERDICT.match(line) for line in lines), lines
    names = [line.split(":")[0].split(None, 1)[1] for line in lines]
    assert {"java", "spark jars", "retrace jars", "lake", "lake locks"} <= set(names), names
    assert re.match(r"ok +java: 17\.", lines[0]), lines[0]
    assert not os.path.exists(tmp_path / "lake")  # judged by the folder that would hold it, not created


def test_doctor_fails_a_jars_folder_with_a_cut_short_jar_naming_it_and_what_to_do(tmp_path):
    folder = tmp_path / "jars"
    shutil.copytree(spark_settings.JARS, folder, symlinks=True)
    delta = glob.glob(str(folder / "delta-spark_2.13-*.jar"))[0]
    data = open(os.path.realpath(delta), "rb").read()
    os.remove(delta)
    with open(delta, "wb") as f:
        f.write(data[: len(data) // 2])  # a download cut short: the zip directory at the end is gone
    r = replay("doctor", env={"RETRACE_JARS": str(folder)})
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "retrace jars" in ln)
    assert line.startswith("fail") and os.path.basename(delta) in line and "copy the jars" in line, line


def test_doctor_fails_a_lake_no_file_can_be_written_in(tmp_path):
    lake = "/proc/retrace-lake"  # a folder nobody can create files in, root included (the tests may run as root)
    r = replay("doctor", "--lake", lake)
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if re.match(r"\w+ +lake:", ln))
    assert line.startswith("fail") and "cannot write in /proc" in line and "write access" in line, line


def test_doctor_fails_a_folder_that_is_not_a_lake_naming_its_files(tmp_path):
    (tmp_path / "mine" / "journal").mkdir(parents=True)
    (tmp_path / "mine" / "journal" / "notes.txt").write_text("the user's own")
    r = replay("doctor", "--lake", str(tmp_path / "mine"))
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if re.match(r"\w+ +lake:", ln))
    assert line.startswith("fail") and "not a Retrace lake" in line and "journal/notes.txt" in line, line


def test_doctor_fails_an_s3_landing_without_credentials_saying_which_variables_to_set(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                "AWS_EC2_METADATA_DISABLED": "true", "PYTHONPATH": ROOT})
    r = subprocess.run([REPLAY, "doctor", "--landing", "s3://bucket/landing"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if re.match(r"\w+ +s3:", ln))
    assert line.startswith("fail") and "AWS_ACCESS_KEY_ID" in line and "s3://bucket/landing" in line, line
