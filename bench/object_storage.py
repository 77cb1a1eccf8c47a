#!/usr/bin/env python3
"""Reads from object storage, measured against a local S3 endpoint (moto's server on
127.0.0.1, spoken to over HTTP by s3fs/botocore as AWS would be).

- ``bench-0`` (``kafka-written-large``) uploaded to a bucket: a full scan (every batch's CRC
  checked, every record decoded to Arrow) from the bucket next to the same scan of the local
  copy through mmap; and a read of the last 1% of its offsets: bytes fetched ÷ bytes of the
  batches returned, and the GET requests made.
- The Aiven tiered-storage objects of ``tiered-aiven/c-zstd-aes-64kib`` (zstd + AES-GCM,
  64 KiB chunks) in the bucket: a read of the last 1% of the offsets of a segment, the chunks
  fetched and decoded against the segment's total, and the requests made.

A local endpoint has no network latency: the throughput is what kafkalog's side costs, not
what a real bucket gives. Usage: python bench/object_storage.py [--runs 3]
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "fixtures"))
sys.path.insert(0, os.path.dirname(HERE))

import kafkalog  # noqa: E402
from kafkalog import storage, storage_backend, tiered  # noqa: E402
from kafkalog.log import Log  # noqa: E402


class Requests:
    """Counts the S3 API calls s3fs makes, by operation."""

    def __init__(self):
        import s3fs
        self.counts = {}
        original = s3fs.S3FileSystem._call_s3

        async def counted(fs, method, *args, **kwargs):
            self.counts[method] = self.counts.get(method, 0) + 1
            return await original(fs, method, *args, **kwargs)
        s3fs.S3FileSystem._call_s3 = counted

    def reset(self):
        self.counts = {}


def upload(client, bucket, local_dir, prefix):
    for root, _, names in os.walk(local_dir):
        for name in names:
            full = os.path.join(root, name)
            client.upload_file(full, bucket, f"{prefix}/{os.path.relpath(full, local_dir)}")
    return f"s3://{bucket}/{prefix}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import logging
    logging.getLogger("werkzeug").setLevel(logging.ERROR)      # moto's access log
    import boto3
    from moto.server import ThreadedMotoServer
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        options = {"key": "testing", "secret": "testing", "endpoint_url": endpoint,
                   "client_kwargs": {"region_name": "us-east-1"}}
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket="bench")
        local = os.path.join(SHARED, "kafka-written-large", "bench-0")
        url = upload(client, "bench", local, "bench-0")
        requests = Requests()
        size = sum(os.path.getsize(os.path.join(local, n)) for n in os.listdir(local)
                   if n.endswith(".log"))

        def scan(path):
            storage.reset()
            start = time.perf_counter()
            table = kafkalog.read_arrow(path, storage_options=options)
            assert table.num_rows == 1_000_000, table.num_rows
            return time.perf_counter() - start

        for label, path in (("local mmap", local), ("S3 (moto)", url)):
            scan(path)
            times = [scan(path) for _ in range(args.runs)]
            print(f"full scan {label:12s}: {size / statistics.median(times) / 1e6:7.1f} MB/s "
                  f"(median of {args.runs}, {size / 1e6:.1f} MB of segments, CRC checked, "
                  f"records decoded to Arrow)")

        storage.reset()
        requests.reset()
        with Log.open(url, read_only=True, storage_options=options) as log:
            end = log.log_end_offset
            first = end - (end - log.log_start_offset) // 100
            opened = dict(requests.counts)
            returned, offset = 0, first
            while offset < end:                    # what a consumer fetches, segment by segment
                returned += len(log.read(offset, max_bytes=1 << 31).records)
                nxt = log.segments.higher(log.segments.floor(offset).base_offset)
                offset = nxt.base_offset if nxt is not None else end
            fetched = sum(b.fetched for b in storage_backend.cached_buffers())
        print(f"last 1% of bench-0 (offsets {first}..{end}): {fetched} bytes fetched for "
              f"{returned} bytes of batches returned = {fetched / returned:.2f}; requests: "
              f"open {opened}, total {requests.counts}")

        objects = os.path.join(SHARED, "tiered-aiven", "c-zstd-aes-64kib", "objects")
        turl = upload(client, "bench", objects, "tiered-c")
        keys = {"key1": os.path.join(SHARED, "tiered-aiven", "keys", "private.pem")}
        storage.reset()
        requests.reset()
        part = f"{turl}/tiered/multiseg-7u6r2IfuQ7eOjN7qNDN2Ow/0"
        with Log.open(part, read_only=True, storage_options=options, rsm_keys=keys) as log:
            seg = log.segments.first
            seg_end = log.segments.higher(seg.base_offset).base_offset
            first = seg_end - (seg_end - seg.base_offset) // 100
            opened = dict(requests.counts)
            got = [r.offset for r in log.records(first, seg_end)]
        work = next(w for w in tiered.work() if w["base_offset"] == seg.base_offset)
        print(f"tiered zstd+AES segment {seg.base_offset} (64 KiB chunks), last 1% (offsets "
              f"{first}..{seg_end - 1}, {len(got)} records): {work['fetched_chunks']} of "
              f"{work['chunks']} chunks fetched and decoded, {work['requests']} requests for "
              f"the segment (its .indexes object, then one ranged GET per run of chunks); S3 "
              f"calls: open {opened}, total {requests.counts}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
