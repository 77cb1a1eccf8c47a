"""Kafka's segment indexes: ``OffsetIndex`` (.index), ``TimeIndex`` (.timeindex) and
``TransactionIndex`` (.txnindex), with Kafka's append rules, errors and searches.

Offset and time indexes are memory-mapped and preallocated to ``max_index_size`` when created;
searches run in the ``index_search`` kernel (hot/cold binary search, FORMAT.md).
"""
from __future__ import annotations

import contextlib
import errno
import mmap
import os
import struct
import threading
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from kafkalog import storage
from kafkalog._kernels import (
    IndexView, index_lookup_many, index_search, index_entries,
    index_valid_entries,
)
from kafkalog._layout import (
    HEADER_SIZE_UP_TO_MAGIC, OFFSET_KEY, OFFSET_VALUE, TIME_KEY, TIME_VALUE,
    OFFSET_INDEX_ENTRY_SIZE,
    TIME_INDEX_ENTRY_SIZE, TXN_INDEX_ENTRY_SIZE,
)
from kafkalog.errors import (
    CorruptIndexError, IndexFullError, IndexOffsetOverflowError, InvalidOffsetError,
    InvalidTimestampError,
)

if TYPE_CHECKING:
    from kafkalog._typing import StrPath

_Index = TypeVar("_Index", bound="_MappedIndex")

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024
_INT32_MAX = 2**31 - 1

class OffsetPosition(NamedTuple):
    """An offset index entry: an absolute offset and the byte position of its batch."""
    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A time index entry: a timestamp (ms) and an absolute offset."""
    timestamp: int
    offset: int


def _close_quietly(mapping):
    """Close a mapping unless a reader still holds a view of it; then it closes when the
    last view goes."""
    if mapping is not None:
        try:
            mapping.close()
        except BufferError:
            pass


def _preallocate(fd, offset, length):
    """Extend the file over [offset, offset + length) with real blocks, not a sparse hole:
    entries are stored through the mmap, and a store into a page the filesystem cannot back
    (disk full) is a SIGBUS that kills the process. Allocating here turns a full disk into
    an ``OSError`` (ENOSPC) raised before anything is mapped. ``posix_fallocate`` writes
    zeros itself where the filesystem has no fallocate."""
    if length <= 0:
        return
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            os.ftruncate(fd, offset)        # no half-allocated index left behind
            raise
        _write_zeros(fd, offset, length)


def _read_at_most(fd, length):
    """Up to ``length`` bytes from the start of the file (fewer if it shrank meanwhile)."""
    chunks, position = [], 0
    while position < length:
        chunk = os.pread(fd, length - position, position)
        if not chunk:
            break
        chunks.append(chunk)
        position += len(chunk)
    return b"".join(chunks)


def _write_zeros(fd, offset, length):
    zeros = bytes(min(length, 1 << 20))
    position, end = offset, offset + length
    try:
        while position < end:
            position += os.pwrite(fd, zeros[:end - position], position)
    except OSError:
        os.ftruncate(fd, offset)
        raise


class _MappedIndex:
    """What the offset and time indexes share: the file, its mmap, entries, resize, trim."""
    entry_size = 0
    _key_field = _value_field = 0
    _result_type: type | None = None

    def __init__(self, path: StrPath, base_offset: int,
                 max_index_size: int = DEFAULT_MAX_INDEX_SIZE, writable: bool = True,
                 empty: bool = False) -> None:
        """``empty``: read-only, no entries, the file not even opened (for readers of a
        directory whose index is missing or damaged: a lookup then scans from the segment's
        start)."""
        self.path = storage.normalize(os.fspath(path))
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable and not empty
        self._lock = threading.RLock()
        self._mmap: Any = None  # mmap.mmap once mapped (writes happen only then)
        self._data = b""        # a read-only index's entries, copied
        self.view: Any = None   # the held IndexView (searched by the read kernels too)
        self._n = 0
        remote = not empty and storage.is_remote(self.path)
        if remote and writable:
            storage.check_writable(self.path)
        newly_created = empty or (not remote and not os.path.exists(self.path))
        if empty:
            self._length = 0
            self._map(None)
        elif remote:
            # read whole, as a local reader copies it (a missing object: FileNotFoundError)
            self._data = storage.read_file(self.path)
            self._length = self._round_down(len(self._data))
            self._rebind_view()
        else:
            if newly_created and not writable:
                raise FileNotFoundError(self.path)
            fd = os.open(self.path, (os.O_RDWR | os.O_CREAT) if writable else os.O_RDONLY,
                         0o644)
            try:
                if newly_created:
                    _preallocate(fd, 0, self._round_down(max_index_size))
                self._length = os.fstat(fd).st_size
                self._map(fd)
            finally:
                os.close(fd)
        # An index opened from disk is assumed full of valid entries, as Kafka assumes.
        self._entries = 0 if newly_created else self._length // self.entry_size
        self._after_open()

    def _after_open(self):
        pass

    @classmethod
    @contextlib.contextmanager
    def reading(cls: type[_Index], path: StrPath, base_offset: int,
                storage_options: dict[str, Any] | None = None) -> Iterator[_Index]:
        """An existing index opened read-only with only its written entries (the all-zero
        tail a crash leaves in a preallocated index is left out); released on exit. ``path``
        may be an fsspec URL (read whole), with the filesystem's ``storage_options``."""
        index = cls(storage.configure(os.fspath(path), storage_options), base_offset,
                    writable=False)
        try:
            index.drop_zero_tail()
            yield index
        finally:
            index.close_handler()

    def _round_down(self, size):
        return size - size % self.entry_size

    def _map(self, fd):
        self._mmap = None
        self._data = b""
        if self._length and self.writable:
            self._mmap = mmap.mmap(fd, self._length, access=mmap.ACCESS_WRITE)
        elif self._length:
            # A reader copies the entries instead of mapping them: the writer of a live log
            # (a broker, a Log in another process) trims its indexes at roll and close, and a
            # read of a mapped page past the new end is a SIGBUS that kills the reader.
            self._data = _read_at_most(fd, self._length)
            self._length = len(self._data)
        self._rebind_view()

    def _rebind_view(self):
        """A fresh held view for ``lookup`` over the current mapping (the old one released,
        so the old mapping can close)."""
        old = self.view
        self.view = IndexView(self._buffer, self._n, self.base_offset, self._key_field,
                               self._result_type)
        # Instance attributes: ``index.lookup(x)`` is one call into the kernel, and ``view``
        # is what read kernels search (segment_read).
        self.lookup = self.view.lookup
        if old is not None:
            old.release()

    @property
    def _entries(self):
        return self._n

    @_entries.setter
    def _entries(self, value):
        self._n = value
        if self.view is not None:
            self.view.entries = value

    def _unmap(self):
        """Drop the mapping. Not synced (as Kafka's close): its dirty pages stay in the page
        cache, and ``flush()`` (an msync, which syncs the file range whichever mapping wrote
        it) is what makes entries durable."""
        old, self._mmap = self._mmap, None
        self._data = b""
        if self.view is not None:
            self.view.release()
        _close_quietly(old)

    @property
    def _buffer(self):
        return self._mmap if self._mmap is not None else self._data

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._length // self.entry_size

    @property
    def length(self) -> int:
        """Size of the index file in bytes."""
        return self._length

    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    def _relative(self, offset):
        relative = offset - self.base_offset
        if relative < 0 or relative > _INT32_MAX:
            raise IndexOffsetOverflowError(
                f"integer overflow for offset: {offset} ({self.path}, base offset "
                f"{self.base_offset})")
        return relative

    def _search(self, target, field, upper=False):
        return index_search(self._buffer, self._entries, field, target, upper)

    def _require_writable(self):
        if not self.writable:
            raise PermissionError(f"index {self.path} is read-only")

    def resize(self, new_size: int) -> bool:
        """Set the file size to ``new_size`` rounded down to whole entries; True if it changed.

        The new mapping is made before the old one is dropped, so a concurrent lookup always
        sees a mapping that holds its entries.
        """
        with self._lock:
            rounded = self._round_down(new_size)
            if rounded == self._length:
                return False
            if not self.writable:
                raise PermissionError(f"index {self.path} is read-only")
            old = self._mmap      # its dirty pages are the file's: no msync needed here
            self._entries = min(self._entries, self._round_down(new_size) // self.entry_size)
            fd = os.open(self.path, os.O_RDWR)
            try:
                if rounded > self._length:
                    _preallocate(fd, self._length, rounded - self._length)
                else:
                    os.ftruncate(fd, rounded)
                self._length = rounded
                self._map(fd)
            finally:
                os.close(fd)
            self._entries = min(self._entries, self.max_entries)
            _close_quietly(old)
            return True

    def trim_to_valid_size(self) -> bool:
        """Shrink the file to the entries in use (done at roll and close)."""
        return self.resize(self._entries * self.entry_size)

    def truncate(self) -> None:
        """Drop every entry."""
        self._truncate_to_entries(0)

    def reset(self) -> None:
        """Drop every entry and grow the file back to the maximum size."""
        with self._lock:
            self.truncate()
            self.resize(self.max_index_size)

    def drop_zero_tail(self) -> int:
        """Forget the all-zero entries a crash leaves at the end of a preallocated index (the
        file is not changed); returns how many there were."""
        if not self._entries:
            return 0
        valid = self.valid_entries()
        dropped = self._entries - valid
        if dropped:
            self._truncate_to_entries(valid)
        return dropped

    def _drop_trailing(self, past):
        """Truncate to before the run of True at the end of ``past`` (if all after its first
        True are True); returns how many entries went."""
        bad = np.flatnonzero(past)
        if len(bad) == 0 or len(bad) != len(past) - bad[0]:
            return 0
        self._truncate_to_entries(int(bad[0]))
        return len(bad)

    def _truncate_to_entries(self, entries):
        with self._lock:
            self._entries = entries
            self._after_truncate()

    def _after_truncate(self):
        pass

    def _truncate_slot(self, offset):
        """Entries to keep so that none has an offset >= ``offset``."""
        slot = self._search(offset - self.base_offset, self._offset_field)
        if slot < 0:
            return 0
        return slot if self._entry_offset(slot) == offset else slot + 1

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with an offset >= ``offset``."""
        with self._lock:
            self._truncate_to_entries(self._truncate_slot(offset))

    def _check_length(self):
        if self._length % self.entry_size != 0:
            raise CorruptIndexError(
                f"index file {self.path} is corrupt, found {self._length} bytes which is "
                f"neither positive nor a multiple of {self.entry_size}")

    def valid_entries(self) -> int:
        """Entries before the all-zero tail a crash leaves in a preallocated index."""
        return index_valid_entries(self._buffer, self.entry_size)

    def flush(self) -> None:
        if self._mmap is not None and self.writable:
            self._mmap.flush()

    def close(self) -> None:
        """Trim to the valid entries (when writable) and release the mapping."""
        with self._lock:
            if self.writable:
                self.trim_to_valid_size()
            self._unmap()

    def close_handler(self) -> None:
        """Release the mapping without trimming (a deleted segment, a failed dir)."""
        self._unmap()

    def rename_to(self, path: StrPath) -> None:
        os.replace(self.path, path)
        self.path = os.fspath(path)

    def key_values(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """All entries as two int64 numpy arrays (see subclasses for the meaning)."""
        return index_entries(self._buffer, self._entries, self._key_field)

    def __enter__(self: _Index) -> _Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, base_offset={self.base_offset}, " \
               f"entries={self._entries})"


def offset_entries_problem(relative_offsets: npt.NDArray[np.int64],
                           positions: npt.NDArray[np.int64], log_size: int) -> str | None:
    """What is wrong with offset index entries (relative offsets, byte positions) of a
    segment whose ``.log`` holds ``log_size`` bytes, or None. Vectorized: offsets and
    positions strictly increasing, no offset below the base offset, every entry pointing at
    a batch header inside the file."""
    if len(relative_offsets) == 0:
        return None
    if relative_offsets[0] < 0:
        return f"an entry's offset is {int(relative_offsets[0])} below the base offset"
    if positions[0] < 0:
        return f"an entry points at the negative position {int(positions[0])}"
    if len(relative_offsets) > 1:
        if (np.diff(relative_offsets) <= 0).any():
            return "its offsets do not increase"
        if (np.diff(positions) <= 0).any():
            return "its positions do not increase"
    if int(positions[-1]) + HEADER_SIZE_UP_TO_MAGIC > log_size:
        return (f"its last entry points at position {int(positions[-1])}, past the end of the "
                f"{log_size}-byte log")
    return None


def time_entries_problem(timestamps: npt.NDArray[np.int64],
                         relative_offsets: npt.NDArray[np.int64],
                         max_relative_offset: int | None = None) -> str | None:
    """What is wrong with time index entries (timestamps in ms, relative offsets), or None:
    offsets inside the segment (not below its base, at most ``max_relative_offset`` when
    given), timestamps and offsets not decreasing."""
    if len(timestamps) == 0:
        return None
    if relative_offsets.min() < 0:
        return "an entry's offset is below the base offset"
    if max_relative_offset is not None and relative_offsets.max() > max_relative_offset:
        return (f"an entry's offset is {int(relative_offsets.max())} past the segment's last "
                f"offset (relative {max_relative_offset})")
    if len(timestamps) > 1 and ((np.diff(timestamps) < 0).any()
                                or (np.diff(relative_offsets) < 0).any()):
        return "its entries do not increase"
    return None


class OffsetIndex(_MappedIndex):
    """Sparse map from offset to the byte position of its batch in the segment's ``.log``.

    Entries are 8 bytes: relative offset (int32) and position (int32).
    """
    entry_size = OFFSET_INDEX_ENTRY_SIZE
    _result_type = OffsetPosition
    _key_field = OFFSET_KEY
    _value_field = OFFSET_VALUE
    _offset_field = OFFSET_KEY

    def _after_open(self):
        self._last_offset = self._read_last_offset()

    def _read_last_offset(self):
        return self.entry(self._entries - 1).offset if self._entries else self.base_offset

    def _after_truncate(self):
        self._last_offset = self._read_last_offset()

    @property
    def last_offset(self) -> int:
        return self._last_offset

    def entry(self, n: int) -> OffsetPosition:
        """The n-th entry as ``OffsetPosition`` (absolute offset)."""
        if n < 0 or n >= self._entries:
            raise IndexError(f"attempt to fetch the {n}th entry from {self.path} of size "
                             f"{self._entries}")
        rel, pos = struct.unpack_from(">ii", self._buffer, n * 8)
        return OffsetPosition(self.base_offset + rel, pos)

    def _entry_offset(self, slot):
        return self.entry(slot).offset

    def append(self, offset: int, position: int) -> None:
        """Add an entry; its offset must be larger than the last one."""
        with self._lock:
            if self.is_full():
                raise IndexFullError(f"attempt to append to a full index (size = "
                                     f"{self._entries}, {self.path})")
            if self._entries == 0 or offset > self._last_offset:
                self._require_writable()
                struct.pack_into(">ii", self._mmap, self._entries * 8, self._relative(offset),
                                 position)
                self._entries += 1
                self._last_offset = offset
            else:
                raise InvalidOffsetError(
                    f"attempt to append an offset ({offset}) to position {self._entries} no "
                    f"larger than the last offset appended ({self._last_offset}) to {self.path}")

    def append_many(self, offsets: npt.ArrayLike, positions: npt.ArrayLike) -> None:
        """Append several entries at once (recovery); the same rules as ``append``."""
        offsets = np.asarray(offsets, dtype=np.int64)
        positions = np.asarray(positions, dtype=np.int64)
        n = len(offsets)
        if n == 0:
            return
        with self._lock:
            if self._entries + n > self.max_entries:
                raise IndexFullError(f"{n} entries do not fit index {self.path} "
                                     f"({self._entries} of {self.max_entries} used)")
            if (np.diff(offsets) <= 0).any() or (self._entries and offsets[0] <= self._last_offset):
                raise InvalidOffsetError(f"offsets appended to {self.path} do not increase")
            self._relative(int(offsets[0]))
            self._relative(int(offsets[-1]))
            self._require_writable()
            entries = np.empty(n, dtype=[("rel", ">i4"), ("pos", ">i4")])
            entries["rel"] = offsets - self.base_offset
            entries["pos"] = positions
            start = self._entries * self.entry_size
            self._mmap[start:start + n * self.entry_size] = entries.tobytes()
            self._entries += n
            self._last_offset = int(offsets[-1])

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Largest entry with offset <= ``target_offset``, else (base_offset, 0).

        (Bound per instance to the held view's kernel; this is the unbound fallback.)"""
        return self.view.lookup(target_offset)

    def lookup_many(self, target_offsets: npt.ArrayLike
                    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``lookup`` for an array of offsets in one call; returns (offsets, positions) arrays."""
        return index_lookup_many(self._buffer, self._entries, OFFSET_KEY, self.base_offset,
                                 np.asarray(target_offsets, dtype=np.int64))

    def fetch_upper_bound_offset(self, fetch_position: OffsetPosition | int,
                                 fetch_size: int) -> OffsetPosition | None:
        """Smallest entry whose position >= ``fetch_position`` + ``fetch_size``, else None.

        ``fetch_position`` may be an ``OffsetPosition`` or a byte position.
        """
        if isinstance(fetch_position, OffsetPosition):
            fetch_position = fetch_position.position
        slot = self._search(fetch_position + fetch_size, OFFSET_VALUE, upper=True)
        return None if slot < 0 else self.entry(slot)

    def sanity_check(self) -> None:
        """Raise CorruptIndexError as Kafka's OffsetIndex.sanityCheck does."""
        if self._entries != 0 and self._last_offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt index found, index file ({self.path}) has non-zero size but the last "
                f"offset is {self._last_offset} which is less than the base offset "
                f"{self.base_offset}")
        self._check_length()

    def check_entries(self, log_size: int) -> None:
        """Raise CorruptIndexError when an entry cannot be right for a ``.log`` of
        ``log_size`` bytes (``offset_entries_problem``); one vectorized pass, no I/O."""
        rel, pos = self.key_values()
        problem = offset_entries_problem(rel, pos, log_size)
        if problem is not None:
            raise CorruptIndexError(f"offset index {self.path} does not match its log: {problem}")

    def drop_entries_past(self, log_size: int) -> int:
        """Forget the trailing entries that point past ``log_size`` bytes (a reader's view of
        a live log: the writer indexed data appended after the reader looked at the
        ``.log``); returns how many. Entries in the wrong order are left for the checks."""
        _, pos = self.key_values()
        return self._drop_trailing(pos + HEADER_SIZE_UP_TO_MAGIC > log_size)

    def entries_array(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(absolute offsets, positions) of every entry, as int64 arrays."""
        rel, pos = self.key_values()
        return rel + self.base_offset, pos


class TimeIndex(_MappedIndex):
    """Sparse map from timestamp to offset. Entries are 12 bytes: timestamp (int64) and
    relative offset (int32); each holds the largest timestamp so far and its offset."""
    entry_size = TIME_INDEX_ENTRY_SIZE
    _result_type = TimestampOffset
    _key_field = TIME_KEY
    _value_field = TIME_VALUE
    _offset_field = TIME_VALUE

    def _after_open(self):
        self._last_entry = self._read_last_entry()

    def _read_last_entry(self):
        if self._entries == 0:
            return TimestampOffset(-1, self.base_offset)
        return self.entry(self._entries - 1)

    def _after_truncate(self):
        self._last_entry = self._read_last_entry()

    @property
    def last_entry(self) -> TimestampOffset:
        return self._last_entry

    def is_full(self) -> bool:
        # The last slot is kept for the entry appended when the segment rolls.
        return self._entries >= self.max_entries - 1

    def entry(self, n: int) -> TimestampOffset:
        """The n-th entry as ``TimestampOffset`` (absolute offset)."""
        if n < 0 or n >= self._entries:
            raise IndexError(f"attempt to fetch the {n}th entry from {self.path} of size "
                             f"{self._entries}")
        ts, rel = struct.unpack_from(">qi", self._buffer, n * 12)
        return TimestampOffset(ts, self.base_offset + rel)

    def _entry_offset(self, slot):
        return self.entry(slot).offset

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if ``timestamp`` is larger than the last entry's."""
        with self._lock:
            if not skip_full_check and self.is_full():
                raise IndexFullError(f"attempt to append to a full time index (size = "
                                     f"{self._entries}, {self.path})")
            last = self._last_entry
            if self._entries != 0 and offset < last.offset:
                raise InvalidOffsetError(
                    f"attempt to append an offset ({offset}) to slot {self._entries} no larger "
                    f"than the last offset appended ({last.offset}) to {self.path}")
            if self._entries != 0 and timestamp < last.timestamp:
                raise InvalidTimestampError(
                    f"attempt to append a timestamp ({timestamp}) to slot {self._entries} no "
                    f"larger than the last timestamp appended ({last.timestamp}) to "
                    f"{self.path}")
            if timestamp > last.timestamp:
                if self._entries >= self.max_entries:
                    raise IndexFullError(f"time index {self.path} has no free slot")
                self._require_writable()
                struct.pack_into(">qi", self._mmap, self._entries * 12, timestamp,
                                 self._relative(offset))
                self._entries += 1
                self._last_entry = TimestampOffset(timestamp, offset)

    def append_many(self, timestamps: npt.ArrayLike, offsets: npt.ArrayLike) -> None:
        """Append entries of increasing timestamps at once (recovery); ``maybe_append``'s
        rules, with the slot kept for the roll left free."""
        timestamps = np.asarray(timestamps, dtype=np.int64)
        offsets = np.asarray(offsets, dtype=np.int64)
        n = len(timestamps)
        if n == 0:
            return
        with self._lock:
            if self._entries + n > self.max_entries - 1:
                raise IndexFullError(f"{n} entries do not fit time index {self.path}")
            last = self._last_entry
            if (np.diff(timestamps) <= 0).any() or (np.diff(offsets) < 0).any() or \
                    timestamps[0] <= last.timestamp or \
                    (self._entries and offsets[0] < last.offset):
                raise InvalidOffsetError(f"entries appended to {self.path} do not increase")
            self._relative(int(offsets[0]))
            self._relative(int(offsets[-1]))
            self._require_writable()
            entries = np.empty(n, dtype=[("ts", ">i8"), ("rel", ">i4")])
            entries["ts"] = timestamps
            entries["rel"] = offsets - self.base_offset
            start = self._entries * self.entry_size
            self._mmap[start:start + n * self.entry_size] = entries.tobytes()
            self._entries += n
            self._last_entry = TimestampOffset(int(timestamps[-1]), int(offsets[-1]))

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Largest entry with timestamp <= ``target_timestamp``, else (-1, base_offset).

        (Bound per instance to the held view's kernel; this is the unbound fallback.)"""
        return self.view.lookup(target_timestamp)

    def lookup_many(self, target_timestamps: npt.ArrayLike
                    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``lookup`` for an array of timestamps; returns (timestamps, offsets) arrays."""
        return index_lookup_many(self._buffer, self._entries, TIME_KEY, self.base_offset,
                                 np.asarray(target_timestamps, dtype=np.int64))

    def sanity_check(self) -> None:
        """Raise CorruptIndexError as Kafka's TimeIndex.sanityCheck does."""
        last = self._last_entry
        if self._entries != 0 and last.timestamp < self.entry(0).timestamp:
            raise CorruptIndexError(
                f"corrupt time index found, time index file ({self.path}) has non-zero size "
                f"but the last timestamp is {last.timestamp} which is less than the first "
                f"timestamp {self.entry(0).timestamp}")
        if self._entries != 0 and last.offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt time index found, time index file ({self.path}) has non-zero size "
                f"but the last offset is {last.offset} which is less than the base offset "
                f"{self.base_offset}")
        self._check_length()

    def check_entries(self, max_offset: int | None = None) -> None:
        """Raise CorruptIndexError when an entry cannot be right (``time_entries_problem``);
        ``max_offset``: the segment's last offset, when known."""
        ts, rel = self.key_values()
        problem = time_entries_problem(
            ts, rel, None if max_offset is None else max_offset - self.base_offset)
        if problem is not None:
            raise CorruptIndexError(f"time index {self.path} does not match its log: {problem}")

    def drop_entries_past(self, max_offset: int) -> int:
        """Forget the trailing entries for offsets above ``max_offset`` (see
        ``OffsetIndex.drop_entries_past``); returns how many."""
        _, rel = self.key_values()
        return self._drop_trailing(rel > max_offset - self.base_offset)

    def entries_array(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(timestamps, absolute offsets) of every entry, as int64 arrays."""
        ts, rel = self.key_values()
        return ts, rel + self.base_offset


class AbortedTxn(NamedTuple):
    """A transaction index entry: the producer and the offsets its aborted transaction spans
    (``last_offset`` is the ABORT marker's)."""
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

TXN_ENTRY_DTYPE = np.dtype([("version", ">i2"), ("producer_id", ">i8"), ("first_offset", ">i8"),
                            ("last_offset", ">i8"), ("last_stable_offset", ">i8")])
assert TXN_ENTRY_DTYPE.itemsize == TXN_INDEX_ENTRY_SIZE
_TXN_VERSION = 0
_TXN_ENTRY = struct.Struct(">hqqqq")

class TxnIndexSearchResult(NamedTuple):
    """The aborted transactions a fetch overlaps, and whether later segments can add none."""
    aborted_transactions: list[AbortedTxn]
    is_complete: bool


class TransactionIndex:
    """The aborted transactions whose ABORT marker lies in this segment (``.txnindex``).

    34-byte entries, append-only, not preallocated; the file is created on the first append.
    """

    def __init__(self, path: StrPath, base_offset: int) -> None:
        self.path = storage.normalize(os.fspath(path))
        self.base_offset = base_offset
        self._last_offset: int | None = None
        self._lock = threading.RLock()

    def _read(self):
        try:
            data = storage.read_file(self.path)
        except FileNotFoundError:
            return np.empty(0, TXN_ENTRY_DTYPE)
        if len(data) % TXN_INDEX_ENTRY_SIZE:
            raise CorruptIndexError(f"unexpected end of transaction index {self.path}: "
                                    f"{len(data)} bytes is not a whole number of entries")
        entries = np.frombuffer(data, TXN_ENTRY_DTYPE)
        bad = entries["version"] != _TXN_VERSION
        if bad.any():
            raise CorruptIndexError(
                f"unexpected aborted transaction version {int(entries['version'][bad][0])} in "
                f"transaction index {self.path}, current version is {_TXN_VERSION}")
        return entries

    def entries_array(self) -> np.ndarray:
        """Every entry, as a numpy array of ``TXN_ENTRY_DTYPE``."""
        return self._read()

    def all_aborted_txns(self) -> list[AbortedTxn]:
        return [AbortedTxn(int(e["producer_id"]), int(e["first_offset"]), int(e["last_offset"]),
                           int(e["last_stable_offset"])) for e in self._read()]

    def append(self, aborted_txn: AbortedTxn) -> None:
        """Add an entry; its last offset must exceed the previous one appended."""
        with self._lock:
            if self._last_offset is not None and self._last_offset >= aborted_txn.last_offset:
                raise InvalidOffsetError(
                    f"the last offset of appended transactions must increase sequentially, but "
                    f"{aborted_txn.last_offset} is not greater than current last offset "
                    f"{self._last_offset} of index file {self.path}")
            self._last_offset = aborted_txn.last_offset
            with open(self.path, "ab") as f:
                f.write(_TXN_ENTRY.pack(_TXN_VERSION, aborted_txn.producer_id,
                                        aborted_txn.first_offset, aborted_txn.last_offset,
                                        aborted_txn.last_stable_offset))

    def collect_aborted_txns(self, fetch_offset: int,
                             upper_bound_offset: int) -> TxnIndexSearchResult:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset).

        ``is_complete`` is True once an entry's last stable offset reaches the upper bound:
        later segments cannot hold more transactions that matter to this fetch.
        """
        entries = self._read()
        if len(entries) == 0:
            return TxnIndexSearchResult([], False)
        complete = np.nonzero(entries["last_stable_offset"] >= upper_bound_offset)[0]
        end = int(complete[0]) + 1 if len(complete) else len(entries)
        chosen = entries[:end]
        mask = ((chosen["last_offset"] >= fetch_offset)
                & (chosen["first_offset"] < upper_bound_offset))
        txns = [AbortedTxn(int(e["producer_id"]), int(e["first_offset"]), int(e["last_offset"]),
                           int(e["last_stable_offset"])) for e in chosen[mask]]
        return TxnIndexSearchResult(txns, len(complete) > 0)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with last offset >= ``offset``."""
        with self._lock:
            entries = self._read()
            cut = np.nonzero(entries["last_offset"] >= offset)[0]
            if len(cut) == 0:
                return
            keep = int(cut[0])
            with open(self.path, "r+b") as f:
                f.truncate(keep * TXN_INDEX_ENTRY_SIZE)
            self._last_offset = int(entries["last_offset"][keep - 1]) if keep else None

    def reset(self) -> None:
        with self._lock:
            if os.path.exists(self.path):
                with open(self.path, "r+b") as f:
                    f.truncate(0)
            self._last_offset = None

    def sanity_check(self) -> None:
        """Raise CorruptIndexError if an entry's last offset is below the base offset."""
        entries = self._read()
        bad = entries["last_offset"] < self.base_offset
        if bad.any():
            e = entries[bad][0]
            raise CorruptIndexError(
                f"last offset of aborted transaction {tuple(int(x) for x in e)} in index "
                f"{self.path} is less than start offset {self.base_offset}")

    def flush(self) -> None:
        if os.path.exists(self.path):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        pass

    def rename_to(self, path: StrPath) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, path)
        self.path = os.fspath(path)
