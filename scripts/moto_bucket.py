"""A local S3 endpoint with Kafka data in a bucket, for scripts (the cluster check).

Usage: python scripts/moto_bucket.py LOCAL_DIR BUCKET/PREFIX

Starts moto's S3 server on 127.0.0.1 on a free port, uploads every file under LOCAL_DIR to
``s3://BUCKET/PREFIX/``, prints one line ``ENDPOINT URL`` (e.g. ``http://127.0.0.1:40123
s3://kafkalog-cluster/multiseg-0``) and serves until it is sent SIGTERM or SIGINT. Credentials
are moto's: any key, e.g. ``AWS_ACCESS_KEY_ID=testing``. Each request is logged on stderr
(werkzeug's access log: method, path, status; ranged GETs answer 206).
"""
import logging
import os
import signal
import sys
import threading


def main():
    local_dir, target = sys.argv[1], sys.argv[2].strip("/")
    bucket, _, prefix = target.partition("/")
    import boto3
    from moto.server import ThreadedMotoServer

    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket=bucket)
        for root, _, names in os.walk(local_dir):
            for name in names:
                full = os.path.join(root, name)
                key = "/".join(p for p in (prefix, os.path.relpath(full, local_dir)) if p)
                client.upload_file(full, bucket, key)
        print(endpoint, f"s3://{target}", flush=True)
        while not stop.wait(0.5):      # a timed wait: the signal handler runs between waits
            pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
