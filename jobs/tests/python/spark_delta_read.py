"""Spark with delta-spark (PyPI pyspark 4.0.1, delta-spark 4.0.0; Delta's jars come from Maven
through spark.jars.packages) reads a silt lake table, applying its deletion vectors. Run by
jobs/tests/query_corpus.rs, which compares what this prints with the table's changelog.

Usage: spark_delta_read.py <table path>
Prints one line per row: `ROW id|grp|name|score|flag|__bucket|__offset|__timestamp`, with NULL
for a null name, the score with two decimals and the timestamp in microseconds since the epoch.
"""

import sys

from delta import configure_spark_with_delta_pip
from pyspark.sql import SparkSession


def main(path):
    builder = (
        SparkSession.builder.master("local[1]")
        .appName("silt-delta-read")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog",
            "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        )
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
    )
    spark = configure_spark_with_delta_pip(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rows = (
            spark.read.format("delta")
            .load(path)
            .selectExpr(
                "id",
                "grp",
                "name",
                "score",
                "flag",
                "__bucket",
                "__offset",
                "unix_micros(__timestamp) AS ts",
            )
            .collect()
        )
        for r in rows:
            name = "NULL" if r["name"] is None else r["name"]
            print(
                f"ROW {r['id']}|{r['grp']}|{name}|{r['score']:.2f}|{str(r['flag']).lower()}"
                f"|{r['__bucket']}|{r['__offset']}|{r['ts']}"
            )
        sys.stdout.flush()
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
