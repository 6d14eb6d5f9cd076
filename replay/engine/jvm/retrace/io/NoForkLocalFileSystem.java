package retrace.io;

import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system without a process per call. Without Hadoop's native library (pip's pyspark has none)
 * RawLocalFileSystem forks `chmod` for every file and folder it creates and `readlink` for every rename's target
 * check (Delta's log and checksum files, Structured Streaming's offsets): about 300 processes per live batch, each
 * spawned from the driver's JVM. The same answers come from java.nio here. Local runs only (`replay.io.spark`):
 * `fs.file.impl` is this class, `fs.AbstractFileSystem.file.impl` is {@link Fs}.
 */
public final class NoForkLocalFileSystem extends LocalFileSystem {
  public NoForkLocalFileSystem() {
    super(new Raw());
  }

  /** The raw (checksum-less) file system under both: permissions and links through java.nio. */
  public static final class Raw extends RawLocalFileSystem {
    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      if (permission.getStickyBit()) {  // not expressible as rwx: Hadoop's own (forking) way
        super.setPermission(p, permission);
        return;
      }
      Files.setPosixFilePermissions(pathToFile(p).toPath(),
          PosixFilePermissions.fromString(permission.toString().substring(0, 9)));
    }

    @Override
    public FileStatus getFileLinkStatus(Path f) throws IOException {
      File file = pathToFile(f);
      if (!Files.isSymbolicLink(file.toPath())) {
        return getFileStatus(f);
      }
      Path target = new Path(Files.readSymbolicLink(file.toPath()).toString());
      try {
        FileStatus fs = getFileStatus(f);
        return new FileStatus(fs.getLen(), false, fs.getReplication(), fs.getBlockSize(), fs.getModificationTime(),
            fs.getAccessTime(), fs.getPermission(), fs.getOwner(), fs.getGroup(), target, f);
      } catch (FileNotFoundException e) {  // a dangling link
        return new FileStatus(0, false, 0, 0, 0, 0, FsPermission.getDefault(), "", "", target, f);
      }
    }

    @Override
    public Path getLinkTarget(Path f) throws IOException {
      return getFileLinkStatus(f).getSymlink();
    }
  }

  /** FileContext's side (Delta's log store, Structured Streaming's checkpoint files): Hadoop's LocalFs over Raw. */
  public static final class Fs extends ChecksumFs {
    public Fs(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(new RawFs(uri, conf));
    }
  }

  /** Hadoop's RawLocalFs, over Raw. */
  public static final class RawFs extends DelegateToFileSystem {
    public RawFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new Raw(), conf, "file", false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1;
    }

    @Override
    @Deprecated
    public FsServerDefaults getServerDefaults() throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public FsServerDefaults getServerDefaults(Path f) throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String src) {
      return true;
    }
  }
}
