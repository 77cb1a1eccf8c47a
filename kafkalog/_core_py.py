"""Pure-Python reference of every kernel in ``_core.pyx``: same signatures, same results.

Used when the compiled module is missing or ``KAFKALOG_NO_EXTENSIONS=1``, and by the tests as
the reference the compiled kernels are checked against. Written for clarity, not speed.
"""
import struct
import zlib

import numpy as np
from crc32c import crc32c as _crc32c

from kafkalog._layout import (
    BATCH_DTYPE, RECORD_DTYPE, HEADER_DTYPE, LOG_OVERHEAD, HEADER_SIZE_UP_TO_MAGIC,
    LEGACY_OVERHEAD_V0, LEGACY_OVERHEAD_V1, V2_CRC_START, LEGACY_CRC_START,
    OFFSET_KEY, OFFSET_VALUE, TIME_KEY, TIME_VALUE,
    WALK_END, WALK_PARTIAL, WALK_CORRUPT, WALK_INVALID,
)
from kafkalog.errors import CorruptRecordError

_V2_MIN_SIZE = 49
_MIN_RECORD_SIZE = 7
_V2_HEADER = struct.Struct(">qiibIhiqqqhii")   # baseOffset .. recordCount
_LEGACY_HEADER = struct.Struct(">qiIbb")        # offset, size, crc, magic, attributes


def crc32c(buf, value=0):
    """CRC32C of ``buf`` continuing ``value`` (the crc32c package: the portable path)."""
    return _crc32c(buf, value)


def _byte_span(buf, start, end):
    """``buf`` as bytes and ``end`` clamped to it (-1: its end), as the kernels take a span;
    a ``start`` outside [0, end] is a ValueError."""
    buf = memoryview(buf).cast("B")
    if end < 0 or end > len(buf):
        end = len(buf)
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside the buffer [0, {end}]")
    return buf, end


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


class _Corrupt(Exception):
    def __init__(self, reason, position):
        self.reason, self.position = reason, position


def _wrap64(value):
    return (value + 2**63) % 2**64 - 2**63


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


def _span(buf, pos, end):
    n, pos = _varint(buf, pos, end, 5)
    if n < 0:
        return pos, -1, pos
    if n > end - pos:
        raise _Corrupt("a key, value or header runs past the end of the record", pos)
    return pos, n, pos + n


_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_INT64_MIN = -2**63

# The reasons of ``_core`` (its R_* table), for the checks both implementations make.
_ERR_COUNT = "record count does not fit the batch"
_ERRORS = {
    "offset_order": "record offsets do not increase inside the batch",
    "offset_range": "record offset delta is outside the batch's offsets (lastOffsetDelta)",
    "timestamp": "record timestamp delta overflows the batch's base timestamp",
    "codec": "unknown compression codec in the batch attributes",
    "last_offset_delta": "invalid negative lastOffsetDelta",
    "offset_overflow": "last offset leaves no next offset in 64 bits",
    "count_offsets": "record count does not fit the batch's offsets (negative, or more than "
                     "lastOffsetDelta + 1)",
    "sequence": "invalid base sequence (below -1)",
    "producer": "invalid producer id or epoch (below -1)",
    "txn_producer": "transactional batch without a producer id",
    "legacy_span": "legacy record key or value runs past its entry",
    "legacy_size": "legacy record size does not match its key and value",
    "wrapper_null": "compressed legacy wrapper has a null value",
    "negative_offset": "invalid negative offset",
}


def _max_delta(base_offset, last_offset):
    return -1 if last_offset < base_offset else min(last_offset - base_offset, _INT32_MAX)


def decode_v2_records(buf, starts, ends, base_offsets, base_timestamps, counts,
                      last_offsets=None):
    """See ``_core.decode_v2_records``."""
    buf = memoryview(buf).cast("B")
    n_regions = len(starts)
    if not (len(ends) == len(base_offsets) == len(base_timestamps) == len(counts) == n_regions):
        raise ValueError("region arrays differ in length")
    if last_offsets is not None and len(last_offsets) != n_regions:
        raise ValueError("region arrays differ in length")
    for i in range(n_regions):
        if not (0 <= starts[i] <= ends[i] <= len(buf)):
            raise ValueError(f"region {i} [{starts[i]}, {ends[i]}) outside the buffer")
        if counts[i] < 0 or counts[i] * _MIN_RECORD_SIZE > ends[i] - starts[i]:
            exc = CorruptRecordError(f"{_ERR_COUNT} ({counts[i]} records "
                                     f"in {ends[i] - starts[i]} bytes)", position=int(starts[i]))
            exc.region = i
            raise exc
    records, headers = [], []
    for i in range(n_regions):
        max_delta = (_max_delta(int(base_offsets[i]), int(last_offsets[i]))
                     if last_offsets is not None else _INT32_MAX)
        try:
            _decode_region(buf, int(starts[i]), int(ends[i]), int(base_offsets[i]), max_delta,
                           int(base_timestamps[i]), int(counts[i]), records, headers)
        except _Corrupt as c:
            exc = CorruptRecordError(c.reason, position=c.position)
            exc.region = i
            raise exc from None
    return np.array(records, dtype=RECORD_DTYPE), np.array(headers, dtype=HEADER_DTYPE)


def _decode_region(buf, pos, end, base_offset, max_delta, base_timestamp, count, records,
                   headers):
    """See ``_core._decode_region``; ``records`` None: only validate."""
    prev_delta = -1
    for _ in range(count):
        rec_start = pos
        try:
            length, pos = _varint(buf, pos, end, 5)
        except _Corrupt as c:
            raise _Corrupt(c.reason, rec_start) from None
        if length < _MIN_RECORD_SIZE - 1 or length > end - pos:
            raise _Corrupt("invalid record length", rec_start)
        body_end = pos + length
        try:
            attributes = _int8(buf[pos])
            ts_delta, pos = _varint(buf, pos + 1, body_end, 10)
            offset_delta, pos = _varint(buf, pos, body_end, 5)
            if offset_delta <= prev_delta:
                raise _Corrupt(_ERRORS["offset_order"], pos)
            if offset_delta > max_delta or base_offset + offset_delta > _INT64_MAX:
                raise _Corrupt(_ERRORS["offset_range"], pos)
            prev_delta = offset_delta
            if not _INT64_MIN <= base_timestamp + ts_delta <= _INT64_MAX:
                raise _Corrupt(_ERRORS["timestamp"], pos)
            key_pos, key_len, pos = _span(buf, pos, body_end)
            value_pos, value_len, pos = _span(buf, pos, body_end)
            header_count, pos = _varint(buf, pos, body_end, 5)
            if header_count < 0 or header_count > (body_end - pos) // 2:
                raise _Corrupt("invalid negative number of record headers", pos)
            header_start = len(headers) if headers is not None else 0
            for _h in range(header_count):
                hk_pos, hk_len, pos = _span(buf, pos, body_end)
                if hk_len < 0:
                    raise _Corrupt("invalid negative header key size", pos)
                hv_pos, hv_len, pos = _span(buf, pos, body_end)
                if headers is not None:
                    headers.append((hk_pos, hv_pos, hk_len, hv_len))
            if pos != body_end:
                raise _Corrupt("record length does not match the bytes its fields use", pos)
        except _Corrupt as c:
            raise _Corrupt(c.reason, rec_start) from None
        if records is not None:
            records.append((base_offset + offset_delta, base_timestamp + ts_delta, key_pos,
                            value_pos, header_start, body_end - rec_start, key_len, value_len,
                            header_count, attributes))
    if pos != end:
        raise _Corrupt("incorrect declared batch size, records still remaining", pos)


def _check_v2_header(buf, pos, size):
    """The reason the v2 header at ``pos`` fails (see ``_core._check_v2_header``), or None."""
    (base, _, _, _, _, attributes, delta, _, _, producer_id, producer_epoch, base_sequence,
     count) = _V2_HEADER.unpack_from(buf, pos)
    if attributes & 0x07 > 4:
        return "codec"
    if base < 0:
        return "negative_offset"
    if delta < 0:
        return "last_offset_delta"
    if base + delta >= _INT64_MAX:       # the next offset must fit too
        return "offset_overflow"
    if count < 0 or count - 1 > delta:
        return "count_offsets"
    if attributes & 0x07 == 0 and count * _MIN_RECORD_SIZE > size - 61:
        return "count"
    if base_sequence < -1:
        return "sequence"
    if producer_id < -1 or producer_epoch < -1:
        return "producer"
    if attributes & 0x10 and producer_id < 0:
        return "txn_producer"
    return None


def _legacy_spans(buf, b):
    """(key_pos, key_len, value_pos, value_len) of a legacy entry, or the reason it fails."""
    pos, end = int(b["position"]), int(b["position"] + b["size"])
    if int(b["attributes"]) & 0x07 > 4:
        return "codec"
    if b["base_offset"] < 0:
        return "negative_offset"
    if b["base_offset"] == _INT64_MAX:
        return "offset_overflow"
    pos += 18 + (8 if b["magic"] == 1 else 0)
    key_len = struct.unpack_from(">i", buf, pos)[0]
    pos += 4
    if key_len > end - pos - 4:
        return "legacy_span"
    key_pos = pos
    pos += max(key_len, 0)
    value_len = struct.unpack_from(">i", buf, pos)[0]
    pos += 4
    if value_len > end - pos:
        return "legacy_span"
    value_pos = pos
    pos += max(value_len, 0)
    if pos != end:
        return "legacy_size"
    if value_len < 0 and int(b["attributes"]) & 0x07:
        return "wrapper_null"
    return key_pos, max(key_len, -1), value_pos, max(value_len, -1)


def _check_rows(buf, batches):
    minimum = {0: LEGACY_OVERHEAD_V0, 1: LEGACY_OVERHEAD_V1, 2: _V2_MIN_SIZE}
    for i, b in enumerate(batches):
        if int(b["magic"]) not in minimum or b["position"] < 0 or \
                b["position"] + b["size"] > len(buf) or \
                b["size"] < LOG_OVERHEAD + minimum[int(b["magic"])]:
            raise ValueError(f"entry {i} is not a walked batch inside the buffer")


def check_batches(buf, batches, records=True):
    """See ``_core.check_batches``."""
    buf = memoryview(buf).cast("B")
    batches = np.asarray(batches, dtype=BATCH_DTYPE)
    _check_rows(buf, batches)
    for i, b in enumerate(batches):
        pos, size = int(b["position"]), int(b["size"])
        if b["magic"] != 2:
            spans = _legacy_spans(buf, b)
            if isinstance(spans, str):
                return i, _ERRORS[spans], pos
            continue
        why = _check_v2_header(buf, pos, size)
        if why is not None:
            return i, (_ERR_COUNT if why == "count" else _ERRORS[why]), pos
        (base, _, _, _, _, attributes, delta, base_ts, _, _, _, _,
         count) = _V2_HEADER.unpack_from(buf, pos)
        if records and attributes & 0x07 == 0:
            try:
                _decode_region(buf, pos + 61, pos + size, base, delta, base_ts, count, None, None)
            except _Corrupt as c:
                return i, c.reason, c.position
    return len(batches), None, -1


def _int8(value):
    value &= 0xFF
    return value - 256 if value & 0x80 else value


def decode_legacy_records(buf, batches):
    """See ``_core.decode_legacy_records``."""
    buf = memoryview(buf).cast("B")
    batches = np.asarray(batches, dtype=BATCH_DTYPE)
    for i, b in enumerate(batches):
        if b["magic"] > 1 or b["magic"] < 0 or b["position"] < 0 or \
                b["position"] + b["size"] > len(buf) or \
                b["size"] < LOG_OVERHEAD + (LEGACY_OVERHEAD_V1 if b["magic"] == 1
                                            else LEGACY_OVERHEAD_V0):
            raise ValueError(f"entry {i} is not a legacy entry inside the buffer")
    rows = []
    for b in batches:
        spans = _legacy_spans(buf, b)
        if isinstance(spans, str):
            raise CorruptRecordError(_ERRORS[spans], position=int(b["position"]),
                                     base_offset=int(b["base_offset"]))
        key_pos, key_len, value_pos, value_len = spans
        rows.append((b["base_offset"], b["base_timestamp"], key_pos, value_pos, 0, b["size"],
                     key_len, value_len, 0, _int8(int(b["attributes"]))))
    return np.array(rows, dtype=RECORD_DTYPE)


_ENTRY_SIZE = {OFFSET_KEY: 8, OFFSET_VALUE: 8, TIME_KEY: 12, TIME_VALUE: 12}
_FIELD = {OFFSET_KEY: (">i", 0), OFFSET_VALUE: (">i", 4), TIME_KEY: (">q", 0), TIME_VALUE: (">i", 8)}


def _check_index(buf, entries, field):
    if field not in _ENTRY_SIZE:
        raise ValueError(f"unknown index field {field}")
    buf = memoryview(buf).cast("B")
    if entries < 0 or entries * _ENTRY_SIZE[field] > len(buf):
        raise ValueError(f"{entries} entries do not fit a buffer of {len(buf)} bytes")
    return buf


def _value(buf, slot, field):
    fmt, at = _FIELD[field]
    return struct.unpack_from(fmt, buf, slot * _ENTRY_SIZE[field] + at)[0]


def _search(buf, entries, field, target, upper):
    if entries == 0:
        return -1

    def binary_search(lo, hi):
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            found = _value(buf, mid, field)
            if found > target:
                hi = mid - 1
            elif found < target:
                lo = mid
            else:
                return mid
        if not upper or _value(buf, lo, field) == target:
            return lo
        return -1 if lo == entries - 1 else lo + 1

    warm = 8192 // _ENTRY_SIZE[field]
    first_hot = max(0, entries - 1 - warm)
    if _value(buf, first_hot, field) < target:
        return binary_search(first_hot, entries - 1)
    if _value(buf, 0, field) > target:
        return 0 if upper else -1
    return binary_search(0, first_hot)


def index_search(buf, entries, field, target, upper=False):
    """See ``_core.index_search``."""
    buf = _check_index(buf, entries, field)
    return _search(buf, entries, field, target, upper)


def index_search_many(buf, entries, field, targets, upper=False):
    """See ``_core.index_search_many``."""
    buf = _check_index(buf, entries, field)
    return np.array([_search(buf, entries, field, int(t), upper) for t in targets], dtype=np.int64)


def index_entries(buf, entries, field_kind):
    """See ``_core.index_entries``."""
    if field_kind not in (OFFSET_KEY, TIME_KEY):
        raise ValueError(f"field_kind must be OFFSET_KEY or TIME_KEY, not {field_kind}")
    buf = _check_index(buf, entries, field_kind)
    keys = [_value(buf, i, field_kind) for i in range(entries)]
    values = [_value(buf, i, field_kind + 1) for i in range(entries)]
    return np.array(keys, dtype=np.int64), np.array(values, dtype=np.int64)


def index_valid_entries(buf, entry_size):
    """See ``_core.index_valid_entries``."""
    if entry_size <= 0:
        raise ValueError("entry_size must be positive")
    buf = memoryview(buf).cast("B")
    end = (len(buf) // entry_size) * entry_size
    data = bytes(buf[:end])
    last = len(data.rstrip(b"\0"))
    return (last + entry_size - 1) // entry_size


def index_lookup(buf, entries, field, target, upper=False):
    """See ``_core.index_lookup``."""
    buf = _check_index(buf, entries, field)
    slot = _search(buf, entries, field, target, upper)
    if slot < 0:
        return (-1, 0, 0)
    kind = OFFSET_KEY if field <= OFFSET_VALUE else TIME_KEY
    return (slot, _value(buf, slot, kind), _value(buf, slot, kind + 1))


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


def index_entries_for(batches, interval_bytes, start_position=0):
    """See ``_core.index_entries_for``."""
    batches = np.asarray(batches, dtype=BATCH_DTYPE)
    offset_entries, time_entries = [], []
    valid_bytes = last_entry = 0
    max_ts = max_ts_offset = last_time = -1
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
            np.array(time_entries, dtype=np.int64).reshape(-1, 2), max_ts, max_ts_offset)


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
    offsets, times, max_ts, max_ts_offset = index_entries_for(batches, interval_bytes)
    time_rows = times.tolist()
    if max_ts >= 0 and (not time_rows or time_rows[-1][0] < max_ts):
        time_rows.append([max_ts, max_ts_offset])
    offset_index = b"".join(struct.pack(">ii", o - base_offset, p) for o, p in offsets.tolist())
    time_index = b"".join(struct.pack(">qi", t, o - base_offset) for t, o in time_rows)
    valid_bytes = int(batches["position"][-1]) + int(batches["size"][-1]) if len(batches) else 0
    last_entry = int(offsets[-1, 1]) if len(offsets) else 0
    return (-1, valid_bytes, offset_index, time_index, max_ts, max_ts_offset, last_entry,
            producers, max_epoch)


APPEND_HAS_PRODUCER = 1
APPEND_HAS_COMPRESSED = 2


def prepare_append(buf, assign_from, max_batch_size, log_append_time):
    """See ``_core.prepare_append``."""
    from kafkalog.errors import RecordTooLargeError
    view = memoryview(buf).cast("B")
    length = len(view)
    pos = n = count = flags = 0
    next_offset = assign_from
    first = last = prev_last = max_ts = off_max = epoch = -1
    while pos < length:
        remaining = length - pos
        if remaining < HEADER_SIZE_UP_TO_MAGIC:
            raise CorruptRecordError(f"{remaining} trailing bytes are too few for a batch",
                                     position=pos)
        size = struct.unpack_from(">i", view, pos + 8)[0]
        if size < _V2_MIN_SIZE:
            raise CorruptRecordError("batch is smaller than the v2 batch header", position=pos)
        if size > remaining - LOG_OVERHEAD:
            raise CorruptRecordError(f"batch declares {size} bytes after its length field but "
                                     f"only {remaining - LOG_OVERHEAD} remain", position=pos)
        if view[pos + 16] != 2:
            raise CorruptRecordError(f"only record batch v2 can be appended, not magic "
                                     f"{struct.unpack_from('>b', view, pos + 16)[0]}",
                                     position=pos)
        size += LOG_OVERHEAD
        if size > max_batch_size:
            raise RecordTooLargeError(f"batch of {size} bytes at position {pos} exceeds "
                                      f"max.message.bytes {max_batch_size}")
        if _crc32c(view[pos + V2_CRC_START:pos + size]) != struct.unpack_from(">I", view,
                                                                               pos + 17)[0]:
            raise CorruptRecordError("record is corrupt (CRC mismatch)", position=pos)
        (base, _, leader_epoch, _, _, attributes, delta, _, _, producer_id, _, _,
         records) = _V2_HEADER.unpack_from(view, pos)
        if delta < 0 or records < 0:
            raise CorruptRecordError("invalid records in batch", position=pos)
        if attributes & 0x07:
            flags |= APPEND_HAS_COMPRESSED
        elif records > 0:
            if records * _MIN_RECORD_SIZE > size - 61:
                raise CorruptRecordError("invalid records in batch", position=pos)
            try:
                _decode_region(view, pos + 61, pos + size, base, delta, 0, records, None, None)
            except _Corrupt:
                raise CorruptRecordError("invalid records in batch", position=pos) from None
        if producer_id >= 0:
            flags |= APPEND_HAS_PRODUCER
        epoch = max(epoch, leader_epoch)
        if next_offset >= 0:
            base = next_offset
            struct.pack_into(">q", view, pos, base)
            next_offset = base + delta + 1
        last = base + delta
        if n > 0 and base <= prev_last:
            raise CorruptRecordError("batch offsets do not increase", position=pos)
        if n == 0:
            first = base
        if log_append_time >= 0:
            struct.pack_into(">h", view, pos + 21, attributes | 0x08)
            struct.pack_into(">q", view, pos + 35, log_append_time)
            struct.pack_into(">I", view, pos + 17, _crc32c(view[pos + V2_CRC_START:pos + size]))
        ts = struct.unpack_from(">q", view, pos + 35)[0]
        if ts > max_ts:
            max_ts, off_max = ts, last
        prev_last = last
        count += records
        n += 1
        pos += size
    if n == 0:
        raise CorruptRecordError("no record batch to append", position=0)
    return (n, first, last, max_ts, off_max, count, flags, epoch)


def gather_spans(buf, positions, lengths):
    """See ``_core.gather_spans``."""
    buf = memoryview(buf).cast("B")
    if len(lengths) != len(positions):
        raise ValueError("positions and lengths differ in length")
    chunks, offsets, valid = [], [0], []
    for i, (p, n) in enumerate(zip(positions, lengths)):
        p, n = int(p), int(n)
        if n > 0 and (p < 0 or p + n > len(buf)):
            raise ValueError(f"span {i} lies outside the buffer")
        if n > 0:
            chunks.append(bytes(buf[p:p + n]))
        offsets.append(offsets[-1] + max(n, 0))
        valid.append(n >= 0)
    if offsets[-1] > 2**31 - 1:
        raise ValueError("spans exceed 2 GiB: split the input")
    return (np.array(offsets, dtype=np.int32),
            np.frombuffer(b"".join(chunks), dtype=np.uint8).copy(),
            np.array(valid, dtype=np.bool_))


class IndexView:
    """See ``_core.IndexView``."""

    def __init__(self, buf, entries, base_offset, kind, result_type):
        if kind not in (OFFSET_KEY, TIME_KEY):
            raise ValueError(f"kind must be OFFSET_KEY or TIME_KEY, not {kind}")
        self._buf = memoryview(buf).cast("B")
        self.entries = entries
        self._base = base_offset
        self._kind = kind
        self._type = result_type

    def release(self):
        if self._buf is not None:
            self._buf.release()
            self._buf = None
        self.entries = 0

    def lookup(self, target):
        if self._buf is None:
            raise ValueError("index view released (the index was closed)")
        if self._kind == OFFSET_KEY:
            slot, rel, pos = index_lookup(self._buf, self.entries, OFFSET_KEY,
                                          target - self._base)
            return self._type(self._base, 0) if slot < 0 else self._type(self._base + rel, pos)
        slot, ts, rel = index_lookup(self._buf, self.entries, TIME_KEY, target)
        return self._type(-1, self._base) if slot < 0 else self._type(ts, self._base + rel)


def index_lookup_many(buf, entries, kind, base_offset, targets):
    """See ``_core.index_lookup_many``."""
    if kind not in (OFFSET_KEY, TIME_KEY):
        raise ValueError(f"kind must be OFFSET_KEY or TIME_KEY, not {kind}")
    buf = _check_index(buf, entries, kind)
    first, second = [], []
    for t in targets:
        target = int(t) - base_offset if kind == OFFSET_KEY else int(t)
        slot, x, y = index_lookup(buf, entries, kind, target)
        if kind == OFFSET_KEY:
            first.append(base_offset if slot < 0 else base_offset + x)
            second.append(0 if slot < 0 else y)
        else:
            first.append(-1 if slot < 0 else x)
            second.append(base_offset if slot < 0 else base_offset + y)
    return np.array(first, dtype=np.int64), np.array(second, dtype=np.int64)


# ----------------------------------------------------------------------------------------------
# The reads users call (_read.pxi)

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
        if index._kind != OFFSET_KEY:
            raise ValueError("segment_read takes an offset index's view")
        entry = index.lookup(offset)
        if entry[1] > starting_position:
            if batch_header_plausible(buf, entry[1], index._base, entry[0]):
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


class Record:
    """One record: ``offset``, ``timestamp`` (ms), ``timestamp_type``, ``key``, ``value``
    (bytes or None) and ``headers`` (tuple of ``(str, bytes | None)``).

    Construct one for appends as ``Record(key=..., value=..., timestamp=None, headers=())``;
    a timestamp of None means "now" when the batch is built.
    """
    __slots__ = ("offset", "timestamp", "timestamp_type", "key", "value", "headers")

    def __init__(self, key=None, value=None, timestamp=None, headers=(), offset=None,
                 timestamp_type=0):
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.headers = tuple(headers)
        self.offset = offset
        self.timestamp_type = timestamp_type

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in Record.__slots__)

    def __hash__(self):
        return hash((self.offset, self.timestamp, self.key, self.value))

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r:.60}, headers={self.headers!r:.60})")


def make_records(data, records, headers, timestamp_types, type_objects):
    """See ``_core.make_records`` (here the fields are copied at once)."""
    data = memoryview(data).cast("B")
    records = np.asarray(records, dtype=RECORD_DTYPE)
    if len(timestamp_types) != len(records):
        raise ValueError("timestamp_types and records differ in length")

    def span(pos, length):
        if length < 0:
            return None
        if pos + length > len(data):
            raise ValueError("a record lies outside the buffer")
        return bytes(data[pos:pos + length])

    out = []
    for r, t in zip(records, timestamp_types):
        heads = headers[int(r["header_start"]):int(r["header_start"]) + int(r["header_count"])] \
            if r["header_count"] else ()
        out.append(Record(
            key=span(int(r["key_pos"]), int(r["key_len"])),
            value=span(int(r["value_pos"]), int(r["value_len"])),
            timestamp=int(r["timestamp"]),
            headers=tuple((span(int(h["key_pos"]), int(h["key_len"])).decode("utf-8", "replace"),
                           span(int(h["value_pos"]), int(h["value_len"]))) for h in heads),
            offset=int(r["offset"]), timestamp_type=type_objects[int(t) + 1]))
    return out


def table_records(data, records, headers, timestamp_types, type_objects):
    """See ``_core.table_records`` (here the records are made at once)."""
    return iter(make_records(data, records, headers, timestamp_types, type_objects))


def batch_records(buf, row, type_objects):
    """See ``_core.batch_records`` (here through the columnar kernels)."""
    rows = np.asarray(row, dtype=BATCH_DTYPE).reshape(-1)
    if len(rows) != 1:
        raise ValueError("batch_records takes one walked batch row")
    pos, size = int(rows["position"][0]), int(rows["size"][0])
    if int(rows["magic"][0]) != 2 or pos < 0 or size < LOG_OVERHEAD + _V2_MIN_SIZE or \
            pos + size > len(buf):
        return None
    (base, _, _, _, _, attributes, delta, base_ts, max_ts, _, _, _,
     count) = _V2_HEADER.unpack_from(buf, pos)
    if attributes & 0x07 or check_batches(buf, rows, False)[0] != 1:
        return None
    try:
        records, headers = decode_v2_records(
            buf, np.array([pos + _V2_HEADER.size], np.int64), np.array([pos + size], np.int64),
            np.array([base], np.int64), np.array([base_ts], np.int64),
            np.array([count], np.int64), np.array([base + delta], np.int64))
    except CorruptRecordError:
        return None
    if attributes & 0x20 and (records["key_len"] < 4).any():
        return None
    kind = 0
    if attributes & 0x08:
        records["timestamp"] = max_ts
        kind = 1
    return iter(make_records(buf, records, headers, np.full(len(records), kind, np.int8),
                             type_objects))


def span_bytes(buf, positions, lengths):
    """See ``_core.span_bytes``."""
    buf = memoryview(buf).cast("B")
    if len(lengths) != len(positions):
        raise ValueError("positions and lengths differ in length")
    out = []
    for i, (p, n) in enumerate(zip(positions, lengths)):
        p, n = int(p), int(n)
        if n < 0:
            out.append(None)
            continue
        if p < 0 or p + n > len(buf):
            raise ValueError(f"span {i} lies outside the buffer")
        out.append(bytes(buf[p:p + n]))
    return out


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


_RESYNC_CHAIN_SIZE = 1 << 20


def _chained(buf, pos, end):
    if end - pos < HEADER_SIZE_UP_TO_MAGIC:
        return True
    return buf[pos + 16] <= 2 and struct.unpack_from(">i", buf, pos + 8)[0] >= LEGACY_OVERHEAD_V0


# ----------------------------------------------------------------------------------------------
# Compaction (twins of _compact.pxi)

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


def zigzag_varint(value):
    """``value`` as Kafka's zigzag varint (also what ``builder`` writes records with)."""
    v = ((value << 1) ^ (value >> 63)) & _M64
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


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
