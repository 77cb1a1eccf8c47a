"""``LogValidator``: the validation of the batches an append brings, apart from the log (Kafka's
``LogValidator`` and ``UnifiedLog.analyzeAndValidateRecords``/``analyzeAndValidateProducerState``).

It checks structure, magic, size, CRC, records and offsets, and for a leader assigns the offsets
and the LogAppendTime in the caller's buffer; then the CreateTime bounds
(``message.timestamp.before/after.max.ms``) and the producers' sequences. The log gives it the
log end offset, the time and its producer state, and writes what it accepts.
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import numpy as np

from kafkalog import codecs
from kafkalog._kernels import (
    APPEND_HAS_COMPRESSED, APPEND_HAS_PRODUCER, prepare_append, walk_batches,
)
from kafkalog._layout import V2_LEADER_EPOCH_AT
from kafkalog.builder import compressor
from kafkalog.config import LONG_MAX
from kafkalog.errors import CorruptRecordError, InvalidOffsetError, InvalidTimestampError
from kafkalog.records import CONTROL_MASK, decode_batches

if TYPE_CHECKING:
    from kafkalog.config import LogConfig
    from kafkalog.producer_state import ProducerStateManager


def with_leader_epoch(data: Any, epoch: int | None) -> Any:
    """A copy of the v2 batches ``data`` (bytes-like) with ``epoch`` in every batch's
    partitionLeaderEpoch, as Kafka's LogValidator sets a leader's: the CRC covers a batch from
    its attributes on, so it stays valid (the batches are validated when appended). ``data``
    itself when ``epoch`` is None or it is not bytes (records, built with the epoch)."""
    if epoch is None or not isinstance(data, (bytes, bytearray, memoryview)):
        return data
    if not -2**31 <= epoch < 2**31:
        raise OverflowError(f"partition leader epoch {epoch} is not an int32")
    data = bytearray(data)
    field = walk_batches(data, validate_crc=False)[0]["position"][:, None] + \
        np.arange(V2_LEADER_EPOCH_AT, V2_LEADER_EPOCH_AT + 4)
    np.frombuffer(data, np.uint8)[field] = np.frombuffer(struct.pack(">i", epoch), np.uint8)
    return data


class LogValidator:
    """Validates appends to the log at ``path`` under ``config`` (made once per config)."""
    __slots__ = ("path", "config", "log_append_time", "max_message_bytes", "before_max_ms",
                 "after_max_ms", "bounded_timestamps")

    def __init__(self, path: str, config: LogConfig) -> None:
        self.path = path
        self.config = config
        self.log_append_time = config["message.timestamp.type"] == "LogAppendTime"
        self.max_message_bytes = config["max.message.bytes"]
        self.before_max_ms = config["message.timestamp.before.max.ms"]
        self.after_max_ms = config["message.timestamp.after.max.ms"]
        # below their unbounded defaults, the bounds are checked record by record
        self.bounded_timestamps = self.before_max_ms != LONG_MAX or \
            self.after_max_ms != LONG_MAX

    def validate(self, data: bytearray, log_end: int, assign_offsets: bool, now: int,
                 producer_state: ProducerStateManager) -> tuple[Any, ...]:
        """Validate ``data`` (whole v2 batches, in a bytearray the caller made for it); as a
        leader (``assign_offsets``) assign offsets from ``log_end`` and, under LogAppendTime,
        the time ``now`` (ms) in place; as a follower, the offsets must not go below
        ``log_end``.

        Returns
        -------
        (n_batches, first_offset, last_offset, max_timestamp, offset_of_max_timestamp,
         records, flags, max_epoch, batches, prepared)
            ``prepare_append``'s summary (``flags``: APPEND_HAS_*; ``max_epoch``: the
            largest partition leader epoch, -1 for none), ``batches`` (their
            ``BATCH_DTYPE`` walk, or None when nothing needed it) and ``prepared``: for a
            leader's append of producer batches, the producer state's ``PreparedAppend``
            (its ``duplicate``: a retried batch already in the log, when nothing is to be
            written; else the caller commits it after the write), else None. A plain tuple:
            it is made once per append.
        """
        log_append = self.log_append_time
        # One kernel pass validates (structure, magic, size, CRC, records, offsets) and,
        # for a leader, assigns offsets and LogAppendTime in place.
        n_batches, first, last, max_ts, offset_of_max, count, flags, epoch = \
            prepare_append(data, log_end if assign_offsets else -1, self.max_message_bytes,
                           now if log_append else -1)
        batches = prepared = None
        if flags & APPEND_HAS_COMPRESSED:
            batches = walk_batches(data, validate_crc=False)[0]
            compressed = batches[(batches["attributes"] & 0x07) != 0]
            table = decode_batches(data, compressed)       # every record must decode
            if (np.diff(table.records["offset"]) <= 0).any():
                raise CorruptRecordError("record offsets within a batch do not increase")
        if assign_offsets and not log_append and self.bounded_timestamps:
            batches = self._validate_timestamps(data, batches, now)
        if assign_offsets and flags & APPEND_HAS_PRODUCER:
            batches = walk_batches(data, validate_crc=False)[0]
            prepared = producer_state.prepare_append(data, batches)
        if not assign_offsets and first < log_end:
            raise InvalidOffsetError(
                f"out of order offsets: first offset {first} is below the log end offset "
                f"{log_end} of {self.path}")
        return (n_batches, first, last, max_ts, offset_of_max, count, flags, epoch, batches,
                prepared)

    def _validate_timestamps(self, data, batches, now):
        """Kafka's ``message.timestamp.before.max.ms`` / ``after.max.ms`` check of every
        record's CreateTime (only when either is set below its unbounded default)."""
        before, after = self.before_max_ms, self.after_max_ms
        if batches is None:
            batches = walk_batches(data, validate_crc=False)[0]
        data_batches = batches[(batches["attributes"] & CONTROL_MASK) == 0]
        stamps = decode_batches(data, data_batches).records["timestamp"]
        early = stamps[now - stamps > before] if before != LONG_MAX else stamps[:0]
        late = stamps[stamps - now > after] if after != LONG_MAX else stamps[:0]
        if len(early) or len(late):
            bad = int(early[0]) if len(early) else int(late[0])
            raise InvalidTimestampError(
                f"timestamp {bad} of a record is out of range: it must be within "
                f"[{now} - message.timestamp.before.max.ms ({before}), {now} + "
                f"message.timestamp.after.max.ms ({after})]")
        return batches


class AppendSettings(NamedTuple):
    """What every append reads of a config, made once per config: its ``LogValidator``, the
    roll and flush bounds, and the codec (and its compressor) of the batches ``Log.append``
    builds (``compression.type``; none for ``producer`` and ``uncompressed``)."""
    validator: LogValidator
    segment_ms: int
    segment_bytes: int
    flush_messages: int
    flush_ms: int
    codec: int
    compress: Callable[[bytes], bytes] | None

    @classmethod
    def of(cls, path: str, config: LogConfig) -> AppendSettings:
        name = config["compression.type"]
        codec = codecs.NONE if name in ("producer", "uncompressed") else codecs.codec_id(name)
        return cls(LogValidator(path, config), config["segment.ms"], config["segment.bytes"],
                   config["flush.messages"], config["flush.ms"], codec, compressor(codec))

    def codec_for(self, compression: str | int | None
                  ) -> tuple[int, Callable[[bytes], bytes] | None]:
        """(codec, compressor) of a batch ``Log.append`` builds with ``compression`` (None:
        the topic's)."""
        if compression is None:
            return self.codec, self.compress
        codec = codecs.codec_id(compression)
        return codec, compressor(codec)
