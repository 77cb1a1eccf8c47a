"""Twin of ``_read.pxi``: the reads users call, one kernel call each (Kafka's
``LogSegment.read`` and ``FileRecords.searchForTimestamp``)."""
import struct

from kafkalog._layout import (
    LOG_OVERHEAD, HEADER_SIZE_UP_TO_MAGIC, LEGACY_OVERHEAD_V0, LEGACY_OVERHEAD_V1, OFFSET_KEY,
)
from kafkalog._common_py import _V2_MIN_SIZE, _byte_span, _Corrupt, _int8
from kafkalog._decode_py import _check_v2_header, _decode_region, _max_delta
from kafkalog._scan_py import find_batch

FIND_TS_FOUND, FIND_TS_NONE, FIND_TS_MORE, FIND_TS_DECODE = 0, 1, 2, 3
_NOT_PLAIN = 0x07 | 0x08 | 0x20    # compressed, LogAppendTime, control


def batch_header_plausible(buf, position, base_offset, offset):
    """See ``_core.batch_header_plausible``."""
    buf = memoryview(buf).cast("B")
    if position < 0 or position + HEADER_SIZE_UP_TO_MAGIC > len(buf):
        return False
    base, size = struct.unpack_from(">qi", buf, position)
    return (buf[position + 16] <= 2 and LEGACY_OVERHEAD_V0 <= size
            and position + LOG_OVERHEAD + size <= len(buf) and base_offset <= base <= offset)


def segment_read(index, buf, offset, starting_position, max_size, max_position,
                 min_one_message):
    """See ``_core.segment_read``."""
    buf = memoryview(buf).cast("B")
    start, lies = starting_position, False
    if start < 0:
        raise ValueError(f"starting position {start} is negative")
    if index is not None:
        if index.kind != OFFSET_KEY:
            raise ValueError("segment_read takes an offset index's view")
        entry = index.lookup(offset)
        if entry[1] > starting_position:
            if batch_header_plausible(buf, entry[1], index.base_offset, entry[0]):
                start = entry[1]
            else:
                lies = True
    position, size = find_batch(buf, min(start, len(buf)), len(buf), offset)
    if position < 0:
        return (-1, 0, None, False, lies)
    adjusted = max(max_size, size) if min_one_message else max_size
    if adjusted == 0:
        return (position, size, b"", False, lies)
    fetch = max(0, min(max_position - position, adjusted))
    return (position, size, bytes(buf[position:position + fetch]), adjusted < size, lies)


def _first_at_or_after(buf, pos, size, timestamp, starting_offset):
    """See ``_core._first_at_or_after``: (timestamp, offset), None, or False when the batch
    fails its checks."""
    if _check_v2_header(buf, pos, size) is not None:
        return False
    base, delta = struct.unpack_from(">q", buf, pos)[0], struct.unpack_from(">i", buf, pos + 23)[0]
    base_ts = struct.unpack_from(">q", buf, pos + 27)[0]
    count = struct.unpack_from(">i", buf, pos + 57)[0]
    records = []
    try:
        _decode_region(buf, pos + 61, pos + size, base, _max_delta(base, base + delta), base_ts,
                       count, records, None)
    except _Corrupt:
        return False
    for r in records:
        if r[1] >= timestamp and r[0] >= starting_offset:
            return (r[1], r[0])
    return None


def find_timestamp(buf, start, end, timestamp, starting_offset):
    """See ``_core.find_timestamp``."""
    buf, end = _byte_span(buf, start, end)
    pos = start
    while True:
        if end - pos <= HEADER_SIZE_UP_TO_MAGIC:
            return (FIND_TS_NONE if end == pos else FIND_TS_MORE, pos, 0)
        base, size = struct.unpack_from(">qi", buf, pos)
        if size < LEGACY_OVERHEAD_V0:
            return (FIND_TS_NONE, pos, 0)
        if size > end - pos - LOG_OVERHEAD:
            return (FIND_TS_MORE, pos, 0)
        magic = _int8(buf[pos + 16])
        if magic == 2:
            if size < _V2_MIN_SIZE:
                return (FIND_TS_NONE, pos, 0)
            last = base + struct.unpack_from(">i", buf, pos + 23)[0]
            max_ts = struct.unpack_from(">q", buf, pos + 35)[0]
        elif magic in (0, 1):
            if magic == 1 and size < LEGACY_OVERHEAD_V1:
                return (FIND_TS_NONE, pos, 0)
            last = base
            max_ts = struct.unpack_from(">q", buf, pos + 18)[0] if magic == 1 else -1
        else:
            return (FIND_TS_NONE, pos, 0)
        if max_ts >= timestamp and last >= starting_offset:
            if magic != 2 or struct.unpack_from(">h", buf, pos + 21)[0] & _NOT_PLAIN:
                return (FIND_TS_DECODE, pos, size + LOG_OVERHEAD)
            found = _first_at_or_after(buf, pos, size + LOG_OVERHEAD, timestamp,
                                       starting_offset)
            if found:
                return (FIND_TS_FOUND, found[0], found[1])
            if found is False:
                return (FIND_TS_DECODE, pos, size + LOG_OVERHEAD)
        pos += LOG_OVERHEAD + size
