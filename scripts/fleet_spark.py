#!/usr/bin/env python3
"""The fleet queries of `gputrace fleet` on Apache Spark, for datasets too big for one machine.

    spark-submit scripts/fleet_spark.py DATASET JOB --out results.json [--sql DIR]
    gputrace fleet DATASET --job JOB --results results.json     # the same verdict, from Spark's rows

Runs every query of analyzer/src/fleet/sql/ (the text gputrace's embedded engine runs,
unchanged but for the job's name) over the dataset's tables (Hive-partitioned Parquet,
docs/dataset.md) and writes {"job": JOB, "engine": "spark", "results": {query: [rows]}}
as JSON to --out (stdout by default, where Spark's own logging may also go). The decisions (straggler, hang, outliers, verdict) stay in gputrace, so both
engines' answers come from the same rows.
"""
import argparse
import json
import os
import sys

TABLES = ["processes", "collectives", "nccl_calls", "findings", "idle_gaps", "python_samples"]


def literal(s):
    return "'" + s.replace("'", "''") + "'"


def shift(offsets):
    """The offsets query's rows as an SQL expression of a collective's host (as gputrace's
    fleet::shift builds it): how far that host's clock is ahead."""
    arms = [f"WHEN {literal(str(r['host']))} THEN CAST({int(r['off_ns'])} AS BIGINT)"
            for r in offsets if int(r["off_ns"] or 0) != 0]
    return "CASE host " + " ".join(arms) + " ELSE 0 END" if arms else "0"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("job")
    ap.add_argument("--sql", default=os.path.join(here, "..", "analyzer", "src", "fleet", "sql"),
                    help="the directory of the queries (default: the checkout's)")
    ap.add_argument("--master", default=None, help="Spark master (default: spark-submit's)")
    ap.add_argument("--out", default="-", help="where to write the rows (default: stdout)")
    a = ap.parse_args()

    desc = os.path.join(a.dataset, "_gputrace_dataset.json")
    try:
        version = json.load(open(desc)).get("version")
    except (OSError, ValueError):
        sys.exit(f"{a.dataset}: not a gputrace dataset (no readable {desc})")
    if version != 1:
        sys.exit(f"{a.dataset}: a dataset of layout version {version} (this script reads 1)")

    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName("gputrace fleet")
    if a.master:
        b = b.master(a.master)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    for t in TABLES:
        path = os.path.join(a.dataset, t)
        # Hive partitions become columns: job and host as strings, rank and window as
        # integers (as gputrace's engine declares them).
        df = (spark.read.option("basePath", path)
              .option("recursiveFileLookup", "false")
              .parquet(path))
        df = (df.withColumn("job", df["job"].cast("string"))
                .withColumn("host", df["host"].cast("string"))
                .withColumn("rank", df["rank"].cast("bigint"))
                .withColumn("window", df["window"].cast("bigint")))
        df.createOrReplaceTempView(t)
    aligned = open(os.path.join(a.sql, "aligned.sqlpart")).read().rstrip()

    def run(f, moved):
        text = (open(os.path.join(a.sql, f)).read().replace("{aligned}", aligned)
                .replace("{shift}", moved).replace("{job}", literal(a.job)))
        return [r.asDict() for r in spark.sql(text).collect()]

    # The hosts' clock offsets first: the other queries move each host's times by them.
    results = {"offsets": run("offsets.sql", "0")}
    moved = shift(results["offsets"])
    for f in sorted(os.listdir(a.sql)):
        if f.endswith(".sql") and f != "offsets.sql":
            results[f[:-4]] = run(f, moved)
    spark.stop()
    out = sys.stdout if a.out == "-" else open(a.out, "w")
    json.dump({"job": a.job, "engine": "spark", "results": results}, out, default=str)
    out.write("\n")
    out.close()


if __name__ == "__main__":
    main()
