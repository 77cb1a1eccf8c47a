"""``LogSegment``: one ``.log`` file with its offset, time and transaction indexes."""
from __future__ import annotations

import logging
import mmap
import os
import random
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple

import numpy as np

from kafkalog._kernels import find_batch, index_entries_for, walk_batches
from kafkalog.errors import CorruptIndexError, IndexOffsetOverflowError
from kafkalog.files import (
    INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, file_path,
)
from kafkalog.index import OffsetIndex, TimeIndex, TimestampOffset, TransactionIndex
from kafkalog.producer_state import ProducerStateManager
from kafkalog.records import decode_batches

if TYPE_CHECKING:
    from kafkalog._typing import StrPath
    from kafkalog.config import LogConfig
    from kafkalog.index import AbortedTxn, OffsetPosition, TxnIndexSearchResult
    from kafkalog.leader_epoch import LeaderEpochCache

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
_RNG = random.Random()

class LogOffsetMetadata(NamedTuple):
    """Where an offset is: its segment's base offset and its byte position in that segment."""
    message_offset: int
    segment_base_offset: int
    relative_position_in_segment: int


class FetchDataInfo:
    """The result of a read: ``records`` (bytes of whole batches, except that the last may be
    cut by the size limit), where the read started, and for read_committed the aborted
    transactions (a list of ``AbortedTxn``) in the range."""
    __slots__ = ("fetch_offset_metadata", "records", "first_entry_incomplete",
                 "aborted_transactions")

    def __init__(self, fetch_offset_metadata: LogOffsetMetadata, records: Any = b"",
                 first_entry_incomplete: bool = False,
                 aborted_transactions: list[AbortedTxn] | None = None) -> None:
        self.fetch_offset_metadata = fetch_offset_metadata
        self.records = records
        self.first_entry_incomplete = first_entry_incomplete
        self.aborted_transactions = aborted_transactions

    def __repr__(self) -> str:
        return (f"FetchDataInfo({self.fetch_offset_metadata}, {len(self.records)} bytes, "
                f"aborted={self.aborted_transactions})")


class LogSegment:
    """A segment of a partition's log: the ``.log`` file of batches from ``base_offset`` on, a
    sparse offset index, a time index and a transaction index.

    Indexes are opened lazily (the first lookup or append opens them), so loading a log of
    many segments touches only directory entries. Appends are not thread-safe (the log
    serialises them); reads may run concurrently with appends.
    """

    def __init__(self, directory: StrPath, base_offset: int, config: LogConfig, *,
                 file_suffix: str = "", read_only: bool = False,
                 time_fn: Callable[[], float] = time.time, rng: random.Random | None = None,
                 size: int | None = None) -> None:
        self.directory = os.fspath(directory)
        self.base_offset = base_offset
        self._stem = file_path(self.directory, base_offset, "")
        self.config = config
        self.file_suffix = file_suffix
        self.read_only = read_only
        self._time_fn = time_fn
        self.log_path = self._path(LOG_SUFFIX)
        # The .log is opened on first use: a log of many segments holds no descriptor for
        # the ones nobody reads. ``size`` may come from the loader's directory scan.
        self._fd_value = -1
        self._finalizer: Any = None
        self._fd_lock = threading.Lock()
        if size is None:
            if not read_only and not os.path.exists(self.log_path):
                self._open_fd()
            size = os.stat(self.log_path).st_size
        self._size = size
        self._map: Any = None
        self._map_lock = threading.Lock()
        self._scan_lock = threading.RLock()      # held by scans and by truncation
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._pending_rebuild = False
        self._recovering = False
        self.deleted = False
        self.txn_index = TransactionIndex(self._path(TXN_INDEX_SUFFIX), base_offset)
        self.rolling_based_timestamp: int | None = None
        self._max_timestamp_and_offset: TimestampOffset | None = None
        self.bytes_since_last_index_entry = 0
        self.created_ms = int(time_fn() * 1000)
        self.roll_jitter_ms = config.random_segment_jitter(rng or _RNG)

    @property
    def _fd(self):
        fd = self._fd_value
        return fd if fd >= 0 else self._open_fd()

    def _open_fd(self):
        with self._fd_lock:
            if self._fd_value < 0:
                flags = os.O_RDONLY if self.read_only else os.O_RDWR | os.O_CREAT
                fd = os.open(self.log_path, flags, 0o644)
                # Closed by close(), or when the segment is collected (a deleted segment may
                # still be read by a reader holding an older segment list).
                self._fd_box = [fd]
                self._finalizer = weakref.finalize(self, _close_fd, self._fd_box)
                self._fd_value = fd
            return self._fd_value

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
        if self._offset_index is None:
            self._offset_index = self._open_index(OffsetIndex, self.index_path)
            self._rebuild_if_needed()
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._time_index = self._open_index(TimeIndex, self.time_index_path)
            self._rebuild_if_needed()
        return self._time_index

    def _open_index(self, cls, path):
        if self.read_only and not os.path.exists(path):
            log.warning("%s is missing; reading %s without it", path, self.log_path)
            return self._unindexed(cls, path)
        index = cls(path, self.base_offset, max_index_size=self.config.max_index_size,
                    writable=not self.read_only)
        # Left at its preallocated size by a crash: the written entries end before the
        # all-zero tail.
        index.drop_zero_tail()
        try:
            index.sanity_check()
        except CorruptIndexError as e:
            if self.read_only:
                log.warning("%s; reading %s without it", e, self.log_path)
                index.close_handler()
                return self._unindexed(cls, path)
            # A damaged index is rebuilt from the log, as Kafka's loader does.
            log.warning("%s; rebuilding it from %s", e, self.log_path)
            index.close_handler()
            os.remove(path)
            index = cls(path, self.base_offset, max_index_size=self.config.max_index_size)
            self._pending_rebuild = True
        return index

    def _unindexed(self, cls, path):
        """A read-only segment's stand-in for a missing or damaged index: no entries (lookups
        scan from the start), nothing written; the largest timestamp comes from the batches."""
        if cls is TimeIndex:
            batches = walk_batches(self.buffer(), 0, validate_crc=False)[0]
            if len(batches):
                i = int(np.argmax(batches["max_timestamp"]))
                self._max_timestamp_and_offset = TimestampOffset(
                    int(batches["max_timestamp"][i]), int(batches["last_offset"][i]))
        return cls(path, self.base_offset, empty=True)

    def _rebuild_if_needed(self):
        # Within recover() the indexes are rebuilt anyway (and a cut must go through its hook)
        if self._pending_rebuild and not self._recovering:
            self._pending_rebuild = False
            self.recover()

    def indexes_opened(self) -> bool:
        return self._offset_index is not None or self._time_index is not None

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
        if exists(self.txn_index.path):
            self.txn_index.sanity_check()

    def full_sanity_check(self) -> None:
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        self.txn_index.sanity_check()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    # ------------------------------------------------------------------------------ the file
    @property
    def size(self) -> int:
        """Bytes in the ``.log`` file."""
        return self._size

    def buffer(self) -> Any:
        """A read-only mapping of the ``.log`` file as it is now (b"" when empty)."""
        with self._map_lock:
            if self._size == 0:
                return b""
            current = self._map
            if current is None or len(current) != self._size:
                current = mmap.mmap(self._fd, self._size, access=mmap.ACCESS_READ)
                self._map = current
            return current

    def read_bytes(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

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
        if self._max_timestamp_and_offset is None:
            last = self.time_index.last_entry     # opening it may set the value (unindexed)
            if self._max_timestamp_and_offset is None:
                self._max_timestamp_and_offset = last
        return self._max_timestamp_and_offset

    def append(self, largest_offset: int, largest_timestamp: int,
               shallow_offset_of_max_timestamp: int, records: Any) -> None:
        """Append whole batches (bytes) whose last offset is ``largest_offset``; write an index
        entry when more than ``index.interval.bytes`` were appended since the last one."""
        data = memoryview(records).cast("B")
        if len(data) == 0:
            return
        physical_position = self._size
        if physical_position == 0:
            self.rolling_based_timestamp = largest_timestamp
        self._ensure_offset_in_range(largest_offset)
        written = 0
        try:
            while written < len(data):     # a short write is continued, not an error
                written += os.pwrite(self._fd, data[written:], physical_position + written)
        except OSError:
            try:                           # leave no partial batch behind, if the disk lets us
                os.ftruncate(self._fd, physical_position)
            except OSError:
                pass                       # recovery at the next open cuts it off
            raise
        self._size += len(data)
        if largest_timestamp > self.max_timestamp_so_far:
            self._max_timestamp_and_offset = TimestampOffset(largest_timestamp,
                                                             shallow_offset_of_max_timestamp)
        if self.bytes_since_last_index_entry > self.config["index.interval.bytes"]:
            self.offset_index.append(largest_offset, physical_position)
            self.time_index.maybe_append(self.max_timestamp_so_far,
                                         self.offset_of_max_timestamp_so_far)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += len(data)

    # ------------------------------------------------------------------------------ read
    def _checked_position(self, position):
        """An index position to scan from: a damaged index (trusted after a clean shutdown,
        as Kafka trusts it) can point outside the file; then the scan starts at 0."""
        return position if 0 <= position <= self._size else 0

    def translate_offset(self, offset: int, starting_position: int = 0
                         ) -> tuple[int, int] | None:
        """(position, size) of the first batch whose last offset >= ``offset``, or None."""
        with self._scan_lock:
            mapping = self.offset_index.lookup(offset)
            buf = self.buffer()
            start = max(self._checked_position(mapping.position), starting_position)
            position, size = find_batch(buf, min(start, len(buf)), len(buf), offset)
        return None if position < 0 else (position, size)

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = False) -> FetchDataInfo | None:
        """Read whole batches from the first with last offset >= ``start_offset``.

        Returns a FetchDataInfo, or None when ``start_offset`` is beyond this segment. At most
        ``max_size`` bytes (or the first batch whole, with ``min_one_message``) and nothing at
        or past ``max_position``.
        """
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for log read from segment "
                             f"{self.log_path}")
        if max_position is None:
            max_position = self._size
        with self._scan_lock:
            found = self.translate_offset(start_offset)
            if found is None:
                return None
            position, size = found
            metadata = LogOffsetMetadata(start_offset, self.base_offset, position)
            adjusted = max(max_size, size) if min_one_message else max_size
            if adjusted == 0:
                return FetchDataInfo(metadata, b"")
            fetch_size = max(0, min(max_position - position, adjusted))
            data = self.read_bytes(position, fetch_size)
        return FetchDataInfo(metadata, data, first_entry_incomplete=adjusted < size)

    def fetch_upper_bound_offset(self, start_position: OffsetPosition | int,
                                 fetch_size: int) -> int | None:
        found = self.offset_index.fetch_upper_bound_offset(start_position, fetch_size)
        return None if found is None else found.offset

    def collect_aborted_txns(self, fetch_offset: int,
                             upper_bound_offset: int) -> TxnIndexSearchResult:
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    def batches(self, start_position: int = 0, validate_crc: bool = False
                ) -> tuple[np.ndarray, int, int, str | None]:
        """Walk the segment's batches: ``(batches, status, stop, message)`` from the kernel."""
        with self._scan_lock:
            return walk_batches(self.buffer(), start_position, validate_crc=validate_crc)

    def read_next_offset(self) -> int:
        """The offset after the last batch (the base offset when the segment is empty)."""
        start = self.offset_index.lookup(self.offset_index.last_offset).position
        batches, _, _, _ = self.batches(self._checked_position(start))
        if len(batches):
            return int(batches["last_offset"][-1]) + 1
        return self.base_offset

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int = 0
                                 ) -> TimestampOffset | None:
        """(timestamp, offset) of the first record with timestamp >= ``timestamp`` at or after
        ``starting_offset``, or None."""
        ts_entry = self.time_index.lookup(timestamp)
        position = self._checked_position(
            self.offset_index.lookup(max(ts_entry.offset, starting_offset)).position)
        with self._scan_lock:
            buf = self.buffer()
            batches, _, _, _ = walk_batches(buf, position, validate_crc=False)
            candidates = np.nonzero(batches["max_timestamp"] >= timestamp)[0]
            for i in candidates:
                table = decode_batches(buf, batches[i:i + 1], self.log_path)
                recs = table.records
                hit = np.nonzero((recs["timestamp"] >= timestamp)
                                 & (recs["offset"] >= starting_offset))[0]
                if len(hit):
                    r = recs[hit[0]]
                    return TimestampOffset(int(r["timestamp"]), int(r["offset"]))
        return None

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, else the file's modification time (ms)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return int(os.stat(self.log_path).st_mtime * 1000)

    # ------------------------------------------------------------------------------ roll
    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        if self.rolling_based_timestamp is None and self._size:
            batches = walk_batches(self.buffer(), 0, validate_crc=False, max_batches=1)[0]
            if len(batches):
                self.rolling_based_timestamp = int(batches["max_timestamp"][0])
        if self.rolling_based_timestamp is not None and self.rolling_based_timestamp >= 0:
            return message_timestamp - self.rolling_based_timestamp
        return now_ms - self.created_ms

    def should_roll(self, max_segment_ms: int, max_segment_bytes: int,
                    max_timestamp_in_messages: int, max_offset_in_messages: int,
                    messages_size: int, now_ms: int) -> bool:
        """Kafka's roll conditions: size, time (with jitter), a full index, offset overflow."""
        reached_roll_ms = self.time_waited_for_roll(now_ms, max_timestamp_in_messages) > \
            max_segment_ms - self.roll_jitter_ms
        size = self._size
        return (size > max_segment_bytes - messages_size
                or (size > 0 and reached_roll_ms)
                or self.offset_index.is_full() or self.time_index.is_full()
                or not self.can_convert_to_relative_offset(max_offset_in_messages))

    def on_becoming_inactive_segment(self) -> None:
        """At roll: the last time index entry, then trim the indexes."""
        self.time_index.maybe_append(self.max_timestamp_so_far,
                                     self.offset_of_max_timestamp_so_far, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    # ------------------------------------------------------------------------------ recovery
    def recover(self, producer_state: ProducerStateManager | None = None,
                leader_epochs: LeaderEpochCache | None = None,
                before_truncate: Callable[[LogSegment, int, str], None] | None = None) -> int:
        """Rebuild the indexes from the ``.log`` and cut it at the first invalid batch.

        Validates structure, CRC and offset range of every batch; returns the bytes truncated.
        ``producer_state`` is the state at this segment's base offset (for the transaction
        index); by default it is loaded from the producer snapshot at or below it.
        ``leader_epochs`` (a LeaderEpochCache) learns the epochs of the valid batches.
        ``before_truncate(segment, valid_bytes, reason)`` is called before bytes are cut.
        """
        if producer_state is None:
            producer_state = ProducerStateManager(self.directory)
            producer_state.load_latest_snapshot(self.base_offset)
        with self._scan_lock:
            self._recovering = True
            try:
                return self._recover(producer_state, leader_epochs, before_truncate)
            finally:
                self._recovering = False
                self._pending_rebuild = False

    def _recover(self, producer_state, leader_epochs, before_truncate):
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        buf = self.buffer()
        batches, status, stop, reason = walk_batches(buf, 0, validate_crc=True,
                                                     stop_on_invalid=True)
        if len(batches):
            out_of_range = (batches["last_offset"] - self.base_offset > _INT32_MAX) | \
                (batches["last_offset"] < self.base_offset)
            if out_of_range.any():
                bad = int(np.argmax(out_of_range))
                raise IndexOffsetOverflowError(
                    f"segment {self.log_path} holds offset "
                    f"{int(batches['last_offset'][bad])} that does not fit its base offset "
                    f"{self.base_offset}")
        valid_bytes = int(batches["position"][-1] + batches["size"][-1]) if len(batches) \
            else 0
        offset_entries, time_entries, max_ts, max_ts_offset = index_entries_for(
            batches, self.config["index.interval.bytes"])
        self.offset_index.append_many(offset_entries[:, 0], offset_entries[:, 1])
        self.time_index.append_many(time_entries[:, 0], time_entries[:, 1])
        self._max_timestamp_and_offset = TimestampOffset(max_ts, max_ts_offset)
        producer_state.apply_batches(buf, batches, self.log_path, self.txn_index)
        if leader_epochs is not None:
            leader_epochs.assign_from_batches(batches)
        truncated = self._size - valid_bytes
        if truncated > 0:
            if before_truncate is not None:
                before_truncate(self, valid_bytes, reason or "an incomplete batch at the "
                                "end of the file (a torn write)")
            self._truncate_file(valid_bytes)
        self.offset_index.trim_to_valid_size()
        self.time_index.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        return truncated

    # ------------------------------------------------------------------------------ truncate
    def truncate_to(self, offset: int) -> int:
        """Remove every batch with offsets >= ``offset`` (the batch holding ``offset`` goes
        whole) and the index entries for them; returns the bytes truncated."""
        with self._scan_lock:
            found = self.translate_offset(offset)
            self.offset_index.truncate_to(offset)
            self.time_index.truncate_to(offset)
            self.txn_index.truncate_to(offset)
            self.offset_index.resize(self.config.max_index_size)
            self.time_index.resize(self.config.max_index_size)
            truncated = 0
            if found is not None:
                truncated = self._size - found[0]
                self._truncate_file(found[0])
            if self._size == 0:
                self.created_ms = int(self._time_fn() * 1000)
                self.rolling_based_timestamp = None
            self.bytes_since_last_index_entry = 0
            self._max_timestamp_and_offset = None
            if self.max_timestamp_so_far >= 0:
                self._load_largest_timestamp()
            return truncated

    def _load_largest_timestamp(self):
        last = self.time_index.last_entry
        position = self._checked_position(self.offset_index.lookup(last.offset).position)
        batches = walk_batches(self.buffer(), position, validate_crc=False)[0]
        self._max_timestamp_and_offset = last
        if len(batches):
            i = int(np.argmax(batches["max_timestamp"]))
            if batches["max_timestamp"][i] > last.timestamp:
                self._max_timestamp_and_offset = TimestampOffset(
                    int(batches["max_timestamp"][i]), int(batches["last_offset"][i]))

    def _truncate_file(self, size):
        with self._map_lock:
            self._map = None
        os.ftruncate(self._fd, size)
        self._size = size

    # ------------------------------------------------------------------------------ lifecycle
    def flush(self) -> None:
        """fsync the ``.log`` and flush the indexes."""
        if self.read_only:
            return
        os.fsync(self._fd)
        if self._offset_index is not None:
            self._offset_index.flush()
        if self._time_index is not None:
            self._time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Append the final time index entry, trim the indexes, release the files."""
        if not self.read_only:
            if self._offset_index is None and not os.path.exists(self.index_path):
                self.offset_index      # a segment always has its index files, as in Kafka
            if self._time_index is None and not os.path.exists(self.time_index_path):
                self.time_index
            if self._max_timestamp_and_offset is not None:
                self.time_index.maybe_append(self.max_timestamp_so_far,
                                             self.offset_of_max_timestamp_so_far,
                                             skip_full_check=True)
        if self._offset_index is not None:
            self._offset_index.close()
        if self._time_index is not None:
            self._time_index.close()
        self._release()

    def close_handlers(self) -> None:
        """Release files without trimming (used when a segment is deleted)."""
        if self._offset_index is not None:
            self._offset_index.close_handler()
        if self._time_index is not None:
            self._time_index.close_handler()
        self._release()

    def _release(self):
        with self._map_lock:
            self._map = None
        if self._finalizer is not None:
            self._finalizer()
        self._fd_value = -1

    def files(self) -> list[str]:
        return [self.log_path, self.index_path, self.time_index_path, self.txn_index.path]

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every file of the segment (e.g. to ``.deleted``); missing indexes are skipped."""
        def renamed(path):
            base = path[:-len(old_suffix)] if old_suffix and path.endswith(old_suffix) else path
            return base + new_suffix
        os.replace(self.log_path, renamed(self.log_path))
        self.log_path = renamed(self.log_path)
        for index, path in ((self._offset_index, self.index_path),
                            (self._time_index, self.time_index_path)):
            target = renamed(path)
            if index is not None:
                if os.path.exists(index.path):
                    index.rename_to(target)
            elif os.path.exists(path):
                os.replace(path, target)
        self.txn_index.rename_to(renamed(self.txn_index.path))
        self.file_suffix = new_suffix

    def mark_deleted(self) -> None:
        """Prepare for deletion while readers may still hold the segment: the indexes are
        opened now (never lazily from a renamed or removed file), and from here on the files
        are only unlinked, not closed; the mappings and descriptor go with the object."""
        self._fd        # opened now too: opened lazily later, it would create an empty file
        self.offset_index
        self.time_index
        self.deleted = True

    def delete_files(self) -> None:
        """Remove every file of the segment (whatever its suffix). A segment marked deleted
        keeps its open descriptor and mappings for readers until it is collected."""
        if not self.deleted:
            self.close_handlers()
        paths = [self.log_path, self._path(INDEX_SUFFIX), self._path(TIME_INDEX_SUFFIX),
                 self.txn_index.path]
        if self._offset_index is not None:
            paths.append(self._offset_index.path)
        if self._time_index is not None:
            paths.append(self._time_index.path)
        for p in set(paths):
            try:
                os.remove(p)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size})"


def _close_fd(box):
    if box[0] >= 0:
        os.close(box[0])
        box[0] = -1

