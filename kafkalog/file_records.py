"""``FileRecords``: a segment's ``.log`` file (Kafka's ``FileRecords``): opened on first use,
read through one read-only mapping (a remote file through its ``storage.range_buffer``),
appended to with ``pwrite``, cut with ``ftruncate``, searched for an offset or a timestamp.

Its descriptor and mapping count against the descriptor cache as its segment's: the owner is
touched on every use and gives them back through ``drop_handles``.
"""
from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from kafkalog import storage
from kafkalog._kernels import (
    FIND_TS_DECODE, FIND_TS_FOUND, FIND_TS_MORE, find_batch, find_timestamp, walk_batches,
)
from kafkalog.descriptor_cache import OPEN_SEGMENTS, CacheMember, Descriptor
from kafkalog.errors import FileShrunkError, SegmentDeletedError
from kafkalog.index import TimestampOffset
from kafkalog.records import decode_batches
from kafkalog.storage_local import map_file, open_regular, open_regular_stat

# Recovery reads a .log up to this size with one pread instead of mapping it.
_READ_WHOLE_BYTES = 1 << 20
# ``OPEN_SEGMENTS.touch``'s fast path, bound once (every read of a mapped file)
_move_to_end = OPEN_SEGMENTS.move_to_end


class FileSlice:
    """``size`` bytes at ``offset`` of an open file, unread: ``fileno()`` and ``offset`` for
    ``socket.sendfile``, ``len()``, ``bytes()`` to read them. It holds the file's descriptor
    (a segment evicted or deleted meanwhile is still read as it was) until its log is closed:
    a send that may outlive the log dups ``fileno()`` first."""
    __slots__ = ("_desc", "offset", "size")

    def __init__(self, desc: Descriptor, offset: int, size: int) -> None:
        self._desc = desc
        self.offset = offset
        self.size = size

    def fileno(self) -> int:
        return self._desc.fd

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return os.pread(self._desc.fd, self.size, self.offset)

    def __repr__(self) -> str:
        return f"FileSlice(fd={self._desc.fd}, offset={self.offset}, size={self.size})"


class FileRecords:
    """The ``.log`` at ``path`` of segment ``owner``; ``size`` is its bytes (given by a
    directory scan, else read now; a writable file is created when missing)."""
    __slots__ = ("path", "owner", "remote", "read_only", "size", "_desc", "_fd_lock", "_map",
                 "_map_lock", "_mapped_ino")

    def __init__(self, path: str, owner: CacheMember, *, remote: bool, read_only: bool,
                 size: int | None = None) -> None:
        self.path = path
        self.owner = owner
        self.remote = remote
        self.read_only = read_only
        # The file is opened on first use: a log of many segments holds no descriptor for
        # the ones nobody reads, and the least recently used give theirs back.
        self._desc: Descriptor | None = None
        self._fd_lock = threading.Lock()
        self._map: Any = None
        self._map_lock = threading.Lock()
        self._mapped_ino: int | None = None       # the inode ``_map`` maps
        if size is None and remote:
            size = storage.size_of(path)
        if size is None:
            if not read_only and not os.path.exists(path):
                self.descriptor(create=True)
            size = os.stat(path).st_size
        self.size: int = size

    def descriptor(self, create: bool = False) -> Descriptor:
        """The file's descriptor, opened if needed. Hold the returned object while using its
        ``fd``: eviction only drops this reference (a deleted segment may still be read by a
        reader holding an older segment list)."""
        desc = self._desc
        if desc is None:
            with self._fd_lock:
                desc = self._desc
                if desc is None:
                    flags = os.O_RDONLY if self.read_only else os.O_RDWR
                    if create:
                        flags |= os.O_CREAT
                    desc = Descriptor(self._open(flags))
                    self._desc = desc
        OPEN_SEGMENTS.touch(self.owner)
        return desc

    def _open(self, flags: int) -> int:
        try:
            return open_regular(self.path, flags)
        except FileNotFoundError:
            if not self.read_only:
                raise
            raise self._deleted() from None

    def _deleted(self) -> SegmentDeletedError:
        # a writer (retention, delete_records, a truncation) deleted it since it was listed
        return SegmentDeletedError(f"{self.path}: the segment was deleted after the log was "
                                   "opened (the writer's retention or truncation); reopen "
                                   "the log to read it as it is now")

    def _mapped_size(self) -> int:
        """Bytes of the cached mapping, -1 when there is none or its file shrank under a read
        (a new read maps the file as it is now)."""
        current = self._map
        if current is None:
            return -1
        try:
            return len(current)
        except FileShrunkError:
            return -1

    def buffer(self) -> Any:
        """A read-only mapping of the file as it is now (b"" when empty). It stays valid while
        held, even after the file releases its own reference. A remote file's is its
        ``storage.range_buffer`` with every block fetched (a whole-file read; ranged reads use
        ``buffer_for``).

        A read-only file that another process cut since it was listed is mapped as it is now
        (its remaining bytes are the log's, as a Kafka read past a truncation reads what is
        left) and ``size`` follows; one cut during a read gives ``FileShrunkError``, one
        deleted ``SegmentDeletedError``."""
        if self.remote:
            return self.buffer_for(0, self.size)
        current = self._map
        if current is not None:
            try:
                current_size = len(current)
            except FileShrunkError:     # remapped below, as the file is now
                current_size = -1
            if current_size == self.size:
                # the mapping is current (every read comes here): touch's fast path inline
                try:
                    _move_to_end(self.owner)
                except KeyError:
                    OPEN_SEGMENTS.touch(self.owner)
                return current
        with self._map_lock:
            if self.size == 0:
                return b""
            current = self._map
            if self._mapped_size() != self.size:
                desc = self._desc
                if desc is not None:
                    current = map_file(self.path, desc.fd, self.size)
                    self._mapped_ino = os.fstat(desc.fd).st_ino
                else:
                    # A file only read holds the mapping alone (which keeps no descriptor),
                    # not a descriptor as well.
                    fd = self._open(os.O_RDONLY)
                    try:
                        current = map_file(self.path, fd, self.size)
                        self._mapped_ino = os.fstat(fd).st_ino
                    finally:
                        os.close(fd)
                if len(current) < self.size and self.read_only:
                    self.size = len(current)
                self._map = current if len(current) else None
        OPEN_SEGMENTS.touch(self.owner)
        return current

    def buffer_for(self, start: int, end: int) -> Any:
        """A buffer of the file (positions are file positions) in which bytes [start, end)
        are present: the mapping of a local file; for a remote one, its range_buffer with the
        blocks covering [start, end) fetched (other bytes are not meaningful)."""
        if not self.remote:
            return self.buffer()
        if self.size == 0:
            return b""
        buf = storage.range_buffer(self.path, self.size).ensure(start, end)
        OPEN_SEGMENTS.touch(self.owner)
        return buf

    def recovery_buffer(self) -> Any:
        """The file for recovery's one pass: a small file read whole (open, fstat, pread,
        close: cheaper than a mapping's mmap, page faults and munmap, and nothing is left to
        release), a larger one mapped (``buffer()``). The size is the file's now."""
        if self.remote or self._desc is not None or self.size > _READ_WHOLE_BYTES:
            return self.buffer()
        fd, st = open_regular_stat(self.path, os.O_RDONLY)
        try:
            if st.st_size > _READ_WHOLE_BYTES:
                self.size = st.st_size
                return self.buffer()
            data = os.pread(fd, st.st_size, 0) if st.st_size else b""
        finally:
            os.close(fd)
        self.size = len(data)
        return data

    def find_batch(self, start: int, offset: int) -> tuple[int, int]:
        """(position, size) of the first batch from ``start`` whose last offset >= ``offset``
        (position -1 when none; Kafka's ``searchForOffsetWithSize``); a remote file is fetched
        one block (a tiered segment's: one chunk) further at a time until the batch is found
        (an index entry puts it close)."""
        if not self.remote:
            buf = self.buffer()
            return find_batch(buf, min(start, len(buf)), len(buf), offset)
        start = min(start, self.size)
        end = start
        step = storage.range_buffer(self.path, self.size).step
        while True:
            end = min(self.size, (end // step + 1) * step)
            buf = self.buffer_for(start, end)
            position, size = find_batch(buf, start, end, offset) if end > start else (-1, 0)
            if position >= 0 or end >= self.size:
                return position, size

    def search_for_timestamp(self, timestamp: int, starting_offset: int, position: int
                             ) -> TimestampOffset | None:
        """Kafka's ``searchForTimestamp`` from ``position`` (an index entry's: the answer is
        normally in the first batch or the second): (timestamp, offset) of the first record
        with timestamp >= ``timestamp`` at or after ``starting_offset``, or None. A remote
        file is fetched one block further at a time, as ``find_batch`` does."""
        size = self.size
        step = storage.range_buffer(self.path, size).step if self.remote else size
        end = min(size, (position // step + 1) * step) if step else size
        while True:
            buf = self.buffer_for(position, end)
            status, first, second = find_timestamp(buf, position, end, timestamp,
                                                   starting_offset)
            if status == FIND_TS_FOUND:
                return TimestampOffset(first, second)
            if status == FIND_TS_MORE and end < size:
                position, end = first, min(size, (end // step + 1) * step)
            elif status == FIND_TS_DECODE:
                # compressed, legacy, LogAppendTime or control; or damaged records, which
                # decode_batches reports with their place
                batch = walk_batches(buf, first, first + second, validate_crc=False)[0]
                records = decode_batches(buf, batch, self.path).records
                hit = np.flatnonzero((records["timestamp"] >= timestamp)
                                     & (records["offset"] >= starting_offset))
                if len(hit):
                    return TimestampOffset(int(records["timestamp"][hit[0]]),
                                           int(records["offset"][hit[0]]))
                position = first + second
            else:
                return None

    def slice(self, position: int, size: int) -> FileSlice:
        """``size`` bytes from ``position`` of a local file, not read (Kafka's
        ``FileRecords.slice``): what a server sends with ``sendfile``."""
        return FileSlice(self.descriptor(), position, size)

    def read_bytes(self, position: int, size: int, now: bool = False) -> bytes:
        """``size`` bytes from ``position`` (fewer at the end of the file). ``now``: of the
        file at ``path`` now, not through the descriptor or mapping held (a read-only view's
        may be of a file deleted since); SegmentDeletedError when it is gone."""
        if now and not self.remote:
            fd = self._open(os.O_RDONLY)
            try:
                return os.pread(fd, size, position)
            finally:
                os.close(fd)
        if self.remote:
            end = min(self.size, position + size)
            return bytes(self.buffer_for(position, end)[position:end])
        desc = self._desc
        if desc is not None and desc.fd >= 0:
            return os.pread(desc.fd, size, position)
        buf = self.buffer()
        return bytes(buf[position:position + size])

    def append(self, data: Any, position: int) -> None:
        """Write ``data`` at ``position`` (the end of the file) in one ``pwrite``, continued
        after a short write; on failure the file is cut back to ``position`` if the disk
        lets it (else recovery at the next open cuts the partial batch)."""
        desc = self._desc or self.descriptor()
        size = len(data)
        try:
            written = os.pwrite(desc.fd, data, position)
            if written < size:
                view = memoryview(data)
                while written < size:
                    written += os.pwrite(desc.fd, view[written:], position + written)
        except OSError:
            try:
                os.ftruncate(desc.fd, position)
            except OSError:
                pass
            raise
        self.size = position + size

    def truncate_to(self, size: int) -> None:
        with self._map_lock:
            self._map = None
        os.ftruncate(self.descriptor().fd, size)
        self.size = size

    def flush(self) -> None:
        """fsync the file."""
        desc = self.descriptor()       # held: an eviction meanwhile must not close the fd
        os.fsync(desc.fd)

    def cut_since_mapped(self, end: int) -> FileShrunkError | None:
        """FileShrunkError when the local file mapped is now, at its path, shorter than
        ``end``: a copy from the mapping past the cut read zeros there (the rest of a mapped
        page past a file's end reads so, with no fault to catch). None when it is not, or when
        the path holds another file now (the cleaner's swap: the mapping keeps the one it
        mapped whole) or none (deleted whole)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        if st.st_ino != self._mapped_ino or st.st_size >= end:
            return None
        return FileShrunkError(self.path, end, st.st_size)

    @property
    def one_fetch(self) -> bool:
        """Whether reading any of the file fetches all of it (a remote file of one block, one
        ranged GET): an index that points into it would only add a request."""
        return self.remote and 0 < self.size <= storage.range_buffer(self.path, self.size).step

    @property
    def opened(self) -> bool:
        """Whether the file's descriptor is open."""
        return self._desc is not None

    def drop_handles(self) -> None:
        """Let go of the descriptor and mapping (reopened on the next use); a holder of
        either keeps it."""
        self._map = None
        self._desc = None

    def close(self) -> None:
        with self._map_lock:
            self._map = None
        desc, self._desc = self._desc, None
        if desc is not None:
            desc.close()

    def rename_to(self, path: str) -> None:
        os.replace(self.path, path)
        self.path = path

    @property
    def last_modified_ms(self) -> int:
        desc = self._desc
        if desc is not None:      # (a deleted segment's file, renamed or removed, keeps it)
            return int(os.fstat(desc.fd).st_mtime * 1000)
        try:
            return storage.modified_ms(self.path)
        except FileNotFoundError:
            if not self.read_only:
                raise
            raise self._deleted() from None
