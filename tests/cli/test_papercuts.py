"""The first hour's papercuts (issue 50.10): every message names something the user can type. Each test reads like
the user's mistake and what the command says back."""
from __future__ import annotations

import argparse
import re
import shlex

import pytest

from replay.cli import main as cli
from replay.cli.arguments import parser
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
