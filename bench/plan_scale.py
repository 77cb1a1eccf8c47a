#!/usr/bin/env python3
"""Discovery and planning at scale (issue 40): P partitions that are copies of one Kafka-written
segment of 3,000 records (``kafka-written/plain-0``), planned and read locally and from a moto
S3 server behind a proxy that adds latency to every request, as object storage does.

Locally the copies are hard links (cheap at 100,000 partitions), made once under ``--cache``
and reused. On S3 the objects are put straight into moto; kafkalog reaches it through the proxy,
which sleeps ``--latency-ms`` before forwarding each request and counts them by kind (LIST,
HEAD, GET): the requests a plan or a read makes are those it sent through the proxy.

Prints, per P: requests per partition, planning seconds (``kafkalog.spark.plan``, in this
process), ``read_arrow`` seconds and requests (the ``offset`` column only: decoding is not what
is measured). ``--spark P`` adds the Spark full read of P small partitions against Parquet of
the same rows in P files (``bench/spark_compare.py --partitions P``, run from a temporary
directory: Spark's workers put their working directory on sys.path). Usage::

    python bench/plan_scale.py --local 1000,10000,100000 --s3 100,500,1000,10000 [--bounded] \
        [--spark 2000]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import gc
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "fixtures"))
SOURCE = os.path.join(SHARED, "kafka-written", "plain-0")      # 1 segment, 3,000 records
RECORDS = 3000
MIDDLE_TIMESTAMP = 1700000015000        # plain-0's record 1,500 (10 ms apart from 1700000000000)
TOPIC = "bench"
LINKS_PER_COPY = 10_000
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import kafkalog  # noqa: E402
import kafkalog.spark  # noqa: E402
from kafkalog import storage  # noqa: E402
from s3_proxy import COUNTS_PATH, CountingProxy  # noqa: E402  (tests/s3_proxy.py)


# ------------------------------------------------------------------------------ local copies
def local_copies(cache: str, p: int) -> str:
    """A log dir of ``p`` partition directories ``bench-<i>``, each hard links to the files of
    ``SOURCE`` (made once: a marker file says the copy is complete)."""
    root = os.path.join(cache, f"local-{p}")
    done = os.path.join(cache, f"local-{p}.v2")
    if os.path.exists(done):
        return root
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    names = sorted(os.listdir(SOURCE))
    source = None
    for i in range(p):
        if i % LINKS_PER_COPY == 0:
            # links to a private copy, never to the shared fixture (whose link count others'
            # tests need), a new copy before a file system's link limit (ext4: 65,000)
            source = os.path.join(cache, f"source-{p}-{i // LINKS_PER_COPY}")
            shutil.rmtree(source, ignore_errors=True)
            shutil.copytree(SOURCE, source)
        d = os.path.join(root, f"{TOPIC}-{i}")
        os.mkdir(d)
        for n in names:
            try:
                os.link(os.path.join(source, n), os.path.join(d, n))
            except OSError:                 # another filesystem: a copy then
                shutil.copyfile(os.path.join(source, n), os.path.join(d, n))
    open(done, "w").close()
    return root


def s3_copies(client, bucket: str, p: int) -> str:
    """``p`` partition directories under ``s3://bucket/s3-<p>/`` (objects put into moto
    directly, not through the proxy)."""
    prefix = f"s3-{p}"
    names = sorted(os.listdir(SOURCE))
    data = {n: open(os.path.join(SOURCE, n), "rb").read() for n in names}

    def put(i):
        for n in names:
            client.put_object(Bucket=bucket, Key=f"{prefix}/{TOPIC}-{i}/{n}", Body=data[n])
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(p)))
    return f"s3://{bucket}/{prefix}"


# ------------------------------------------------------------------------------ measuring
def measure(path, p, storage_options=None, take=None, read=True):
    """(planning seconds, tasks, plan requests, read seconds or None, read requests);
    ``take``: the proxy's counts since the last call."""
    storage.reset()
    gc.collect()
    if take:
        take()
    t0 = time.perf_counter()
    tasks = kafkalog.spark.plan(path, {}, storage_options=storage_options)
    planned = time.perf_counter() - t0
    plan_requests = take() if take else {}
    read_s, read_requests = None, {}
    if read:
        storage.reset()
        t0 = time.perf_counter()
        table = kafkalog.arrow.read_arrow(path, storage_options=storage_options,
                                          columns=["offset"])
        read_s = time.perf_counter() - t0
        assert table.num_rows == p * RECORDS, (table.num_rows, p * RECORDS)
        read_requests = take() if take else {}
    return planned, len(tasks), plan_requests, read_s, read_requests


def _fmt(counts):
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items())) or "-"


def row(where, p, result):
    planned, n_tasks, plan_requests, read_s, read_requests = result
    per = sum(plan_requests.values()) / p
    read_total = sum(read_requests.values())
    print(f"| {where} | {p:,} | {n_tasks:,} | {planned:.2f} s ({planned / p * 1000:.2f} ms/p) | "
          f"{per:.2f} ({_fmt(plan_requests)}) | "
          f"{'-' if read_s is None else f'{read_s:.2f} s'} | "
          f"{read_total} ({_fmt(read_requests)}) |", flush=True)


def bounded_rows(url, p, options, take):
    """Requests and seconds of planning the S3 partitions bounded by offsets (from the middle
    of each, to its middle), by a timestamp (the middle record's), read_committed, and of a
    stream's latest offsets (``partition_offsets``)."""
    from kafkalog.scan.planner import partition_offsets
    from kafkalog.spark.options import Options
    middle = json.dumps({TOPIC: {str(i): RECORDS // 2 for i in range(p)}})
    for what, call in (
            ("startingOffsets", lambda: kafkalog.spark.plan(
                url, {"startingOffsets": middle}, storage_options=options)),
            ("endingOffsets", lambda: kafkalog.spark.plan(
                url, {"endingOffsets": middle}, storage_options=options)),
            ("startingTimestamp", lambda: kafkalog.spark.plan(
                url, {"startingTimestamp": str(MIDDLE_TIMESTAMP)}, storage_options=options)),
            ("read_committed", lambda: kafkalog.spark.plan(
                url, {"kafka.isolation.level": "read_committed"}, storage_options=options)),
            ("stream offsets", lambda: partition_offsets(url, Options({}),
                                                         storage_options=options))):
        storage.reset()
        take()
        t0 = time.perf_counter()
        call()
        seconds = time.perf_counter() - t0
        counts = take()
        print(f"| S3 {what} | {p:,} | - | {seconds:.2f} s | "
              f"{sum(counts.values()) / p:.2f} ({_fmt(counts)}) | - | - |", flush=True)


def sizes(text):
    return [int(x) for x in text.split(",") if x.strip()] if text else []


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local", default="1000,10000",
                        help="local partition counts, comma-separated ('' for none)")
    parser.add_argument("--s3", default="100",
                        help="S3 partition counts, comma-separated ('' for none)")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--local-read-max", type=int, default=10000,
                        help="read_arrow locally only up to this many partitions")
    parser.add_argument("--cache", default=os.path.join("/tmp", "kafkalog-plan-scale"))
    parser.add_argument("--bounded", action="store_true",
                        help="on S3 also plan offset-bounded reads and a stream's offsets")
    parser.add_argument("--spark", type=int, default=None, metavar="P",
                        help="also the Spark full read of P partitions against Parquet")
    parser.add_argument("--spark-runs", type=int, default=3)
    parser.add_argument("--serve-proxy", metavar="HOST:PORT",
                        help="(internal) run the latency proxy in front of HOST:PORT")
    args = parser.parse_args()
    if args.serve_proxy:
        return serve_proxy(args.serve_proxy, args.latency_ms)
    print("| where | P | tasks | planning | requests per partition (plan) | read_arrow | "
          "read requests |")
    print("|---|---|---|---|---|---|---|")
    for p in sizes(args.local):
        root = local_copies(args.cache, p)
        try:
            result = measure(root, p, read=p <= args.local_read_max)
        except Exception as e:                   # a failure is a result too (ENOMEM at scale)
            print(f"| local | {p:,} | failed: {type(e).__name__}: {e} |", flush=True)
            continue
        row("local", p, result)
    if sizes(args.s3):
        s3_rows(args)
    if args.spark:
        spark_row(args.spark, args.spark_runs)


def spark_row(p, runs):
    """The Spark full read of ``p`` partitions against Parquet (spark_compare.py's
    ``--partitions``, in its own process and working directory)."""
    import tempfile
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE)] + [x for x in [os.environ.get("PYTHONPATH")] if x]))
    with tempfile.TemporaryDirectory() as work:
        out = subprocess.run([sys.executable, os.path.join(HERE, "spark_compare.py"), SOURCE,
                              "--partitions", str(p), "--runs", str(runs), "--json"],
                             cwd=work, env=env, capture_output=True, text=True)
    if out.returncode:
        print(f"| Spark | {p:,} | failed: {out.stderr.strip().splitlines()[-1:]} |")
        return
    got = json.loads(out.stdout[out.stdout.index("{"):])
    m = got["median_s"]
    print(f"| Spark full read vs Parquet | {p:,} | - | kafkalog {m['kafkalog']:.2f} s, "
          f"Parquet {m['parquet']:.2f} s: **{got['x_parquet']:.2f}x** (medians of {runs}; "
          f"load {got['load'][0]:.1f}) | plans per action {got['plans_per_run'][-1]} | - | - |",
          flush=True)


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(cmd):
    """A server in its own process (as a store is: its work does not share this process's
    interpreter), its first line of output its endpoint."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return proc, proc.stdout.readline().strip()


def s3_rows(args):
    import boto3
    port = _free_port()
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proxy = None
    try:
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        for _ in range(300):
            try:
                client.list_buckets()
                break
            except Exception:                       # not listening yet
                time.sleep(0.1)
        proxy, proxy_endpoint = _serve([sys.executable, __file__, "--serve-proxy",
                                        f"127.0.0.1:{port}", "--latency-ms",
                                        str(args.latency_ms)])
        options = {"key": "testing", "secret": "testing", "endpoint_url": proxy_endpoint,
                   "client_kwargs": {"region_name": "us-east-1"}}

        def take():
            with urllib.request.urlopen(proxy_endpoint + COUNTS_PATH) as r:
                return json.loads(r.read())
        for p in sizes(args.s3):
            bucket = f"plan-scale-{p}"            # one bucket each: moto lists a whole bucket
            client.create_bucket(Bucket=bucket)
            url = s3_copies(client, bucket, p)
            row(f"S3 +{args.latency_ms:g} ms", p, measure(url, p, options, take))
            if args.bounded:
                bounded_rows(url, p, options, take)
    finally:
        for proc in (proxy, moto):
            if proc is not None:
                proc.terminate()
                proc.wait()


def serve_proxy(upstream, latency_ms):
    proxy = CountingProxy(f"http://{upstream}", latency_ms / 1000)
    print(proxy.endpoint, flush=True)
    proxy.thread.join()


if __name__ == "__main__":
    main()
