"""Local paths handed to Spark's file readers, and back: any name a file system allows stays that name.

Spark treats a path string as a Hadoop glob (`[`, `]`, `{`, `}`, `*`, `?`, `\\`) and reports the files it
read as URIs (`_metadata.file_path`: `%20` for a space, `%25` for `%`, `+` left as is). These two helpers are
the only places that cross that boundary, so the rest of Retrace works with plain paths.
"""
from __future__ import annotations

import re

from pyspark.sql import Column
from pyspark.sql import functions as F

_GLOB = re.compile(r"([\\\[\]{}*?])")


def spark_path(path: str) -> str:
    """A local path as a Spark reader takes it: glob characters escaped, so it names exactly that file."""
    return _GLOB.sub(r"\\\1", path)


def relative_name(root: str) -> Column:
    """The name, relative to folder `root`, of the file each row was read from (the inverse of `spark_path`).

    The file URI is percent-decoded exactly: `+` is protected first (`url_decode` would read it as a space)."""
    uri = F.regexp_replace(F.col("_metadata.file_path"), "^file:(//)?", "")
    path = F.try_url_decode(F.replace(uri, F.lit("+"), F.lit("%2B")))
    return F.substring(path, len(root.rstrip("/")) + 2, 1 << 30)
