"""``kafkalog serve`` under hostile clients: malformed frames, huge size prefixes, unknown APIs
and versions, a client sending a byte at a time, more connections than allowed. Each bad
connection is closed (as a broker closes one whose request does not decode), nothing announced
is allocated before it arrives, and the server keeps answering everyone else."""
import random
import socket
import struct
import time
import tracemalloc

import pytest

from kafkalog import Record, build_batch
from kafkalog.protocol import APIS, decode_response, encode_request
from protocol_bodies import random_body

serve = pytest.importorskip("kafkalog.serve", reason="the server lands with branch serve")

@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    (root / "t-0").mkdir()
    (root / "t-0" / "00000000000000000000.log").write_bytes(
        build_batch([Record(key=b"k", value=b"v", timestamp=1000)]))
    return root


@pytest.fixture(scope="module")
def server(data, tmp_path_factory):
    with serve.Server([data], tmp_path_factory.mktemp("state")) as s:
        yield s


def _connect(server):
    conn = socket.create_connection(server.address, timeout=10)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def _read(conn):
    """The next response frame (after its size), or None when the server closed."""
    data = b""
    try:
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = conn.recv(65536)
            if not chunk:
                assert not data, "the connection was closed mid-response"
                return None
            data += chunk
    except ConnectionResetError:
        return None
    return data[4:]


def _ok(server):
    """A good client is answered: Metadata of every topic."""
    with _connect(server) as conn:
        conn.sendall(encode_request(3, 1, 9, "good", {"topics": None}))
        correlation_id, body = decode_response(3, 1, _read(conn))
    assert correlation_id == 9 and [t["name"] for t in body["topics"]] == ["t"]


def _header(api_key, version, tail=b""):
    return struct.pack(">hhih", api_key, version, 1, 1) + b"c" + tail


BAD = {
    "garbage body": _header(3, 1, b"\x7f\xff\xff\xff" + b"\x00" * 8),
    "truncated body": encode_request(3, 1, 1, "c", {"topics": [{"name": "t"}]})[4:-1],
    "bytes left over": encode_request(3, 1, 1, "c", {"topics": None})[4:] + b"\x00",
    "shorter than a header": b"\x00\x03\x00",
    "unknown API key": _header(99, 0, b"\x00" * 8),
    "unknown version": _header(1, 13, b"\x00" * 8),
    "negative version": _header(3, -1),
}


@pytest.mark.parametrize("name", BAD)
def test_a_malformed_frame_closes_its_connection_only(server, name):
    frame = BAD[name]
    with _connect(server) as conn:
        conn.sendall(struct.pack(">i", len(frame)) + frame)
        assert _read(conn) is None
    _ok(server)


@pytest.mark.parametrize("size", [-1, -2**31, "over the limit", 2**31 - 1])
def test_a_size_prefix_out_of_bounds_closes_at_once(server, size):
    if size == "over the limit":
        size = server.max_frame_bytes + 1
    with _connect(server) as conn:
        conn.sendall(struct.pack(">i", size))      # nothing follows: closed on the prefix alone
        assert _read(conn) is None
    _ok(server)


def test_api_versions_of_an_unknown_version_is_answered_and_the_connection_kept(server):
    with _connect(server) as conn:
        frame = _header(18, 9, b"\x00")             # a newer client's ApiVersions
        conn.sendall(struct.pack(">i", len(frame)) + frame)
        _, body = decode_response(18, 0, _read(conn))
        assert body["errorCode"] == 35 and body["apiKeys"]
        conn.sendall(encode_request(18, 3, 2, "c", {}))
        assert decode_response(18, 3, _read(conn))[1]["errorCode"] == 0


def test_announced_sizes_are_not_allocated_before_they_arrive(server):
    # 20 connections each announce the largest frame (8 MiB) and send 1 KiB of it
    tracemalloc.start()
    try:
        conns = [_connect(server) for _ in range(20)]
        for conn in conns:
            conn.sendall(struct.pack(">i", server.max_frame_bytes) + b"\x00" * 1024)
        _ok(server)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        for conn in conns:
            conn.close()
    # preallocating would take 20 x 8 MiB; a connection holds what arrived and one receive
    # buffer (64 KiB)
    assert peak < 4 * 1024 * 1024, peak


def test_a_client_sending_a_byte_at_a_time_is_served_and_holds_up_no_one(server):
    frame = encode_request(18, 3, 5, "slow", {"clientSoftwareName": "s",
                                              "clientSoftwareVersion": "1"})
    with _connect(server) as slow:
        for b in frame[:len(frame) // 2]:
            slow.sendall(bytes([b]))
        _ok(server)                                 # others are answered meanwhile
        for b in frame[len(frame) // 2:]:
            slow.sendall(bytes([b]))
        correlation_id, body = decode_response(18, 3, _read(slow))
    assert correlation_id == 5 and body["errorCode"] == 0


def test_connections_beyond_the_limit_are_closed_and_serving_goes_on(data, tmp_path):
    limit, tries = 40, 100
    with serve.Server([data], tmp_path, max_connections=limit) as s:
        conns = [_connect(s) for _ in range(tries)]
        try:
            for conn in conns:
                try:
                    conn.sendall(encode_request(18, 0, 1, "c", {}))
                except OSError:
                    pass                            # already closed by the server
            answered = sum(_read(conn) is not None for conn in conns)
        finally:
            for conn in conns:
                conn.close()
        assert answered == limit
        # the closed connections are let go: a new client is served again (the server
        # notices the closes on its own threads, so a few attempts may come first)
        for attempt in range(100):
            try:
                _ok(s)
                break
            except (AssertionError, TypeError, OSError):
                time.sleep(0.02)
        else:
            pytest.fail("the server never served again after its connections closed")


def test_mutated_requests_of_every_api_are_answered_or_closed_never_a_fault(server, caplog):
    # a valid request of every API in its highest version, a bit flipped: each is answered
    # (the mutation still decodes) or its connection closed; no handler fails
    rng = random.Random(6)
    answered = closed = 0
    with caplog.at_level("ERROR", logger="kafkalog.serve"):
        for api_key, (_, _, version) in sorted(APIS.items()):
            frame = encode_request(api_key, version, 1, "c",
                                   random_body(rng, api_key, version, "Request"))
            for _ in range(3):
                mutated = bytearray(frame)
                mutated[rng.randrange(12, len(mutated))] ^= 1 << rng.randrange(8)
                with _connect(server) as conn:
                    conn.sendall(mutated)
                    if _read(conn) is None:
                        closed += 1
                    else:
                        answered += 1
    faults = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert not faults, faults
    assert answered and closed
    _ok(server)
