"""``kafkalog serve``'s run: start the server, print the line saying where it listens, serve
until SIGTERM or SIGINT, then stop cleanly (connections closed, logs released)."""
from __future__ import annotations

import argparse
import json
import logging
import signal
import sys

from kafkalog.errors import KafkaLogError

log = logging.getLogger(__name__)


def host_port(text):
    """``HOST:PORT`` (``[::1]:9092`` for IPv6; ``:9092`` binds 127.0.0.1) as (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT")
    return (host.strip("[]") or "127.0.0.1", int(port))


def storage_option(text):
    """``KEY=VALUE``, VALUE read as JSON when it is (``true``, ``10``), else as a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def add_arguments(parser):
    parser.add_argument("--listen", type=host_port, default=("127.0.0.1", 9092),
                        metavar="HOST:PORT",
                        help="address to accept clients on (default 127.0.0.1:9092; "
                             "port 0 picks a free one)")
    parser.add_argument("--advertise", type=host_port, metavar="HOST:PORT",
                        help="the address clients are told to connect to (default: --listen)")
    parser.add_argument("--state-dir", required=True, metavar="DIR",
                        help="where committed offsets are kept (never in the served data)")
    parser.add_argument("--storage-option", type=storage_option, action="append",
                        default=[], metavar="KEY=VALUE",
                        help="fsspec option of URL paths (e.g. anon=true); repeatable")
    parser.add_argument("--read-above-high-watermark", action="store_true",
                        help="serve up to the log end where a log dir's checkpoint holds an "
                             "older high watermark")


def run(args, keys):
    """Serve until a signal; the exit status."""
    from kafkalog.serve.server import Server
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    server = Server(args.paths, args.state_dir, args.listen,
                    storage_options=dict(args.storage_option) or None, rsm_keys=keys,
                    read_above_high_watermark=args.read_above_high_watermark,
                    advertised=args.advertise)
    try:
        server.start()
    except (KafkaLogError, OSError) as e:
        print(f"kafkalog serve: {e}", file=sys.stderr)
        return 2

    def stop(signum, frame):
        log.info("signal %d: stopping", signum)
        server.stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    host, port = server.address
    print(f"kafkalog serve: listening on {host}:{port}", flush=True)
    try:
        while not server.wait(1.0):
            pass
    finally:
        server.close()
    return 0
