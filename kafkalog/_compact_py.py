"""Twin of ``_compact.pxi``: compaction, the key -> latest offset map (Kafka's
SkimpyOffsetMap in shape, MurmurHash3 x64 128 keys) and the rewrite of kept records."""
import struct

import numpy as np
from crc32c import crc32c as _crc32c

from kafkalog._common_py import zigzag_varint
from kafkalog.errors import CorruptRecordError

OFFSET_MAP_ENTRY_BYTES = 24
COMPACT_COPY, COMPACT_DROP, COMPACT_REBUILD = 0, 1, 2
_M64 = 0xFFFFFFFFFFFFFFFF


def _rotl64(x, r):
    return ((x << r) | (x >> (64 - r))) & _M64


def _fmix64(k):
    k ^= k >> 33
    k = (k * 0xff51afd7ed558ccd) & _M64
    k ^= k >> 33
    k = (k * 0xc4ceb9fe1a85ec53) & _M64
    return k ^ (k >> 33)


def key_hash(key):
    """MurmurHash3 x64 128, seed 0, as two unsigned 64-bit ints."""
    data = bytes(key)
    c1, c2 = 0x87c37b91114253d5, 0x4cf5ad432745937f
    h1 = h2 = 0
    n = len(data)
    for i in range(0, n - n % 16, 16):
        k1, k2 = struct.unpack_from("<QQ", data, i)
        k1 = (_rotl64((k1 * c1) & _M64, 31) * c2) & _M64
        h1 ^= k1
        h1 = (_rotl64(h1, 27) + h2) & _M64
        h1 = (h1 * 5 + 0x52dce729) & _M64
        k2 = (_rotl64((k2 * c2) & _M64, 33) * c1) & _M64
        h2 ^= k2
        h2 = (_rotl64(h2, 31) + h1) & _M64
        h2 = (h2 * 5 + 0x38495ab5) & _M64
    tail = data[n - n % 16:]
    if len(tail) > 8:
        k2 = int.from_bytes(tail[8:], "little")
        h2 ^= (_rotl64((k2 * c2) & _M64, 33) * c1) & _M64
    if tail:
        k1 = int.from_bytes(tail[:8], "little")
        h1 ^= (_rotl64((k1 * c1) & _M64, 31) * c2) & _M64
    h1 ^= n
    h2 ^= n
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    h1, h2 = _fmix64(h1), _fmix64(h2)
    h1 = (h1 + h2) & _M64
    return h1, (h2 + h1) & _M64


def _probe(slots, mask, h1, h2):
    i = h1 & mask
    while slots[i, 2] != 0 and (slots[i, 0] != h1 or slots[i, 1] != h2):
        i = (i + 1) & mask
    return i


def offset_map_put(slots, count, limit, data, records, use):
    n = len(records)
    if len(use) != n:
        raise ValueError("use must have one entry per record")
    mask = len(slots) - 1
    for i in range(n):
        r = records[i]
        if not use[i] or r["key_len"] < 0:
            continue
        pos, size = int(r["key_pos"]), int(r["key_len"])
        h1, h2 = key_hash(data[pos:pos + size])
        s = _probe(slots, mask, h1, h2)
        stored = int(r["offset"]) + 1
        if slots[s, 2] == 0:
            if count >= limit:
                return count, i
            slots[s] = (h1, h2, stored)
            count += 1
        elif stored > int(slots[s, 2]):
            slots[s, 2] = stored
    return count, n


def offset_map_get(slots, data, records):
    out = np.full(len(records), -1, dtype=np.int64)
    mask = len(slots) - 1
    for i in range(len(records)):
        r = records[i]
        if r["key_len"] < 0:
            continue
        pos, size = int(r["key_pos"]), int(r["key_len"])
        s = _probe(slots, mask, *key_hash(data[pos:pos + size]))
        if slots[s, 2] != 0:
            out[i] = int(slots[s, 2]) - 1
    return out


def _unzigzag_at(buf, pos, end):
    v = shift = 0
    while pos < end and shift < 70:
        byte = buf[pos]
        v |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return (v >> 1) ^ -(v & 1), pos
        shift += 7
    return None, -1


def compact_batches(buf, batches, keep, action, horizon):
    if len(action) != len(batches) or len(horizon) != len(batches):
        raise ValueError("action and horizon must have one entry per batch")
    if ((batches["magic"] != 2) | ((batches["attributes"] & 0x07) != 0)).any():
        raise ValueError("compact_batches rewrites uncompressed v2 batches only")
    if len(keep) != int(batches["record_count"].sum()):
        raise ValueError("keep must have one entry per record")
    out = []
    k = 0
    for b, row in enumerate(batches):
        start, size, count = int(row["position"]), int(row["size"]), int(row["record_count"])
        if action[b] == COMPACT_COPY:
            out.append(bytes(buf[start:start + size]))
        elif action[b] == COMPACT_REBUILD:
            base_ts = struct.unpack_from(">q", buf, start + 27)[0]
            new_base = int(horizon[b])
            kept, records = 0, []
            pos, end = start + 61, start + size
            for j in range(count):
                length, pos = _unzigzag_at(buf, pos, end)
                if pos < 0 or length < 0 or pos + length > end:
                    raise CorruptRecordError("record does not parse", start, None,
                                             int(row["base_offset"]))
                rec_end = pos + length
                if keep[k + j]:
                    ts_delta, after = _unzigzag_at(buf, pos + 1, rec_end)
                    if after < 0:
                        raise CorruptRecordError("record does not parse", start, None,
                                                 int(row["base_offset"]))
                    if kept == 0 and horizon[b] < 0:
                        new_base = base_ts + ts_delta
                    body = bytes(buf[pos:pos + 1]) + zigzag_varint(base_ts + ts_delta - new_base) \
                        + bytes(buf[after:rec_end])
                    records.append(zigzag_varint(len(body)) + body)
                    kept += 1
                pos = rec_end
            header = bytearray(buf[start:start + 61])
            attributes = struct.unpack_from(">h", header, 21)[0]
            if horizon[b] >= 0:
                attributes |= 0x40
            data = header + b"".join(records)
            struct.pack_into(">i", data, 8, len(data) - 12)
            struct.pack_into(">h", data, 21, attributes)
            struct.pack_into(">q", data, 27, new_base if kept or horizon[b] >= 0 else -1)
            struct.pack_into(">i", data, 57, kept)
            struct.pack_into(">I", data, 17, _crc32c(bytes(data[21:])))
            out.append(bytes(data))
        k += count
    return b"".join(out)
