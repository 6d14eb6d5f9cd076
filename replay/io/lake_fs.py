"""The lake's files outside Delta tables (its marker, lock files and leases, folder listings, a table's commit files
read without Spark), on a local disk or on S3-compatible object storage (`s3a://bucket/prefix`), behind one small
interface: the rest of Retrace never calls `os.path` or boto3 on a lake path.

On S3 (boto3, configured by the environment as the S3 landing is: AWS_ENDPOINT_URL, AWS_REGION, credentials) a
folder is a key prefix: it exists when a key lies under it. `create` and `replace` are the store's conditional puts
(`If-None-Match: *`, `If-Match: ETAG`): what a lease on an object store rests on (replay.io.locks).
"""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from typing import Protocol

SCHEME = "s3a://"  # the only object store scheme a lake takes: Hadoop's S3A reads and writes its tables
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


@dataclass(frozen=True)
class Entry:
    name: str
    is_dir: bool


class LakeFS(Protocol):
    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def is_file(self, path: str) -> bool: ...

    def list(self, path: str) -> list[Entry]: ...

    def read(self, path: str) -> tuple[bytes, str] | None: ...

    def write(self, path: str, data: bytes) -> None: ...

    def create(self, path: str, data: bytes) -> str | None: ...

    def replace(self, path: str, data: bytes, tag: str) -> str | None: ...

    def remove(self, path: str) -> None: ...

    def remove_tree(self, path: str) -> None: ...


def is_uri(path: str) -> bool:
    return _URI.match(path) is not None


def is_object_store(path: str) -> bool:
    return path.startswith(SCHEME)


def check_uri(path: str) -> None:
    """A lake path is a local folder or an s3a:// URI; anything else is refused in one line."""
    if is_uri(path) and not is_object_store(path):
        scheme = path.split("://", 1)[0]
        hint = f"; for S3 write s3a://{path.split('://', 1)[1]}" if scheme in ("s3", "s3n") else ""
        raise ValueError(f"lake {path}: a lake is a local folder or an s3a://bucket/prefix URI, not {scheme}://{hint}")
    if is_object_store(path) and not path[len(SCHEME):].split("/", 1)[0]:
        raise ValueError(f"lake {path}: no bucket; write s3a://BUCKET/PREFIX")


_clients: dict[str, object] = {}  # the AWS_* settings -> the boto3 client made with them (one per process)


def of(path: str) -> LakeFS:
    """The file system of a lake path: S3 for s3a://, the local disk otherwise."""
    check_uri(path)
    if not is_object_store(path):
        return LocalFS()
    key = repr(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    if key not in _clients:
        _clients[key] = s3_client()
    return S3FS(_clients[key])


def s3_client():
    """A boto3 S3 client configured by the environment or profile only (endpoint, region, credentials): the lake's
    and the S3 landing's (replay.io.landing)."""
    import boto3

    session = boto3.session.Session()  # AWS_PROFILE, AWS_DEFAULT_REGION, the credentials chain
    # botocore reads AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3 itself
    return session.client("s3", region_name=session.region_name or os.environ.get("AWS_REGION"))


def relative(path: str, root: str) -> str:
    """`path` relative to folder `root`, for either kind of path."""
    if is_uri(root):
        return path[len(root.rstrip("/")) + 1:] if path.startswith(root.rstrip("/") + "/") else path
    return os.path.relpath(path, root)


class LocalFS:
    """A local (or NFSv4) folder: `create` is O_EXCL, a tag is the file's modification time and size."""

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def is_file(self, path: str) -> bool:
        return os.path.isfile(path)

    def list(self, path: str) -> list[Entry]:
        if not os.path.isdir(path):
            return []
        return sorted((Entry(n, os.path.isdir(os.path.join(path, n))) for n in os.listdir(path)), key=lambda e: e.name)

    def read(self, path: str) -> tuple[bytes, str] | None:
        try:
            with open(path, "rb") as f:
                data, st = f.read(), os.fstat(f.fileno())
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        return data, f"{st.st_mtime_ns}-{st.st_size}"

    def write(self, path: str, data: bytes) -> None:
        """Replace the file whole (a temporary file renamed over it: a reader never sees half of it)."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temp = f"{path}.{os.getpid()}.tmp"
        with open(temp, "wb") as f:
            f.write(data)
        os.replace(temp, path)

    def create(self, path: str, data: bytes) -> str | None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return None
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        found = self.read(path)
        return found[1] if found else None

    def replace(self, path: str, data: bytes, tag: str) -> str | None:
        found = self.read(path)
        if found is None or found[1] != tag:
            return None
        self.write(path, data)
        found = self.read(path)
        return found[1] if found else None

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)


class S3FS:
    """S3-compatible object storage through boto3: a folder is a key prefix, a tag an object's ETag."""

    def __init__(self, client):
        self.client = client

    def exists(self, path: str) -> bool:
        return self.is_file(path) or self.is_dir(path)

    def is_dir(self, path: str) -> bool:
        bucket, key = _split(path)
        page = self._call(path, self.client.list_objects_v2, Bucket=bucket, Prefix=_folder(key), MaxKeys=1)
        return page.get("KeyCount", 0) > 0

    def is_file(self, path: str) -> bool:
        bucket, key = _split(path)
        if not key or key.endswith("/"):
            return False
        try:
            self._call(path, self.client.head_object, Bucket=bucket, Key=key)
        except FileNotFoundError:
            return False
        return True

    def list(self, path: str) -> list[Entry]:
        bucket, key = _split(path)
        prefix, out = _folder(key), {}
        token: dict = {}
        while True:
            page = self._call(path, self.client.list_objects_v2, Bucket=bucket, Prefix=prefix, Delimiter="/", **token)
            for p in page.get("CommonPrefixes", []):
                out[p["Prefix"][len(prefix):].rstrip("/")] = True
            for o in page.get("Contents", []):
                name = o["Key"][len(prefix):]
                if name:  # a folder's own marker object ("prefix/"), written by Hadoop's S3A, is not an entry
                    out.setdefault(name, False)
            if not page.get("IsTruncated"):
                break
            token = {"ContinuationToken": page["NextContinuationToken"]}
        return [Entry(n, d) for n, d in sorted(out.items())]

    def read(self, path: str) -> tuple[bytes, str] | None:
        bucket, key = _split(path)
        try:
            got = self._call(path, self.client.get_object, Bucket=bucket, Key=key)
        except FileNotFoundError:
            return None
        return got["Body"].read(), got["ETag"]

    def write(self, path: str, data: bytes) -> None:
        bucket, key = _split(path)
        self._call(path, self.client.put_object, Bucket=bucket, Key=key, Body=data)

    def create(self, path: str, data: bytes) -> str | None:
        """Put the object only if no object has its key (`If-None-Match: *`): its ETag, or None when one has."""
        bucket, key = _split(path)
        try:
            return self._call(path, self.client.put_object, Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")["ETag"]
        except _Conflict:
            return None

    def replace(self, path: str, data: bytes, tag: str) -> str | None:
        """Put the object only if its ETag is still `tag` (`If-Match`): the new ETag, or None when it is not."""
        bucket, key = _split(path)
        try:
            return self._call(path, self.client.put_object, Bucket=bucket, Key=key, Body=data, IfMatch=tag)["ETag"]
        except (_Conflict, FileNotFoundError):
            return None

    def remove(self, path: str) -> None:
        bucket, key = _split(path)
        self._call(path, self.client.delete_object, Bucket=bucket, Key=key)

    def remove_tree(self, path: str) -> None:
        bucket, key = _split(path)
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=_folder(key))
        keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
        for start in range(0, len(keys), 1000):
            self._call(path, self.client.delete_objects, Bucket=bucket,
                       Delete={"Objects": [{"Key": k} for k in keys[start:start + 1000]], "Quiet": True})
        if key:
            self.remove(path.rstrip("/") + "/")  # S3A's marker of the folder itself, if any

    def _call(self, path: str, method, **kwargs):
        try:
            return method(**kwargs)
        except Exception as e:  # noqa: BLE001 - botocore's errors, told apart by code
            raise _error(e, path) from e


class _Conflict(Exception):
    """A conditional put that did not hold (412, or 409 when another conditional put of the key is under way)."""


def _error(e: Exception, path: str) -> Exception:
    response = getattr(e, "response", {}) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
        return _Conflict(code)
    if code in ("NoSuchKey", "404", "NotFound"):
        return FileNotFoundError(path)
    if code == "NoSuchBucket":
        return FileNotFoundError(f"lake {path}: bucket {_split(path)[0]!r} does not exist")
    if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return PermissionError(f"access to lake {path} denied ({code}); check AWS_PROFILE or the AWS credentials "
                               f"in the environment")
    from botocore.exceptions import ConnectionError as EndpointError

    if isinstance(e, EndpointError):
        return ConnectionError(f"cannot reach the S3 endpoint for lake {path} ({e}); check AWS_ENDPOINT_URL and "
                               f"the network")
    return RuntimeError(f"lake {path}: {e}")


def _split(path: str) -> tuple[str, str]:
    """(bucket, key) of an s3a:// path."""
    bucket, _, key = path[len(SCHEME):].partition("/")
    return bucket, key


def _folder(key: str) -> str:
    return key.rstrip("/") + "/" if key.strip("/") else ""
