"""The driver's handles on the JVM (`replay.jvm`): a name or a constant Column is made once per JVM, so a live
batch does not pay its py4j round trips again for every job."""
from __future__ import annotations

import threading
from contextlib import contextmanager

from py4j import clientserver, java_gateway
from pyspark.sql import functions as F

from replay import jvm


@contextmanager
def round_trips():
    """Counts this thread's py4j round trips in the block (`[n]`)."""
    count, me = [0], threading.get_ident()
    originals = {cls: cls.send_command for cls in (clientserver.ClientServerConnection, java_gateway.GatewayConnection)}

    def counting(original):
        def send_command(self, *args, **kwargs):
            count[0] += threading.get_ident() == me
            return original(self, *args, **kwargs)
        return send_command
    for cls, original in originals.items():
        cls.send_command = counting(original)
    try:
        yield count
    finally:
        for cls, original in originals.items():
            cls.send_command = original


def test_a_jvm_name_is_looked_up_once(spark):
    name = "java.lang.Math.floorMod"  # looked up nowhere else
    with round_trips() as first:
        found = jvm.lookup(name)
    with round_trips() as again:
        assert jvm.lookup(name) is found
    assert first[0] >= 4 and again[0] == 0  # a round trip per name in it, then none
    assert found(7, 3) == 1


def test_constant_columns_are_built_once_and_planned_like_new_ones(spark):
    built = jvm.once_per_jvm(lambda: [F.col("id") * 2, F.lit("x").alias("name")])
    with round_trips() as first:
        columns = built()
    with round_trips() as again:
        assert built() is columns
    assert first[0] > 0 and again[0] == 0
    rows = spark.range(2).select(*built()).collect() + spark.range(3, 4).select(*built()).collect()
    assert [tuple(r) for r in rows] == [(0, "x"), (2, "x"), (6, "x")]  # one Column in two plans


def test_columns_built_from_arguments_are_made_once_per_arguments(spark):
    built = jvm.once_per_jvm(lambda name, factor: [(F.col("id") * factor).alias(name)])
    assert built("twice", 2) is built("twice", 2) and built("twice", 2) is not built("thrice", 3)
    assert spark.range(2).select(*built("thrice", 3)).columns == ["thrice"]
