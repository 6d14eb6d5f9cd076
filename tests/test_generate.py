"""The synthetic landing generator (`replay.generate`) on its own: no Spark, a few thousand events."""
from __future__ import annotations

import hashlib
import json
import os

import pyarrow.parquet as pq
import pytest

from replay.generate import generate

SMALL = dict(partitions=4, keys=50, seed=34)  # seed 34: 3000 events hold one malformed row of each kind

# Recorded from the generator at commit 6cd9c73, before shapes existed: its output (the basic shape) must
# not change. jsonl: the files' bytes; parquet: the schema and rows (the file bytes also name the writer).
BASIC_JSONL_SHA256 = "b00050f6e360bc11a98f39e63f69868fb94c09a1636c603fcdafc73dc782cdf0"
BASIC_PARQUET_SHA256 = "f75f70d3569528e4c6e903e4961e5cc32b861ead4c1407741947afecad579e18"


def _files(folder) -> list[str]:
    return [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.startswith("part-")]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_the_basic_shape_is_the_default_and_unchanged(tmp_path, fmt):
    generate(str(tmp_path), 3000, files=3, fmt=fmt, **SMALL)
    h = hashlib.sha256()
    for path in _files(tmp_path):
        if fmt == "jsonl":
            h.update(open(path, "rb").read())
        else:
            table = pq.read_table(path)
            h.update(str(table.schema).encode())
            h.update(json.dumps(table.to_pylist()).encode())
    assert h.hexdigest() == (BASIC_JSONL_SHA256 if fmt == "jsonl" else BASIC_PARQUET_SHA256)
