"""A local driver's file system (`replay.io.spark.NO_FORK_FILES`): Hadoop's local file system with permissions and
links through java.nio, not a `chmod` or `readlink` process per file created or renamed."""
from __future__ import annotations

import os
import stat

import pytest


def _hadoop(spark):
    jvm = spark._jvm
    return jvm, spark._jsc.hadoopConfiguration()


def test_a_local_session_uses_the_file_system_that_forks_no_process(spark):
    jvm, conf = _hadoop(spark)
    uri = jvm.java.net.URI("file:///")
    assert jvm.org.apache.hadoop.fs.FileSystem.get(uri, conf).getClass().getName() == "retrace.io.NoForkLocalFileSystem"
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(uri, conf)
    assert context.getDefaultFileSystem().getClass().getName() == "retrace.io.NoForkLocalFileSystem$Fs"


def test_files_spark_writes_have_the_permissions_hadoop_gives_them(spark, tmp_path):
    folder = tmp_path / "written"
    spark.range(3).write.parquet(str(folder))
    parts = [f for f in os.listdir(folder) if f.startswith("part-")]
    assert parts
    for name in parts:  # 0666 under Hadoop's default umask of 022
        assert stat.S_IMODE(os.stat(folder / name).st_mode) == 0o644, name


def test_a_folder_made_with_a_mode_gets_that_mode(spark, tmp_path):
    jvm, conf = _hadoop(spark)
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf)
    target, mode = tmp_path / "made", jvm.org.apache.hadoop.fs.permission.FsPermission
    fs.mkdirs(jvm.org.apache.hadoop.fs.Path(target.as_uri()), mode(0o750))
    fs.setPermission(jvm.org.apache.hadoop.fs.Path(target.as_uri()), mode(0o705))
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o705


def test_a_rename_onto_an_existing_file_is_refused(spark, tmp_path):
    """Delta's log relies on it: two writers of one version, the second refused."""
    from py4j.protocol import Py4JJavaError

    jvm, conf = _hadoop(spark)
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(jvm.java.net.URI("file:///"), conf)
    path = lambda name: jvm.org.apache.hadoop.fs.Path((tmp_path / name).as_uri())  # noqa: E731
    with pytest.raises(Py4JJavaError, match="FileAlreadyExistsException"):
        context.rename(path("a"), path("b"), jvm.org.apache.hadoop.fs.Options.Rename.values()[:1])
    context.rename(path("a"), path("c"), jvm.org.apache.hadoop.fs.Options.Rename.values()[:1])
    assert (tmp_path / "c").read_text() == "a" and (tmp_path / "b").read_text() == "b"


def test_a_symbolic_link_is_seen_as_one(spark, tmp_path):
    jvm, conf = _hadoop(spark)
    (tmp_path / "file").write_text("x")
    os.symlink(tmp_path / "file", tmp_path / "link")
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf)
    link = fs.getFileLinkStatus(jvm.org.apache.hadoop.fs.Path((tmp_path / "link").as_uri()))
    assert link.isSymlink() and link.getSymlink().toString() == str(tmp_path / "file")
    assert not fs.getFileLinkStatus(jvm.org.apache.hadoop.fs.Path((tmp_path / "file").as_uri())).isSymlink()
