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

``--partitions P`` instead: P small partitions, hard links to one partition directory (default
``kafka-written/plain-0``: one segment of 3,000 records) named ``<topic>-0`` ... ``<topic>-P-1``,
against Parquet of the same rows in P files (one per partition); one query, ``full``
(``sum(length(value))``, kafkalog through ``kafkalog.spark.read``, the DataFrame made in each
run as a job would make it, so its planning is timed), and the plans the run made per action
(``kafkalog.spark.plan`` calls in every process of the session, counted through
``KAFKALOG_COUNT_PLANS``). Target at P = 2,000: <= 2.5x parquet (issue 40).

Run it from outside the checkout (Spark workers put their cwd on sys.path):
``cd /tmp && python /path/to/bench/spark_compare.py [--n 1 10] [--runs 3] [--json]``, or
``... spark_compare.py --partitions 2000``.
"""
import argparse
import errno
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
SMALL = os.path.join(HERE, "..", "..", "shared", "fixtures", "kafka-written", "plain-0")
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


def linked_inputs(spark, source, count, tmp):
    """(log dir of ``count`` partitions, each hard links to the files of ``source``, Parquet
    of their records in ``count`` files): the inputs of ``--partitions``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import kafkalog
    topic = os.path.basename(source).rpartition("-")[0]
    logs = os.path.join(tmp, f"logs-p{count}")
    parquet = os.path.join(tmp, f"parquet-p{count}")
    os.makedirs(parquet)
    with kafkalog.record_batch_reader(source) as reader:
        table = pa.Table.from_batches(list(reader), reader.schema)
    column = table.schema.get_field_index("partition")
    # links to a private copy (the shared fixture may be near the file system's link limit),
    # and to a new copy whenever one reaches it
    copies = []
    for p in range(count):
        target = os.path.join(logs, f"{topic}-{p}")
        os.makedirs(target)
        for name in os.listdir(source):
            while True:
                if not copies:
                    copies.append(shutil.copytree(source, os.path.join(tmp, f"src-{p}")))
                try:
                    os.link(os.path.join(copies[-1], name), os.path.join(target, name))
                    break
                except OSError as e:
                    if e.errno != errno.EMLINK:
                        raise
                    copies.append(shutil.copytree(source, os.path.join(tmp, f"src-{p}")))
        pq.write_table(table.set_column(column, table.schema.field(column),
                                        pa.array([p] * len(table), pa.int32())),
                       os.path.join(parquet, f"part-{p:06d}.parquet"))
    return logs, parquet


def plans_made(name):
    """{kind: count} of the plans noted in ``name`` (``KAFKALOG_COUNT_PLANS``)."""
    counts = {}
    if os.path.exists(name):
        with open(name) as f:
            for line in f:
                kind = line.split()[1]
                counts[kind] = counts.get(kind, 0) + 1
    return counts


def many_partitions(spark, source, count, runs, tmp, counter):
    """``--partitions``: the full read of ``count`` small partitions against Parquet of the
    same rows in ``count`` files, interleaved, medians of ``runs`` after a warm-up; the plans
    of each kafkalog run."""
    import kafkalog.spark as ks
    start = time.perf_counter()
    logs, parquet = linked_inputs(spark, source, count, tmp)
    made_s = time.perf_counter() - start
    full = "sum(length(value))"
    cases = {"kafkalog": lambda: ks.read(spark, logs).selectExpr(full).first()[0],
             "parquet": lambda: spark.read.parquet(parquet).selectExpr(full).first()[0]}
    times = {k: [] for k in cases}
    answers, plans = {}, []
    for i in range(runs + 1):
        for name, run in cases.items():
            if name == "kafkalog":
                open(counter, "w").close()
            begin = time.perf_counter()
            answers[name] = run()
            if i:
                times[name].append(time.perf_counter() - begin)
            if name == "kafkalog":
                plans.append(plans_made(counter))
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {"partitions": count, "source": source, "inputs_s": made_s, "load": os.getloadavg(),
            "median_s": medians, "runs_s": times, "answers": answers,
            "x_parquet": medians["kafkalog"] / medians["parquet"], "plans_per_run": plans}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source", nargs="?", default=None, help="the partition directory copied "
                    "(default kafka-written-large/bench-0; with --partitions "
                    "kafka-written/plain-0)")
    ap.add_argument("--n", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--partitions", type=int, default=None,
                    help="P small partitions against Parquet in P files (full read only)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    tmp = tempfile.mkdtemp(prefix="spark_compare-")
    # every process of the session (planning workers, executors' workers) notes its plans
    counter = os.environ.setdefault("KAFKALOG_COUNT_PLANS", os.path.join(tmp, "plans"))
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
    if args.partitions is not None:
        try:
            out = many_partitions(spark, os.path.abspath(args.source or SMALL),
                                  args.partitions, args.runs, tmp, counter)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            spark.stop()
        if args.json:
            print(json.dumps(out, indent=1, default=str))
            return
        m = out["median_s"]
        print(f"bench: {out['partitions']} partitions of {out['source']} (hard links; inputs "
              f"made in {out['inputs_s']:.1f} s); compiled kernels: {kafkalog.compiled()}; "
              f"medians of {args.runs}; load average at the end "
              f"{' '.join(f'{x:.1f}' for x in out['load'])}")
        print(f"full read: kafkalog {m['kafkalog']:.2f} s, parquet {m['parquet']:.2f} s: "
              f"{out['x_parquet']:.2f}x parquet (runs: kafkalog "
              f"{' '.join(f'{t:.2f}' for t in out['runs_s']['kafkalog'])}, parquet "
              f"{' '.join(f'{t:.2f}' for t in out['runs_s']['parquet'])})")
        print(f"answers: {out['answers']}")
        print(f"plans per kafkalog run (kind: count): {out['plans_per_run']}")
        return
    source = os.path.abspath(args.source or DEFAULT)
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
