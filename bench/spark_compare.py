#!/usr/bin/env python3
"""Spark read of kafka-written-large/bench-0 (1M records): kafkalog vs Spark's Parquet reader
over the same records vs a plain mapPartitions reader yielding one Row per record from
kafka-python's decoder. Each computes count() and sum(length(value)); times are medians of
--runs runs in one Spark session (local[2]), after one warm-up run each.

Usage: python bench/spark_compare.py [--runs 5] [--json]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "..", "shared", "fixtures", "kafka-written-large", "bench-0")


def kafka_python_partition(paths):
    from kafka.record.memory_records import MemoryRecords
    from pyspark.sql import Row
    for path in paths:
        with open(path, "rb") as f:
            records = MemoryRecords(f.read())
        name = os.path.basename(os.path.dirname(path))
        topic, _, partition = name.rpartition("-")
        while True:
            batch = records.next_batch()
            if batch is None:
                break
            for r in batch:
                yield Row(key=r.key, value=r.value, topic=topic, partition=int(partition),
                          offset=r.offset, timestamp=r.timestamp, timestampType=0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", default=DEFAULT)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    import kafkalog.spark as ks
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    path = os.path.abspath(args.path)
    tmp = tempfile.mkdtemp()
    try:
        parquet = os.path.join(tmp, "bench.parquet")
        ks.read(spark, path).write.parquet(parquet)
        logs = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".log"))

        def kafkalog_df():
            return ks.read(spark, path)

        def parquet_df():
            return spark.read.parquet(parquet)

        def kafka_python_df():
            rdd = spark.sparkContext.parallelize(logs, len(logs)).mapPartitions(
                kafka_python_partition)
            return spark.createDataFrame(rdd, "key binary, value binary, topic string, "
                                              "partition int, offset long, timestamp long, "
                                              "timestampType int")

        results = {}
        for name, make in [("kafkalog", kafkalog_df), ("parquet", parquet_df),
                           ("kafka-python mapPartitions", kafka_python_df)]:
            times, answer = [], None
            for i in range(args.runs + 1):
                start = time.perf_counter()
                answer = make().selectExpr("count(*) AS n", "sum(length(value)) AS bytes") \
                    .collect()[0]
                if i:
                    times.append(time.perf_counter() - start)
            results[name] = {"median_s": statistics.median(times), "min_s": min(times),
                             "max_s": max(times), "count": answer.n, "value_bytes": answer.bytes}
        base = results["kafkalog"]["median_s"]
        for r in results.values():
            r["ratio_to_kafkalog"] = r["median_s"] / base
        if args.json:
            print(json.dumps(results, indent=1))
        else:
            print(f"{'reader':30s} {'median':>9s} {'min':>9s} {'max':>9s} {'x kafkalog':>10s}  "
                  f"count / sum(length(value))")
            for name, r in results.items():
                print(f"{name:30s} {r['median_s']:8.2f}s {r['min_s']:8.2f}s {r['max_s']:8.2f}s "
                      f"{r['ratio_to_kafkalog']:10.2f}  {r['count']} / {r['value_bytes']}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
