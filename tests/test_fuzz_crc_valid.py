"""CRC-valid garbage (issue #16): batches mutated field by field with their CRCs recomputed
after every mutation, so that only the decoder's own checks stand between the bytes and the
reader.

Every case must either decode or raise ``CorruptRecordError`` (``RecordTooLargeError`` for a
payload declaring more than the decompression limit) through every public reader; what
``validate_batches`` (recovery) accepts must decode; and a recovered segment must read without
error. Each case runs through every reader twice in one process, with the compiled kernels and
with their pure-Python twins swapped in (``twins.kernels_of``): the records, the errors (type,
message, position), what validation keeps and what recovery leaves must agree.
``scripts/fuzz_stress.py --crc-valid`` runs the same cases in bulk.
"""
from __future__ import annotations

import os
import random
import struct
import tempfile
import zlib

import numpy as np
import pytest
from crc32c import crc32c

from kafkalog import Record, build_batch, build_control_batch, codecs
from kafkalog import _core_py, _kernels
from kafkalog._common_py import _varint
from kafkalog.config import LogConfig
from kafkalog.errors import CorruptRecordError, KafkaLogError, RecordTooLargeError
from kafkalog.records import decode_batches, iter_batches, validate_batches
from kafkalog.segment import LogSegment

from conftest import FIXTURES, fixtures_present
from twins import kernels_of, modules as kernel_modules

# --- the corpus --------------------------------------------------------------------------------

SEED_FIXTURES = ["plain-0", "gzip-0", "snappy-0", "lz4-0", "zstd-0", "headers-0", "txn-0",
                 "append_time-0", "legacy_v0-0", "legacy_v1-0", "legacy_v1_codecs-0"]
_CORPUS: list[bytes] = []


def _split(data, limit):
    """The first ``limit`` batches of ``data`` as separate byte strings (pure walk)."""
    rows = _core_py.walk_batches(data, validate_crc=False)[0][:limit]
    return [bytes(data[int(r["position"]):int(r["position"] + r["size"])]) for r in rows]


def _built():
    rng = random.Random(7)
    out = []

    def recs(n, headers=True):
        return [Record(key=rng.choice([None, b"", b"k%d" % i]),
                       value=rng.choice([None, b"", rng.randbytes(rng.randint(1, 40))]),
                       timestamp=1_700_000_000_000 + rng.randint(-500, 500),
                       headers=[("h\u00e9", rng.choice([None, b"v"]))] * rng.randint(0, 2)
                       if headers else ())
                for i in range(n)]
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        out.append(build_batch(recs(5), base_offset=10, compression=codec))
        out.append(build_batch(recs(3), base_offset=20, compression=codec, producer_id=7,
                               producer_epoch=1, base_sequence=2**31 - 2))
        out.append(build_batch(recs(2), base_offset=30, compression=codec,
                               timestamp_type="log_append_time", log_append_time=5))
    # compacted: lastOffsetDelta above the last record's; an empty batch kept for a producer
    out.append(build_batch([Record(value=b"a", timestamp=1, offset=41),
                            Record(value=b"b", timestamp=2, offset=44)], base_offset=40,
                           last_offset=49))
    out.append(build_batch([], base_offset=50, producer_id=3, producer_epoch=0,
                           base_sequence=5, last_offset=52))
    out.append(build_control_batch("commit", producer_id=7, producer_epoch=1, base_offset=60))
    for magic in (0, 1):
        for codec in ("none", "gzip", "snappy", "lz4"):
            out.extend(_split(build_batch(recs(4, False), base_offset=70, magic=magic,
                                          compression=codec), 2))
    return out


def corpus() -> list[bytes]:
    """Single batches / legacy entries: Kafka-written (when the fixtures are there) and built."""
    if not _CORPUS:
        if fixtures_present():
            for name in SEED_FIXTURES:
                log = FIXTURES / name / "00000000000000000000.log"
                _CORPUS.extend(_split(log.read_bytes()[:200_000], 6))
        _CORPUS.extend(_built())
    return _CORPUS


# --- mutations ---------------------------------------------------------------------------------

_I32 = [0, 1, -1, -2, 2, 7, 2**31 - 1, -2**31, 2**31 - 2, 2**15, 61]
_I64 = [0, 1, -1, -2, 2**63 - 1, -2**63, 2**63 - 2, 2**31, -2**31 - 1]
# v2 header fields: (offset, format, boundary values)
_V2_FIELDS = [(0, ">q", _I64), (12, ">i", _I32), (21, ">h", [0, 1, 2, 3, 4, 5, 7, 8, 0x10,
                                                             0x20, 0x30, 0x40, -1, 0x7F]),
              (23, ">i", _I32), (27, ">q", _I64), (35, ">q", _I64), (43, ">q", _I64),
              (51, ">h", [0, -1, -2, 2**15 - 1, -2**15]), (53, ">i", _I32), (57, ">i", _I32)]
_VARINTS = [0, 1, -1, 63, -64, 64, 2**31 - 1, -2**31, 2**31, 2**35, 2**63 - 1, -2**63]
_ILLEGAL_VARINTS = [b"\xff" * 5, b"\xff" * 4 + b"\x1f", b"\xff" * 9 + b"\x03", b"\x80" * 11,
                    b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x0f"]


def zigzag(value, width=64):
    raw = ((value << 1) ^ (value >> (width - 1))) & ((1 << width) - 1)
    out = bytearray()
    while True:
        if raw < 0x80:
            out.append(raw)
            return bytes(out)
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7


def _record_bounds(payload):
    """[(start, end)] of the records in an uncompressed v2 payload, as far as they parse."""
    out, pos = [], 0
    while pos < len(payload):
        try:
            length, body = _varint(payload, pos, len(payload), 5)
        except Exception:
            break
        end = body + length
        if length < 0 or end > len(payload):
            break
        out.append((pos, end))
        pos = end
    return out


def _encode_record(attributes, ts_delta, off_delta, key, value, headers, extra=b"",
                   length_adjust=0):
    def span(b):
        return zigzag(-1, 32) if b is None else zigzag(len(b), 32) + b
    body = bytes([attributes & 0xFF]) + zigzag(ts_delta) + zigzag(off_delta, 32) + \
        span(key) + span(value) + zigzag(len(headers), 32) + \
        b"".join(span(k) + span(v) for k, v in headers) + extra
    return zigzag(len(body) + length_adjust, 32) + body


def _mutate_record_fields(payload, rng):
    """Re-encode one record of an uncompressed payload with one field set to a boundary."""
    bounds = _record_bounds(payload)
    if not bounds:
        return _mutate_bytes(payload, rng)
    i = rng.randrange(len(bounds))
    start, end = bounds[i]
    fields = {"attributes": 0, "ts": 0, "off": i, "key": b"k", "value": b"v",
              "headers": [(b"h", b"x")], "extra": b"", "adjust": 0}
    kind = rng.randrange(9)
    if kind == 0:
        fields["off"] = rng.choice(_VARINTS[:8] + [i - 1, i, i + 1, 10**6])
    elif kind == 1:
        fields["ts"] = rng.choice(_VARINTS)
    elif kind == 2:
        fields["adjust"] = rng.choice([-2, -1, 1, 2, 100])
    elif kind == 3:
        fields["headers"] = [(None, b"x")]
    elif kind == 4:
        fields["extra"] = rng.randbytes(rng.randint(1, 4))
    elif kind == 5:
        fields["key"] = b"k" * rng.randint(0, 300)
        fields["headers"] = [(b"h", None)] * rng.randint(0, 40)
    rec = _encode_record(fields["attributes"], fields["ts"], fields["off"], fields["key"],
                         fields["value"], fields["headers"], fields["extra"], fields["adjust"])
    if kind == 6:          # a header count / key length varint set to a boundary value
        rec = bytearray(rec)
        at = rng.randrange(1, len(rec))
        rec[at:at + 1] = zigzag(rng.choice(_VARINTS), 32)
        rec = bytes(rec)
    elif kind == 7:        # a record twice (same offset delta)
        rec = payload[start:end] * 2
    elif kind == 8:        # the record dropped
        rec = b""
    return payload[:start] + rec + payload[end:]


def _mutate_bytes(payload, rng):
    data = bytearray(payload)
    kind = rng.randrange(8)
    i = rng.randrange(len(data) + 1)
    if kind == 0 and data:
        data[min(i, len(data) - 1)] ^= 1 << rng.randrange(8)
    elif kind == 1:
        data[i:i + 1] = bytes([rng.choice([0, 0x7F, 0x80, 0xFF])])
    elif kind == 2:
        data[i:i + rng.randint(1, 3)] = zigzag(rng.choice(_VARINTS), rng.choice([32, 64]))
    elif kind == 3:
        data[i:i + rng.randint(0, 5)] = rng.choice(_ILLEGAL_VARINTS)
    elif kind == 4:
        del data[i:i + rng.randint(1, 8)]
    elif kind == 5:
        data[i:i] = rng.randbytes(rng.randint(1, 8))
    elif kind == 6:
        del data[i:]                                   # a truncated last record
    else:
        j = rng.randrange(len(data) + 1)
        data[j:j] = data[i:i + rng.randint(1, 40)]     # a chunk repeated (extended records)
    return bytes(data)


def _mutate_payload(payload, rng, structured):
    if structured and rng.random() < 0.5:
        return _mutate_record_fields(payload, rng)
    return _mutate_bytes(payload, rng)


def seal_v2(batch, fix_length=True):
    batch = bytearray(batch)
    if fix_length:
        struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def seal_legacy(entry, fix_length=True):
    entry = bytearray(entry)
    if fix_length:
        struct.pack_into(">i", entry, 8, len(entry) - 12)
    struct.pack_into(">I", entry, 12, zlib.crc32(bytes(entry[16:])))
    return bytes(entry)


def _mutate_v2(batch, rng):
    batch = bytearray(batch)
    codec = struct.unpack_from(">h", batch, 21)[0] & 7
    kind = rng.randrange(10)
    if kind < 3:                                       # header fields at boundaries
        for _ in range(rng.randint(1, 2)):
            at, fmt, values = rng.choice(_V2_FIELDS)
            if rng.random() < 0.3:
                old = struct.unpack_from(fmt, batch, at)[0]
                value = old + rng.choice([-2, -1, 1, 2])
            else:
                value = rng.choice(values)
            bits = struct.calcsize(fmt) * 8
            struct.pack_into(fmt, batch, at, (value + 2**(bits - 1)) % 2**bits - 2**(bits - 1))
        return seal_v2(batch, rng.random() < 0.9)
    if kind == 3:                                      # a bit anywhere after the length
        batch[rng.randrange(12, len(batch))] ^= 1 << rng.randrange(8)
        return seal_v2(batch, False)
    header, payload = bytes(batch[:61]), bytes(batch[61:])
    if codec > 4:                                      # an unknown codec: bytes as they are
        payload = _mutate_bytes(payload, rng)
    elif codec and kind == 4:                          # the compressed bytes themselves
        payload = _mutate_bytes(payload, rng)
    elif codec and kind == 5:                          # decompressed by another codec
        other = rng.choice([c for c in (1, 2, 3, 4) if c != codec])
        header = bytearray(header)
        struct.pack_into(">h", header, 21, (struct.unpack_from(">h", header, 21)[0] & ~7) | other)
        header = bytes(header)
    elif codec:
        try:
            plain = bytes(codecs.decompress(codec, payload))
        except KafkaLogError:
            plain = payload
        payload = codecs.compress(codec, _mutate_payload(plain, rng, True))
    else:
        payload = _mutate_payload(payload, rng, True)
    if rng.random() < 0.4:                             # the count made to match, to go deeper
        header = bytearray(header)
        if codec == 0:
            struct.pack_into(">i", header, 57, len(_record_bounds(payload)))
        header = bytes(header)
    return seal_v2(header + payload, rng.random() < 0.95)


def _legacy_prefix(magic):
    return 18 + (8 if magic == 1 else 0)


def _mutate_legacy(entry, rng, depth=0):
    entry = bytearray(entry)
    magic, codec = entry[16], entry[17] & 7
    prefix = _legacy_prefix(magic)
    kind = rng.randrange(6)
    if kind == 0:                                      # offset (outside the CRC) at a boundary
        struct.pack_into(">q", entry, 0, rng.choice(_I64 + [rng.randint(-5, 5)]))
        return bytes(entry)
    if kind == 1:                                      # key or value length
        at = prefix if rng.random() < 0.5 or len(entry) < prefix + 8 else \
            prefix + 4 + max(0, struct.unpack_from(">i", entry, prefix)[0])
        if at + 4 <= len(entry):
            struct.pack_into(">i", entry, at, rng.choice([-1, -2, -2**31, 2**31 - 1, 0, 1,
                                                           len(entry)]))
        return seal_legacy(entry, rng.random() < 0.9)
    if kind == 2:                                      # attributes / magic / timestamp
        at = rng.choice([16, 17] + ([18] if magic == 1 else []))
        if at == 18:
            struct.pack_into(">q", entry, 18, rng.choice(_I64))
        else:
            entry[at] = rng.choice([0, 1, 2, 3, 4, 5, 7, 8, 0xFF])
        return seal_legacy(entry)
    if codec == 0 or depth > 0 or kind == 3:          # bytes after the CRC / the prefix
        start = 16 if kind == 3 else prefix
        return seal_legacy(bytes(entry[:start]) + _mutate_bytes(bytes(entry[start:]), rng),
                           rng.random() < 0.9)
    # a compressed wrapper: mutate its inner message set, then recompress and reseal
    if prefix + 4 > len(entry):
        return seal_legacy(entry)
    key_len = struct.unpack_from(">i", entry, prefix)[0]
    value_at = prefix + 4 + max(0, key_len)
    if value_at + 4 > len(entry):
        return seal_legacy(entry)
    try:
        inner = bytes(codecs.decompress(codec, bytes(entry[value_at + 4:])))
    except KafkaLogError:
        return seal_legacy(entry)
    parts = _split(inner, 100)
    if parts and rng.random() < 0.7:
        i = rng.randrange(len(parts))
        parts[i] = _mutate_legacy(parts[i], rng, depth + 1)
        if rng.random() < 0.2:
            parts[i] = parts[i][:rng.randrange(len(parts[i]))]
        elif rng.random() < 0.2:
            del parts[i]
    elif parts:
        parts.append(parts[-1])                        # an inner message repeated
    value = codecs.compress(codec, b"".join(parts))
    return seal_legacy(bytes(entry[:value_at]) + struct.pack(">i", len(value)) + value)


def mutate_crc_valid(batch: bytes, rng: random.Random) -> bytes:
    """One to three CRC-recomputing mutations of one batch (v2) or legacy entry."""
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if len(batch) < 26 or (batch[16] == 2 and len(batch) < 61):
            break
        batch = _mutate_v2(batch, rng) if batch[16] == 2 else _mutate_legacy(batch, rng)
    return batch


def make_case(rng: random.Random) -> bytes:
    """A buffer: maybe a valid batch, a CRC-valid mutated one, maybe another valid one."""
    pool = corpus()
    out = []
    if rng.random() < 0.3:
        out.append(rng.choice(pool))
    out.append(mutate_crc_valid(rng.choice(pool), rng))
    if rng.random() < 0.3:
        out.append(rng.choice(pool))
    return b"".join(out)


# --- running a case ----------------------------------------------------------------------------

def read_all(data):
    """Every public reader over ``data``: ("ok", records) or ("corrupt", reason). Any other
    exception propagates (the failure being looked for)."""
    try:
        got = []
        for batch in iter_batches(data, validate_crc=True):
            batch.record_count, batch.base_offset, batch.last_sequence, len(batch)
            got.extend((r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value,
                        r.headers) for r in batch)
        rows = _kernels.walk_batches(data, validate_crc=False)[0]
        table = decode_batches(data, rows)
        table.keys()
        table.to_records()
        from kafkalog._kernels import gather_spans       # the Arrow path's gather
        gather_spans(np.frombuffer(bytes(table.data), np.uint8) if len(table.data) else b"",
                     table.records["value_pos"].copy(), table.records["value_len"].copy())
        return "ok", got
    except (CorruptRecordError, RecordTooLargeError) as e:
        return "corrupt", type(e).__name__, str(e), getattr(e, "position", None)


def check_validation(data):
    """What recovery's ``validate_batches`` keeps must decode."""
    rows = _kernels.walk_batches(data, validate_crc=True, stop_on_invalid=True)[0]
    n_valid, reason = validate_batches(data, rows)
    decode_batches(data, rows[:n_valid])
    return n_valid, len(rows)


def check_recovery(data, directory):
    """Recover a segment holding ``data``; what is left must read without error. Returns
    what is left (None when recovery refused the segment with a typed error)."""
    for name in os.listdir(directory):
        os.remove(os.path.join(directory, name))
    with open(os.path.join(directory, "00000000000000000000.log"), "wb") as f:
        f.write(data)
    seg = LogSegment(directory, 0, LogConfig({"segment.index.bytes": 4096}))
    buf = None
    try:
        seg.recover()
        buf = bytes(seg.buffer())
    except KafkaLogError:        # offsets outside the segment's range: typed, as before
        pass
    finally:
        seg.close()              # close() always releases, whatever recovery found
    if buf is None:
        return None
    kind, error = read_all(buf)[:2]
    # Kafka's LogSegment.recover does not check that batches follow each other (a base offset
    # is outside the CRC): such a batch stays, and the readers report it as data loss
    assert kind == "ok" or error == "OffsetsOutOfOrderError", "a recovered segment fails to read"
    return buf


def run_case(data, modules, directory=None):
    """Check one buffer with the kernels of every module in ``modules`` (``twins.kernels_of``:
    every reader, recovery included, through them); they must agree. Returns the outcome."""
    outcomes = []
    for module in modules:
        with kernels_of(module):
            read = read_all(data)
            n_valid, n = check_validation(data)
            if read[0] == "ok":
                assert n_valid == n, "validate_batches refuses a batch that decodes"
            recovered = check_recovery(data, directory) if directory is not None else None
        outcomes.append((read, n_valid, n, recovered))
    for other in outcomes[1:]:
        assert other == outcomes[0], f"kernels disagree: {[o[:3] for o in outcomes]}"
    return outcomes[0][0][0]


# --- the CI test -------------------------------------------------------------------------------

CASES = int(os.environ.get("KAFKALOG_CRC_FUZZ_CASES", "3000"))


@pytest.mark.parametrize("part", range(3))
def test_crc_valid_mutations_decode_or_raise_corrupt(part, tmp_path):
    modules = kernel_modules()
    rng = random.Random(1600 + part)
    tally = {"ok": 0, "corrupt": 0}
    for i in range(CASES // 3):
        data = make_case(rng)
        tally[run_case(data, modules, tmp_path if i % 25 == 0 else None)] += 1
    assert tally["corrupt"] > tally["ok"] / 4, tally        # the mutations do reach the checks


def _v2(records_bytes, count, base_offset=0, last_delta=None, base_sequence=-1,
        attributes=0, producer_id=-1):
    header = struct.pack(">qiibIhiqqqhii", base_offset, 0, -1, 2, 0, attributes,
                         count - 1 if last_delta is None else last_delta, 1000, 1000,
                         producer_id, -1 if producer_id < 0 else 0, base_sequence, count)
    return seal_v2(header + records_bytes)


def _rec(off_delta, ts_delta=0, value=b"v", headers=()):
    return _encode_record(0, ts_delta, off_delta, None, value, list(headers))


def all_corrupt(data):
    for module in kernel_modules():
        with kernels_of(module):
            assert read_all(data)[0] == "corrupt"
            rows = _kernels.walk_batches(data)[0]
            assert validate_batches(data, rows)[0] == 0


def test_sequences_of_a_batch_whose_count_exceeds_its_offsets():
    """The np.repeat broadcast in _finish_v2: record offsets beyond lastOffsetDelta, with a
    producer sequence to spread over them, or offsets that do not increase."""
    body = b"".join(_rec(d) for d in (0, 1, 2))
    all_corrupt(_v2(body, 3, last_delta=1, base_sequence=5, producer_id=1))
    all_corrupt(_v2(body, 3, last_delta=-1, base_sequence=5, producer_id=1))
    all_corrupt(_v2(b"".join(_rec(d) for d in (0, 0, 1)), 3, base_sequence=5, producer_id=1))
    all_corrupt(_v2(body, 3, base_sequence=-7, producer_id=1))
    all_corrupt(_v2(body, 4, last_delta=2))                          # count above the offsets


def test_legacy_wrapper_offsets_that_overflow():
    """The OverflowError of _decode_wrapper: a v1 wrapper whose offset minus the last inner
    relative offset does not fit an int64, or whose inner offsets run past it."""
    wrapper = build_batch([Record(value=b"a", timestamp=1), Record(value=b"b", timestamp=2)],
                          magic=1, compression="gzip", base_offset=0)
    for offset in (-2**63, -1, 0):
        data = bytearray(wrapper)
        struct.pack_into(">q", data, 0, offset)        # the offset is outside the CRC
        all_corrupt(bytes(data))
    inner = _legacy_message(0) + _legacy_message(2**63 - 1)      # relative, past the wrapper
    all_corrupt(_wrap(inner, 5))


def _legacy_message(rel):
    body = struct.pack(">bbq", 1, 0, 1) + struct.pack(">i", -1) + struct.pack(">i", 1) + b"x"
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", rel, len(msg)) + msg


def _wrap(inner, offset, codec=codecs.GZIP):
    value = codecs.compress(codec, inner)
    body = struct.pack(">bbq", 1, codec, 1) + struct.pack(">i", -1) + \
        struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def test_header_and_varint_checks():
    ok = _v2(_rec(0), 1)
    for module in kernel_modules():
        with kernels_of(module):
            assert read_all(ok)[0] == "ok"
    all_corrupt(_v2(_rec(0, ts_delta=2**63 - 1), 1))                   # timestamp overflow
    all_corrupt(_v2(b"\x0c\x00" + b"\xff" * 9 + b"\x03" + b"\x00\x01\x02\x00", 1))   # varlong
    all_corrupt(_v2(b"\x10\x00\x00\xff\xff\xff\xff\x1f\x01\x02\x00", 1))  # 5-byte varint
    all_corrupt(_v2(_rec(0), 1, base_offset=2**63 - 1, last_delta=3))  # offset overflow
    all_corrupt(_v2(_rec(0), 1, attributes=0x10))                      # txn without producer
    all_corrupt(_v2(_rec(0), 1, attributes=0x06))                      # codec 6
    all_corrupt(_v2(_rec(0, headers=[(None, b"x")]), 1))               # null header key


def test_inner_messages_must_match_the_wrapper():
    good = _legacy_message(0) + _legacy_message(1)
    for module in kernel_modules():
        with kernels_of(module):
            assert read_all(_wrap(good, 5))[0] == "ok"
    all_corrupt(_wrap(b"", 5))                                          # no inner records
    all_corrupt(_wrap(_legacy_message(1) + _legacy_message(0), 5))      # not increasing
    all_corrupt(_wrap(good, 0))                                         # negative base
    all_corrupt(_wrap(good[:-1], 5))                                    # a cut inner message
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    all_corrupt(_wrap(bytes(bad_crc), 5))


def test_recovery_truncates_a_crc_valid_invalid_batch(tmp_path):
    good = build_batch([Record(value=b"a", timestamp=1), Record(value=b"b", timestamp=2)])
    bad = _v2(b"".join(_rec(d) for d in (0, 1, 2)), 3, base_offset=2, last_delta=1,
              base_sequence=5, producer_id=1)
    with open(tmp_path / "00000000000000000000.log", "wb") as f:
        f.write(good + bad)
    seg = LogSegment(str(tmp_path), 0, LogConfig({"segment.index.bytes": 4096}))
    reasons = []
    try:
        assert seg.recover(before_truncate=lambda s, n, why: reasons.append((n, why))) \
            == len(bad)
        assert seg.size == len(good)
    finally:
        seg.close()
    [(valid, why)] = reasons
    assert valid == len(good) and "lastOffsetDelta" in why and "invalid batch structure" in why


def test_twins_agree_on_seed_corpus_unmutated():
    modules = kernel_modules()
    with tempfile.TemporaryDirectory() as d:
        for batch in corpus():
            assert run_case(batch, modules, d) == "ok"
