#!/usr/bin/env python3
"""``kafkalog serve`` under a librdkafka consumer (issue 42, item 6): a confluent-kafka consumer
reads all of ``kafka-written-large/bench-0`` (1,000,000 records, 84 MB) through the server,
touching each record's value; printed: records/s, and the CPU time of the server process
beside the client process's (librdkafka's threads included) in the same run, with the load
average. The server moves stored batches (``sendfile``), the client decodes them: the target is
server CPU <= 0.25 x client CPU.

The server runs as ``python -m kafkalog serve`` in its own process; its CPU time is read from
/proc before the first request and after the last record arrived. The page cache is warmed
first (one read of the segments).

Usage: python bench/serve.py [--runs 3] [--partition-max-bytes N]
"""
import argparse
import glob
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BENCH0 = os.path.normpath(os.path.join(ROOT, "..", "shared", "fixtures", "kafka-written-large",
                                       "bench-0"))
RECORDS = 1_000_000
TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid):
    """User + system CPU seconds of process ``pid`` (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def own_cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def consume(bootstrap, partition_max_bytes):
    """Read bench-0 whole with librdkafka: (records, value bytes, seconds, client CPU)."""
    import confluent_kafka as ck
    consumer = ck.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
        "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": partition_max_bytes,
        "fetch.wait.max.ms": 100, "queued.max.messages.kbytes": 256 << 10})
    cpu, start = own_cpu(), time.perf_counter()
    consumer.assign([ck.TopicPartition("bench", 0, 0)])
    count = size = 0
    while count < RECORDS:
        for m in consumer.consume(10_000, 5.0):
            if m.error():
                raise RuntimeError(m.error())
            size += len(m.value())
            count += 1
    seconds = time.perf_counter() - start
    cpu = own_cpu() - cpu
    consumer.close()
    return count, size, seconds, cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partition-max-bytes", type=int, default=1 << 20,
                        help="the consumer's max.partition.fetch.bytes (default 1 MiB, "
                             "librdkafka's default)")
    args = parser.parse_args()
    if not os.path.isdir(BENCH0):
        sys.exit(f"{BENCH0} not found: the shared fixtures sit beside the checkout")
    for path in glob.glob(os.path.join(BENCH0, "*.log")):
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory() as state:
        server = subprocess.Popen(
            [sys.executable, "-m", "kafkalog", "serve", "--listen", "127.0.0.1:0",
             "--state-dir", state, BENCH0],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        try:
            line = server.stdout.readline()
            if "listening" not in line:
                sys.exit(f"the server did not start: {line!r}")
            bootstrap = line.rsplit(" ", 1)[1].strip()
            print(f"bench-0 through kafkalog serve ({bootstrap}), librdkafka consumer, "
                  f"max.partition.fetch.bytes {args.partition_max_bytes}")
            for run in range(args.runs):
                before = process_cpu(server.pid)
                count, size, seconds, client = consume(bootstrap, args.partition_max_bytes)
                served = process_cpu(server.pid) - before
                load = os.getloadavg()
                print(f"run {run + 1}: {count:,} records ({size / 1e6:.1f} MB of values) in "
                      f"{seconds:.2f} s = {count / seconds:,.0f} records/s; CPU: server "
                      f"{served:.2f} s, client {client:.2f} s, ratio {served / client:.3f} "
                      f"(target <= 0.25); load average {load[0]:.2f} {load[1]:.2f} "
                      f"{load[2]:.2f} on {os.cpu_count()} cores")
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
