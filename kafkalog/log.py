"""``Log``: one partition's segments, loaded, recovered, appended to, read and retained as
Kafka's UnifiedLog / LogLoader do (FORMAT.md "Log load" and "Retention")."""
import bisect
import collections
import contextlib
import os
import re
import threading
import time

import numpy as np

from kafkalog import checkpoint
from kafkalog._kernels import (
    APPEND_HAS_COMPRESSED, APPEND_HAS_PRODUCER, prepare_append, walk_batches,
)
from kafkalog.config import LogConfig
from kafkalog.errors import (
    CorruptIndexError, CorruptRecordError, IndexOffsetOverflowError, InvalidOffsetError,
    KafkaLogError, LogDirFailureError, OffsetOutOfRangeError, OutOfOrderSequenceError,
)
from kafkalog.leader_epoch import LeaderEpochCache
from kafkalog.producer_state import ProducerStateManager, list_snapshots
from kafkalog.records import (
    CONTROL_MASK, TRANSACTIONAL_MASK, RecordBatch, build_batch, decode_batches,
)
from kafkalog.retention import KAFKA_POLICIES, LogStartOffsetRetention
from kafkalog.scheduler import default_scheduler
from kafkalog.segment import (
    CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX, FetchDataInfo, LogOffsetMetadata, LogSegment, control_of,
)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
PARTITION_METADATA = "partition.metadata"
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
ISOLATIONS = ("log_end", "high_watermark", "committed")
_FILE_OFFSET = re.compile(r"^(\d{20})\.")
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

LogOffsetSnapshot = collections.namedtuple(
    "LogOffsetSnapshot", "log_start_offset log_end_offset high_watermark last_stable_offset "
                         "recovery_point")

LogAppendInfo = collections.namedtuple(
    "LogAppendInfo", "first_offset last_offset max_timestamp offset_of_max_timestamp "
                     "log_append_time valid_bytes records_count")


def parse_topic_partition(name):
    """(topic, partition) of a partition directory name ``topic-partition``."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise KafkaLogError(f"{name!r} is not a topic-partition directory name")
    return topic, int(partition)


def _offset_from_file(name):
    m = _FILE_OFFSET.match(name)
    return int(m.group(1)) if m else None


class _Segments:
    """An immutable sorted view of the segments: each change builds a new one, so a reader
    holding one sees a consistent list while appends, rolls and deletions go on."""
    __slots__ = ("bases", "segments")

    def __init__(self, segments):
        self.segments = tuple(sorted(segments, key=lambda s: s.base_offset))
        self.bases = [s.base_offset for s in self.segments]

    def floor(self, offset):
        i = bisect.bisect_right(self.bases, offset) - 1
        return (i, self.segments[i]) if i >= 0 else (-1, None)

    def higher(self, base_offset):
        i = bisect.bisect_right(self.bases, base_offset)
        return self.segments[i] if i < len(self.segments) else None

    def replace(self, remove=(), add=()):
        gone = {id(s) for s in remove}
        return _Segments([s for s in self.segments if id(s) not in gone] + list(add))


class Log:
    """A partition directory as Kafka's storage engine sees it.

    Open with ``Log.open(path, config)``. Appends are serialised by a lock; reads take the
    current immutable segment list and never wait for appends or deletions.
    """

    def __init__(self, path, config, segments, *, log_start_offset, recovery_point,
                 high_watermark, producer_state, leader_epochs, replicated, read_only,
                 scheduler, time_fn):
        self.path = path
        self.dir_name = os.path.basename(path)
        self.config = config
        self._segments = _Segments(segments)
        self._lock = threading.RLock()
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._producer_state = producer_state
        self._leader_epochs = leader_epochs
        self._retention_policies = []
        self.first_dirty_offset = log_start_offset    # where the next compaction starts
        self._replicated = replicated
        self.read_only = read_only
        self._scheduler = scheduler
        self._time_fn = time_fn
        self._log_end_offset = self.active_segment.read_next_offset()
        self._high_watermark = self._log_end_offset if high_watermark is None else \
            min(max(high_watermark, log_start_offset), self._log_end_offset)
        self._unflushed_messages = 0
        self._last_flush_ms = self._now_ms()
        self._closed = False
        self._failed = None

    # ------------------------------------------------------------------------------ open
    @classmethod
    def open(cls, path, config=None, *, recovery_point=None, log_start_offset=None,
             clean_shutdown=None, high_watermark=None, replicated=False, read_only=False,
             scheduler=None, time_fn=time.time, topic_id=None):
        """Load a partition directory (created when missing) as Kafka's LogLoader does.

        Where not given, the recovery point, log start offset, high watermark and whether the
        broker shut down cleanly are read from the parent log dir's checkpoint files and
        clean-shutdown marker, as a broker would; with none there, the whole log is recovered.
        ``read_only`` opens without recovery or any write (for backups and inspection).
        ``replicated=False`` (one copy, the embedded case) moves the high watermark with
        every append; with ``True`` it moves only through ``update_high_watermark``.
        ``topic_id`` (Kafka's base64 topic id) is written to ``partition.metadata``; a different
        id already there is an error.
        """
        config = config if isinstance(config, LogConfig) else LogConfig(config)
        path = os.path.abspath(os.fspath(path))
        if not os.path.isdir(path) and read_only:
            raise FileNotFoundError(path)
        try:
            return cls._open(path, config, recovery_point, log_start_offset, clean_shutdown,
                             high_watermark, replicated, read_only, scheduler, time_fn,
                             topic_id)
        except OSError as e:
            raise LogDirFailureError(f"loading {path} failed: {e}", errno=e.errno) from e

    @classmethod
    def _open(cls, path, config, recovery_point, log_start_offset, clean_shutdown,
              high_watermark, replicated, read_only, scheduler, time_fn, topic_id):
        if not os.path.isdir(path):
            os.makedirs(path)
            checkpoint.fsync_dir(os.path.dirname(path))
        parent = os.path.dirname(path)
        key = _checkpoint_key(os.path.basename(path))
        if clean_shutdown is None:
            clean_shutdown = os.path.exists(os.path.join(parent, CLEAN_SHUTDOWN_FILE))
        if recovery_point is None:
            recovery_point = _read_checkpoint(parent, RECOVERY_POINT_CHECKPOINT, key, 0)
        if log_start_offset is None:
            log_start_offset = _read_checkpoint(parent, LOG_START_OFFSET_CHECKPOINT, key, 0)
        if high_watermark is None and replicated:
            high_watermark = _read_checkpoint(parent, REPLICATION_OFFSET_CHECKPOINT, key, 0)
        scheduler = scheduler or default_scheduler()
        loader = _LogLoader(path, config, recovery_point, log_start_offset,
                            clean_shutdown or read_only, read_only, scheduler, time_fn)
        segments, log_start_offset, recovery_point, producer_state, leader_epochs = \
            loader.load()
        log = cls(path, config, segments, log_start_offset=log_start_offset,
                  recovery_point=recovery_point, high_watermark=high_watermark,
                  producer_state=producer_state, leader_epochs=leader_epochs,
                  replicated=replicated, read_only=read_only, scheduler=scheduler,
                  time_fn=time_fn)
        log.first_dirty_offset = max(log_start_offset,
                                     _read_checkpoint(parent, CLEANER_OFFSET_CHECKPOINT, key, 0))
        if topic_id is not None:
            log.assign_topic_id(topic_id)
        return log

    # ------------------------------------------------------------------------------ state
    def _now_ms(self):
        return int(self._time_fn() * 1000)

    @property
    def failed(self):
        """The OSError that took the log offline, or None."""
        return self._failed

    @property
    def segments(self):
        """The segments, oldest first (a snapshot: later changes do not alter it)."""
        return list(self._segments.segments)

    @property
    def active_segment(self):
        return self._segments.segments[-1]

    @property
    def log_start_offset(self):
        return self._log_start_offset

    @property
    def log_end_offset(self):
        return self._log_end_offset

    @property
    def high_watermark(self):
        return self._high_watermark

    @property
    def recovery_point(self):
        return self._recovery_point

    @property
    def last_stable_offset(self):
        """The first offset of the earliest open transaction, else the high watermark."""
        first = self._producer_state.first_unstable_offset()
        return self._high_watermark if first is None else min(first, self._high_watermark)

    @property
    def size(self):
        """Bytes in all ``.log`` files."""
        return sum(s.size for s in self._segments.segments)

    @property
    def topic_partition(self):
        return parse_topic_partition(self.dir_name)

    @property
    def leader_epoch_cache(self):
        """The partition's ``LeaderEpochCache`` (kept in ``leader-epoch-checkpoint``)."""
        return self._leader_epochs

    def end_offset_for_epoch(self, epoch):
        """(epoch, end offset) as Kafka answers OffsetsForLeaderEpoch."""
        return self._leader_epochs.end_offset_for(epoch, self._log_end_offset)

    @property
    def topic_id(self):
        """The topic id in ``partition.metadata``, or None."""
        return read_partition_metadata(self.path)

    def assign_topic_id(self, topic_id):
        """Write ``partition.metadata`` (as Kafka does); a different id there is an error."""
        existing = read_partition_metadata(self.path)
        if existing is not None and existing != topic_id:
            raise KafkaLogError(f"{self.path} belongs to topic id {existing}, not {topic_id}")
        if existing is None:
            if self.read_only:
                raise KafkaLogError(f"log {self.path} was opened read-only")
            checkpoint.write_atomically(os.path.join(self.path, PARTITION_METADATA),
                                        f"version: 0\ntopic_id: {topic_id}")

    def update_high_watermark(self, offset):
        """Set the high watermark (clamped to [log start offset, log end offset])."""
        with self._lock:
            self._high_watermark = min(max(offset, self._log_start_offset), self._log_end_offset)
            return self._high_watermark

    @contextlib.contextmanager
    def _io(self, what):
        """Turn a failed file operation into LogDirFailureError and take the log offline."""
        try:
            yield
        except OSError as e:
            self._failed = e
            raise LogDirFailureError(f"{what} failed for {self.path}: {e}; the log is offline "
                                     f"until reopened", errno=e.errno) from e

    def _check_writable(self):
        if self._closed:
            raise KafkaLogError(f"log {self.path} is closed")
        if self.read_only:
            raise KafkaLogError(f"log {self.path} was opened read-only")
        if self._failed is not None:
            raise KafkaLogError(f"log {self.path} is offline after an I/O error "
                                f"({self._failed}); reopen it") from self._failed

    # ------------------------------------------------------------------------------ append
    def append(self, records_or_batch_bytes, *, compression="none", producer_id=-1,
               producer_epoch=-1, base_sequence=-1, transactional=False,
               partition_leader_epoch=0):
        """Append as leader: assign offsets from the log end offset.

        Takes ``Record`` objects (built into one batch here) or the bytes of whole v2 batches
        (validated: structure, CRC, magic, size, record decoding). Applies
        ``message.timestamp.type``. Returns a ``LogAppendInfo``.
        """
        if isinstance(records_or_batch_bytes, (bytes, bytearray, memoryview)):
            data = bytes(records_or_batch_bytes)
        else:
            records = list(records_or_batch_bytes)
            if not records:
                raise ValueError("nothing to append")
            data = build_batch(records, compression=compression, producer_id=producer_id,
                               producer_epoch=producer_epoch, base_sequence=base_sequence,
                               transactional=transactional,
                               partition_leader_epoch=partition_leader_epoch)
        return self._append(data, assign_offsets=True)

    def append_as_follower(self, batch_bytes):
        """Append batches that carry their offsets (replication, copying): offsets must not
        go below the log end offset."""
        return self._append(bytes(batch_bytes), assign_offsets=False)

    def _append(self, data, assign_offsets):
        data = bytearray(data)
        with self._lock:
            self._check_writable()
            now = self._now_ms()
            log_append = self.config["message.timestamp.type"] == "LogAppendTime"
            # One kernel pass validates (structure, magic, size, CRC, records, offsets) and,
            # for a leader, assigns offsets and LogAppendTime in place.
            n_batches, first, last, max_ts, offset_of_max, count, flags = prepare_append(
                data, self._log_end_offset if assign_offsets else -1,
                self.config["max.message.bytes"], now if log_append else -1)
            batches = None
            if flags & APPEND_HAS_COMPRESSED:
                batches = walk_batches(data, validate_crc=False)[0]
                compressed = batches[(batches["attributes"] & 0x07) != 0]
                table = decode_batches(data, compressed)       # every record must decode
                if (np.diff(table.records["offset"]) <= 0).any():
                    raise CorruptRecordError("record offsets within a batch do not increase")
            if assign_offsets and flags & APPEND_HAS_PRODUCER:
                batches = walk_batches(data, validate_crc=False)[0]
                duplicate = self._validate_producers(batches)
                if duplicate is not None:
                    # A retried batch already in the log: answer with its offsets.
                    return LogAppendInfo(duplicate.first_offset, duplicate.last_offset,
                                         duplicate.timestamp, duplicate.last_offset, -1, 0, 0)
            if not assign_offsets and first < self._log_end_offset:
                raise InvalidOffsetError(
                    f"out of order offsets: first offset {first} is below the log end offset "
                    f"{self._log_end_offset} of {self.path}")
            with self._io("append"):
                segment = self._maybe_roll(len(data), max_ts, first, last, now)
                segment.append(last, max_ts, offset_of_max, data)
                if flags & APPEND_HAS_PRODUCER:
                    if batches is None:
                        batches = walk_batches(data, validate_crc=False)[0]
                    self._update_producer_state(data, batches, segment)
                self._update_leader_epochs(data, batches, n_batches, first)
            self._producer_state.map_end_offset = last + 1
            self._log_end_offset = last + 1
            if not self._replicated:
                self._high_watermark = self._log_end_offset
            self._unflushed_messages += count
            self._maybe_flush(now)
            return LogAppendInfo(first, last, max_ts, offset_of_max,
                                 now if log_append else -1, len(data), count)

    def _validate_producers(self, batches):
        """Kafka's producer checks on a leader append; the first batch of each producer is
        checked against the state, later ones of the same append against the one before."""
        seen = {}
        for row in batches[batches["producer_id"] >= 0]:
            pid = int(row["producer_id"])
            base_seq = int(row["base_sequence"])
            if pid not in seen:
                duplicate = self._producer_state.validate(row)
                if duplicate is not None:
                    return duplicate
            elif base_seq >= 0 and seen[pid] >= 0 and base_seq != seen[pid] + 1:
                raise OutOfOrderSequenceError(
                    f"out of order sequence number for producer {pid} within one append: "
                    f"{base_seq} after {seen[pid]}")
            seen[pid] = base_seq + int(row["last_offset"] - row["base_offset"]) \
                if base_seq >= 0 else -1
        return None

    def remove_expired_producers(self, expiration_ms=86_400_000, now_ms=None):
        """Forget idempotent producers idle for ``expiration_ms`` (Kafka's
        ``producer.id.expiration.ms``) that have no open transaction."""
        with self._lock:
            self._producer_state.remove_expired_producers(
                self._now_ms() if now_ms is None else now_ms, expiration_ms)

    def _update_leader_epochs(self, data, batches, n_batches, first):
        if n_batches == 1:      # the common case, without walking the batch again
            epoch = int.from_bytes(data[12:16], "big", signed=True)
            latest = self._leader_epochs.latest_epoch()
            if epoch >= 0 and (latest is None or epoch > latest):
                self._leader_epochs.assign(epoch, first)
            return
        if batches is None:
            batches = walk_batches(data, validate_crc=False)[0]
        self._leader_epochs.assign_from_batches(batches)

    def _update_producer_state(self, data, batches, segment):
        with_pid = batches[batches["producer_id"] >= 0]
        for row in with_pid:
            control_type, coordinator_epoch = None, -1
            if int(row["attributes"]) & CONTROL_MASK:
                control_type, coordinator_epoch = control_of(bytes(data), row)
            completed = self._producer_state.update(row, control_type, coordinator_epoch)
            if completed is not None and completed.is_aborted:
                segment.txn_index.append(self._producer_state.aborted_txn(completed))
        self._producer_state.map_end_offset = int(batches["last_offset"][-1]) + 1

    def _maybe_roll(self, messages_size, max_timestamp, first_offset, max_offset, now):
        segment = self.active_segment
        if segment.should_roll(self.config["segment.ms"], self.config["segment.bytes"],
                               max_timestamp, max_offset, messages_size, now):
            # Kafka names the new segment after the first offset the append will take.
            segment = self._roll(max(first_offset, self._log_end_offset))
        elif not segment.can_convert_to_relative_offset(max_offset):
            segment = self._roll(self._log_end_offset)
        return segment

    def roll(self):
        """Start a new active segment at the log end offset; returns it."""
        with self._lock:
            self._check_writable()
            with self._io("roll"):
                return self._roll(self._log_end_offset)

    def _roll(self, new_offset):
        old = self.active_segment
        if old.base_offset == new_offset and old.size == 0:
            return old                     # rolling an empty segment would only rename it
        old.on_becoming_inactive_segment()
        old.flush()
        segment = LogSegment(self.path, new_offset, self.config, time_fn=self._time_fn)
        segment.resize_indexes(self.config.max_index_size)
        checkpoint.fsync_dir(self.path)
        self._producer_state.take_snapshot(new_offset)
        self._segments = self._segments.replace(add=[segment])
        # Everything below the new segment is flushed now (older segments at their own roll).
        self._recovery_point = max(self._recovery_point, new_offset)
        return segment

    # ------------------------------------------------------------------------------ flush
    def _maybe_flush(self, now):
        if self._unflushed_messages >= self.config["flush.messages"] or \
                now - self._last_flush_ms >= self.config["flush.ms"]:
            self.flush()

    def flush(self):
        """fsync every segment holding unflushed data; the recovery point becomes the log end
        offset."""
        with self._lock:
            if self.read_only or self._closed:
                return
            self._check_writable()
            with self._io("flush"):
                for segment in self._segments.segments:
                    if segment.base_offset >= self._segment_base_for(self._recovery_point):
                        segment.flush()
            self._recovery_point = self._log_end_offset
            self._unflushed_messages = 0
            self._last_flush_ms = self._now_ms()

    def _segment_base_for(self, offset):
        _, seg = self._segments.floor(offset)
        return seg.base_offset if seg is not None else 0

    # ------------------------------------------------------------------------------ read
    def _max_offset(self, isolation):
        if isolation == "log_end":
            return self._log_end_offset
        if isolation == "high_watermark":
            return self._high_watermark
        if isolation == "committed":
            return self.last_stable_offset
        raise ValueError(f"isolation must be one of {ISOLATIONS}, not {isolation!r}")

    def read(self, start_offset, max_bytes=1048576, isolation="log_end", min_one_message=True):
        """Batches from the first holding ``start_offset``, up to ``max_bytes``.

        Returns a FetchDataInfo (``records`` = batch bytes; ``aborted_transactions`` for
        ``isolation="committed"``). Raises OffsetOutOfRangeError for an offset below the log
        start offset or above the log end offset.
        """
        segments = self._segments
        max_offset = self._max_offset(isolation)
        log_end = self._log_end_offset
        if start_offset < self._log_start_offset or start_offset > log_end:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range for {self.dir_name}: log start offset "
                f"{self._log_start_offset}, log end offset {log_end}")
        empty = FetchDataInfo(LogOffsetMetadata(start_offset, -1, -1), b"",
                              aborted_transactions=[] if isolation == "committed" else None)
        if start_offset >= max_offset:
            return empty
        i, segment = segments.floor(start_offset)
        while segment is not None:
            if segment.base_offset >= max_offset:
                break
            max_position = segment.size
            nxt = segments.segments[i + 1] if i + 1 < len(segments.segments) else None
            if nxt is None or nxt.base_offset > max_offset:
                found = segment.translate_offset(max_offset)
                if found is not None:
                    max_position = found[0]
            info = segment.read(start_offset, max_bytes, max_position, min_one_message)
            if info is not None and (info.records or info.first_entry_incomplete):
                if isolation == "committed":
                    info.aborted_transactions = self._aborted_transactions(
                        start_offset, segment, info, segments)
                return info
            i += 1
            segment = nxt
        return empty

    def _aborted_transactions(self, start_offset, segment, info, segments):
        meta = info.fetch_offset_metadata
        upper = segment.fetch_upper_bound_offset(meta.relative_position_in_segment,
                                                 len(info.records))
        if upper is None:
            nxt = segments.higher(segment.base_offset)
            upper = nxt.base_offset if nxt is not None else self._log_end_offset
        found = []
        seg = segment
        while seg is not None:
            result = seg.collect_aborted_txns(start_offset, upper)
            found.extend(result.aborted_transactions)
            if result.is_complete:
                break
            seg = segments.higher(seg.base_offset)
        return found

    def records(self, start_offset=None, end_offset=None, isolation="log_end",
                include_control=False):
        """Iterate ``Record`` objects in offset order over [start_offset, end_offset).

        Control records (transaction markers) are left out, as a consumer leaves them out,
        unless ``include_control``. With ``isolation="committed"`` the records of aborted
        transactions are left out too, as a read_committed consumer does.
        """
        for table in self.record_tables(start_offset, end_offset, isolation, include_control):
            yield from table.to_records()

    def record_tables(self, start_offset=None, end_offset=None, isolation="log_end",
                      include_control=False, max_bytes=16 * 1024 * 1024):
        """Like ``records`` but yields columnar ``RecordTable`` chunks."""
        offset = self._log_start_offset if start_offset is None else start_offset
        limit = self._max_offset(isolation)
        end = limit if end_offset is None else min(end_offset, limit)
        aborted = _AbortedFilter() if isolation == "committed" else None
        while offset < end:
            info = self.read(offset, max_bytes, isolation)
            if not info.records:
                break
            data = info.records
            batches, _, _, _ = walk_batches(data, validate_crc=False)
            if len(batches) == 0:
                break
            table = decode_batches(data, batches)
            keep = (table.records["offset"] >= offset) & (table.records["offset"] < end)
            if not include_control:
                keep &= (batches["attributes"][table.batch] & CONTROL_MASK) == 0
            if aborted is not None:
                aborted.add(info.aborted_transactions)
                keep &= aborted.keep_mask(batches, table)
            next_offset = int(batches["last_offset"][-1]) + 1
            if keep.any():
                yield table.slice(keep)
            offset = next_offset

    def offset_for_timestamp(self, timestamp):
        """(offset, timestamp) of the first record with a timestamp >= ``timestamp``; -2 gives
        the log start offset, -1 the log end offset. None when no record is that late."""
        if timestamp == EARLIEST_TIMESTAMP:
            return (self._log_start_offset, -1)
        if timestamp == LATEST_TIMESTAMP:
            return (self._log_end_offset, -1)
        for segment in self._segments.segments:
            if segment.largest_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    return (found.offset, found.timestamp)
        return None

    # ------------------------------------------------------------------------------ truncate
    def truncate_to(self, offset):
        """Remove every record at or above ``offset`` (a follower's truncation)."""
        with self._lock:
            self._check_writable()
            if offset < 0:
                raise InvalidOffsetError(f"cannot truncate {self.path} to a negative offset")
            if offset >= self._log_end_offset:
                return False
            if offset < self.active_segment.base_offset and offset <= \
                    self._segments.segments[0].base_offset:
                self._truncate_fully_and_start_at(offset)
                return True
            with self._io("truncate"):
                doomed = [s for s in self._segments.segments if s.base_offset > offset]
                self._segments = self._segments.replace(remove=doomed)
                self._delete_segment_files(doomed)
                self.active_segment.truncate_to(offset)
                self._log_end_offset = self.active_segment.read_next_offset()
                self._after_truncation(offset)
            return True

    def truncate_fully_and_start_at(self, new_offset):
        """Delete every segment and start an empty log at ``new_offset``."""
        with self._lock:
            self._check_writable()
            self._truncate_fully_and_start_at(new_offset)

    def _truncate_fully_and_start_at(self, new_offset):
        doomed = list(self._segments.segments)
        fresh = LogSegment(self.path, new_offset, self.config, time_fn=self._time_fn) \
            if new_offset not in self._segments.bases else None
        for s in doomed:
            if s.base_offset == new_offset:
                s.truncate_to(new_offset)
                fresh = s
        self._segments = _Segments([fresh])
        self._delete_segment_files([s for s in doomed if s is not fresh])
        self._log_end_offset = new_offset
        self._log_start_offset = new_offset
        self._leader_epochs.clear()
        self._producer_state.clear(new_offset)
        self._producer_state.delete_snapshots_above(-1)
        self._after_truncation(new_offset)

    def _after_truncation(self, offset):
        self._leader_epochs.truncate_from_end(self._log_end_offset)
        self._recovery_point = min(self._recovery_point, self._log_end_offset)
        self._high_watermark = min(self._high_watermark, self._log_end_offset)
        self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
        self._producer_state.delete_snapshots_above(self._log_end_offset)
        self._producer_state = _rebuild_producer_state(self.path, self._segments.segments,
                                                       self._log_end_offset)

    # ------------------------------------------------------------------------------ retention
    def delete_old_segments(self, now_ms=None):
        """Apply retention: Kafka's policies (log start offset; with ``cleanup.policy``
        delete, ``retention.bytes`` and ``retention.ms``) and any added with
        ``add_retention_policy``; returns how many segments were deleted."""
        with self._lock:
            self._check_writable()
            now_ms = self._now_ms() if now_ms is None else now_ms
            with self._io("retention"):
                return self._apply_retention(now_ms)

    def _apply_retention(self, now_ms):
        deleted = 0
        for policy in KAFKA_POLICIES + tuple(self._retention_policies):
            if getattr(policy, "requires_delete_policy", True) and \
                    not self.config.delete_enabled:
                continue
            make = policy.predicate if hasattr(policy, "predicate") else policy
            predicate = make(self, now_ms)
            if predicate is not None:
                deleted += self._delete_by(predicate)
        return deleted

    def compact(self, now_ms=None, memory_budget=None):
        """One cleaner pass (``cleanup.policy`` must include compact); returns the cleaner's
        ``CleanerStats``. See ``kafkalog.cleaner``."""
        from kafkalog import cleaner
        if not self.config.compact_enabled:
            raise KafkaLogError(f"{self.path}: cleanup.policy {self.config.cleanup_policy!r} "
                                f"does not include compact")
        self._check_writable()
        with self._io("compaction"):
            return cleaner.clean(self, now_ms, memory_budget or cleaner.DEFAULT_MAP_MEMORY)

    def _swap_in_cleaned(self, group, data):
        """Replace ``group`` (consecutive segments) by one segment holding ``data``, through
        ``.cleaned`` -> ``.swap`` -> final names (each step survives a crash)."""
        with self._lock:
            base = group[0].base_offset
            cleaned = os.path.join(self.path, f"{base:020d}{LOG_SUFFIX}{CLEANED_SUFFIX}")
            with open(cleaned, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            piece = LogSegment(self.path, base, self.config, file_suffix=CLEANED_SUFFIX,
                               time_fn=self._time_fn)
            piece.recover(ProducerStateManager(self.path))
            piece.txn_index.reset()
            for old in group:          # the aborted transactions stay known to readers
                for txn in old.txn_index.all_aborted_txns():
                    piece.txn_index.append(txn)
            piece.close()
            for path in piece.files():
                if os.path.exists(path):
                    os.replace(path, path[:-len(CLEANED_SUFFIX)] + SWAP_SUFFIX)
            checkpoint.fsync_dir(self.path)
            self._segments = self._segments.replace(remove=group)
            self._delete_segment_files(group)
            for path in piece.files():
                swap = path[:-len(CLEANED_SUFFIX)] + SWAP_SUFFIX
                if os.path.exists(swap):
                    os.replace(swap, swap[:-len(SWAP_SUFFIX)])
            checkpoint.fsync_dir(self.path)
            fresh = LogSegment(self.path, base, self.config, time_fn=self._time_fn)
            self._segments = self._segments.replace(add=[fresh])

    def add_retention_policy(self, policy):
        """Add a ``RetentionPolicy`` (or a function ``f(log, now_ms)`` returning a predicate of
        ``(segment, next_segment)`` or None) to those ``delete_old_segments`` applies."""
        self._retention_policies.append(policy)

    def _delete_by(self, predicate):
        segments = self._segments.segments
        deletable = []
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else self._log_end_offset
            last_and_empty = nxt is None and segment.size == 0
            if self._high_watermark >= upper and not last_and_empty and predicate(segment, nxt):
                deletable.append(segment)
            else:
                break
        if not deletable:
            return 0
        if len(deletable) == len(segments):
            self._roll(self._log_end_offset)
        self._segments = self._segments.replace(remove=deletable)
        self._log_start_offset = max(self._log_start_offset, self._segments.segments[0].base_offset)
        self._leader_epochs.truncate_from_start(self._log_start_offset)
        self._delete_segment_files(deletable)
        self._producer_state.delete_snapshots_below(self._segments.segments[0].base_offset)
        return len(deletable)

    def delete_records(self, before_offset):
        """Move the log start offset to ``before_offset`` (Kafka's DeleteRecords); segments
        wholly below it go at the next retention pass. Returns the new log start offset."""
        with self._lock:
            self._check_writable()
            if before_offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {before_offset}: above the high watermark "
                    f"{self._high_watermark}")
            self._log_start_offset = max(self._log_start_offset, before_offset)
            self._leader_epochs.truncate_from_start(self._log_start_offset)
            self._delete_by(LogStartOffsetRetention().predicate(self, 0))
            return self._log_start_offset

    def _delete_segment_files(self, segments):
        """Rename to ``.deleted`` now; remove after ``file.delete.delay.ms`` in the
        background. Readers holding the segments keep reading them until then."""
        for s in segments:
            s.mark_deleted()
            s.change_file_suffixes("", DELETED_SUFFIX)
        delay = self.config["file.delete.delay.ms"] / 1000.0
        self._scheduler.schedule_once(delay, lambda: [s.delete_files() for s in segments])

    # ------------------------------------------------------------------------------ close
    def offsets(self):
        """A ``LogOffsetSnapshot`` (log start offset, log end offset, high watermark, last
        stable offset, recovery point) read together under the log's lock, as Kafka's."""
        with self._lock:
            return LogOffsetSnapshot(self._log_start_offset, self._log_end_offset,
                                     self._high_watermark, self.last_stable_offset,
                                     self._recovery_point)

    def close(self):
        """Flush, snapshot the producer state, trim the active segment's indexes, close."""
        with self._lock:
            if self._closed:
                return
            if not self.read_only and self._failed is None:
                self.flush()
                with self._io("close"):
                    self._producer_state.take_snapshot(self._log_end_offset)
            for segment in self._segments.segments:
                segment.close()
            self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"Log({self.path!r}, log_start_offset={self._log_start_offset}, "
                f"log_end_offset={self._log_end_offset}, segments={len(self._segments.bases)})")


class _AbortedFilter:
    """A read_committed consumer's filter: drops control batches and the batches of aborted
    transactions (from the first offset of an aborted transaction to its ABORT marker)."""

    def __init__(self):
        self.pending = []        # AbortedTxn not yet reached, by first offset
        self.seen = set()
        self.active = set()      # producer ids inside an aborted transaction

    def add(self, txns):
        for t in txns or ():
            if t not in self.seen:
                self.seen.add(t)
                self.pending.append(t)
        self.pending.sort(key=lambda t: t.first_offset)

    def keep_mask(self, batches, table):
        keep_batch = np.ones(len(batches), dtype=bool)
        for i, row in enumerate(batches):
            attributes = int(row["attributes"])
            pid = int(row["producer_id"])
            while self.pending and self.pending[0].first_offset <= int(row["last_offset"]):
                self.active.add(self.pending.pop(0).producer_id)
            if attributes & CONTROL_MASK:
                keep_batch[i] = False
                self.active.discard(pid)   # the marker ends that producer's transaction
            elif attributes & TRANSACTIONAL_MASK and pid in self.active:
                keep_batch[i] = False
        return keep_batch[table.batch]


class _LogLoader:
    """Kafka's LogLoader: temp/swap files, segment loading, recovery, log start offset."""

    def __init__(self, path, config, recovery_point, log_start_offset, clean_shutdown,
                 read_only, scheduler, time_fn):
        self.path = path
        self.config = config
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset
        self.clean_shutdown = clean_shutdown
        self.read_only = read_only
        self.scheduler = scheduler
        self.time_fn = time_fn
        self._snapshots = None

    def load(self):
        if not self.read_only:
            self._remove_temp_files_and_complete_swaps()
        # The epoch cache is kept for logs of record batch v2 (Kafka deletes it for older
        # message formats); recovery below teaches it the epochs of the batches it keeps.
        self.leader_epochs = LeaderEpochCache.load(
            self.path, create=not self.read_only and not self._legacy_format())
        segments = self._load_segments()
        if not self.clean_shutdown:
            segments = self._recover(segments)
        if segments:
            log_end = segments[-1].read_next_offset()
            if log_end < self.log_start_offset and not self.read_only:
                for s in segments:
                    s.change_file_suffixes("", DELETED_SUFFIX)
                    s.delete_files()
                segments = []
        if not segments:
            if self.read_only:
                raise KafkaLogError(f"{self.path} holds no segment")
            segments = [LogSegment(self.path, self.log_start_offset, self.config,
                                   time_fn=self.time_fn)]
        active = segments[-1]
        log_end = active.read_next_offset()
        if not self.read_only:
            active.resize_indexes(self.config.max_index_size)
        recovery_point = log_end if self.clean_shutdown else min(self.recovery_point, log_end)
        log_start = max(self.log_start_offset, segments[0].base_offset)
        producer_state = _rebuild_producer_state(self.path, segments, log_end,
                                                 write=not self.read_only)
        self.leader_epochs.truncate_from_end(log_end)
        self.leader_epochs.truncate_from_start(log_start)
        return segments, log_start, recovery_point, producer_state, self.leader_epochs

    def _legacy_format(self):
        logs = sorted(n for n in os.listdir(self.path) if n.endswith(LOG_SUFFIX))
        if not logs:
            return False
        with open(os.path.join(self.path, logs[-1]), "rb") as f:
            head = f.read(17)
        return len(head) == 17 and head[16] < 2

    def _remove_temp_files_and_complete_swaps(self):
        """Returns True when it changed the directory."""
        names = [n for n in os.listdir(self.path)
                 if n.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX))]
        if not names:
            return False
        swaps, cleaned = [], []
        for name in names:
            full = os.path.join(self.path, name)
            if name.endswith(DELETED_SUFFIX):
                _remove_quietly(full)
            elif name.endswith(CLEANED_SUFFIX):
                cleaned.append(name)
            elif name.endswith(SWAP_SUFFIX):
                swaps.append(name)
        min_cleaned = min((_offset_from_file(n) for n in cleaned), default=None)
        for name in cleaned:
            _remove_quietly(os.path.join(self.path, name))
        kept = []
        for name in swaps:
            offset = _offset_from_file(name)
            if min_cleaned is not None and offset is not None and offset >= min_cleaned:
                _remove_quietly(os.path.join(self.path, name))  # an unfinished cleaning
            else:
                kept.append(name)
        log_swaps = [n for n in kept if n.endswith(LOG_SUFFIX + SWAP_SUFFIX)]
        if not log_swaps:
            for name in kept:       # index swaps without their log: the log was renamed
                os.replace(os.path.join(self.path, name),
                           os.path.join(self.path, name[:-len(SWAP_SUFFIX)]))
            return True
        low, high = None, None
        for name in log_swaps:
            base = _offset_from_file(name)
            seg = LogSegment(self.path, base, self.config, file_suffix=SWAP_SUFFIX)
            nxt = seg.read_next_offset()
            seg.close_handlers()
            low = base if low is None else min(low, base)
            high = nxt if high is None else max(high, nxt)
        for name in os.listdir(self.path):
            offset = _offset_from_file(name)
            if name.endswith(SWAP_SUFFIX) or offset is None:
                continue
            if low <= offset < high:
                _remove_quietly(os.path.join(self.path, name))
        for name in os.listdir(self.path):
            if name.endswith(SWAP_SUFFIX):
                os.replace(os.path.join(self.path, name),
                           os.path.join(self.path, name[:-len(SWAP_SUFFIX)]))
        checkpoint.fsync_dir(self.path)
        return True

    def _load_segments(self):
        entries = {e.name: e for e in os.scandir(self.path)}
        names = set(entries)
        logs = {n[:-len(LOG_SUFFIX)] for n in names
                if n.endswith(LOG_SUFFIX) and _offset_from_file(n) is not None}
        segments = []
        for name in sorted(names):
            stem, ext = os.path.splitext(name)
            if ext in _INDEX_SUFFIXES and _offset_from_file(name) is not None:
                if stem not in logs and not self.read_only:
                    _remove_quietly(os.path.join(self.path, name))   # an orphan index
                continue
            if ext != LOG_SUFFIX or stem not in logs:
                continue
            segment = LogSegment(self.path, int(stem), self.config, read_only=self.read_only,
                                 time_fn=self.time_fn, size=entries[name].stat().st_size)
            if not self.read_only:
                try:
                    segment.sanity_check(stem + TIME_INDEX_SUFFIX not in names, names)
                except (FileNotFoundError, CorruptIndexError):
                    pieces, _ = self._recover_or_split(segment)
                    segments.extend(pieces)
                    continue
            segments.append(segment)
        return segments

    def _recover_segment(self, segment, earlier):
        if self._snapshots is None:
            self._snapshots = list_snapshots(self.path)
        state = ProducerStateManager(self.path)
        state.load_latest_snapshot(segment.base_offset, self._snapshots)
        return segment.recover(state, self.leader_epochs)

    def _recover(self, segments):
        """Recover every segment from the one holding the recovery point; the first that
        truncates makes every later segment go."""
        start = 0
        for i, s in enumerate(segments):
            if s.base_offset <= self.recovery_point:
                start = i
        kept = list(segments[:start])
        truncated = False
        for segment in segments[start:]:
            if truncated:
                segment.change_file_suffixes("", DELETED_SUFFIX)
                segment.delete_files()
                continue
            pieces, truncated_bytes = self._recover_or_split(segment)
            kept.extend(pieces)
            if truncated_bytes > 0:
                truncated = True
        return kept

    def _recover_or_split(self, segment):
        """Recover a segment; returns (the segments it became, bytes truncated)."""
        try:
            return [segment], self._recover_segment(segment, None)
        except IndexOffsetOverflowError:
            # A legacy segment whose offsets do not fit its base: split, as Kafka does.
            return self._split_overflowed(segment)
        except InvalidOffsetError:
            segment.truncate_to(segment.base_offset)
            return [segment], 1

    def _split_overflowed(self, segment):
        """Split a segment into segments whose offsets fit (Kafka's splitOverflowedSegment).

        Crash-safe through the swap protocol: the pieces are written as ``.cleaned`` (thrown
        away at load if a crash comes first), renamed ``.swap`` once complete (then a load
        finishes the replacement), and only then is the old segment deleted and the pieces
        renamed into place. Returns (new segments, bytes their recovery truncated).
        """
        buf = segment.buffer()
        batches = walk_batches(buf, validate_crc=False)[0]
        groups = []
        i = 0
        while i < len(batches):
            base = RecordBatch(buf, batches[i], segment.log_path).base_offset
            last = batches["last_offset"][i:]
            fits = (last >= base) & (last - base <= 2**31 - 1)
            j = i + (int(np.argmin(fits)) if not fits.all() else len(fits))
            if j == i:
                raise KafkaLogError(f"{segment.log_path}: offsets at position "
                                    f"{int(batches['position'][i])} cannot be split to fit")
            end = int(batches["position"][j - 1] + batches["size"][j - 1])
            groups.append((base, int(batches["position"][i]), end))
            i = j
        for base, start, end in groups:
            cleaned = os.path.join(self.path, f"{base:020d}{LOG_SUFFIX}{CLEANED_SUFFIX}")
            with open(cleaned, "wb") as f:
                f.write(buf[start:end])
                f.flush()
                os.fsync(f.fileno())
        for base, _, _ in groups:
            stem = os.path.join(self.path, f"{base:020d}{LOG_SUFFIX}")
            os.replace(stem + CLEANED_SUFFIX, stem + SWAP_SUFFIX)
        checkpoint.fsync_dir(self.path)
        truncated = 0
        for base, _, _ in groups:
            piece = LogSegment(self.path, base, self.config, file_suffix=SWAP_SUFFIX,
                               time_fn=self.time_fn)
            truncated += piece.recover(ProducerStateManager(self.path), self.leader_epochs)
            piece.close()
        segment.change_file_suffixes("", DELETED_SUFFIX)
        segment.delete_files()
        for name in os.listdir(self.path):
            if name.endswith(SWAP_SUFFIX):
                os.replace(os.path.join(self.path, name),
                           os.path.join(self.path, name[:-len(SWAP_SUFFIX)]))
        checkpoint.fsync_dir(self.path)
        pieces = [LogSegment(self.path, base, self.config, time_fn=self.time_fn)
                  for base, _, _ in groups]
        return pieces, truncated


def _rebuild_producer_state(path, segments, log_end, write=True):
    """Producer state at ``log_end``: the latest snapshot, then the batches after it."""
    state = ProducerStateManager(path)
    loaded = state.load_latest_snapshot(log_end)
    start = loaded if loaded is not None else (segments[0].base_offset if segments else 0)
    for i, segment in enumerate(segments):
        nxt_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if segment.size == 0 or (nxt_base is not None and nxt_base <= start):
            continue
        buf = segment.buffer()
        batches = walk_batches(buf, 0, validate_crc=False)[0]
        batches = batches[(batches["last_offset"] >= start) & (batches["magic"] == 2)]
        for row in batches[batches["producer_id"] >= 0]:
            control_type, epoch = None, -1
            if int(row["attributes"]) & CONTROL_MASK:
                control_type, epoch = control_of(buf, row, segment.log_path)
            state.update(row, control_type, epoch)
    state.map_end_offset = log_end
    return state


def _remove_quietly(path):
    """Remove a file that a concurrent deletion (a ``.deleted`` segment's timer) may have
    removed first."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def read_partition_metadata(directory):
    """The topic id in a partition's ``partition.metadata`` (``version: 0`` /
    ``topic_id: <id>``), or None when there is no such file."""
    path = os.path.join(directory, PARTITION_METADATA)
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8").splitlines()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise KafkaLogError(f"malformed {path}: not UTF-8 text") from None
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    if fields.get("version", "").strip() != "0" or "topic_id" not in fields:
        raise KafkaLogError(f"malformed {path}: {lines!r}")
    return fields["topic_id"].strip()


def _checkpoint_key(dir_name):
    try:
        return parse_topic_partition(dir_name)
    except KafkaLogError:
        return None


def _read_checkpoint(log_dir, name, key, default):
    path = os.path.join(log_dir, name)
    if key is None or not os.path.exists(path):
        return default
    try:
        return checkpoint.read_offset_checkpoint(path).get(key, default)
    except (checkpoint.CorruptCheckpointError, OSError):
        return default
