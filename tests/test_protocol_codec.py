"""kafkalog.protocol: every table round-trips in every supported version, frames agree byte for
byte with kafka-python's own protocol classes (an implementation no one here wrote), the
headers and the ApiVersions fallback behave as Kafka's broker, and hostile frames (fuzzed,
mutated, huge counts) only ever raise ProtocolError without allocating what they announce."""
import importlib
import io
import pkgutil
import random
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from kafka.protocol import old

from kafkalog.internal.schema import Struct

from kafkalog.errors import ProtocolEncodeError, ProtocolError, UnsupportedVersionError
from kafkalog.protocol import (
    APIS, MESSAGES, api_versions_body, decode_request, decode_response,
    encode_request, encode_response, frame_size,
)
from protocol_bodies import random_body

VERSIONS = [(key, v) for key, (_, lo, hi) in sorted(APIS.items()) for v in range(lo, hi + 1)]
@pytest.mark.parametrize("api_key,version", VERSIONS)
def test_every_table_round_trips_in_every_version(api_key, version):
    rng = random.Random(api_key * 100 + version)
    for view in (bytes, memoryview, bytearray):     # what a server may hold a frame in
        sent = random_body(rng, api_key, version, "Request")
        frame = encode_request(api_key, version, 42, "client", sent)
        assert frame_size(frame[:4], 1 << 20) == len(frame) - 4
        request = decode_request(view(frame)[4:])
        assert (request.api_key, request.api_version, request.correlation_id,
                request.client_id, request.response_version) == (api_key, version, 42,
                                                                  "client", version)
        assert request.body == sent
        answer = random_body(rng, api_key, version, "Response")
        chunks = encode_response(request, answer)
        raw = b"".join(chunks)
        assert frame_size(raw[:4], 1 << 20) == len(raw) - 4
        assert decode_response(api_key, version, raw[4:]) == (42, answer)


class _Slice:
    """A stand-in for a file slice the server sends with sendfile: only its length counts."""

    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length


def test_records_stay_chunks_of_their_own():
    request = decode_request(encode_request(1, 12, 3, "c", {"topics": []})[4:])
    stored = memoryview(bytearray(b"B" * 10_000))
    region = _Slice(5_000)
    chunks = encode_response(request, {"responses": [{"topic": "t", "partitions": [
        {"partitionIndex": 0, "records": stored},
        {"partitionIndex": 1, "records": region},
        {"partitionIndex": 2, "records": b"small"}]}]})
    # the large values are the very objects given, not copies; the small one is inlined
    assert chunks[1] is stored and chunks[3] is region
    assert len(chunks) == 5 and b"small" in chunks[4]
    assert struct.unpack(">i", chunks[0][:4])[0] == sum(len(c) for c in chunks) - 4


def test_api_versions_of_an_unknown_version_is_answered_as_v0():
    # a newer client's ApiVersions (v9, flexible header with a tagged field): the body is not
    # read and the answer is v0 with UNSUPPORTED_VERSION, as Kafka's RequestContext does
    frame = struct.pack(">hhih", 18, 9, 77, 3) + b"cli" + b"\x01\x05\x01\x00" + b"\xff" * 9
    request = decode_request(frame)
    assert (request.api_version, request.response_version, request.body) == (9, 0, {})
    raw = b"".join(encode_response(request, api_versions_body(request)))
    correlation_id, answer = decode_response(18, 0, raw[4:])
    assert correlation_id == 77 and answer["errorCode"] == 35
    assert {a["apiKey"]: (a["minVersion"], a["maxVersion"]) for a in answer["apiKeys"]} == \
        {key: (lo, hi) for key, (_, lo, hi) in APIS.items()}
    # header v0 for ApiVersions even in a flexible version: no tagged-field byte after the id
    request = decode_request(encode_request(18, 3, 5, None, {})[4:])
    assert request.client_id == ""
    raw = b"".join(encode_response(request, api_versions_body(request)))
    assert raw[4:8] == struct.pack(">i", 5) and raw[8:10] == b"\x00\x00"   # errorCode 0


@pytest.mark.parametrize("api_key,version", [(1, 3), (1, 13), (2, 0), (99, 0), (-1, 0)])
def test_unknown_apis_and_versions(api_key, version):
    frame = struct.pack(">hhih", api_key, version, 12, 1) + b"c" + b"\x00" * 20
    with pytest.raises(UnsupportedVersionError) as e:
        decode_request(frame)
    assert (e.value.api_key, e.value.api_version, e.value.correlation_id) == \
        (api_key, version, 12)


def test_a_body_the_schema_cannot_hold_is_the_encoders_fault():
    request = decode_request(encode_request(3, 1, 1, "c", {"topics": None})[4:])
    for bad in ({"brokers": None}, {"controllerId": 2**31}, {"brokers": [{"host": 7}]},
                {"topics": [{"name": None}]}):
        with pytest.raises(ProtocolEncodeError) as e:
            encode_response(request, bad)
        assert not isinstance(e.value, ProtocolError)
    with pytest.raises(ProtocolEncodeError, match="no version 13"):
        encode_request(1, 13, 1, "c", {})


def test_frame_size_refuses_before_reading():
    assert frame_size(b"\x00\x00\x01\x00", 256) == 256
    for prefix in (b"\x00\x00\x01\x01", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00"):
        with pytest.raises(ProtocolError):
            frame_size(prefix, 256)


# ---------------------------------------------------------------------------------------------
# kafka-python's protocol classes: its hand-written structs (kafka.protocol.old) and its
# JSON-driven messages (kafka.protocol.*) encode and decode the same bytes

def test_golden_bytes_against_kafka_python_old_structs():
    from kafka.protocol.old.fetch import FetchRequest
    from kafka.protocol.old.group import JoinGroupRequest
    from kafka.protocol.old.metadata import MetadataRequest
    cases = [
        (MetadataRequest[1](topics=["a", "bb"]), 3, 1, {"topics": [{"name": "a"},
                                                                      {"name": "bb"}]}),
        (FetchRequest[4](-1, 500, 1, 1000, 1, [("t", [(0, 42, 1048576)])]), 1, 4,
         {"maxWaitMs": 500, "minBytes": 1, "maxBytes": 1000, "isolationLevel": 1,
          "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetchOffset": 42,
                                                    "partitionMaxBytes": 1048576}]}]}),
        (JoinGroupRequest[1]("g", 10000, 30000, "", "consumer", [("range", b"\x00\x01")]),
         11, 1, {"groupId": "g", "sessionTimeoutMs": 10000, "rebalanceTimeoutMs": 30000,
                 "memberId": "", "protocolType": "consumer",
                 "protocols": [{"name": "range", "metadata": b"\x00\x01"}]}),
    ]
    for theirs, api_key, version, ours in cases:
        theirs.with_header(correlation_id=6, client_id="cid")
        frame = theirs.encode(header=True, framed=True)
        assert frame == encode_request(api_key, version, 6, "cid", ours)
        got = decode_request(frame[4:]).body
        assert {k: got[k] for k in ours if k != "topics"} == \
            {k: v for k, v in ours.items() if k != "topics"}


def test_golden_bytes_against_kafka_python_flexible_messages():
    from kafka.protocol.consumer import FetchResponse
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
    theirs = ApiVersionsRequest(client_software_name="kp", client_software_version="3.0",
                                version=3)
    theirs.with_header(correlation_id=11, client_id="cid")
    frame = bytes(theirs.encode(header=True, framed=True))
    assert frame == encode_request(18, 3, 11, "cid", {"clientSoftwareName": "kp",
                                                      "clientSoftwareVersion": "3.0"})
    request = decode_request(frame[4:])
    # our ApiVersions v3 answer, read by kafka-python (header v0 in a flexible version)
    raw = b"".join(encode_response(request, api_versions_body(request)))
    answer = ApiVersionsResponse.decode(raw, version=3, header=True, framed=True)
    assert answer.header.correlation_id == 11 and answer.error_code == 0
    assert {(k.api_key, k.min_version, k.max_version) for k in answer.api_keys} == \
        {(key, lo, hi) for key, (_, lo, hi) in APIS.items()}
    # a Fetch v12 answer with stored batches and tagged fields, read by kafka-python
    request = decode_request(encode_request(1, 12, 8, "c", {"topics": []})[4:])
    batches = b"\x00" * 61 + b"R" * 5000
    raw = b"".join(bytes(c) for c in encode_response(request, {"sessionId": 3, "responses": [
        {"topic": "t", "partitions": [
            {"partitionIndex": 4, "highWatermark": 99, "lastStableOffset": 90,
             "currentLeader": {"leaderId": 1, "leaderEpoch": 7},
             "abortedTransactions": [{"producerId": 5, "firstOffset": 60}],
             "records": memoryview(batches)}]}]}))
    theirs = FetchResponse.decode(raw, version=12, header=True, framed=True)
    assert theirs.header.correlation_id == 8 and theirs.session_id == 3
    p = theirs.responses[0].partitions[0]
    assert (p.partition_index, p.high_watermark, p.last_stable_offset) == (4, 99, 90)
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (1, 7)
    assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(5, 60)]
    assert bytes(p.records) == batches
    # and theirs, re-encoded, is the same frame
    assert bytes(theirs.encode(header=True, framed=True)) == raw


def _bodies(seed):
    """(api key, version, kind, message, random body, its bytes) of every table and version."""
    rng = random.Random(seed)
    for key, version in VERSIONS:
        for kind in ("Request", "Response"):
            message = MESSAGES[APIS[key][0] + kind]
            sent = random_body(rng, key, version, kind)
            if (key, kind) == (18, "Response"):
                sent["errorCode"] = 0   # kafka-python reads an ApiVersions error as v0's
            raw = b"".join(bytes(c) for c in message.write(sent, version).chunks())
            yield key, version, kind, message, sent, raw


def _in_order(s, values, version, flexible, top=True):
    """A body as kafka-python's hand-written structs hold it: the version's regular fields in
    order, a struct of one field as that field's value."""
    out = []
    for f in s.layout(version, flexible)[0]:
        v = values[f.name]
        if isinstance(f.type, Struct) and v is not None:
            v = [_in_order(f.type, x, version, flexible, False) for x in v] if f.array else \
                _in_order(f.type, v, version, flexible, False)
        out.append(v)
    return out[0] if len(out) == 1 and not top else out


def _theirs(v):
    if isinstance(v, set):              # their BitField: an int32 of bits
        n = sum(1 << b for b in v)
        return n - (1 << 32) if n >= 1 << 31 else n
    if isinstance(v, (list, tuple)):    # without their tagged-field dicts
        return [_theirs(x) for x in v if not isinstance(x, dict)]
    return v


def test_kafka_python_structs_read_what_the_tables_write():
    # kafka.protocol.old: hand-written structs of many APIs and versions (170 of ours)
    from kafka.protocol.old import api
    classes = {}
    for module in pkgutil.iter_modules(old.__path__):
        for c in vars(importlib.import_module(f"kafka.protocol.old.{module.name}")).values():
            if isinstance(c, type) and issubclass(c, (api.Request, api.Response)) and \
                    isinstance(getattr(c, "API_KEY", None), int):
                classes[c.API_KEY, c.API_VERSION, issubclass(c, api.Request)] = c
    compared = 0
    for key, version, kind, message, sent, raw in _bodies(5):
        theirs = classes.get((key, version, kind == "Request"))
        if theirs is None:
            continue
        buf = io.BytesIO(raw)
        got = theirs.SCHEMA.decode(buf)
        assert buf.tell() == len(raw), (theirs, raw)
        want = _in_order(message.struct, sent, version, version in message.flexible)
        assert _theirs(got) == want, theirs
        compared += 1
    assert compared == 170


def test_kafka_python_messages_read_what_the_tables_write():
    # kafka.protocol's JSON-driven messages, every API, version, request and response: read
    # and written again by kafka-python, the bytes are the same
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.producer
    modules = (kafka.protocol.admin, kafka.protocol.consumer, kafka.protocol.metadata,
               kafka.protocol.producer)
    for key, version, kind, _, _, raw in _bodies(6):
        name = APIS[key][0] + kind
        theirs = next(getattr(m, name) for m in modules if hasattr(m, name))
        got = theirs.decode(raw, version=version)
        got._header = None              # a decoded message has none; encode looks for one
        assert bytes(got.encode(version=version)) == raw, (name, version)


# ---------------------------------------------------------------------------------------------
# Hostile input

def _valid_frames():
    rng = random.Random(7)
    return [encode_request(k, v, 1, "c", random_body(rng, k, v, "Request"))[4:]
            for k, v in VERSIONS]


def _decode(frame):
    try:
        decode_request(frame)
    except ProtocolError:
        pass


def test_mutated_frames_of_every_api_and_version_raise_only_protocol_errors():
    rng = random.Random(11)
    for frame in _valid_frames():
        for _ in range(30):
            data = bytearray(frame)
            op = rng.randrange(4)
            if op == 0:                       # flip a byte
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            elif op == 1:                     # truncate
                del data[rng.randrange(8, len(data) + 1):]
            elif op == 2:                     # a length or count made huge
                at = rng.randrange(8, max(9, len(data) - 3))
                data[at:at + 4] = rng.choice([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe",
                                              b"\x8f\xff\xff\xff\x0f", b"\x7f\xff"])
            else:                             # bytes appended
                data += rng.randbytes(rng.randrange(1, 5))
            _decode(bytes(data))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(VERSIONS), st.binary(max_size=200))
def test_random_bodies_raise_only_protocol_errors(api, tail):
    api_key, version = api
    _decode(struct.pack(">hhih", api_key, version, 1, 1) + b"c" + tail)
    _decode(struct.pack(">hhi", api_key, version, 1) + tail)


def test_huge_counts_and_lengths_are_refused_without_allocating():
    huge, compact_huge = struct.pack(">i", 0x7FFFFFFF), b"\xff\xff\xff\xff\x07"
    frames = [
        # Metadata v1: the topics array's count
        struct.pack(">hhih", 3, 1, 1, 1) + b"c" + huge,
        # Metadata v9 (flexible): the compact topics count (2**32 - 2)
        struct.pack(">hhih", 3, 9, 1, 1) + b"c" + b"\x00" + compact_huge,
        # JoinGroup v1: the group id string, then the bytes of a protocol's metadata
        struct.pack(">hhih", 11, 1, 1, 1) + b"c" + b"\x7f\xff" + b"g" * 10,
        struct.pack(">hhih", 11, 1, 1, 1) + b"c" + b"\x00\x01g" + struct.pack(">iih", 1, 1, 0)
        + b"\x00\x00" + struct.pack(">ih", 1, 1) + b"r" + huge,
        # a request header's tagged field of 2**32 - 2 bytes
        struct.pack(">hhih", 3, 9, 1, 1) + b"c" + b"\x01\x00" + compact_huge,
    ]
    tracemalloc.start()
    try:
        for frame in frames:
            with pytest.raises(ProtocolError, match="left"):
                decode_request(frame)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, peak
