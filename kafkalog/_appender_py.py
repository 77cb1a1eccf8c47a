"""Pure-Python twin of ``_appender.pxi``: ``ActiveSegmentAppender``."""
import os
import struct

from kafkalog._append_py import build_v2_batch, prepare_append
from kafkalog._record_py import Record
from kafkalog.errors import KafkaLogError

_INT32_MAX = 2**31 - 1
_INT64 = struct.Struct(">q")
_HEADER = struct.Struct(">qi")
_ATTRIBUTES = struct.Struct(">h")
_B_MAX_TIMESTAMP = 35


class ActiveSegmentAppender:
    """See ``_core.ActiveSegmentAppender``."""

    def __init__(self, config, segment, file, desc, log_end, bytes_since_index,
                 index_interval, max_ts, offset_of_max_ts, rolling_ts, roll_ms, segment_bytes,
                 max_message_bytes, unflushed, flush_messages, last_flush_ms, flush_ms,
                 latest_epoch, replicated, lock, time_fn, index_entry, offset_index,
                 time_index, metadata_type, timestamp_offset_type, info_type):
        self.config, self.segment, self.file, self.desc = config, segment, file, desc
        self.fd = desc.fd
        self.position = file.size
        self.base_offset = segment.base_offset
        self.log_end = log_end
        self.bytes_since_index = bytes_since_index
        self.index_interval = index_interval
        self.max_ts = max_ts
        self.offset_of_max_ts = offset_of_max_ts
        self.rolling_ts = rolling_ts
        self.roll_ms = roll_ms
        self.segment_bytes = segment_bytes
        self.max_message_bytes = max_message_bytes
        self.unflushed = unflushed
        self.flush_messages = flush_messages
        self.last_flush_ms = last_flush_ms
        self.flush_ms = flush_ms
        self.latest_epoch = latest_epoch
        self.replicated = replicated
        self.lock = lock
        self.time_fn = time_fn
        self.index_entry = index_entry
        self.metadata_type = metadata_type
        self.timestamp_offset_type = timestamp_offset_type
        self.info_type = info_type
        self.armed = True
        self.running = False

    def append(self, log, local, records, partition_leader_epoch):
        if not -2**31 <= partition_leader_epoch < 2**31:
            raise OverflowError(f"partition leader epoch {partition_leader_epoch} is not an "
                                f"int32")
        if not self.armed:
            return None
        kind = type(records)
        if kind is list:
            if partition_leader_epoch > self.latest_epoch:
                return None
        elif kind is not bytes and kind is not bytearray:
            return None
        with self.lock:
            if local.appender is not self or not self.armed or self.running or \
                    log.config is not self.config or local.failed is not None:
                return None
            self.armed = False
            self.running = True
            try:
                if kind is list:
                    return self._append_records(log, local, records, partition_leader_epoch)
                return self._append_batch(log, local, records)
            finally:
                self.running = False

    def _append_records(self, log, local, records, partition_leader_epoch):
        now = int(self.time_fn() * 1000)
        n = len(records)
        if not n or any(type(r) is not Record or r.offset is not None for r in records):
            return None
        if self._flush_due(n, now):
            return None
        data = build_v2_batch(records, self.log_end, now, 0, -1, -1, -1, partition_leader_epoch)
        last = self.log_end + n - 1
        return self._write(log, local, data, last, n,
                           _INT64.unpack_from(data, _B_MAX_TIMESTAMP)[0], last)

    def _append_batch(self, log, local, data):
        if len(data) < 61 or _HEADER.unpack_from(data)[1] != len(data) - 12 or \
                _ATTRIBUTES.unpack_from(data, 21)[0] & 0x07 or \
                _INT64.unpack_from(data, 43)[0] >= 0:        # (the producer id)
            return None
        data = bytearray(data)
        try:
            (batches, _, last, max_ts, offset_of_max_ts, count, flags,
             epoch) = prepare_append(data, self.log_end, self.max_message_bytes, -1)
        except KafkaLogError:
            return None
        if batches != 1 or flags or epoch > self.latest_epoch:
            return None
        if self._flush_due(count, int(self.time_fn() * 1000)):
            return None
        return self._write(log, local, data, last, count, max_ts, offset_of_max_ts)

    def _flush_due(self, count, now):
        return self.unflushed + count >= self.flush_messages or \
            now - self.last_flush_ms >= self.flush_ms

    def _write(self, log, local, data, last, count, max_ts, offset_of_max_ts):
        size = len(data)
        position = self.position
        if size > self.max_message_bytes or position > self.segment_bytes - size or \
                max_ts - self.rolling_ts > self.roll_ms or last - self.base_offset > _INT32_MAX:
            return None
        try:
            _write_at(self.fd, data, position)
            return self._appended(log, local, last, count, size, max_ts, offset_of_max_ts,
                                  position)
        except OSError as e:
            raise local.offline("append", e) from e

    def _appended(self, log, local, last, count, size, max_ts, offset_of_max_ts, position):
        first = self.log_end
        self.position = position + size
        self.log_end = last + 1
        self.unflushed += count
        self.file.size = self.position
        if max_ts > self.max_ts:
            self.max_ts, self.offset_of_max_ts = max_ts, offset_of_max_ts
            self.segment.max_timestamp_and_offset = self.timestamp_offset_type(
                max_ts, offset_of_max_ts)
        if self.bytes_since_index > self.index_interval:
            # (the compiled kernel writes the entries itself where it can: the same result)
            rearm = self.index_entry(last, position, size)
            self.bytes_since_index = size
        else:
            rearm = True
            self.bytes_since_index += size
        self.segment.bytes_since_last_index_entry = self.bytes_since_index
        local.log_end_metadata = self.metadata_type(self.log_end, self.base_offset,
                                                    self.position)
        if not self.replicated:
            log.high_watermark = self.log_end
        local.unflushed_messages = self.unflushed
        info = self.info_type(first, last, max_ts, offset_of_max_ts, -1, size, count)
        self.armed = rearm
        return info


def _write_at(fd, data, position):
    """See ``_appender.pxi``'s ``_write_at``."""
    view = memoryview(data)
    done = 0
    try:
        while done < len(data):
            done += os.pwrite(fd, view[done:], position + done)
    except OSError:
        try:
            os.ftruncate(fd, position)
        except OSError:
            pass
        raise
