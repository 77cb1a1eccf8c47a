"""``Log``: the partition users hold, as Kafka's ``UnifiedLog``: offsets (log start, high
watermark, last stable offset), append validation, producer and leader-epoch state, reads with
isolation, retention, truncation, and compaction coordinated with all of them.

The files and their I/O failures are ``LocalLog``'s (``local_log``), opening and loading
``loader``'s, the choice of what retention deletes ``retention``'s, a compaction pass
``cleaner``'s. A read-only ``Log`` is the one view of a partition every reader uses.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

from kafkalog import checkpoint, storage
from kafkalog._kernels import APPEND_HAS_COMPRESSED, APPEND_HAS_PRODUCER, chained, walk_batches
from kafkalog.cleaner import (DEFAULT_MAP_MEMORY, CleanerStats, CleaningAbortedError,
                              CleaningCoordinator, CleaningSnapshot, clean_log)
from kafkalog.config import LogConfig
from kafkalog.errors import InvalidOffsetError, KafkaLogError, LogClosedError, OffsetOutOfRangeError
from kafkalog.files import parse_topic_partition
from kafkalog.isolation import ISOLATIONS, fetched_records, fetched_tables, unknown_isolation
from kafkalog.loader import open_partition, rebuild_producer_state
from kafkalog.local_log import LocalLog
from kafkalog.locks import MutationGuard
from kafkalog.log_validator import AppendSettings, with_leader_epoch
from kafkalog.fetch_data_info import LogAppendInfo, LogOffsetSnapshot, append_info
from kafkalog.builder import leader_batch
from kafkalog.retention import LogStartOffsetRetention, breached_policies, deletable_segments
from kafkalog.producer_state import last_stable_offset
from kafkalog.scheduler import default_scheduler

if TYPE_CHECKING:
    from kafkalog._core import Record
    from kafkalog._typing import StrPath
    from kafkalog.builder import RecordLike
    from kafkalog.index import AbortedTxn
    from kafkalog.leader_epoch import LeaderEpochCache
    from kafkalog.locks import FileLock
    from kafkalog.log_segments import LogSegments
    from kafkalog.records import RecordTable
    from kafkalog.retention import RetentionPolicy
    from kafkalog.scheduler import Scheduler
    from kafkalog.fetch_data_info import FetchDataInfo
    from kafkalog.segment import LogSegment
    #: a policy, or ``f(log, now_ms)`` returning a predicate of (segment, next) or None
    RetentionPolicyLike = RetentionPolicy | Callable[
        ["Log", int], "Callable[[LogSegment, LogSegment | None], bool] | None"]

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
_NOT_FOR_APPENDER = APPEND_HAS_PRODUCER | APPEND_HAS_COMPRESSED    # (ActiveSegmentAppender)
__all__ = ["Log", "LogAppendInfo", "LogOffsetSnapshot", "ISOLATIONS", "EARLIEST_TIMESTAMP",
           "LATEST_TIMESTAMP"]

class Log:
    """A partition directory as Kafka's storage engine sees it.

    Open with ``Log.open(path, config)``. Appends, truncation, retention and the swap of a
    cleaned segment are serialised by a lock; reads take the current immutable segment list
    and never wait for them. ``high_watermark`` is kept by the log (appends, truncation,
    ``update_high_watermark``, the appender under the lock): read it, never assign it.
    """

    def __init__(self, path: str, config: LogConfig, loaded: Any, *,
                 high_watermark: int | None, replicated: bool, read_only: bool,
                 scheduler: Scheduler, time_fn: Callable[[], float], first_dirty_offset: int = 0,
                 managed: bool = False, locks: list[FileLock] | None = None) -> None:
        self.path = path
        self._locks = locks or []
        self.dir_name = os.path.basename(path)
        self.config = config
        self.recovery_report = loaded.report
        self._local = LocalLog(path, config, loaded.segments,
                               log_end_offset=loaded.log_end_offset, managed=managed,
                               recovery_point=loaded.recovery_point, scheduler=scheduler,
                               time_fn=time_fn, changed=bool(loaded.report.actions))
        self._lock = threading.RLock()
        self._mutation = MutationGuard(self._lock, path, self._local.appending)
        self._cleaning = CleaningCoordinator(self._lock)
        self._log_start_offset = loaded.log_start_offset
        self._producer_state = loaded.producer_state
        self._leader_epochs = loaded.leader_epochs
        self._retention_policies: list[RetentionPolicyLike] = []
        self.first_dirty_offset = max(first_dirty_offset, loaded.log_start_offset)
        self._replicated = replicated
        self._managed = managed
        self.read_only = read_only
        self._time_fn = time_fn
        log_end = loaded.log_end_offset
        self.high_watermark = log_end if high_watermark is None else \
            min(max(high_watermark, loaded.log_start_offset), log_end)
        self._producer_state.on_high_watermark_updated(self.high_watermark)
        self._closed = False
        self._settings: tuple[LogConfig, AppendSettings] | None = None
        self._unclosed = self._local.release_when_collected(self, self._locks)

    # ------------------------------------------------------------------------------ open
    @classmethod
    def open(cls, path: StrPath, config: LogConfig | Mapping[str, Any] | StrPath | None = None,
             *, recovery_point: int | None = None, log_start_offset: int | None = None,
             clean_shutdown: bool | None = None, high_watermark: int | None = None,
             replicated: bool = False, read_only: bool = False,
             scheduler: Scheduler | None = None, time_fn: Callable[[], float] = time.time,
             topic_id: str | None = None, first_dirty_offset: int | None = None,
             managed: bool = False, salvage_dir: StrPath | None = None,
             storage_options: Mapping[str, Any] | None = None,
             rsm_keys: Mapping[str, Any] | None = None) -> Log:
        """Load a partition directory (created when missing) as Kafka's LogLoader does.

        ``config``: the topic's settings (``LogConfig.of``: a ``LogConfig``, a mapping, or the
        path of a ``.properties`` file; None for the defaults).

        Where not given, the recovery point, log start offset, high watermark, cleaner offset
        and whether the broker shut down cleanly are read from the parent log dir's checkpoint
        files and clean-shutdown marker (``checkpoint.LogDirCheckpoints``), as a broker would;
        with none there, the whole log is recovered. A high watermark found there is kept
        (loading never raises it to the log end); a standalone log moves it with its next
        append. ``managed``: a ``LogManager`` writes the log dir's checkpoints; a standalone log
        records a log start offset moved by ``delete_records`` in the parent dir's
        ``log-start-offset-checkpoint`` itself, so it survives reopening.

        What loading did to the files (truncations, deleted segments, rebuilt indexes, swaps,
        snapshots) is logged at WARNING and kept as ``log.recovery_report``; ``salvage_dir``:
        what recovery would delete is moved there. ``read_only``: no recovery nor any write
        (every reader's view); with ``clean_shutdown=False``, a WARNING where recovery would cut.
        ``replicated=False`` (one copy, the embedded case) moves the high watermark with
        every append; with ``True`` it moves only through ``update_high_watermark``.
        ``topic_id`` (Kafka's base64 topic id) is written to ``partition.metadata``; a different
        id already there is an error.

        ``path`` may be an fsspec URL (``s3://bucket/dir/topic-0``, ``s3a://``, ``gs://``,
        ``abfs://``, ``hdfs://``; ``file://`` is a local path) with ``read_only=True``:
        ``storage_options`` are the filesystem's options (for S3 ``key``, ``secret``,
        ``endpoint_url``, ``client_kwargs``, ...; else the standard environment). A writable
        open of a URL raises ReadOnlyStorageError, a missing one LogNotFoundError.

        With ``read_only=True``, ``path`` may also be a partition prefix of Kafka tiered
        storage as Aiven's RemoteStorageManager writes it (``<prefix><topic>-<topicId>/<p>``,
        local or a URL; see ``kafkalog.tiered``): ``rsm_keys`` maps the key-pair ids of
        encrypted segments to RSA private keys (PEM file paths or PEM text).
        """
        config = LogConfig.of(config)

        def build(path, loaded, topic_id, **kwargs):
            log_ = cls(path, config, loaded, replicated=replicated,
                       scheduler=scheduler or default_scheduler(), time_fn=time_fn, **kwargs)
            if topic_id is not None:
                log_.assign_topic_id(topic_id)
            return log_
        return open_partition(
            storage.locate(os.fspath(path), storage_options, rsm_keys).root, config, build,
            recovery_point=recovery_point, log_start_offset=log_start_offset,
            clean_shutdown=clean_shutdown, high_watermark=high_watermark, replicated=replicated,
            read_only=read_only, time_fn=time_fn, topic_id=topic_id,
            first_dirty_offset=first_dirty_offset, managed=managed, salvage_dir=salvage_dir)

    # ------------------------------------------------------------------------------ state
    def _now_ms(self):
        return int(self._time_fn() * 1000)

    @property
    def failed(self) -> OSError | None:
        """The OSError that took the log offline, or None."""
        return self._local.failed

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def usable(self) -> bool:
        """Open, writable and not offline: background tasks may work on it."""
        return not self._closed and self._local.failed is None and not self.read_only

    @property
    def segments(self) -> LogSegments:
        """The segments, oldest first (a ``LogSegments`` snapshot: later changes do not alter
        it)."""
        return self._local.segments

    @property
    def active_segment(self) -> LogSegment:
        return self._local.active_segment

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest transaction open or whose marker is not below the
        high watermark yet (not below the log start offset, as Kafka bounds it), else the high
        watermark (read first: an append moves it after the producer state)."""
        return last_stable_offset(high_watermark=self.high_watermark,
                                  log_start_offset=self._log_start_offset,
                                  first_unstable=self._producer_state.first_unstable_offset())

    @property
    def size(self) -> int:
        """Bytes in all ``.log`` files."""
        return self._local.segments.size

    @property
    def topic_partition(self) -> tuple[str, int]:
        return parse_topic_partition(self.dir_name)

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        """The partition's ``LeaderEpochCache`` (kept in ``leader-epoch-checkpoint``)."""
        return self._leader_epochs

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka answers OffsetsForLeaderEpoch."""
        return self._leader_epochs.end_offset_for(epoch, self.log_end_offset)

    @property
    def topic_id(self) -> str | None:
        """The topic id in ``partition.metadata``, or None."""
        return checkpoint.read_partition_metadata(self.path)

    def assign_topic_id(self, topic_id: str) -> None:
        """Write ``partition.metadata`` (as Kafka does); a different id there is an error."""
        checkpoint.assign_topic_id(self.path, topic_id, self.read_only)

    def update_high_watermark(self, offset: int) -> None:
        """Set the high watermark (clamped to [log start offset, log end offset])."""
        with self._lock:
            self.high_watermark = min(max(offset, self._log_start_offset), self.log_end_offset)
            self._producer_state.on_high_watermark_updated(self.high_watermark)
            return self.high_watermark

    def offsets(self) -> LogOffsetSnapshot:
        """A ``LogOffsetSnapshot`` (log start offset, log end offset, high watermark, last
        stable offset, recovery point) read together under the log's lock, as Kafka's."""
        with self._lock:
            return LogOffsetSnapshot(self._log_start_offset, self.log_end_offset,
                                     self.high_watermark, self.last_stable_offset,
                                     self.recovery_point)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[Log]:
        """Hold the log's lock: no append, truncation, retention or cleaned-segment swap runs
        meanwhile (``LogManager.move_log`` copies the files under it)."""
        with self._lock:
            yield self

    def _check_writable(self):
        if self._closed:
            raise LogClosedError(f"log {self.path} is closed")
        if self.read_only:
            raise KafkaLogError(f"log {self.path} was opened read-only")
        failed = self._local.failed
        if failed is not None:
            raise KafkaLogError(f"log {self.path} is offline after an I/O error "
                                f"({failed}); reopen it") from failed

    # ------------------------------------------------------------------------------ append
    def append(self,
               records_or_batch_bytes: bytes | bytearray | memoryview | Iterable[RecordLike], *,
               compression: str | int | None = None, producer_id: int = -1,
               producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False,
               partition_leader_epoch: int | None = None) -> LogAppendInfo:
        """Append as leader: assign offsets from the log end offset.

        Takes ``Record`` objects (built into one batch here, compressed with ``compression``,
        else the topic's ``compression.type`` unless that is ``producer``) or the bytes of
        whole v2 batches (validated: structure, CRC, magic, size, record decoding; appended
        with the codec they carry — kafkalog does not recompress bytes). Applies
        ``message.timestamp.type``, the ``message.timestamp.before/after.max.ms`` bounds and
        ``partition_leader_epoch`` (None: 0; bytes keep theirs). Returns a ``LogAppendInfo``.
        """
        records_or_batch_bytes = with_leader_epoch(records_or_batch_bytes, partition_leader_epoch)
        if compression is None and producer_id == producer_epoch == base_sequence == -1 and \
                not transactional:
            local = self._local  # the common case: one kernel call, under the log's lock
            appender = local.appender
            info = appender and appender.append(self, local, records_or_batch_bytes,
                                                partition_leader_epoch or 0)
            if info:      # (None: the general path)
                return info
        settings = self._append_settings()
        if isinstance(records_or_batch_bytes, (bytes, bytearray, memoryview)):
            return self._append(bytearray(records_or_batch_bytes), True, settings)
        codec, compress = settings.codec_for(compression)
        now = int(self._time_fn() * 1000)      # (of records without a timestamp)
        return self._append(leader_batch(list(records_or_batch_bytes), now, codec, compress,
                                         producer_id, producer_epoch, base_sequence,
                                         transactional, partition_leader_epoch), True, settings)

    def append_batches(self, buffers: Iterable[bytes | bytearray | memoryview]
                       ) -> LogAppendInfo:
        """Append as leader the v2 batches of several buffers (each whole batches, e.g. one
        ``build_batch`` result each) in one call: as ``append`` of their concatenation, so
        one validation pass, one write and one lock for all, all or nothing (Kafka's append
        of a produce request's records: they go to one segment, rolled first when they do
        not fit; index entries are made batch by batch). Returns one ``LogAppendInfo`` for
        them all."""
        data = bytearray().join(buffers)
        if not data:
            raise ValueError("nothing to append")
        return self._append(data, True, self._append_settings())

    def append_as_follower(self, batch_bytes: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches that carry their offsets (replication, copying): offsets must not
        go below the log end offset."""
        return self._append(bytearray(batch_bytes), False, self._append_settings())

    def _append(self, data, assign_offsets, settings):
        """Append ``data`` (a bytearray made for it: offsets are assigned in it) under
        ``settings``: the general path, which arms the appender of the next appends."""
        with self._mutation("append"):
            local = self._local
            local.appender = None
            if self._closed or self.read_only or local.failed is not None:
                self._check_writable()
            now = int(self._time_fn() * 1000)
            log_end = local.log_end_metadata[0]
            validator = settings.validator
            log_append = validator.log_append_time
            (n_batches, first, last, max_ts, offset_of_max, count, flags, epoch, batches,
             prepared) = validator.validate(data, log_end, assign_offsets, now,
                                            self._producer_state)
            if prepared is not None and prepared.duplicate is not None:
                # A retried batch already in the log: answer with its offsets.
                duplicate = prepared.duplicate
                return LogAppendInfo(duplicate.first_offset, duplicate.last_offset,
                                     duplicate.timestamp, duplicate.last_offset, -1, 0, 0)
            size = len(data)
            try:
                segment = local.active_segment
                if segment.should_roll(settings.segment_ms, settings.segment_bytes, max_ts,
                                       last, size, now):
                    # Kafka names the new segment after the first offset the append will take.
                    segment = self._roll(max(first, log_end))
                local.append(segment, last, max_ts, offset_of_max, data)
                if prepared is not None:
                    self._producer_state.commit(prepared, segment.txn_index)
                elif flags & APPEND_HAS_PRODUCER:
                    if batches is None:
                        batches = walk_batches(data, validate_crc=False)[0]
                    self._producer_state.apply_batches(data, batches,
                                                       txn_index=segment.txn_index)
                if epoch >= 0:
                    self._leader_epochs.assign_from_append(epoch, first, data, batches,
                                                           n_batches)
            except OSError as e:
                raise local.offline("append", e) from e
            if not self._replicated:
                self.high_watermark = last + 1
                if flags & APPEND_HAS_PRODUCER:
                    self._producer_state.on_high_watermark_updated(last + 1)
            if local.count_unflushed(count, now, settings):
                self.flush()
            if assign_offsets and n_batches == 1 and not flags & _NOT_FOR_APPENDER:
                local.arm_appender(self, settings, self._leader_epochs, self._replicated,
                                   self._lock)      # (its kind of append: arming costs ~4 us)
            return append_info((first, last, max_ts, offset_of_max,
                                 now if log_append else -1, size, count))

    def _append_settings(self):
        """The settings every append reads, taken from ``self.config`` once per config."""
        cached = self._settings
        if cached is None or cached[0] is not self.config:
            cached = self._settings = (self.config, AppendSettings.of(self.path, self.config))
        return cached[1]

    def remove_expired_producers(self, expiration_ms: int = 86_400_000,
                                 now_ms: int | None = None) -> None:
        """Forget idempotent producers idle for ``expiration_ms`` (Kafka's
        ``producer.id.expiration.ms``) that have no open transaction."""
        with self._lock:
            self._producer_state.remove_expired_producers(
                self._now_ms() if now_ms is None else now_ms, expiration_ms)

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset; returns it."""
        with self._mutation("roll"):
            self._check_writable()
            with self._local.io("roll"):
                return self._roll(self.log_end_offset)

    def _roll(self, new_offset):
        segment = self._local.roll(new_offset)
        self._producer_state.take_snapshot(new_offset)
        return segment

    # ------------------------------------------------------------------------------ flush
    def flush_if_due(self, now_ms: int | None = None) -> None:
        """Flush when ``flush.ms`` has passed since the last flush (the manager's periodic
        flush task)."""
        now_ms = self._now_ms() if now_ms is None else now_ms
        with self._lock:
            if self.usable and now_ms - self._local.last_flush_ms >= self.config["flush.ms"]:
                self.flush()

    def flush(self) -> None:
        """fsync every segment holding unflushed data; the recovery point becomes the log end
        offset."""
        with self._lock:
            if self.read_only or self._closed:
                return
            self._check_writable()
            with self._local.io("flush"):
                self._local.flush()

    # ------------------------------------------------------------------------------ read
    def _max_offset(self, isolation):
        if isolation == "log_end":
            return self.log_end_offset
        if isolation == "high_watermark":
            return self.high_watermark
        if isolation == "committed":
            return self.last_stable_offset
        raise unknown_isolation(isolation)

    def read(self, start_offset: int, max_bytes: int = 1048576, isolation: str = "log_end",
             min_one_message: bool = True, zero_copy: bool = False) -> FetchDataInfo:
        """Batches from the first holding ``start_offset``, up to ``max_bytes``.

        Returns a FetchDataInfo (``records`` = batch bytes, or with ``zero_copy`` a local
        segment's ``FileSlice``; ``aborted_transactions`` for ``isolation="committed"``).
        Raises OffsetOutOfRangeError below the log start offset or above the log end offset.
        """
        # As Kafka's read (a few microseconds): no context manager, one segment search.
        if self._closed:
            raise LogClosedError(f"log {self.path} is closed")
        local = self._local
        log_end = local.log_end_metadata[0]
        max_offset = log_end if isolation == "log_end" else self._max_offset(isolation)
        if start_offset < self._log_start_offset or start_offset > log_end:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range for {self.dir_name}: log start offset "
                f"{self._log_start_offset}, log end offset {log_end}")
        try:
            return local.read(start_offset, max_bytes, max_offset, min_one_message,
                              isolation == "committed", zero_copy)
        except (ValueError, OSError) as e:
            self._raise_if_closed(e)
            raise

    @contextlib.contextmanager
    def _reading(self):
        """A read of the files: LogClosedError once the log is closed, also when ``close()``
        releases the files under a read that is running."""
        if self._closed:
            raise LogClosedError(f"log {self.path} is closed")
        try:
            yield
        except (ValueError, OSError) as e:
            self._raise_if_closed(e)
            raise

    def _raise_if_closed(self, e):
        """A read failed with ``e``: LogClosedError when ``close()`` released the files under
        it (a released view, a closed descriptor)."""
        if self._closed:
            raise LogClosedError(f"log {self.path} was closed during the read") from e

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The ``AbortedTxn`` entries that a read_committed read of [start_offset,
        end_offset) must know (from the transaction indexes)."""
        with self._reading():
            return LocalLog.collect_aborted_transactions(self.segments, start_offset,
                                                         end_offset)

    def records(self, start_offset: int | None = None, end_offset: int | None = None,
                isolation: str = "log_end", include_control: bool = False,
                validate_crc: bool = True) -> Iterator[Record]:
        """Iterate ``Record`` objects in offset order over [start_offset, end_offset).

        Control records (transaction markers) are left out, as a consumer leaves them out,
        unless ``include_control``. With ``isolation="committed"`` the records of aborted
        transactions are left out too, as a read_committed consumer does. Every batch's CRC
        is checked first (a failure raises CorruptRecordError, before any of its records);
        ``validate_crc=False`` skips that on trusted data.
        """
        # Chained in C, no Log work per record; 1 MiB fetches, as a consumer's (cache-warm).
        return chained(self._fetched(
            fetched_records, start_offset, end_offset, isolation, include_control, 1 << 20,
            validate_crc))

    def record_tables(self, start_offset: int | None = None, end_offset: int | None = None,
                      isolation: str = "log_end", include_control: bool = False,
                      max_bytes: int = 16 * 1024 * 1024,
                      validate_crc: bool = True) -> Iterator[RecordTable]:
        """Like ``records`` but yields columnar ``RecordTable`` chunks."""
        return self._fetched(fetched_tables, start_offset, end_offset, isolation,
                             include_control, max_bytes, validate_crc)

    def _fetched(self, fetch, start_offset, end_offset, isolation, *args):
        # (a generator: the range is taken when the iteration starts)
        limit = self._max_offset(isolation)
        offset = self._log_start_offset if start_offset is None else start_offset
        end = limit if end_offset is None else min(end_offset, limit)
        yield from fetch(self.read, self._reading, self._local, offset, end, isolation, *args)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= ``timestamp``; -2 gives
        the log start offset, -1 the log end offset. None when no record is that late."""
        if timestamp == EARLIEST_TIMESTAMP:
            return (self._log_start_offset, -1)
        if timestamp == LATEST_TIMESTAMP:
            return (self.log_end_offset, -1)
        if self._closed:
            raise LogClosedError(f"log {self.path} is closed")
        try:      # _reading()'s checks without its context manager (~1 us of a ~8 us call)
            return self._local.offset_for_timestamp(timestamp, self._log_start_offset)
        except (ValueError, OSError) as e:
            self._raise_if_closed(e)
            raise

    # ------------------------------------------------------------------------------ truncate
    def truncate_to(self, offset: int) -> bool:
        """Remove every record at or above ``offset`` (a follower's truncation); the log end
        offset becomes ``offset``. A running cleaner pass is aborted first. Returns whether
        anything was removed."""
        with self._mutation("truncate_to"):
            self._check_writable()
            if offset < 0:
                raise InvalidOffsetError(f"cannot truncate {self.path} to a negative offset")
            if offset >= self.log_end_offset:
                return False
            with self._cleaning.paused():
                # A log always has a segment, so ``first`` is not None.
                if offset < self.active_segment.base_offset and \
                        offset <= self.segments.first.base_offset:  # type: ignore[union-attr]
                    self._truncate_fully_and_start_at(offset)
                    return True
                with self._local.io("truncate"):
                    self._local.truncate_to(offset)
                    self._after_truncation()
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start an empty log at ``new_offset``."""
        with self._mutation("truncate_fully_and_start_at"):
            self._check_writable()
            with self._cleaning.paused():
                self._truncate_fully_and_start_at(new_offset)

    def _truncate_fully_and_start_at(self, new_offset):
        with self._local.io("truncate"):
            self._local.truncate_fully_and_start_at(new_offset)
            self._log_start_offset = self.high_watermark = new_offset    # as Kafka's
            self._leader_epochs.clear()
            self._producer_state.clear()
            self._producer_state.delete_snapshots_above(-1)
            self._after_truncation()

    def _after_truncation(self):
        log_end = self.log_end_offset
        self._leader_epochs.truncate_from_end(log_end)
        self.high_watermark = min(self.high_watermark, log_end)
        self._log_start_offset = min(self._log_start_offset, log_end)
        self.first_dirty_offset = min(self.first_dirty_offset, log_end)
        self._producer_state.delete_snapshots_above(log_end)
        self._producer_state = rebuild_producer_state(self.path, self.segments, log_end)
        self._producer_state.on_high_watermark_updated(self.high_watermark)

    # ------------------------------------------------------------------------------ retention
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Apply retention: Kafka's policies (log start offset; with ``cleanup.policy``
        delete, ``retention.bytes`` and ``retention.ms``) and any added with
        ``add_retention_policy``; returns how many segments were deleted."""
        with self._mutation("delete_old_segments"):
            self._check_writable()
            now_ms = self._now_ms() if now_ms is None else now_ms
            with self._local.io("retention"):
                return sum(self._delete_by(predicate, reason) for predicate, reason in
                           breached_policies(self, self._retention_policies, now_ms))

    def add_retention_policy(self, policy: RetentionPolicyLike) -> None:
        """Add a ``RetentionPolicy`` (or a function ``f(log, now_ms)`` returning a predicate of
        ``(segment, next_segment)`` or None) to those ``delete_old_segments`` applies."""
        self._retention_policies.append(policy)

    def _delete_by(self, predicate, reason):
        deletable = deletable_segments(self, predicate)
        if not deletable:
            return 0
        log.info("%s: deleting %d segment(s) from base offset %d to %d (%s)", self.path,
                 len(deletable), deletable[0].base_offset, deletable[-1].base_offset, reason)
        if len(deletable) == len(self.segments):
            self._producer_state.take_snapshot(self.log_end_offset)
        self._local.delete_segments(deletable)
        self._log_start_offset = max(self._log_start_offset, self.segments.first.base_offset)
        self._leader_epochs.truncate_from_start(self._log_start_offset)
        self._producer_state.delete_snapshots_below(self.segments.first.base_offset)
        return len(deletable)

    def delete_records(self, before_offset: int) -> int:
        """Move the log start offset to ``before_offset`` (Kafka's DeleteRecords); segments
        wholly below it go now. Returns the new log start offset."""
        with self._mutation("delete_records"):
            self._check_writable()
            if before_offset > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {before_offset}: above the high watermark "
                    f"{self.high_watermark}")
            with self._cleaning.paused():
                self._log_start_offset = max(self._log_start_offset, before_offset)
                self._leader_epochs.truncate_from_start(self._log_start_offset)
                with self._local.io("retention"):
                    retention = LogStartOffsetRetention()
                    self._delete_by(retention.predicate(self, 0), retention.reason)
                    self._local.checkpoint("log_start_offset", self._log_start_offset)
            return self._log_start_offset

    # ------------------------------------------------------------------------------ compaction
    def cleaning_snapshot(self) -> CleaningSnapshot:
        """A ``CleaningSnapshot``: what the cleaner needs, read together under the lock."""
        with self._lock:
            return CleaningSnapshot(
                self.segments, self._log_start_offset, self.log_end_offset,
                self.high_watermark, self.first_dirty_offset,
                self._producer_state.first_unstable_offset(),
                self._producer_state.last_records(), self.config)

    def compact(self, now_ms: int | None = None, memory_budget: int | None = None
                ) -> CleanerStats:
        """One cleaner pass (``cleanup.policy`` must include compact); returns the cleaner's
        ``CleanerStats`` (``aborted`` when a truncation, deletion or close stopped it, or
        another pass was running). See ``kafkalog.cleaner``."""
        if not self.config.compact_enabled:
            raise KafkaLogError(f"{self.path}: cleanup.policy {self.config.cleanup_policy!r} "
                                f"does not include compact")
        now_ms = self._now_ms() if now_ms is None else now_ms
        with self._lock:
            self._check_writable()
            snapshot = self.cleaning_snapshot() if self._cleaning.try_begin() else None
        return clean_log(self, snapshot, self._cleaning, now_ms,
                         memory_budget or DEFAULT_MAP_MEMORY, self._time_fn, self._local.offline)

    def replace_segments(self, new_segments: list[LogSegment],
                         old_segments: list[LogSegment]) -> None:
        """Swap cleaned ``new_segments`` in for ``old_segments`` under the lock (Kafka's
        ``replaceSegments``); CleaningAbortedError when the pass was aborted or they are no
        longer all in the log."""
        with self._mutation("replace_segments"):
            self._cleaning.check_aborted()
            if self._closed or self._local.failed is not None or \
                    not all(s in self.segments for s in old_segments):
                raise CleaningAbortedError(f"segments of {self.path} changed during cleaning")
            with self._local.io("compaction"):
                for gone in self._local.replace_segments(new_segments, old_segments):
                    self._producer_state.delete_snapshot(gone.base_offset)

    # ------------------------------------------------------------------------------ close
    def close(self) -> None:
        """Flush, snapshot the producer state, trim the active segment's indexes, close. A
        running cleaner pass is aborted first."""
        with self._mutation("close"):
            if self._closed:
                return
            try:
                with self._cleaning.paused():
                    if not self.read_only and self._local.failed is None:
                        self.flush()
                        with self._local.io("close"):
                            self._producer_state.close_snapshot(self.log_end_offset, self.segments)
            finally:
                # Whatever failed above, the files are closed and the partition is free
                # for the next writer (the failure is raised; nothing flushed is lost).
                self._closed = True
                self._unclosed.detach()
                try:
                    # trimming indexes while the dir works, only releasing them once failed
                    if self._local.failed is None:
                        with self._local.io("close"):
                            self._local.close(checkpoint=not self.read_only)
                    else:
                        self._local.close_handlers()
                finally:
                    for lock in self._locks:
                        lock.release()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self):
        return (f"Log({self.path!r}, log_start_offset={self._log_start_offset}, "
                f"log_end_offset={self.log_end_offset}, segments={len(self.segments)})")

