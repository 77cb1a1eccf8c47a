"""Twin of ``_decode.pxi``: record decoding into columnar arrays, and the header and
record checks a batch passes (``check_batches``)."""
import struct

import numpy as np

from kafkalog._layout import (
    BATCH_DTYPE, RECORD_DTYPE, HEADER_DTYPE, LOG_OVERHEAD, LEGACY_OVERHEAD_V0,
    LEGACY_OVERHEAD_V1,
)
from kafkalog.errors import CorruptRecordError
from kafkalog._common_py import (
    _V2_MIN_SIZE, _MIN_RECORD_SIZE, _V2_HEADER, _INT32_MAX, _INT64_MAX, _INT64_MIN, _Corrupt,
    _int8, _varint,
)

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


def _span(buf, pos, end):
    n, pos = _varint(buf, pos, end, 5)
    if n < 0:
        return pos, -1, pos
    if n > end - pos:
        raise _Corrupt("a key, value or header runs past the end of the record", pos)
    return pos, n, pos + n


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


def _record_head(buf, pos, end, base_offset, max_delta, base_timestamp, prev_delta):
    """See ``_core._record_head``: ``(body_end, attributes, offset_delta, offset, timestamp,
    pos)``; raises ``_Corrupt`` at the record's start."""
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
    except _Corrupt as c:
        raise _Corrupt(c.reason, rec_start) from None
    if offset_delta <= prev_delta:
        raise _Corrupt(_ERRORS["offset_order"], rec_start)
    if offset_delta > max_delta or base_offset + offset_delta > _INT64_MAX:
        raise _Corrupt(_ERRORS["offset_range"], rec_start)
    if not _INT64_MIN <= base_timestamp + ts_delta <= _INT64_MAX:
        raise _Corrupt(_ERRORS["timestamp"], rec_start)
    return (body_end, attributes, offset_delta, base_offset + offset_delta,
            base_timestamp + ts_delta, pos)


def _decode_region(buf, pos, end, base_offset, max_delta, base_timestamp, count, records,
                   headers):
    """See ``_core._decode_region``; ``records`` None: only validate."""
    prev_delta = -1
    for _ in range(count):
        rec_start = pos
        body_end, attributes, prev_delta, offset, timestamp, pos = _record_head(
            buf, pos, end, base_offset, max_delta, base_timestamp, prev_delta)
        try:
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
            records.append((offset, timestamp, key_pos, value_pos, header_start,
                            body_end - rec_start, key_len, value_len, header_count, attributes))
    if pos != end:
        raise _Corrupt("incorrect declared batch size, records still remaining", pos)


def _head_region(buf, pos, end, base_offset, max_delta, base_timestamp, count, offsets,
                 timestamps):
    """See ``_core._head_region``: appends to ``offsets`` and ``timestamps``."""
    prev_delta = -1
    for _ in range(count):
        pos, _attributes, prev_delta, offset, timestamp, _ = _record_head(
            buf, pos, end, base_offset, max_delta, base_timestamp, prev_delta)
        offsets.append(offset)
        timestamps.append(timestamp)
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


def decode_v2_offsets(buf, batches):
    """See ``_core.decode_v2_offsets``."""
    buf = memoryview(buf).cast("B")
    batches = np.asarray(batches, dtype=BATCH_DTYPE)
    _check_rows(buf, batches)
    for i, b in enumerate(batches):
        if b["magic"] != 2 or int(b["attributes"]) & 0x07:
            raise ValueError(f"entry {i} is not an uncompressed v2 batch")
    offsets, timestamps = [], []
    for i, b in enumerate(batches):
        pos, size = int(b["position"]), int(b["size"])
        why = _check_v2_header(buf, pos, size)
        if why is not None:
            exc = CorruptRecordError(_ERR_COUNT if why == "count" else _ERRORS[why],
                                     position=pos)
            exc.region = i
            raise exc
        (base, _, _, _, _, attributes, delta, base_ts, max_ts, _, _, _,
         count) = _V2_HEADER.unpack_from(buf, pos)
        first = len(offsets)
        try:
            _head_region(buf, pos + 61, pos + size, base, delta, base_ts, count, offsets,
                         timestamps)
        except _Corrupt as c:
            exc = CorruptRecordError(c.reason, position=c.position)
            exc.region = i
            raise exc from None
        if attributes & 0x08:                 # LogAppendTime
            timestamps[first:] = [max_ts] * count
    return np.array(offsets, dtype=np.int64), np.array(timestamps, dtype=np.int64)


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
