"""What the pure-Python twins share, as ``_core.pyx`` holds what its ``.pxi`` sections share:
the v2 header layout, integer limits, the span check every buffer kernel makes, and the one
bounds-checked varint decoder (fastavro's ``_read_common.py``)."""
import struct

_V2_MIN_SIZE = 49
_MIN_RECORD_SIZE = 7
_V2_HEADER = struct.Struct(">qiibIhiqqqhii")   # baseOffset .. recordCount
_LEGACY_HEADER = struct.Struct(">qiIbb")        # offset, size, crc, magic, attributes
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_INT64_MIN = -2**63


def _byte_span(buf, start, end):
    """``buf`` as bytes and ``end`` clamped to it (-1: its end), as the kernels take a span;
    a ``start`` outside [0, end] is a ValueError."""
    buf = memoryview(buf).cast("B")
    if end < 0 or end > len(buf):
        end = len(buf)
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside the buffer [0, {end}]")
    return buf, end


class _Corrupt(Exception):
    def __init__(self, reason, position):
        self.reason, self.position = reason, position


def _wrap64(value):
    return (value + 2**63) % 2**64 - 2**63


def _int8(value):
    value &= 0xFF
    return value - 256 if value & 0x80 else value


def _varint(buf, pos, end, max_bytes):
    # The last allowed byte carries only the bits left of 32 / 64 (Kafka's readVarint/Varlong).
    raw = shift = 0
    for i in range(max_bytes):
        if pos >= end:
            break
        b = buf[pos]
        pos += 1
        if not b & 0x80:
            if i == max_bytes - 1 and b >> (4 if max_bytes == 5 else 1):
                break
            raw |= b << shift
            return (raw >> 1) ^ -(raw & 1), pos
        raw |= (b & 0x7F) << shift
        shift += 7
    raise _Corrupt("varint is too long or runs past the end of the record", pos)


def zigzag_varint(value):
    """``value`` as Kafka's zigzag varint (written by the batch builder and the compactor)."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)
