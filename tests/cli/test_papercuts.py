"""The first hour's papercuts (issue 50.10): every message names something the user can type. Each test reads like
the user's mistake and what the command says back. A refused command leaves the lake folder as it was, byte for
byte, and a folder that is not a lake is never taken over (50.1, 50.9, 50.14)."""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex

import pytest

from replay.cli import main as cli
from replay.cli.arguments import parser
from replay.io.journal import ingest
from replay.io.lake import Lake
from replay.ops.hashing import target_hash
from tests.support import POLICY_FILE


@pytest.fixture(autouse=True)
def log_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RETRACE_LOG_DIR", str(tmp_path / "logs"))  # `main` names a log file: not in the checkout


def test_every_option_of_every_command_has_help_text():
    top = parser(cli.COMMANDS)
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    silent = [f"replay {name} {'/'.join(a.option_strings)}"
              for name, command in [("", top), *sub.choices.items()] for a in command._actions
              if a.option_strings and not isinstance(a, argparse._HelpAction) and not a.help]
    assert silent == []


def test_a_negative_wait_says_why_it_is_refused(capsys):
    with pytest.raises(SystemExit):
        parser(cli.COMMANDS).parse_args(["ingest", "--landing", "l", "--lake", "lake", "--wait", "-5"])
    err = capsys.readouterr().err
    assert "argument --wait" in err and "'-5' must be 0 or more seconds" in err, err


def test_generate_into_a_folder_with_part_files_names_the_overwrite_flag_and_the_flag_replaces_them(tmp_path,
                                                                                                     capsys):
    args = ["generate", "--out", str(tmp_path / "landing"), "--events", "50", "--files", "2", "--partitions", "2"]
    assert cli.main(args) == 0
    capsys.readouterr()
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "already holds 2 part-* files" in err and "`replay generate --overwrite`" in err, err
    assert cli.main([*args, "--overwrite"]) == 0
    assert len(list((tmp_path / "landing").glob("part-*"))) == 2


def test_a_smtp_port_that_is_not_a_number_is_refused_naming_the_variable(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RETRACE_ALERT_SMTP_PORT", "abc")
    code = cli.main(["stream", "--landing", str(tmp_path / "landing"), "--lake", str(tmp_path / "lake"),
                     "--policy", POLICY_FILE])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip() == "replay stream: RETRACE_ALERT_SMTP_PORT: 'abc' is not a port number (1-65535)"
    assert not (tmp_path / "lake").exists()


def test_hash_of_a_missing_target_suggests_a_run_command_that_names_its_job(spark, tmp_path):
    where = Lake(str(tmp_path / "lake")).target("default", "production")
    with pytest.raises(FileNotFoundError) as missing:
        target_hash(spark, where)
    suggested = re.search(r"`(replay run [^`]+)`", str(missing.value)).group(1)
    words = shlex.split(suggested.replace("POLICY_FILE", POLICY_FILE))[1:]
    args = parser(cli.COMMANDS).parse_args(words)
    assert cli._job(args).name == "default"  # the command would replay the spec's job: --policy is given


# -- refused commands leave the lake as it was ---------------------------------------------------------------------

def tree(folder) -> dict[str, bytes | None]:
    """Every folder (None) and file (its bytes) under `folder`, by relative path."""
    out = {}
    for root, dirs, files in os.walk(folder):
        out.update({os.path.relpath(os.path.join(root, d), folder): None for d in dirs})
        out.update({os.path.relpath(os.path.join(root, f), folder): open(os.path.join(root, f), "rb").read()
                    for f in files})
    return out


def refusal(capsys, command: str) -> str:
    """The one line a refused command printed."""
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"replay {command}: "), lines
    return lines[0]


@pytest.fixture(scope="module")
def small_lake(spark, tmp_path_factory):
    """A lake with a journal of three events (and its landing)."""
    root = tmp_path_factory.mktemp("small")
    landing, lake = root / "landing", str(root / "lake")
    landing.mkdir()
    (landing / "part-0.jsonl").write_text("".join(
        json.dumps({"partition": 0, "offset": i, "arrival_time": f"2024-01-01T00:00:0{i}Z",
                    "event_time": f"2024-01-01T00:00:0{i}Z", "key": "k", "value": 1.0}) + "\n" for i in range(3)))
    ingest(spark, str(landing), lake)
    return {"lake": lake, "landing": str(landing)}


def users_folder(root) -> str:
    """A folder of the user's own, with `journal/` and `outputs/` folders of their files."""
    folder = root / "mine"
    for name, text in (("journal/x.txt", "my notes"), ("outputs/report.csv", "a,b\n1,2\n")):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return str(folder)


def test_ingest_into_a_folder_that_is_not_a_lake_is_refused_naming_its_files(small_lake, tmp_path, capsys):
    folder = users_folder(tmp_path)
    before = tree(folder)
    assert cli.main(["ingest", "--landing", small_lake["landing"], "--lake", folder]) == 2
    line = refusal(capsys, "ingest")
    assert f"{folder} is not a Retrace lake" in line and "journal/x.txt" in line, line
    assert "no .retrace-lake marker" in line, line
    assert tree(folder) == before


def test_every_command_refuses_a_folder_that_is_not_a_lake(tmp_path, capsys):
    folder = users_folder(tmp_path)
    before = tree(folder)
    for args in (["run", "--policy", POLICY_FILE], ["maintain"], ["hash"], ["migrate"],
                 ["stream", "--landing", str(tmp_path / "landing"), "--policy", POLICY_FILE]):
        assert cli.main([*args, "--lake", folder]) == 2, args
        assert "is not a Retrace lake" in refusal(capsys, args[0])
    assert tree(folder) == before


def test_a_lake_made_before_markers_is_taken_for_a_lake_and_marked(tmp_path, capsys):
    lake = tmp_path / "lake"
    for table in ("journal", "journal_files", "jobs/default/outputs/production/decisions",
                  "jobs/default/outputs/production/checkpoints"):
        (lake / table / "_delta_log").mkdir(parents=True)
    for lock in ("journal.lock", "jobs/default/outputs/production.lock"):
        (lake / lock).write_text("{}")
    assert cli.main(["migrate", "--lake", str(lake)]) == 0, capsys.readouterr().err
    assert json.loads((lake / ".retrace-lake").read_text())["layout"] == 1


def test_a_job_spark_refuses_leaves_the_lake_as_it_was(small_lake, tmp_path, capsys):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "sources.yaml").write_text("readings:\n  event_time_field: event_time\n  key_field: key\n")
    (jobs / "typo.yaml").write_text("source: readings\npolicy: {window: {kind: tumbling, size: 1m}}\n"
                                    "where: \"no_such_column > 1\"\naggregates:\n  events: \"count(*)\"\n")
    before = tree(small_lake["lake"])
    assert cli.main(["run", "--lake", small_lake["lake"], "--job", "typo", "--jobs", str(jobs)]) == 2
    assert "no_such_column" in refusal(capsys, "run")
    assert tree(small_lake["lake"]) == before


def test_run_into_a_mistyped_lake_creates_nothing(tmp_path, capsys):
    mistyped = tmp_path / "lkae"
    assert cli.main(["run", "--lake", str(mistyped), "--policy", POLICY_FILE]) == 2
    assert f"no journal at {mistyped}" in refusal(capsys, "run")
    assert not mistyped.exists()


def test_ingest_of_a_missing_landing_creates_no_lake(tmp_path, capsys):
    lake = tmp_path / "lake"
    assert cli.main(["ingest", "--landing", str(tmp_path / "landnig"), "--lake", str(lake)]) == 2
    assert "landnig does not exist" in refusal(capsys, "ingest")
    assert not lake.exists()


def test_stream_into_a_target_outside_its_folder_creates_no_lake(tmp_path, capsys):
    lake = tmp_path / "lake"
    (tmp_path / "landing").mkdir()
    assert cli.main(["stream", "--landing", str(tmp_path / "landing"), "--lake", str(lake), "--policy", POLICY_FILE,
                     "--target", "../../escape"]) == 2
    assert "target: '../../escape'" in refusal(capsys, "stream")
    assert not lake.exists()


def test_hash_of_a_target_outside_its_folder_is_refused(small_lake, capsys):
    before = tree(small_lake["lake"])
    assert cli.main(["hash", "--lake", small_lake["lake"], "--target", "../../other/outputs/production"]) == 2
    assert "target: '../../other/outputs/production'" in refusal(capsys, "hash")
    assert tree(small_lake["lake"]) == before



@pytest.mark.parametrize("command", [["run", "--policy", POLICY_FILE], ["ingest", "--landing", "."]])
def test_a_colon_in_the_lake_path_is_refused_naming_the_path_and_creates_nothing(tmp_path, capsys, command):
    lake = tmp_path / "lake:2024"
    assert cli.main([*command, "--lake", str(lake)]) == 2
    line = refusal(capsys, command[0])
    assert f"lake {lake}: ':' cannot be in a lake's path" in line, line
    assert not lake.exists()
