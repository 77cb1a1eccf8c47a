"""Twin of ``_log07.pxi``: the walk over Kafka 0.7 entries (``.kafka`` files), with CRC32
validation."""
import struct
import zlib

import numpy as np

from kafkalog._common_py import _byte_span
from kafkalog._layout import (
    LOG07_CODEC_MASK, LOG07_ENTRY_DTYPE, LOG07_LENGTH_SIZE, LOG07_MIN_SIZE_V0, LOG07_MIN_SIZE_V1,
    WALK_CORRUPT, WALK_END, WALK_INVALID, WALK_PARTIAL,
)


def walk_log07(buf, start=0, end=-1, validate_crc=True, max_entries=-1):
    """See ``_core.walk_log07``."""
    buf, end = _byte_span(buf, start, end)
    rows = []
    pos = start
    status, message = WALK_END, None
    while True:
        if 0 <= max_entries <= len(rows):
            break
        if end - pos < LOG07_LENGTH_SIZE:
            status = WALK_END if end == pos else WALK_PARTIAL
            break
        size = struct.unpack_from(">i", buf, pos)[0]
        if size < LOG07_MIN_SIZE_V0:
            status = WALK_CORRUPT
            message = (f"message size {size} is smaller than the minimum message header "
                       f"({LOG07_MIN_SIZE_V0})")
            break
        if size > end - pos - LOG07_LENGTH_SIZE:
            status = WALK_PARTIAL
            break
        magic = struct.unpack_from(">b", buf, pos + 4)[0]
        if magic == 1 and size < LOG07_MIN_SIZE_V1:
            status = WALK_CORRUPT
            message = (f"message size {size} is smaller than the magic 1 message header "
                       f"({LOG07_MIN_SIZE_V1})")
            break
        if magic not in (0, 1):
            status = WALK_CORRUPT
            message = f"unknown magic byte {magic}"
            break
        rows.append(_entry_row(buf, pos, size, magic))
        pos += LOG07_LENGTH_SIZE + size
    entries = np.array(rows, dtype=LOG07_ENTRY_DTYPE)
    stop = pos
    if validate_crc:
        for i, row in enumerate(entries):
            p, n = int(row["payload_position"]), int(row["payload_size"])
            computed = zlib.crc32(buf[p:p + n])
            if computed != int(row["crc"]):
                stop = int(row["position"])
                entries = entries[:i]
                status = WALK_INVALID
                message = (f"message is corrupt: stored CRC32 {int(row['crc'])} does not match "
                           f"its payload's {computed}")
                break
            entries[i]["crc_valid"] = 1
    return entries, status, stop, message


def _entry_row(buf, pos, size, magic):
    if magic == 1:
        attributes = struct.unpack_from(">b", buf, pos + 5)[0]
        header = LOG07_LENGTH_SIZE + LOG07_MIN_SIZE_V1
    else:
        attributes = 0
        header = LOG07_LENGTH_SIZE + LOG07_MIN_SIZE_V0
    crc = struct.unpack_from(">I", buf, pos + header - 4)[0]
    entry_size = size + LOG07_LENGTH_SIZE
    return (pos, pos + header, entry_size, entry_size - header, crc, magic, attributes,
            attributes & LOG07_CODEC_MASK, -1)
