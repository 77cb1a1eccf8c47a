#!/usr/bin/env python3
"""Spark reads of N copies of kafka-written-large/bench-0 (1M records, 87 MB each) as N
partitions of one topic, N = 1 and 10 (--n), in one Spark session (local[2]): kafkalog's data
source (``spark.read.format("kafkalog")``) against two references over the same records.

- ``parquet``: Spark's Parquet reader over the records written as Parquet;
- ``floor``: a trivial Python data source that yields the same records as precomputed Arrow
  batches (memory-mapped IPC files written beforehand, one per partition, in the batches
  kafkalog yields): what handing rows from a Python worker to Spark costs by itself, the floor
  of any Python reader.

Queries (times are medians of --runs runs after one warm-up; the runs are interleaved: run i of
every reader and query, then run i + 1):

- ``full``: ``sum(length(value))`` over every record (kafkalog, floor, parquet);
- ``narrow``: ``.schema("partition INT, offset LONG, timestamp TIMESTAMP")``,
  ``sum(offset), max(timestamp)`` (kafkalog, floor; parquet reading the same three columns);
- ``last1%``: ``filter(offset >= cut).count()`` for the last 1% of offsets of each partition,
  ``spark.sql.python.filterPushdown.enabled`` on (kafkalog through ``kafkalog.spark.read``,
  whose scans prune by their filters; parquet).

Then the peak RSS (VmHWM) of each Python worker of the session. Targets at N = 10: full <= 1.25x
floor, narrow <= 2.0x parquet, last1% <= 1.5x parquet, worker RSS <= 300 MB.

Run it from outside the checkout (Spark workers put their cwd on sys.path):
``cd /tmp && python /path/to/bench/spark_compare.py [--n 1 10] [--runs 3] [--json]``.
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
NARROW = "partition INT, offset LONG, timestamp TIMESTAMP"


def floor_source():
    """The floor: a Python data source whose reader yields the record batches of an Arrow IPC
    file per partition (option ``path``: the directory of ``.arrow`` files), memory-mapped;
    with a schema given (``.schema(...)``), only its columns (selected without a copy)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class FloorReader(DataSourceReader):
        def __init__(self, path, columns):
            self.path = path
            self.columns = columns

        def partitions(self):
            return [InputPartition(os.path.join(self.path, n))
                    for n in sorted(os.listdir(self.path))]

        def read(self, partition):
            import gc

            import pyarrow as pa
            if not gc.get_freeze_count():
                # what any Python reader can do (kafkalog's does): keep the worker's modules
                # out of the full gc.collect() PySpark's daemon runs after every task
                gc.collect()
                gc.freeze()
            with pa.memory_map(partition.value) as source:
                batches = pa.ipc.open_file(source)
                for i in range(batches.num_record_batches):
                    yield batches.get_batch(i).select(self.columns)

    class FloorSource(DataSource):
        @classmethod
        def name(cls):
            return "kafkalog_floor"

        def schema(self):
            from kafkalog.spark.schema import kafka_schema
            return kafka_schema()

        def reader(self, schema):
            return FloorReader(self.options["path"], schema.fieldNames())

    return FloorSource


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


def make_inputs(spark, source, n, tmp):
    """(log dir of n copies of ``source`` as partitions 0..n-1 of its topic, Parquet of their
    records, directory of the floor's IPC files)."""
    import pyarrow as pa

    import kafkalog
    topic = os.path.basename(source).rpartition("-")[0]
    logs = os.path.join(tmp, f"logs-{n}")
    for p in range(n):
        shutil.copytree(source, os.path.join(logs, f"{topic}-{p}"))
    parquet = os.path.join(tmp, f"parquet-{n}")
    spark.read.format("kafkalog").load(logs).write.parquet(parquet)
    floor = os.path.join(tmp, f"floor-{n}")
    os.makedirs(floor)
    for p in range(n):
        with kafkalog.record_batch_reader(os.path.join(logs, f"{topic}-{p}")) as reader, \
                pa.OSFile(os.path.join(floor, f"{p:05d}.arrow"), "wb") as sink, \
                pa.ipc.new_file(sink, reader.schema) as writer:
            for batch in reader:
                writer.write_batch(batch)
    return logs, parquet, floor


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source", nargs="?", default=DEFAULT, help="the partition directory copied")
    ap.add_argument("--n", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
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
    spark.dataSource.register(floor_source())
    source = os.path.abspath(args.source)
    tmp = tempfile.mkdtemp(prefix="spark_compare-")
    results = {}
    memory = None
    try:
        inputs = {n: make_inputs(spark, source, n, tmp) for n in args.n}
        last = spark.read.parquet(inputs[args.n[0]][1]).selectExpr("max(offset)").first()[0]
        first = spark.read.parquet(inputs[args.n[0]][1]).selectExpr("min(offset)").first()[0]
        cut = last - (last - first + 1) // 100 + 1
        cases = {}      # (n, query, reader) -> callable returning the answer
        for n, (logs, parquet, floor) in inputs.items():
            kafka = lambda logs=logs: spark.read.format("kafkalog").load(logs)  # noqa: E731
            pq = lambda parquet=parquet: spark.read.parquet(parquet)            # noqa: E731
            full = "sum(length(value))"
            cases[n, "full", "kafkalog"] = lambda k=kafka: k().selectExpr(full).first()[0]
            cases[n, "full", "floor"] = lambda floor=floor: (
                spark.read.format("kafkalog_floor").option("path", floor).load()
                .selectExpr(full).first()[0])
            cases[n, "full", "parquet"] = lambda p=pq: p().selectExpr(full).first()[0]
            narrow = ("sum(offset)", "max(timestamp)")
            cases[n, "narrow", "kafkalog"] = lambda logs=logs: tuple(
                spark.read.format("kafkalog").schema(NARROW).load(logs)
                .selectExpr(*narrow).first())
            cases[n, "narrow", "floor"] = lambda floor=floor: tuple(
                spark.read.format("kafkalog_floor").schema(NARROW).option("path", floor).load()
                .selectExpr(*narrow).first())
            cases[n, "narrow", "parquet"] = lambda p=pq: tuple(
                p().select("partition", "offset", "timestamp").selectExpr(*narrow).first())
            # kafkalog.spark.read: the DataFrame whose scans prune by their pushed filters
            cases[n, "last1%", "kafkalog"] = lambda logs=logs: ks.read(spark, logs).filter(
                f"offset >= {cut}").count()
            cases[n, "last1%", "parquet"] = lambda p=pq: p().filter(f"offset >= {cut}").count()
        memory = WorkerMemory(spark.sparkContext._gateway.proc.pid)
        times = {key: [] for key in cases}
        answers = {}
        for i in range(args.runs + 1):
            for key, run in cases.items():
                start = time.perf_counter()
                try:
                    answers[key] = run()
                except Exception as e:           # a reader that cannot run this query
                    answers[key] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                    continue
                if i:
                    times[key].append(time.perf_counter() - start)
        memory.stop()
        for (n, query, reader), ts in times.items():
            results.setdefault(n, {}).setdefault(query, {})[reader] = {
                "median_s": statistics.median(ts) if ts else None,
                "runs_s": ts, "answer": answers.get((n, query, reader))}
        for n, queries in results.items():
            for query, readers in queries.items():
                ours = readers["kafkalog"]["median_s"]
                for ref in ("parquet", "floor"):
                    if ref in readers and ours and readers[ref]["median_s"]:
                        readers["kafkalog"][f"x_{ref}"] = ours / readers[ref]["median_s"]
                        if ref == "floor":
                            readers["floor"]["x_parquet"] = \
                                readers["floor"]["median_s"] / readers["parquet"]["median_s"]
        workers = sorted(((cmd, pid, peak) for (pid, cmd), peak in memory.peaks.items()),
                         key=lambda x: -x[2])
        load = os.getloadavg()
        if args.json:
            print(json.dumps({"cut": cut, "load": load, "results": results, "workers": [
                {"pid": pid, "module": cmd, "peak_rss_bytes": peak}
                for cmd, pid, peak in workers]}, indent=1, default=str))
            return
        print(f"bench: {args.n} copies of {source}; last1% = offset >= {cut}; compiled "
              f"kernels: {kafkalog.compiled()}; medians of {args.runs}; load average at the "
              f"end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
        print(f"{'N':>3s} {'query':7s} {'reader':9s} {'median':>8s} {'x floor':>8s} "
              f"{'x parquet':>9s}  answer")
        for n, queries in results.items():
            for query, readers in queries.items():
                for reader, r in readers.items():
                    median = "-" if r["median_s"] is None else f"{r['median_s']:7.2f}s"
                    xf = f"{r['x_floor']:8.2f}" if "x_floor" in r else f"{'':8s}"
                    xp = f"{r['x_parquet']:9.2f}" if "x_parquet" in r else f"{'':9s}"
                    print(f"{n:3d} {query:7s} {reader:9s} {median:>8s} {xf} {xp}  "
                          f"{r['answer']}")
        print("peak RSS of the Python workers of this session (MB):")
        for cmd, pid, peak in workers:
            print(f"  {peak / 2**20:7.1f}  pid {pid}  {cmd}")
    finally:
        if memory is not None:
            memory.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
