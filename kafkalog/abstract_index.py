"""``AbstractIndex``: what the offset and time indexes share (Kafka's ``AbstractIndex``): the
file, its mmap (or a reader's copy), the held ``IndexView``, entries, resize, trim, truncate.

Offset and time indexes are memory-mapped and sized to ``max_index_size`` when created, sparse
(as Kafka's ``RandomAccessFile.setLength``): an idle index holds no disk blocks. Real blocks
are allocated a window ahead of the next entry before it is stored through the mapping
(``_reserve``), so a full disk is an ``OSError`` (ENOSPC) and never a SIGBUS. Searches run in
the ``index_search`` kernel (hot/cold binary search, FORMAT.md).
"""
from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
from typing import TYPE_CHECKING, Any, Iterator, TypeVar

import numpy as np
import numpy.typing as npt

from kafkalog import storage
from kafkalog._kernels import (
    FileMapping, IndexView, index_entries, index_search, index_valid_entries,
)
from kafkalog.errors import CorruptIndexError, IndexFullError, IndexOffsetOverflowError

if TYPE_CHECKING:
    from kafkalog._typing import StrPath

_Index = TypeVar("_Index", bound="AbstractIndex")

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024
#: real blocks allocated past the next entry (an index that took entries holds its entries
#: and at most this much more; one fallocate per this many bytes of entries)
ALLOCATION_WINDOW = 8 * mmap.PAGESIZE
_INT32_MAX = 2**31 - 1


def _close_quietly(mapping):
    """Close a mapping unless a reader still holds a view of it; then it closes when the
    last view goes."""
    if mapping is not None:
        try:
            mapping.close()
        except BufferError:
            pass


def _allocate(fd, offset, length):
    """Give [offset, offset + length) of the file real blocks (its size is not changed):
    entries are stored through the mmap, and a store into a page the filesystem cannot back
    (disk full) is a SIGBUS that kills the process. Allocating first turns a full disk into
    an ``OSError`` (ENOSPC) raised before anything is stored. Where the filesystem has no
    fallocate, zeros are written instead."""
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        _write_zeros(fd, offset, length)


def data_end(fd, length):
    """Bytes from the start of the file to its first hole (at most ``length``). Entries are
    stored from the start and blocks allocated from the start, so none lies past it; reading
    a hole through a shared mapping allocates pages on some filesystems (tmpfs), which a full
    disk turns into a SIGBUS, so scans stop here."""
    try:
        return min(length, os.lseek(fd, 0, os.SEEK_HOLE))
    except OSError:        # ENXIO: an empty file; EINVAL: no SEEK_HOLE (then no holes seen)
        return length


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
    while position < end:
        position += os.pwrite(fd, zeros[:end - position], position)


class AbstractIndex:
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
        self._mmap: Any = None  # the FileMapping once mapped (writes happen only then)
        self._data = b""        # a read-only index's entries, copied
        self.view: Any = None   # the held IndexView (searched by the read kernels too)
        self._n = 0
        #: bytes from the start known to have real blocks (allocated by ``_reserve``)
        self._allocated = 0
        #: bytes from the start before the file's first hole when opened: entries lie in it
        self._data_bytes = 0
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
            self._length = self._data_bytes = self._round_down(len(self._data))
            self._rebind_view()
        else:
            if newly_created and not writable:
                raise FileNotFoundError(self.path)
            fd = os.open(self.path, (os.O_RDWR | os.O_CREAT) if writable else os.O_RDONLY,
                         0o644)
            try:
                if newly_created:
                    os.ftruncate(fd, self._round_down(max_index_size))    # sparse
                self._length = os.fstat(fd).st_size
                self._data_bytes = 0 if newly_created else \
                    data_end(fd, self._length) if writable else self._length
                self._map(fd)
            finally:
                os.close(fd)
        # An index opened from disk is assumed full of valid entries, as Kafka assumes (a
        # writable one up to its first hole: a sparse tail holds none, and is not read).
        self._entries = 0 if newly_created else self._round_down(self._data_bytes) // \
            self.entry_size
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
        index = cls(storage.locate(os.fspath(path), storage_options).root, base_offset,
                    writable=False)
        try:
            index.drop_zero_tail()
            yield index
        finally:
            index.close_handler()

    def _round_down(self, size):
        return size - size % self.entry_size

    def _map(self, fd):
        # The new buffer is made before the old one is dropped: a search in another thread
        # (a reader's, while a roll trims the index) sees one of them, never no bytes.
        mapping, data = None, b""
        if self._length and self.writable:
            # (no descriptor kept: a mapped index holds none, as in Kafka)
            mapping = FileMapping(fd, self._length, True)
        elif self._length:
            # A reader copies the entries instead of mapping them: the writer of a live log
            # (a broker, a Log in another process) trims its indexes at roll and close, and a
            # read of a mapped page past the new end is a SIGBUS that kills the reader.
            data = _read_at_most(fd, self._length)
            self._length = self._data_bytes = len(data)
        self._data = data
        self._mmap = mapping
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

    @property
    def allocated(self) -> int:
        """Bytes of the file given disk blocks for entries: what appends fill without
        allocating (a sparse index's room)."""
        return self._allocated

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

    def _reserve(self, end):
        """Real blocks under the file's first ``end`` bytes and a window beyond, before
        entries are stored there through the mapping: on a full disk this raises ``OSError``
        (ENOSPC), where a store into an unbacked page would be a SIGBUS."""
        if end <= self._allocated:
            return
        target = min(self._length, -(-(end + ALLOCATION_WINDOW) // mmap.PAGESIZE)
                     * mmap.PAGESIZE)
        if end > target:
            raise IndexFullError(f"{end} bytes do not fit index {self.path} of "
                                 f"{self._length} bytes")
        fd = os.open(self.path, os.O_RDWR)
        try:
            _allocate(fd, self._allocated, target - self._allocated)
        finally:
            os.close(fd)
        self._allocated = target

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
                os.ftruncate(fd, rounded)     # growing: sparse, as Kafka's setLength
                self._length = rounded
                self._allocated = min(self._allocated, rounded)
                self._data_bytes = min(self._data_bytes, rounded)
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
        scanned = self._round_down(min(self._length, max(self._data_bytes, self._allocated)))
        # only pages with blocks are read (see ``data_end``); the views are released here
        with memoryview(self._buffer) as whole, whole[:scanned] as part:
            return index_valid_entries(part, self.entry_size)

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
        with self._lock:      # (``_reserve`` opens the file by its path)
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
