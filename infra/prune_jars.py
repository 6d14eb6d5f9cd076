"""Drop the resolved jars that pyspark already ships (Hadoop, Jackson, Parquet, Scala, log4j, ...).

Maven resolves delta-spark's and the Kafka source's whole runtime tree; Spark's own copies of those
libraries are newer and already on the classpath, and two versions of one library on one classpath
is how a job fails at run time rather than at start-up.
"""
import os
import re
import sys

import pyspark

VERSIONED = re.compile(r"^(?P<name>.+?)-(?P<version>\d[\w.\-]*)\.jar$")


def artifact(file_name: str) -> str:
    m = VERSIONED.match(file_name)
    return m.group("name") if m else file_name


def main(folder: str) -> None:
    shipped = {artifact(f) for f in os.listdir(os.path.join(os.path.dirname(pyspark.__file__), "jars"))}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".jar") and artifact(f) in shipped:
            os.remove(os.path.join(folder, f))
    kept = sorted(f for f in os.listdir(folder) if f.endswith(".jar"))
    print(f"setup: {len(kept)} jars in {folder}: {', '.join(kept)}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
