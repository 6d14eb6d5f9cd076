"""The driver's handles on the JVM, made once per JVM and reused. Why: a live batch is mostly the driver, and each
py4j round trip costs it: a Column's every function, literal and operator is one, and a name looked up as
`jvm.a.b.C` is one per dot (a package's a search of the class path)."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from pyspark import SparkContext

T = TypeVar("T")


def once_per_jvm(build: Callable[..., T]) -> Callable[..., T]:
    """`build(*args)` (e.g. constant Columns: an expression tree holds no data, so every plan can share it), made once
    per (hashable) arguments for the JVM the driver talks to, again only if that JVM changes."""
    made: dict[tuple, T] = {}
    talking_to: list[int] = []

    @functools.wraps(build)
    def get(*args) -> T:
        jvm = id(SparkContext._gateway)
        if talking_to != [jvm]:
            made.clear()
            talking_to[:] = [jvm]
        if args not in made:
            made[args] = build(*args)
        return made[args]
    return get


@once_per_jvm
def lookup(name: str):
    """`SparkContext._jvm.<name>`: a class, a static method or field, a Scala object, looked up once per JVM."""
    found = SparkContext._jvm
    for part in name.split("."):
        found = getattr(found, part)
    return found
