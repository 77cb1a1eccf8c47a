"""``LogSegment``: one ``.log`` file (``FileRecords``) with its offset and time indexes (each
a ``LazyIndex``) and its transaction index; its recovery's body is in ``segment_recovery``."""
from __future__ import annotations

import contextlib
import logging
import os
import random
import struct
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from kafkalog import storage
from kafkalog._kernels import batch_header_plausible, index_entries_for, walk_batches
from kafkalog._layout import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD
from kafkalog.descriptor_cache import OPEN_SEGMENTS
from kafkalog.errors import (
    CorruptIndexError, FileShrunkError, IndexOffsetOverflowError, InvalidOffsetError,
    InvalidTimestampError,
)
from kafkalog.fetch_data_info import FetchDataInfo
from kafkalog.file_records import FileRecords
from kafkalog.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, file_path
from kafkalog.index import OffsetIndex, TimeIndex, TimestampOffset, TransactionIndex
from kafkalog.lazy_index import LazyIndex, replace_index_files
from kafkalog.producer_state import ProducerStateManager
from kafkalog.segment_recovery import rebuild_index_files, recover_segment

if TYPE_CHECKING:
    from kafkalog._typing import StrPath
    from kafkalog.config import LogConfig
    from kafkalog.index import OffsetPosition, TxnIndexSearchResult
    from kafkalog.leader_epoch import LeaderEpochCache

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
_RNG = random.Random()
_HEADER = struct.Struct(">qi")


class LogSegment:
    """A segment of a partition's log: the ``.log`` file of batches from ``base_offset`` on, a
    sparse offset index, a time index and a transaction index.

    Indexes are opened lazily (at the first lookup or append): a load touches only directory
    entries. Appends are serialised by the log; reads may run concurrently with them.
    """

    # Slots, not a __dict__: a log of 10,000s of segments holds one of these each, and
    # past 30 attributes CPython gives every instance a dict of its own (~2 KB).
    __slots__ = (
        "directory", "_remote", "base_offset", "_stem", "config", "file_suffix", "read_only",
        "_time_fn", "_file", "index_lock", "pins", "evictable", "report", "rebuilt_indexes",
        "_final_time_entry", "_active", "scan_lock", "_lazy_offset_index", "_lazy_time_index",
        "recovering", "deleted", "txn_index", "rolling_based_timestamp",
        "max_timestamp_and_offset", "bytes_since_last_index_entry", "created_ms",
        "roll_jitter_ms", "_append_pinned", "_index_interval_bytes", "_indexes_with_room",
        "_index_files_exist",
    )

    def __init__(self, directory: StrPath, base_offset: int, config: LogConfig, *,
                 file_suffix: str = "", read_only: bool = False,
                 time_fn: Callable[[], float] = time.time, rng: random.Random | None = None,
                 size: int | None = None) -> None:
        self.directory = storage.normalize(os.fspath(directory))
        # A remote segment (an fsspec URL) is read through storage.range_buffer, never written.
        self._remote = storage.is_remote(self.directory)
        if self._remote and not read_only:
            storage.check_writable(self.directory)
        self.base_offset = base_offset
        self._stem = file_path(self.directory, base_offset, "")
        self.config = config
        self.file_suffix = file_suffix
        self.read_only = read_only
        self._time_fn = time_fn
        self.index_lock = threading.RLock()
        self.pins = 0
        self.evictable = False  # until built: creating the file touches the descriptor cache
        #: where a repair found after loading goes (the loader's RecoveryReport.add)
        self.report: Callable[..., None] | None = None
        #: by ``recover``: [(index path, entries before or None if missing, after)] changed
        self.rebuilt_indexes: list[tuple[str, int | None, int, bool]] = []
        self._final_time_entry: TimestampOffset | None = None  # written by recovery
        self._active = False       # set by LocalLog for the segment appends go to
        # ``size`` may come from the loader's directory scan.
        self._file = FileRecords(self._path(LOG_SUFFIX), self, remote=self._remote,
                                 read_only=read_only, size=size)
        # Held by scans and by truncation. Lock order: the scan lock, then the index lock
        # (reads take them so, and so does loading an index, in LazyIndex: the other order
        # deadlocked a time index opened by retention against a read and hung CI).
        self.scan_lock = threading.RLock()
        self._lazy_offset_index = LazyIndex(self, OffsetIndex)
        self._lazy_time_index = LazyIndex(self, TimeIndex)
        self.recovering = False
        self.deleted = False
        self.txn_index = TransactionIndex(self._path(TXN_INDEX_SUFFIX), base_offset, read_only)
        self.rolling_based_timestamp: int | None = None
        #: largest timestamp appended and its offset (None: not read yet); the appender keeps it
        self.max_timestamp_and_offset: TimestampOffset | None = None
        self.bytes_since_last_index_entry = 0
        self.created_ms = int(time_fn() * 1000)
        self.roll_jitter_ms = config.random_segment_jitter(rng or _RNG)
        #: pinned by ``set_active`` for the appends
        self._append_pinned = False
        #: ``index.interval.bytes``, read from the config at the first append
        self._index_interval_bytes: int | None = None
        #: the index objects ``should_roll`` last found not full
        self._indexes_with_room: tuple[OffsetIndex, TimeIndex] | None = None
        #: both index files known to exist (``sanity_check`` saw them): ``close`` stats neither
        self._index_files_exist = False
        self.evictable = True

    def set_active(self, active: bool) -> None:
        """Mark the segment appends go to (set by ``LocalLog``). A writable active segment
        stays pinned while active: every append uses its descriptor and indexes, and pinning
        per append cost two lock round trips (Kafka keeps every segment open)."""
        self._active = active
        self._indexes_with_room = None
        if active and not self.read_only and not self._append_pinned:
            OPEN_SEGMENTS.pin(self)
            self._append_pinned = True
        elif not active and self._append_pinned:
            OPEN_SEGMENTS.unpin(self)
            self._append_pinned = False

    def drop_handles(self):
        """Let go of the descriptor and mappings (the descriptor cache's call, for an unpinned
        segment): reopened on next use; a writable index stays consistent on disk."""
        self._file.drop_handles()
        self._lazy_offset_index.drop()
        self._lazy_time_index.drop()

    def release_handles(self) -> None:
        """Drop the descriptor and mappings now (reopened on next use), as recovery does."""
        OPEN_SEGMENTS.forget(self)
        if self.pins == 0:
            self.drop_handles()

    def _path(self, suffix):
        return self._stem + suffix + self.file_suffix

    # ------------------------------------------------------------------------------ indexes
    @property
    def index_path(self) -> str:
        return self._path(INDEX_SUFFIX)

    @property
    def time_index_path(self) -> str:
        return self._path(TIME_INDEX_SUFFIX)

    @property
    def offset_index(self) -> OffsetIndex:
        index = self._lazy_offset_index.index
        if index is None:
            index = self._lazy_offset_index.get()
        OPEN_SEGMENTS.touch(self)
        return index

    @property
    def time_index(self) -> TimeIndex:
        index = self._lazy_time_index.index
        if index is None:
            index = self._lazy_time_index.get()
        OPEN_SEGMENTS.touch(self)
        return index

    def batch_starts_at(self, position: int, offset: int) -> bool:
        """Whether a batch holding ``offset`` may start at byte ``position``: its header is
        there and plausible (how an index entry is checked against the log)."""
        buf = self._file.buffer_for(position, position + HEADER_SIZE_UP_TO_MAGIC)
        return batch_header_plausible(buf, position, self.base_offset, offset)

    def indexes_opened(self) -> bool:
        return self._lazy_offset_index.index is not None or \
            self._lazy_time_index.index is not None

    def sanity_check(self, time_index_newly_created: bool = False,
                     names: Iterable[str] | None = None) -> None:
        """Kafka's load-time check: the offset index must exist; the transaction index must
        be sound. (The offset and time indexes are checked when first opened.) ``names``:
        the directory's file names, when the caller has listed it already."""
        def exists(path):
            return os.path.basename(path) in names if names is not None else \
                os.path.exists(path)
        if not exists(self.index_path):
            raise FileNotFoundError(f"offset index file {self.index_path} does not exist")
        if time_index_newly_created:
            self.time_index.resize(0)
        self._index_files_exist = True
        if exists(self.txn_index.path):
            self.txn_index.sanity_check()

    def full_sanity_check(self) -> None:
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        self.txn_index.sanity_check()

    def resize_indexes(self, size: int) -> None:
        with OPEN_SEGMENTS.pinned(self):    # (an index evicted meanwhile stays as resized)
            self.offset_index.resize(size)
            self.time_index.resize(size)

    # ------------------------------------------------------------------------------ the file
    @property
    def log_path(self) -> str:
        return self._file.path

    @property
    def size(self) -> int:
        """Bytes in the ``.log`` file."""
        return self._file.size

    def buffer(self) -> Any:
        """The ``.log``'s read-only mapping as it is now (b"" if empty): FileRecords.buffer."""
        return self._file.buffer()

    def read_bytes(self, position: int, size: int, now: bool = False) -> bytes:
        """``size`` bytes from ``position`` (fewer at the end); ``FileRecords.read_bytes``."""
        return self._file.read_bytes(position, size, now)

    def cut_since_mapped(self, end: int) -> FileShrunkError | None:
        """``FileRecords.cut_since_mapped`` of the ``.log``."""
        return self._file.cut_since_mapped(end)

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= _INT32_MAX

    def _ensure_offset_in_range(self, offset):
        if not self.can_convert_to_relative_offset(offset):
            raise IndexOffsetOverflowError(
                f"offset {offset} does not fit segment {self.log_path} (base offset "
                f"{self.base_offset})")

    # ------------------------------------------------------------------------------ append
    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_ts().timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._max_ts().offset

    def _max_ts(self):
        if self.max_timestamp_and_offset is None and self.read_only and self._active:
            # batches a live or killed writer did not index yet count (as recovery finds)
            self._load_largest_timestamp()
        if self.max_timestamp_and_offset is None:
            last = self.time_index.last_entry     # opening it may set the value (unindexed)
            if self.max_timestamp_and_offset is None:
                self.max_timestamp_and_offset = last
        return self.max_timestamp_and_offset

    def append(self, largest_offset: int, largest_timestamp: int,
               shallow_offset_of_max_timestamp: int, records: Any) -> None:
        """Append whole batches (bytes) whose last offset is ``largest_offset``; write an index
        entry when more than ``index.interval.bytes`` were appended since the last one.

        One ``pwrite`` from the caller's buffer; for one batch (the common case) Kafka's
        per-batch index step follows inline, without a walk of the bytes."""
        data = records if type(records) in (bytes, bytearray) else \
            memoryview(records).cast("B")
        size = len(data)
        if size == 0:
            return
        physical_position = self._file.size
        if physical_position == 0:
            self.rolling_based_timestamp = largest_timestamp
        if not 0 <= largest_offset - self.base_offset <= _INT32_MAX:
            self._ensure_offset_in_range(largest_offset)
        pinned = self._append_pinned
        if not pinned:             # (not ``with OPEN_SEGMENTS.pinned(self)``: once per append)
            OPEN_SEGMENTS.pin(self)
        try:
            self._file.append(data, physical_position)
            interval = self._index_interval_bytes
            if interval is None:
                interval = self._index_interval_bytes = self.config["index.interval.bytes"]
            if size != _HEADER.unpack_from(data)[1] + LOG_OVERHEAD:
                self._index_batches(walk_batches(data, validate_crc=False)[0],
                                    physical_position, interval)
                return
            if largest_timestamp > (self.max_timestamp_and_offset or self._max_ts())[0]:
                self.max_timestamp_and_offset = TimestampOffset(
                    largest_timestamp, shallow_offset_of_max_timestamp)
            if self.bytes_since_last_index_entry > interval:
                self.index_entry(largest_offset, physical_position, size)
            else:
                self.bytes_since_last_index_entry += size
        finally:
            if not pinned:
                OPEN_SEGMENTS.unpin(self)

    def index_entry(self, largest_offset: int, physical_position: int, size: int) -> bool:
        """The index step of an append of one batch (``size`` bytes at ``physical_position``,
        last offset ``largest_offset``): an offset index entry, and a time index entry for the
        largest timestamp so far. Returns whether both indexes still have room."""
        self._indexes_with_room = None
        self.offset_index.append(largest_offset, physical_position)
        so_far = self._max_ts()
        self.time_index.maybe_append(so_far[0], so_far[1])
        self.bytes_since_last_index_entry = size
        return not (self.offset_index.is_full() or self.time_index.is_full())

    def forget_index_room(self) -> None:
        """Entries went into the indexes outside ``index_entry``: look at their room again."""
        self._indexes_with_room = None

    def append_handles(self) -> tuple[FileRecords, Any]:
        """The ``.log``'s ``FileRecords`` and descriptor, for ``ActiveSegmentAppender``."""
        return self._file, self._file.descriptor()

    def _index_batches(self, batches, position, interval):
        """Index entries for several batches appended at ``position`` in one write, as
        Kafka's LogSegment.append makes them: batch by batch, an offset index entry (and a
        time index entry for the largest timestamp so far, when it grew) at each batch that
        starts more than ``interval`` bytes after the last entry (one kernel pass)."""
        so_far = self._max_ts()
        offsets, stamps, max_ts, max_offset, since = index_entries_for(
            batches, interval, position, self.bytes_since_last_index_entry, so_far[0],
            so_far[1], self.time_index.last_entry.timestamp)
        if (max_ts, max_offset) != so_far:
            self.max_timestamp_and_offset = TimestampOffset(max_ts, max_offset)
        if len(offsets):
            self._indexes_with_room = None
            self.offset_index.append_many(offsets[:, 0], offsets[:, 1])
            self.time_index.append_many(stamps[:, 0], stamps[:, 1])
        self.bytes_since_last_index_entry = since

    # ------------------------------------------------------------------------------ read
    def _checked_position(self, position):
        """An index position to scan from: a damaged index (trusted after a clean shutdown,
        as Kafka trusts it) can point outside the file; then the scan starts at 0."""
        return position if 0 <= position <= self._file.size else 0

    def translate_offset(self, offset: int, starting_position: int = 0
                         ) -> tuple[int, int] | None:
        """(position, size) of the first batch whose last offset >= ``offset``, or None."""
        if self._remote:
            return self._translate_remote(offset, starting_position)
        with self.scan_lock:
            position, size = self._translate(self._file.buffer(), offset, starting_position)
        return None if position < 0 else (position, size)

    def _translate(self, buf, offset, starting_position):
        """``translate_offset`` of a local segment over its mapping ``buf`` (the caller holds
        the scan lock): (position, size), position -1 when no batch holds ``offset``."""
        position, size, _, _, lies = self._lazy_offset_index.segment_read(
            buf, offset, starting_position, 0, 0, False)
        if lies:
            self._index_lies(self.offset_index.lookup(offset))
        return position, size

    def _translate_remote(self, offset, starting_position):
        """``translate_offset`` fetching only the blocks its walk from the index entry touches."""
        with self.scan_lock:
            start = starting_position
            if not (self._lazy_offset_index.distrusted or self._file.one_fetch):
                mapping = self.offset_index.lookup(offset)
                if mapping.position > starting_position:
                    if self.batch_starts_at(mapping.position, mapping.offset):
                        start = mapping.position
                    else:
                        self._index_lies(mapping)
            position, size = self._file.find_batch(start, offset)
        return None if position < 0 else (position, size)

    def _index_lies(self, mapping):
        """The offset index lies (``LazyIndex.distrust``): it is rebuilt from the log now
        (for the segment being appended to, at its roll: the appender owns its index)."""
        if self._lazy_offset_index.distrust(mapping) and not self.read_only and \
                not self._active and not self.deleted:
            self.rebuild_indexes()

    def rebuild_indexes(self) -> None:
        """Rewrite the offset and time indexes from the batches of the ``.log`` (nothing is
        cut from the log; see ``recover`` for that)."""
        with self.scan_lock, OPEN_SEGMENTS.pinned(self):
            rebuild_index_files(self, self._file)
            self._lazy_offset_index.distrusted = False

    def write_indexes(self, offset_index: bytes, time_index: bytes, max_ts: int,
                      max_ts_offset: int) -> None:
        """The index files replaced with exactly these bytes (``replace_index_files``; what
        changed in ``rebuilt_indexes``), and the largest timestamp they end with."""
        self.rebuilt_indexes = replace_index_files(
            self, ((self._lazy_offset_index, offset_index), (self._lazy_time_index, time_index)))
        self.max_timestamp_and_offset = TimestampOffset(max_ts, max_ts_offset)
        self._final_time_entry = self.max_timestamp_and_offset

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = False, zero_copy: bool = False) -> FetchDataInfo | None:
        """A FetchDataInfo of the batches from the first with last offset >= ``start_offset``
        (None when that is beyond this segment): at most ``max_size`` bytes (the first batch
        whole, with ``min_one_message``), none at or past ``max_position``; with ``zero_copy``
        a local segment's records are a ``FileSlice`` of its file (for ``sendfile``)."""
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for log read from segment "
                             f"{self.log_path}")
        if max_position is None:
            max_position = self._file.size
        # One lock, one mapping, one kernel call (Kafka's LogSegment.read: OffsetIndex.lookup
        # + searchForOffsetWithSize + slice); records copied: nothing holds the mapping.
        with self.scan_lock:
            if not self._remote:
                position, size, data, incomplete, lies = self._lazy_offset_index.segment_read(
                    self._file.buffer(), start_offset, 0,
                    0 if zero_copy else max_size, max_position, min_one_message and not zero_copy)
                if lies:
                    self._index_lies(self.offset_index.lookup(start_offset))
                if position < 0:
                    return None
                if not zero_copy:
                    return FetchDataInfo((start_offset, self.base_offset, position),
                                         data, incomplete)
            else:
                found = self._translate_remote(start_offset, 0)
                if found is None:
                    return None
                position, size = found
            metadata = (start_offset, self.base_offset, position)
            adjusted = max(max_size, size) if min_one_message else max_size
            if adjusted == 0:
                return FetchDataInfo(metadata, b"")
            fetch = max(0, min(max_position - position, adjusted))
            records = self.read_bytes(position, fetch) if self._remote else \
                self._file.slice(position, fetch)
        return FetchDataInfo(metadata, records, adjusted < size)

    def fetch_upper_bound_offset(self, start_position: OffsetPosition | int,
                                 fetch_size: int) -> int | None:
        found = self.offset_index.fetch_upper_bound_offset(start_position, fetch_size)
        return None if found is None else found.offset

    def collect_aborted_txns(self, fetch_offset: int,
                             upper_bound_offset: int) -> TxnIndexSearchResult:
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    def batches(self, start_position: int = 0, validate_crc: bool = False
                ) -> tuple[np.ndarray, int, int, str | None]:
        """Walk the segment's batches: ``(batches, status, stop, message)`` from the kernel;
        ``validate_crc`` stops at a batch that fails its CRC (``WALK_INVALID``)."""
        with self.scan_lock:
            file = self._file
            return walk_batches(file.buffer_for(start_position, file.size), start_position,
                                validate_crc=validate_crc, stop_on_invalid=validate_crc)

    def read_next_offset(self) -> int:
        """The offset after the last batch (the base offset when the segment is empty)."""
        last = self.last_batch()
        return self.base_offset if last is None else int(last["last_offset"]) + 1

    def last_batch(self) -> Any:
        """The last batch's ``BATCH_DTYPE`` row (a walk from the last index entry), or None."""
        index = None if self._lazy_offset_index.distrusted or self._file.one_fetch else \
            self.offset_index
        start = 0 if index is None else \
            self._checked_position(index.lookup(index.last_offset).position)
        batches, _, stop, _ = self.batches(start)
        if start > 0 and (len(batches) == 0 or stop < self._file.size):
            # The walk from the last entry did not reach the end: the entry is not at a
            # batch boundary (the index lies) or the tail is torn; walk from the start.
            batches, _, _, _ = self.batches(0)
        return batches[-1] if len(batches) else None

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int = 0
                                 ) -> TimestampOffset | None:
        """(timestamp, offset) of the first record with timestamp >= ``timestamp`` at or after
        ``starting_offset``, or None."""
        position = 0            # a file fetched whole by any read: no index asked
        if not self._file.one_fetch:
            offset = max(self.time_index.lookup(timestamp).offset, starting_offset)
            position = self._checked_position(self.offset_index.lookup(offset).position)
        with self.scan_lock:
            return self._file.search_for_timestamp(timestamp, starting_offset, position)

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, else the file's modification time (ms)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self._file.last_modified_ms

    # ------------------------------------------------------------------------------ roll
    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        if self.rolling_based_timestamp is None and self._file.size:
            batches = walk_batches(self._file.buffer(), 0, validate_crc=False, max_batches=1)[0]
            if len(batches):
                self.rolling_based_timestamp = int(batches["max_timestamp"][0])
        if self.rolling_based_timestamp is not None and self.rolling_based_timestamp >= 0:
            return message_timestamp - self.rolling_based_timestamp
        return now_ms - self.created_ms

    def should_roll(self, max_segment_ms: int, max_segment_bytes: int,
                    max_timestamp_in_messages: int, max_offset_in_messages: int,
                    messages_size: int, now_ms: int) -> bool:
        """Kafka's roll conditions: size, time (with jitter), a full index, offset overflow."""
        size = self._file.size
        if size > max_segment_bytes - messages_size:
            return True
        if size > 0:
            rolling = self.rolling_based_timestamp
            # (time_waited_for_roll's answer once the first batch's timestamp is known)
            waited = max_timestamp_in_messages - rolling if rolling is not None and \
                rolling >= 0 else self.time_waited_for_roll(now_ms, max_timestamp_in_messages)
            if waited > max_segment_ms - self.roll_jitter_ms:
                return True
        offset_index, time_index = self._lazy_offset_index.index, self._lazy_time_index.index
        room = self._indexes_with_room
        if room is None or room[0] is not offset_index or room[1] is not time_index:
            # An index fills only by an append, which forgets this (as does a change of
            # active segment, and reopening or rebuilding an index makes new objects).
            offset_index, time_index = self.offset_index, self.time_index
            if offset_index.is_full() or time_index.is_full():
                return True
            self._indexes_with_room = (offset_index, time_index)
        return not 0 <= max_offset_in_messages - self.base_offset <= _INT32_MAX

    def on_becoming_inactive_segment(self) -> None:
        """At roll: the last time index entry, then trim the indexes (or rebuild them, when
        a read found the offset index lying)."""
        with OPEN_SEGMENTS.pinned(self):
            self.time_index.maybe_append(self.max_timestamp_so_far,
                                         self.offset_of_max_timestamp_so_far,
                                         skip_full_check=True)
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()
        self._active = False
        if self._lazy_offset_index.distrusted and not self.read_only:
            self.rebuild_indexes()

    # ------------------------------------------------------------------------------ recovery
    def recover(self, producer_state: ProducerStateManager | None = None,
                leader_epochs: LeaderEpochCache | None = None,
                before_truncate: Callable[[LogSegment, int, str], None] | None = None,
                txn_index_exists: bool | None = None, last_segment: bool = True) -> int:
        """Rebuild the indexes from the ``.log`` and cut it at the first invalid batch.

        Validates structure, CRC and offset range of every batch; returns the bytes truncated.
        Structure is what ``records.validate_batches`` checks: a CRC-valid batch whose header
        fields disagree with its records (or whose payload does not decompress to records) is
        invalid like one with a bad CRC, so reading the recovered segment never meets it.
        ``producer_state`` is the state at this segment's base offset (for the transaction
        index); by default it is loaded from the producer snapshot at or below it.
        ``leader_epochs`` (a LeaderEpochCache) learns the epochs of the valid batches.
        ``before_truncate(segment, valid_bytes, reason)`` is called before bytes are cut.
        ``txn_index_exists``: whether the transaction index file exists, when the caller
        knows it from a directory listing (False spares looking for it to reset it).
        ``last_segment``: whether the segment ends the log (for the reason given to
        ``before_truncate``: a batch cut at the end of the last segment is a torn write, at the
        end of another one missing data).
        """
        if producer_state is None:
            producer_state = ProducerStateManager(self.directory)
            producer_state.load_latest_snapshot(self.base_offset)
        with self.scan_lock, OPEN_SEGMENTS.pinned(self):
            self.recovering = True
            try:
                return recover_segment(self, self._file, producer_state, leader_epochs,
                                       before_truncate, txn_index_exists, last_segment)
            finally:
                self.recovering = False
                self._lazy_offset_index.distrusted = False

    # ------------------------------------------------------------------------------ truncate
    def truncate_to(self, offset: int) -> int:
        """Remove every batch with offsets >= ``offset`` (the batch holding ``offset`` goes
        whole) and the index entries for them; returns the bytes truncated."""
        with self.scan_lock, OPEN_SEGMENTS.pinned(self):
            found = self.translate_offset(offset)
            self.offset_index.truncate_to(offset)
            self.time_index.truncate_to(offset)
            self.txn_index.truncate_to(offset)
            # Trimmed first, so no entry past the cut stays in the file (an index reopened
            # after its segment released it must read what is in memory now).
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()
            self.offset_index.resize(self.config.max_index_size)
            self.time_index.resize(self.config.max_index_size)
            truncated = 0
            if found is not None:
                truncated = self._file.size - found[0]
                self._file.truncate_to(found[0])
            if self._file.size == 0:
                self.created_ms = int(self._time_fn() * 1000)
                self.rolling_based_timestamp = None
            self.bytes_since_last_index_entry = 0
            # As Kafka: the largest timestamp known before the cut decides whether to look for
            # it again (read from the truncated time index, an emptied one would say -1).
            if self.max_timestamp_so_far >= 0:
                self._load_largest_timestamp()
            return truncated

    def _load_largest_timestamp(self):
        last = None if self._file.one_fetch else self.time_index.last_entry
        position = 0 if last is None else \
            self._checked_position(self.offset_index.lookup(last.offset).position)
        batches = self.batches(position)[0]
        self.max_timestamp_and_offset = last
        self.learn_largest_timestamp(batches)

    def learn_largest_timestamp(self, batches: np.ndarray) -> None:
        """Raise the largest timestamp so far to the largest of ``batches`` (a walk of this
        segment's, ``BATCH_DTYPE``), as when a read-only segment reads without a time index."""
        if len(batches):
            i = int(np.argmax(batches["max_timestamp"]))
            so_far = self.max_timestamp_and_offset
            if so_far is None or batches["max_timestamp"][i] > so_far.timestamp:
                self.max_timestamp_and_offset = TimestampOffset(
                    int(batches["max_timestamp"][i]), int(batches["last_offset"][i]))

    # ------------------------------------------------------------------------------ lifecycle
    def flush(self) -> None:
        """fsync the ``.log`` and flush the indexes."""
        if self.read_only:
            return
        self._file.flush()
        self._lazy_offset_index.flush()
        self._lazy_time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Append the final time index entry, trim the indexes, release the files."""
        if self._lazy_offset_index.distrusted and not self.read_only and not self.deleted:
            self.rebuild_indexes()       # a read found it lying; it goes with the log now
        OPEN_SEGMENTS.forget(self)
        self.evictable = False
        if not self.read_only:
            try:
                # a segment always has its index files, as in Kafka
                if not self._index_files_exist:
                    for lazy in (self._lazy_offset_index, self._lazy_time_index):
                        if lazy.index is None and not os.path.exists(lazy.path):
                            lazy.get()
                # (recovery wrote it already unless an append or truncation came since)
                if self.max_timestamp_and_offset is not None and \
                        self.max_timestamp_and_offset != self._final_time_entry:
                    self.time_index.maybe_append(self.max_timestamp_so_far,
                                                 self.offset_of_max_timestamp_so_far,
                                                 skip_full_check=True)
            except (CorruptIndexError, InvalidOffsetError, InvalidTimestampError) as e:
                # close() always releases the files; the next load checks and rebuilds
                log.warning("closing %s without its final time index entry: %s",
                            self.log_path, e)
        self._lazy_offset_index.close()
        self._lazy_time_index.close()
        self._file.close()

    def close_handlers(self) -> None:
        """Release files without trimming (used when a segment is deleted)."""
        OPEN_SEGMENTS.forget(self)
        self.evictable = False
        self._lazy_offset_index.close_handler()
        self._lazy_time_index.close_handler()
        self._file.close()

    def files(self) -> list[str]:
        return [self.log_path, self.index_path, self.time_index_path, self.txn_index.path]

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every file of the segment (e.g. to ``.deleted``); missing indexes are skipped."""
        def renamed(path):
            base = path[:-len(old_suffix)] if old_suffix and path.endswith(old_suffix) else path
            return base + new_suffix
        self._file.rename_to(renamed(self.log_path))
        for lazy in (self._lazy_offset_index, self._lazy_time_index):
            lazy.rename_to(renamed(lazy.path))
        self.txn_index.rename_to(renamed(self.txn_index.path))
        self.file_suffix = new_suffix

    def mark_deleted(self) -> None:
        """Prepare for deletion while readers may still hold the segment: the indexes are
        opened now (never lazily from a renamed or removed file), and from here on the files
        are only unlinked, not closed; the mappings and descriptor go with the object."""
        self.evictable = False
        OPEN_SEGMENTS.forget(self)
        self._file.descriptor()   # opened now too: the files are renamed, then removed
        self.offset_index
        self.time_index
        self.txn_index.entries_array()      # (read from memory once the file is removed)
        self.deleted = True

    def delete_files(self) -> None:
        """Remove every file of the segment (whatever its suffix). A segment marked deleted
        keeps its open descriptor and mappings for readers until it is collected."""
        if not self.deleted:
            self.close_handlers()
        paths = self.files()
        for lazy in (self._lazy_offset_index, self._lazy_time_index):
            if lazy.index is not None:
                paths.append(lazy.index.path)
        for p in set(paths):
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._file.size})"
