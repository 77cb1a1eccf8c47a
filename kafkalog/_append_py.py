"""Twin of ``_append.pxi``: append preparation, one-pass validation and offset
assignment; the batch builder."""
import struct

from crc32c import crc32c as _crc32c

from kafkalog._layout import LOG_OVERHEAD, HEADER_SIZE_UP_TO_MAGIC, V2_CRC_START
from kafkalog.errors import CorruptRecordError, RecordTooLargeError
from kafkalog._common_py import (
    _V2_MIN_SIZE, _MIN_RECORD_SIZE, _V2_HEADER, _Corrupt, zigzag_varint as _varint,
)
from kafkalog._decode_py import _decode_region
from kafkalog._record_py import Record

APPEND_HAS_PRODUCER = 1
APPEND_HAS_COMPRESSED = 2


def prepare_append(buf, assign_from, max_batch_size, log_append_time):
    """See ``_core.prepare_append``."""
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


def _bytes_of(value):
    return value if value is None or type(value) is bytes else bytes(memoryview(value))


def _field(value):
    return _varint(-1) if value is None else _varint(len(value)) + value


def _encode_record(record, offset_delta, timestamp_delta):
    headers = [(_bytes_of(key) if not isinstance(key, str) else key.encode("utf-8"),
                _bytes_of(value)) for key, value in record.headers]
    body = [b"\x00", _varint(timestamp_delta), _varint(offset_delta),
            _field(_bytes_of(record.key)), _field(_bytes_of(record.value)),
            _varint(len(headers))]
    for key, value in headers:
        body += (_field(key), _field(value))
    body = b"".join(body)
    return _varint(len(body)) + body


def as_record(r):
    """See ``_core.as_record``."""
    if isinstance(r, Record):
        return r
    if isinstance(r, tuple):
        return Record(*r)
    if isinstance(r, dict):
        return Record(**r)
    raise TypeError(f"expected a Record, a (key, value, ...) tuple or a dict, not {type(r)}")


def build_v2_batch(records, base_offset, now, attributes, producer_id, producer_epoch,
                   base_sequence, partition_leader_epoch, delete_horizon_ms=None,
                   last_offset=None, max_timestamp=None, compress=None):
    """See ``_core.build_v2_batch``."""
    batch = [as_record(r) for r in records]
    offsets = [r.offset if r.offset is not None else base_offset + i
               for i, r in enumerate(batch)]
    timestamps = [r.timestamp if r.timestamp is not None else now for r in batch]
    if delete_horizon_ms is not None:
        base_ts = delete_horizon_ms
    else:
        base_ts = timestamps[0] if timestamps else -1
    body = b"".join(_encode_record(r, offset - base_offset, ts - base_ts)
                    for r, offset, ts in zip(batch, offsets, timestamps))
    if compress is not None:
        body = _bytes_of(compress(body))
    if last_offset is None:
        last_offset = offsets[-1] if offsets else base_offset
    if max_timestamp is None:
        max_timestamp = max(timestamps) if timestamps else -1
    out = bytearray(_V2_HEADER.pack(
        base_offset, 61 - LOG_OVERHEAD + len(body), partition_leader_epoch, 2, 0, attributes,
        last_offset - base_offset, base_ts, max_timestamp, producer_id, producer_epoch,
        base_sequence, len(batch))) + body
    struct.pack_into(">I", out, 17, _crc32c(memoryview(out)[V2_CRC_START:]))
    return out
