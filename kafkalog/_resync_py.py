"""Twin of ``_resync.pxi``: resynchronisation after damage, the next intact batch."""
import struct
import zlib

from crc32c import crc32c as _crc32c

from kafkalog._layout import (
    LOG_OVERHEAD, HEADER_SIZE_UP_TO_MAGIC, LEGACY_OVERHEAD_V0, LEGACY_OVERHEAD_V1, V2_CRC_START,
    LEGACY_CRC_START,
)
from kafkalog._common_py import _V2_MIN_SIZE, _byte_span, _int8

_RESYNC_CHAIN_SIZE = 1 << 20


def next_valid_batch(buf, start, end=-1, legacy=True):
    """See ``_core.next_valid_batch``."""
    buf, end = _byte_span(buf, start, end)
    room = LOG_OVERHEAD + (LEGACY_OVERHEAD_V0 if legacy else _V2_MIN_SIZE)
    pos = start
    while end - pos >= room:
        magic = _int8(buf[pos + 16])
        base, size = struct.unpack_from(">qi", buf, pos)
        crc_start = None
        if magic == 2 and _V2_MIN_SIZE <= size <= end - pos - LOG_OVERHEAD:
            attributes, last_delta = struct.unpack_from(">hi", buf, pos + 21)
            count = struct.unpack_from(">i", buf, pos + 57)[0]
            if base >= 0 and attributes & 0x07 <= 4 and last_delta >= 0 and count >= 0:
                crc_start, crc_at, crc = V2_CRC_START, 17, _crc32c
        elif legacy and magic in (0, 1):
            minimum = LEGACY_OVERHEAD_V1 if magic == 1 else LEGACY_OVERHEAD_V0
            if (minimum <= size <= end - pos - LOG_OVERHEAD and base >= 0
                    and buf[pos + 17] & 0x07 <= 3):
                crc_start, crc_at, crc = LEGACY_CRC_START, 12, zlib.crc32
        if crc_start is not None and (size <= _RESYNC_CHAIN_SIZE or
                                      _chained(buf, pos + LOG_OVERHEAD + size, end)):
            stored = struct.unpack_from(">I", buf, pos + crc_at)[0]
            if crc(buf[pos + crc_start:pos + LOG_OVERHEAD + size]) == stored:
                return (pos, size + LOG_OVERHEAD)
        pos += 1
    return (-1, 0)


def _chained(buf, pos, end):
    if end - pos < HEADER_SIZE_UP_TO_MAGIC:
        return True
    return buf[pos + 16] <= 2 and struct.unpack_from(">i", buf, pos + 8)[0] >= LEGACY_OVERHEAD_V0
