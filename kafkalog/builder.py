"""Building record batches (magic 2) and legacy message sets (magic 0/1): the bytes a producer
or a broker writes. ``records`` reads them."""
from __future__ import annotations

import functools
import struct
import time
import zlib
from typing import TYPE_CHECKING, Any, Callable, Iterable, Union

from kafkalog import codecs
from kafkalog._kernels import Record, as_record, build_v2_batch
from kafkalog.records import (
    CONTROL_MASK, DELETE_HORIZON_MASK, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK,
    ControlType, TimestampType,
)

if TYPE_CHECKING:
    from kafkalog._core import Record as _Record

    #: What ``build_batch`` takes for a record: a ``Record``, a ``(key, value, ...)`` tuple of
    #: ``Record``'s positional arguments, or a dict of its keyword arguments.
    RecordLike = Union[_Record, tuple[Any, ...], dict[str, Any]]

_CREATE_TIME, _LOG_APPEND_TIME = TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME


def build_batch(records: Iterable[RecordLike], *, base_offset: int = 0,
                compression: str | int = "none", magic: int = 2, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False,
                timestamp_type: TimestampType | int | str = "create_time",
                partition_leader_epoch: int = -1, is_control: bool = False,
                log_append_time: int | None = None, delete_horizon_ms: int | None = None,
                last_offset: int | None = None, max_timestamp: int | None = None) -> bytes:
    """Build one record batch (magic 2) or message set (magic 0/1); returns bytes.

    Offsets: a record's own ``offset`` if set, else ``base_offset`` + its index. Timestamps: a
    record's ``timestamp`` if set, else now (ms). With ``timestamp_type="log_append_time"`` the
    max timestamp is ``log_append_time`` (default now), as a broker would set it.
    ``last_offset`` / ``max_timestamp`` keep a batch's original header values when records
    were taken out of it (compaction keeps the producer's sequence range that way).
    """
    codec = codecs.codec_id(compression)
    # (the default without the enum's lookup by name: this call is the cost of a small batch)
    ts_type = _CREATE_TIME if timestamp_type == "create_time" else \
        TimestampType.of(timestamp_type)
    now = int(time.time() * 1000)
    if magic != 2:
        if magic in (0, 1):
            return _build_legacy([as_record(r) for r in records], base_offset, codec, magic,
                                 ts_type, now, log_append_time)
        raise ValueError(f"unsupported magic {magic}")
    attributes = codec
    if ts_type == _LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
        if max_timestamp is None:
            max_timestamp = log_append_time if log_append_time is not None else now
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    return bytes(build_v2_batch(records, base_offset, now, attributes, producer_id,
                                producer_epoch, base_sequence, partition_leader_epoch,
                                delete_horizon_ms, last_offset, max_timestamp,
                                compressor(codec)))


def compressor(codec: int) -> Callable[[bytes], bytes] | None:
    """What ``build_v2_batch`` compresses records with for ``codec`` (None: uncompressed)."""
    return None if codec == codecs.NONE else functools.partial(codecs.compress, codec)


def leader_batch(records: list[RecordLike], now: int, codec: int,
                 compress: Callable[[bytes], bytes] | None, producer_id: int,
                 producer_epoch: int, base_sequence: int, transactional: bool,
                 partition_leader_epoch: int | None) -> bytearray:
    """The batch ``Log.append`` makes of ``records`` (CreateTime, ``now`` for records without
    a timestamp, offsets from 0 until the log assigns them, ``partition_leader_epoch`` None
    as 0), as a bytearray the append may rewrite. Raises ValueError when there is no
    record."""
    if not records:
        raise ValueError("nothing to append")
    return build_v2_batch(records, 0, now, codec | TRANSACTIONAL_MASK if transactional
                          else codec, producer_id, producer_epoch, base_sequence,
                          partition_leader_epoch or 0, None, None, None, compress)


def build_control_batch(control_type: ControlType | int | str, *, producer_id: int,
                        producer_epoch: int, coordinator_epoch: int = 0, base_offset: int = 0,
                        timestamp: int | None = None, partition_leader_epoch: int = -1
                        ) -> bytes:
    """An end-transaction marker batch (``control_type`` "commit" / "abort" or a ControlType).

    Returns bytes: a transactional control batch holding one record whose key is
    (version 0, type) and whose value is (version 0, coordinator epoch).
    """
    if isinstance(control_type, str):
        control_type = ControlType[control_type.upper()]
    key = struct.pack(">hh", 0, int(control_type))
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch([Record(key=key, value=value, timestamp=timestamp)],
                       base_offset=base_offset, producer_id=producer_id,
                       producer_epoch=producer_epoch, transactional=True, is_control=True,
                       partition_leader_epoch=partition_leader_epoch)


def _legacy_message(magic, attributes, timestamp, key, value):
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    return struct.pack(">I", zlib.crc32(body)) + body


def _build_legacy(records, base_offset, codec, magic, ts_type, now, log_append_time):
    ts_attr = TIMESTAMP_TYPE_MASK if (magic == 1 and ts_type == TimestampType.LOG_APPEND_TIME) \
        else 0
    timestamps = [(r.timestamp if r.timestamp is not None else now) for r in records]
    offsets = [r.offset if r.offset is not None else base_offset + i
               for i, r in enumerate(records)]
    if codec == codecs.NONE:
        out = []
        for r, off, ts in zip(records, offsets, timestamps):
            msg = _legacy_message(magic, ts_attr, ts, r.key, r.value)
            out.append(struct.pack(">qi", off, len(msg)) + msg)
        return b"".join(out)
    # A wrapper: inner offsets relative (v1) or absolute (v0); the wrapper carries the last one.
    inner = []
    for i, (r, off, ts) in enumerate(zip(records, offsets, timestamps)):
        msg = _legacy_message(magic, 0, ts, r.key, r.value)
        inner.append(struct.pack(">qi", i if magic == 1 else off, len(msg)) + msg)
    wrapper_ts = max(timestamps) if timestamps else -1
    if ts_attr:
        wrapper_ts = log_append_time if log_append_time is not None else now
    msg = _legacy_message(magic, codec | ts_attr, wrapper_ts, None,
                          codecs.compress(codec, b"".join(inner)))
    return struct.pack(">qi", offsets[-1], len(msg)) + msg
