"""Twin of ``_scan.pxi``: segment scans, finding a batch and recovery's index entries."""
import struct

import numpy as np

from kafkalog._layout import BATCH_DTYPE, LOG_OVERHEAD, HEADER_SIZE_UP_TO_MAGIC, LEGACY_OVERHEAD_V0
from kafkalog._common_py import _V2_MIN_SIZE, _byte_span


def find_batch(buf, start, end, target_offset):
    """See ``_core.find_batch``."""
    buf, end = _byte_span(buf, start, end)
    pos = start
    while end - pos > HEADER_SIZE_UP_TO_MAGIC:
        base, size = struct.unpack_from(">qi", buf, pos)
        if size < LEGACY_OVERHEAD_V0 or size > end - pos - LOG_OVERHEAD:
            break
        if buf[pos + 16] == 2:
            if size < _V2_MIN_SIZE:
                break
            last = base + struct.unpack_from(">i", buf, pos + 23)[0]
        else:
            last = base
        if last >= target_offset:
            return (pos, size + LOG_OVERHEAD)
        pos += LOG_OVERHEAD + size
    return (-1, 0)


def index_entries_for(batches, interval_bytes, start_position=0, since_last_entry=0,
                      max_timestamp=-1, offset_of_max_timestamp=-1, last_index_timestamp=-1):
    """See ``_core.index_entries_for``."""
    batches = np.asarray(batches, dtype=BATCH_DTYPE)
    offset_entries, time_entries = [], []
    valid_bytes, last_entry = 0, -since_last_entry
    max_ts, max_ts_offset = max_timestamp, offset_of_max_timestamp
    last_time = last_index_timestamp
    for b in batches:
        if b["max_timestamp"] > max_ts:
            max_ts, max_ts_offset = int(b["max_timestamp"]), int(b["last_offset"])
        if valid_bytes - last_entry > interval_bytes:
            offset_entries.append((int(b["last_offset"]), start_position + valid_bytes))
            if max_ts > last_time:
                time_entries.append((max_ts, max_ts_offset))
                last_time = max_ts
            last_entry = valid_bytes
        valid_bytes += int(b["size"])
    return (np.array(offset_entries, dtype=np.int64).reshape(-1, 2),
            np.array(time_entries, dtype=np.int64).reshape(-1, 2), max_ts, max_ts_offset,
            valid_bytes - last_entry)


def recovery_summary(batches, base_offset, interval_bytes):
    """See ``_core.recovery_summary``."""
    batches = np.asarray(batches, dtype=BATCH_DTYPE)
    last = batches["last_offset"]
    out_of_range = np.flatnonzero((last < base_offset) | (last - base_offset > 2**31 - 1))
    if len(out_of_range):
        return int(out_of_range[0]), 0, b"", b"", -1, -1, 0, 0, -1
    v2 = batches[batches["magic"] == 2]
    producers = int(np.count_nonzero(v2["producer_id"] >= 0))
    max_epoch = max(int(v2["partition_leader_epoch"].max()), -1) if len(v2) else -1
    offsets, times, max_ts, max_ts_offset, _ = index_entries_for(batches, interval_bytes)
    time_rows = times.tolist()
    if max_ts >= 0 and (not time_rows or time_rows[-1][0] < max_ts):
        time_rows.append([max_ts, max_ts_offset])
    offset_index = b"".join(struct.pack(">ii", o - base_offset, p) for o, p in offsets.tolist())
    time_index = b"".join(struct.pack(">qi", t, o - base_offset) for t, o in time_rows)
    valid_bytes = int(batches["position"][-1]) + int(batches["size"][-1]) if len(batches) else 0
    last_entry = int(offsets[-1, 1]) if len(offsets) else 0
    return (-1, valid_bytes, offset_index, time_index, max_ts, max_ts_offset, last_entry,
            producers, max_epoch)
