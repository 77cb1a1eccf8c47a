"""An HTTP proxy in front of an S3 endpoint (moto's server) that counts the requests it
forwards and can slow or throttle them: the one both the tests (tests/test_object_storage.py)
and the benchmark (bench/plan_scale.py, which puts ``tests`` on its path) use."""
from __future__ import annotations

import http.client
import http.server
import json
import threading
import time

#: A GET of this path answers the counts since the last ``take`` (JSON), not forwarded: how a
#: process other than the proxy's asks.
COUNTS_PATH = "/__s3_proxy_counts__"

_SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
              b'<Message>Please reduce your request rate.</Message></Error>')


class CountingProxy:
    """A proxy on 127.0.0.1 (``endpoint``) in front of ``upstream`` (``http://host:port``).

    Each request waits ``latency`` seconds before it is forwarded (concurrent requests wait
    concurrently, as a store's do) and is counted by kind in ``counts`` (LIST, HEAD, GET,
    GET range, PUT, ...); ``gets`` and ``get_bytes`` count the GETs forwarded and the bytes
    they returned. The next ``fail`` ranged GETs are answered ``503 SlowDown`` (S3's
    throttling reply; ``failed`` counts them)."""

    def __init__(self, upstream: str, latency: float = 0.0) -> None:
        host, _, port = upstream.split("//", 1)[1].rstrip("/").rpartition(":")
        self.upstream = (host, int(port))
        self.latency = latency
        self.counts: dict[str, int] = {}
        self.gets = self.get_bytes = self.fail = self.failed = 0
        self.lock = threading.Lock()
        self._local = threading.local()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if self.path == COUNTS_PATH:
                    self._reply(200, {}, json.dumps(proxy.take()).encode())
                    return
                if proxy._count(self.command, self.path, self.headers):
                    self._reply(503, {"Content-Type": "application/xml"}, _SLOW_DOWN)
                    return
                if proxy.latency:
                    time.sleep(proxy.latency)
                status, reason, headers, data = proxy._upstream(self.command, self.path,
                                                                body, self.headers)
                if self.command == "GET":
                    with proxy.lock:
                        proxy.gets += 1
                        proxy.get_bytes += len(data)
                self._reply(status, headers, data, reason)

            def _reply(self, status, headers, data, reason=None):
                self.send_response_only(status, reason)
                for k, v in headers.items() if isinstance(headers, dict) else headers:
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _count(self, method, path, headers):
        """Count a request; True when it is to be throttled."""
        query = path.partition("?")[2]
        if method == "GET" and ("list-type" in query or "prefix=" in query
                                or "delimiter" in query):
            kind = "LIST"
        elif method == "GET" and headers.get("Range"):
            kind = "GET range"
        else:
            kind = method
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            throttle = kind == "GET range" and self.fail > 0
            if throttle:
                self.fail -= 1
                self.failed += 1
        return throttle

    def _upstream(self, method, path, body, headers):
        """(status, reason, headers, body) of the request sent upstream, on this thread's
        connection (made again once if the upstream closed it)."""
        sent = {k: v for k, v in headers.items() if k.lower() != "host"}
        sent["Host"] = "%s:%d" % self.upstream
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = http.client.HTTPConnection(*self.upstream,
                                                                      timeout=120)
            try:
                conn.request(method, path, body=body, headers=sent)
                resp = conn.getresponse()
                return resp.status, resp.reason, resp.getheaders(), resp.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def take(self) -> dict[str, int]:
        """The counts by kind since the last call."""
        with self.lock:
            out, self.counts = self.counts, {}
        return out

    def reset(self) -> None:
        with self.lock:
            self.gets = self.get_bytes = 0
            self.counts = {}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
