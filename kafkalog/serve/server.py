"""The server: a listening socket, one thread per connection reading size-prefixed request
frames, decoding them with ``kafkalog.protocol``, answering with ``Handlers`` and writing the
response's chunks in order (a file region of a local segment with ``sendfile``).

A connection's requests are answered one at a time, in order (a broker mutes a connection
until its response is sent), so a JoinGroup or a Fetch waiting for data holds only its own
connection. What a client cannot make it do: allocate more than ``max_frame_bytes`` for a
request (bytes are kept as they arrive; a larger size prefix closes the connection, as a
broker's ``InvalidReceiveException`` does), hold more than ``max_connections`` connections
(more are closed as they are accepted), keep an idle connection past ``idle_timeout_s``
(Kafka's ``connections.max.idle.ms``), or make a Fetch answer hold more than a broker's
``fetch.max.bytes``. A request that does not decode closes its connection, as a broker does.
"""
from __future__ import annotations

import base64
import hashlib
import logging
import os
import socket
import threading

from kafkalog.errors import ProtocolError
from kafkalog.protocol import decode_request, encode_response, frame_size
from kafkalog.serve.catalog import Catalog
from kafkalog.serve.groups import GroupCoordinator
from kafkalog.serve.handlers import Handlers
from kafkalog.serve.offsets import OffsetStore

log = logging.getLogger(__name__)

#: bytes asked of the socket per recv while a frame arrives
_RECV_CHUNK = 65536


class Server:
    """A read-only Kafka endpoint over the partition directories under ``paths``.

    ``listen``: (host, port) to bind, port 0 for any free one (``address`` tells which);
    ``state_dir``: where committed offsets are kept (created if missing). ``storage_options``
    and ``rsm_keys`` as the readers take them; ``advertised``: the (host, port) clients are
    told to connect to when it is not the bound address. ``start()`` (or ``with``) binds and
    serves in background threads; ``close()`` stops, closing every connection.
    """

    def __init__(self, paths, state_dir, listen=("127.0.0.1", 0), *, storage_options=None,
                 rsm_keys=None, read_above_high_watermark=False, advertised=None,
                 max_connections=256, max_frame_bytes=8 * 1024 * 1024,
                 idle_timeout_s=600.0):
        self.paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        self.state_dir = os.fspath(state_dir)
        self.listen = listen
        self.max_connections = max_connections
        self.max_frame_bytes = max_frame_bytes
        self.idle_timeout_s = idle_timeout_s
        self._advertised = advertised
        self._options = (storage_options, rsm_keys, read_above_high_watermark)
        self._stop = threading.Event()
        self._closed = False
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._threads: list[threading.Thread] = []
        self._sock = None
        self.catalog = None
        self.groups = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Server:
        storage_options, rsm_keys, above = self._options
        self.catalog = Catalog(self.paths, storage_options, rsm_keys, above)
        try:
            offsets = OffsetStore(self.state_dir)
            self.groups = GroupCoordinator(
                offsets, lambda topic, partition: self.catalog.get(topic, partition) is not None)
            self._handlers = Handlers(self.catalog, self.groups, self._advertised_address,
                                      self._stop.wait, self._cluster_id())
            family = socket.AF_INET6 if ":" in self.listen[0] else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(self.listen)
            sock.listen(128)
            self._sock = sock
        except BaseException:
            self.catalog.close()
            raise
        for target, name in ((self._accept, "accept"), (self._sweep, "groups")):
            t = threading.Thread(target=target, name=f"kafkalog-serve-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        log.info("listening on %s:%d, serving %d topics", *self.address,
                 len(self.catalog.topics))
        return self

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port)."""
        host, port = self._sock.getsockname()[:2]
        return host, port

    def _advertised_address(self):
        if self._advertised is not None:
            return self._advertised
        host, port = self.address
        if host in ("0.0.0.0", "::"):
            host = socket.getfqdn()
        return host, port

    def _cluster_id(self):
        """A cluster id (Kafka's 22-character form) of the paths served, the same each run."""
        digest = hashlib.sha256("\0".join(sorted(map(str, self.paths))).encode()).digest()
        return base64.urlsafe_b64encode(digest[:16]).decode().rstrip("=")

    def stop(self) -> None:
        """Ask the server to stop (safe in a signal handler): ``wait`` returns, ``close``
        finishes."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until ``close()`` (True) or ``timeout`` seconds (False)."""
        return self._stop.wait(timeout)

    def close(self) -> None:
        """Stop accepting, close every connection, release the logs."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self.groups is not None:
            self.groups.close()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
        with self._lock:
            connections = list(self._connections.items())
        for conn, _ in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads + [t for _, t in connections]:
            t.join(5)
        if self.catalog is not None:
            self.catalog.close()
        log.info("stopped")

    def __enter__(self) -> Server:
        return self.start() if self._sock is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ threads
    def _sweep(self):
        while not self._stop.wait(0.1):
            try:
                self.groups.sweep()
            except Exception:
                log.exception("expiring group sessions failed")

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, peer = self._sock.accept()
            except OSError:
                if self._stop.is_set():
                    return
                continue
            with self._lock:
                full = len(self._connections) >= self.max_connections
                if not full:
                    t = threading.Thread(target=self._connection, args=(conn, peer),
                                         name=f"kafkalog-serve-{peer}", daemon=True)
                    self._connections[conn] = t
            if full:
                log.warning("refused a connection from %s: %d connections open (the limit)",
                            peer, self.max_connections)
                conn.close()
            else:
                t.start()

    def _connection(self, conn, peer):
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(self.idle_timeout_s)
            while not self._stop.is_set():
                frame = self._read_frame(conn, peer)
                if frame is None:
                    return
                request = decode_request(frame)
                body = self._handlers.answer(request)
                if body is None:
                    return
                self._send(conn, encode_response(request, body))
        except ProtocolError as e:
            log.info("closing the connection from %s: %s", peer, e)
        except OSError:          # socket.timeout is one
            pass                      # the client went away, or stayed idle too long
        except Exception:
            # a fault of this server's: the connection ends, the server goes on
            log.exception("closing the connection from %s after an internal error", peer)
        finally:
            with self._lock:
                self._connections.pop(conn, None)
            conn.close()

    def _read_frame(self, conn, peer):
        """The next request frame's bytes (after the size), None at a clean end of stream."""
        head = self._recv(conn, 4, at_start=True)
        if head is None:
            return None
        return self._recv(conn, frame_size(head, self.max_frame_bytes))

    @staticmethod
    def _recv(conn, size, at_start=False):
        """``size`` bytes, kept as they arrive (a size prefix allocates nothing)."""
        data = bytearray()
        while len(data) < size:
            chunk = conn.recv(min(_RECV_CHUNK, size - len(data)))
            if not chunk:
                if at_start and not data:
                    return None
                raise ConnectionError("the client closed the connection mid-request")
            data += chunk
        return data

    @staticmethod
    def _send(conn, chunks):
        """Write the response's chunks in order: bytes gathered into one write, a file
        region (``fileno()``, ``offset``, ``__len__``) sent with ``sendfile``."""
        pending: list = []
        for chunk in chunks:
            if hasattr(chunk, "fileno"):
                if pending:
                    conn.sendall(b"".join(pending))
                    pending = []
                # From a descriptor of its own: a log closed meanwhile (a reopen, the server's
                # close) cannot close it, nor its number be reused, under a long send.
                with open(os.dup(chunk.fileno()), "rb", buffering=0) as segment:
                    sent = conn.sendfile(segment, chunk.offset, len(chunk))
                if sent != len(chunk):
                    raise ConnectionError(f"sent {sent} of {len(chunk)} bytes of a segment")
            else:
                pending.append(chunk)
        if pending:
            conn.sendall(b"".join(pending))
