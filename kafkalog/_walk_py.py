"""Twin of ``_walk.pxi``: the batch walk over v2 batches and legacy entries, with CRC
validation."""
import struct
import zlib

import numpy as np
from crc32c import crc32c as _crc32c

from kafkalog._layout import (
    BATCH_DTYPE, LOG_OVERHEAD, HEADER_SIZE_UP_TO_MAGIC, LEGACY_OVERHEAD_V0, LEGACY_OVERHEAD_V1,
    V2_CRC_START, LEGACY_CRC_START, WALK_END, WALK_PARTIAL, WALK_CORRUPT, WALK_INVALID,
)
from kafkalog._common_py import _V2_MIN_SIZE, _V2_HEADER, _LEGACY_HEADER, _byte_span, _wrap64


def walk_batches(buf, start=0, end=-1, validate_crc=True, stop_on_invalid=False, max_batches=-1):
    """See ``_core.walk_batches``."""
    buf, end = _byte_span(buf, start, end)
    rows = []
    pos = start
    status, message = WALK_END, None
    while True:
        if 0 <= max_batches <= len(rows):
            break
        if end - pos <= HEADER_SIZE_UP_TO_MAGIC:
            status = WALK_END if end == pos else WALK_PARTIAL
            break
        size = struct.unpack_from(">i", buf, pos + 8)[0]
        if size < LEGACY_OVERHEAD_V0:
            status = WALK_CORRUPT
            message = (f"record size {size} is smaller than the minimum record overhead "
                       f"({LEGACY_OVERHEAD_V0})")
            break
        if size > end - pos - LOG_OVERHEAD:
            status = WALK_PARTIAL
            break
        magic = struct.unpack_from(">b", buf, pos + 16)[0]
        if magic == 2 and size < _V2_MIN_SIZE:
            status = WALK_CORRUPT
            message = f"batch size {size} is smaller than the v2 batch header ({_V2_MIN_SIZE})"
            break
        if magic == 1 and size < LEGACY_OVERHEAD_V1:
            status = WALK_CORRUPT
            message = (f"record size {size} is smaller than the v1 record overhead "
                       f"({LEGACY_OVERHEAD_V1})")
            break
        if magic not in (0, 1, 2):
            status = WALK_CORRUPT
            message = f"unknown magic byte {magic}"
            break
        rows.append(_batch_row(buf, pos, magic))
        pos += LOG_OVERHEAD + size
    batches = np.array(rows, dtype=BATCH_DTYPE)
    stop = pos
    if validate_crc:
        for i, row in enumerate(batches):
            p, sz = int(row["position"]), int(row["size"])
            if row["magic"] == 2:
                computed = _crc32c(buf[p + V2_CRC_START:p + sz])
            else:
                computed = zlib.crc32(buf[p + LEGACY_CRC_START:p + sz])
            batches[i]["crc_valid"] = computed == int(row["crc"])
            if stop_on_invalid and computed != int(row["crc"]):
                stop = p
                batches = batches[:i]
                status = WALK_INVALID
                message = "record is corrupt (CRC mismatch)"
                break
    return batches, status, stop, message


def _batch_row(buf, pos, magic):
    size = struct.unpack_from(">i", buf, pos + 8)[0] + LOG_OVERHEAD
    if magic == 2:
        (base_offset, _, epoch, _, crc, attributes, last_delta, base_ts, max_ts, producer_id,
         producer_epoch, base_sequence, count) = _V2_HEADER.unpack_from(buf, pos)
        last_offset = _wrap64(base_offset + last_delta)    # Java's long arithmetic
    else:
        base_offset, _, crc, _, attributes = _LEGACY_HEADER.unpack_from(buf, pos)
        attributes &= 0xFF
        base_ts = struct.unpack_from(">q", buf, pos + 18)[0] if magic == 1 else -1
        max_ts, last_offset, epoch = base_ts, base_offset, -1
        producer_id, producer_epoch, base_sequence, count = -1, -1, -1, -1
    return (pos, base_offset, last_offset, max_ts, base_ts, producer_id, size, count, epoch,
            base_sequence, crc, attributes, producer_epoch, magic, -1)
