#!/usr/bin/env python3
"""Spark reads of kafka-written-large/bench-0 (1M records): kafkalog vs Spark's Parquet reader
over the same records, in one Spark session (local[2]); times are medians of --runs runs after
one warm-up run each. Prints, for each query, the ratio kafkalog / Parquet:

- ``count``: ``df.count()``
- ``sum``: ``sum(length(value))``
- ``last1%``: ``df.filter("offset >= N").count()`` for the last 1% of offsets (kafkalog pushes
  the filter; also given as a ratio to kafkalog's own full ``count``: target <= 1/3)
- ``none``: ``df.filter("offset > max").count()``, which reads nothing: what any action costs
  (planning, scheduling, the job), the floor under ``last1%``; ``last1%`` is also given above
  that floor, ``(last1% - none) / (count - none)``

for kafkalog through ``spark.read.format("kafkalog")`` (the Python data source) and through
``kafkalog.spark.read`` (the same source, whose filters on topic, partition, offset and
timestamp prune the planning); and the peak RSS (VmHWM) of each Python worker of this session, which
``maxBytesPerTask`` bounds (--max-bytes-per-task). The times include kafkalog's planning. --kafka-python adds a plain mapPartitions reader that yields
one Row per record from kafka-python's decoder.

Run it from outside the checkout (Spark workers put their cwd on sys.path):
``cd /tmp && python /path/to/bench/spark_compare.py [--runs 5] [--json]``.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
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


class WorkerMemory:
    """Peak RSS (VmHWM, bytes) of every Python process under the Spark JVM, polled."""

    def __init__(self, jvm_pid):
        self.jvm_pid = jvm_pid
        self.peaks = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _children(self):
        parents = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        parents[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    pass
        out, todo = set(), [self.jvm_pid]
        while todo:
            pid = todo.pop()
            for child, parent in parents.items():
                if parent == pid and child not in out:
                    out.add(child)
                    todo.append(child)
        return out

    def _poll(self):
        for pid in self._children():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                if "pyspark" not in cmd:
                    continue
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            kb = int(line.split()[1])
                            key = (pid, cmd.split("pyspark.", 1)[-1][:60])
                            self.peaks[key] = max(self.peaks.get(key, 0), kb * 1024)
            except OSError:
                pass

    def _run(self):
        while not self._stop.wait(0.1):
            self._poll()

    def stop(self):
        self._stop.set()
        self._thread.join()
        self._poll()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", default=DEFAULT)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--max-bytes-per-task", type=int, default=None)
    ap.add_argument("--kafka-python", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import kafkalog
    import kafkalog.spark as ks
    if not kafkalog.compiled():
        print("warning: kafkalog runs its pure-Python kernels here", file=sys.stderr)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.python.filterPushdown.enabled", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    ks.register(spark)
    memory = WorkerMemory(spark.sparkContext._gateway.proc.pid)
    path = os.path.abspath(args.path)
    options = {} if args.max_bytes_per_task is None else \
        {"maxBytesPerTask": str(args.max_bytes_per_task)}
    tmp = tempfile.mkdtemp()
    try:
        parquet = os.path.join(tmp, "bench.parquet")
        ks.read(spark, path).write.parquet(parquet)
        logs = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".log"))
        last = spark.read.parquet(parquet).selectExpr("max(offset)").collect()[0][0]
        first = spark.read.parquet(parquet).selectExpr("min(offset)").collect()[0][0]
        cut = last - (last - first + 1) // 100 + 1

        def kafka_python_df():
            rdd = spark.sparkContext.parallelize(logs, len(logs)).mapPartitions(
                kafka_python_partition)
            return spark.createDataFrame(rdd, "key binary, value binary, topic string, "
                                              "partition int, offset long, timestamp long, "
                                              "timestampType int")

        readers = {
            "kafkalog format": lambda: spark.read.format("kafkalog").options(**options)
            .load(path),
            "kafkalog.spark.read": lambda: ks.read(spark, path, **options),
            "parquet": lambda: spark.read.parquet(parquet),
        }
        if args.kafka_python:
            readers["kafka-python mapPartitions"] = kafka_python_df
        queries = {
            "count": lambda df: df.count(),
            "sum": lambda df: df.selectExpr("sum(length(value))").collect()[0][0],
            "last1%": lambda df: df.filter(f"offset >= {cut}").count(),
            "none": lambda df: df.filter(f"offset > {last}").count(),
        }
        results = {}
        for query, run in queries.items():
            for name, make in readers.items():
                times, answer = [], None
                for i in range(args.runs + 1):
                    start = time.perf_counter()
                    answer = run(make())
                    if i:
                        times.append(time.perf_counter() - start)
                results.setdefault(name, {})[query] = {
                    "median_s": statistics.median(times), "min_s": min(times),
                    "max_s": max(times), "answer": answer}
        memory.stop()
        base = results["parquet"]
        for name, r in results.items():
            for query, q in r.items():
                q["x_parquet"] = q["median_s"] / base[query]["median_s"]
            r["last1%"]["x_own_count"] = r["last1%"]["median_s"] / r["count"]["median_s"]
            floor = r["none"]["median_s"]
            r["last1%"]["x_own_count_above_floor"] = \
                (r["last1%"]["median_s"] - floor) / max(1e-9, r["count"]["median_s"] - floor)
        workers = sorted(((cmd, pid, peak) for (pid, cmd), peak in memory.peaks.items()),
                         key=lambda x: -x[2])
        if args.json:
            print(json.dumps({"cut": cut, "results": results, "workers": [
                {"pid": pid, "module": cmd, "peak_rss_bytes": peak}
                for cmd, pid, peak in workers]}, indent=1))
            return
        print(f"bench: {path}, last1% = offset >= {cut}, options {options}, "
              f"compiled kernels: {kafkalog.compiled()}")
        print(f"{'reader':28s} {'query':7s} {'median':>8s} {'min':>8s} {'max':>8s} "
              f"{'x parquet':>9s}  answer")
        for name, r in results.items():
            for query, q in r.items():
                extra = f"  ({q['x_own_count']:.2f} x own count, " \
                    f"{q['x_own_count_above_floor']:.2f} above the none floor)" \
                    if "x_own_count" in q else ""
                print(f"{name:28s} {query:7s} {q['median_s']:7.2f}s {q['min_s']:7.2f}s "
                      f"{q['max_s']:7.2f}s {q['x_parquet']:9.2f}  {q['answer']}{extra}")
        print("peak RSS of the Python workers of this session (MB):")
        for cmd, pid, peak in workers:
            print(f"  {peak / 2**20:7.1f}  pid {pid}  {cmd}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
