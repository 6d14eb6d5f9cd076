"""Landing files are immutable once journaled: a journaled file that changed is reported, never silently skipped."""
from __future__ import annotations

import os

from replay.cli import main as cli
from replay.io import journal, manifest
from replay.io.journal import ingest
from replay.ops.generate import StreamSpec, generate


def _landing(tmp_path, events: int = 60) -> tuple[str, str]:
    landing, lake = str(tmp_path / "landing"), str(tmp_path / "lake")
    generate(landing, StreamSpec(events, partitions=2, keys=5, files=2, seed=1))
    return landing, lake


def test_ingest_exits_1_naming_a_journaled_file_that_grew(spark, tmp_path, capsys):
    landing, lake = _landing(tmp_path)
    assert cli.main(["ingest", "--landing", landing, "--lake", lake]) == 0
    path = os.path.join(landing, "part-00000.jsonl")
    before = os.path.getsize(path)
    with open(path, "a") as f:
        f.write('{"partition":0,"offset":999,"arrival_time":"2024-01-01T00:00:09Z",'
                '"event_time":"2024-01-01T00:00:09Z","key":"k1","value":1}\n')
    capsys.readouterr()
    assert cli.main(["ingest", "--landing", landing, "--lake", lake]) == 1
    err = capsys.readouterr().err
    assert f"landing file part-00000.jsonl changed after it was journaled: size {before} -> " in err, err
    assert "write new rows to a new file" in err
    assert cli.main(["ingest", "--landing", landing, "--lake", lake, "--accept-changed"]) == 0
    assert journal.read(spark, lake).where("offset = 999").count() == 0  # what was read stays what was read


def test_a_same_size_rewrite_of_a_journaled_file_is_reported(spark, tmp_path):
    landing, lake = _landing(tmp_path)
    ingest(spark, landing, lake)
    path = os.path.join(landing, "part-00001.jsonl")
    text = open(path).read()
    with open(path, "w") as f:
        f.write(text.replace('"value":', '"value": ', 1)[:len(text) - 1] + "\n")
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert os.path.getsize(path) == len(text)
    r = ingest(spark, landing, lake)
    assert [c.source for c in r.changed] == ["part-00001.jsonl"]
    assert "checksum differs" in r.changed[0].what


def test_new_files_are_recorded_with_their_size_and_an_untouched_landing_reports_nothing(spark, tmp_path):
    landing, lake = _landing(tmp_path)
    ingest(spark, landing, lake)
    recorded = manifest.load(spark, lake)
    assert {n: r.size for n, r in recorded.items()} == {
        n: os.path.getsize(os.path.join(landing, n)) for n in os.listdir(landing)}
    assert ingest(spark, landing, lake).changed == []


def _rewrite_middle(path: str, keep_mtime: bool) -> None:
    """The same size, one byte changed halfway through; the modification time moved, or put back as it was."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(b"7" if byte != b"7" else b"8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns if keep_mtime else st.st_mtime_ns + 1_000_000_000))
    assert os.path.getsize(path) == st.st_size


def test_a_same_size_change_in_the_middle_of_a_large_journaled_file_is_reported(spark, tmp_path):
    """The checksum covers the whole file (issue 50, item 3): a file over 128 KiB changed in the middle."""
    landing, lake = _landing(tmp_path, events=2000)
    path = os.path.join(landing, "part-00000.jsonl")
    assert os.path.getsize(path) > 128 * 1024
    ingest(spark, landing, lake)
    _rewrite_middle(path, keep_mtime=False)
    r = ingest(spark, landing, lake)
    assert [c.source for c in r.changed] == ["part-00000.jsonl"]


def test_a_change_whose_writer_kept_the_modification_time_is_reported(spark, tmp_path):
    """Checked whenever the file is listed, not only when its modification time moved (issue 50, item 3)."""
    landing, lake = _landing(tmp_path)
    ingest(spark, landing, lake)
    _rewrite_middle(os.path.join(landing, "part-00001.jsonl"), keep_mtime=True)
    r = ingest(spark, landing, lake)
    assert [c.source for c in r.changed] == ["part-00001.jsonl"]
    assert "checksum differs" in r.changed[0].what
