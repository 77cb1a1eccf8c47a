"""``LazyIndex``: a segment's offset or time index, opened on first use (Kafka's
``LazyIndex``), checked against the segment's log when opened, distrusted when a read finds the
offset index lying, and rewritten whole when it is rebuilt from the log.

Loading a log of many segments touches only directory entries; an index is mapped by the first
lookup or append, and dropped again when its segment gives its handles back (the descriptor
cache) or its file is rewritten.
"""
from __future__ import annotations

import logging
import os
import stat
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Generic, Iterable, Protocol, \
    TypeVar

import numpy as np

from kafkalog import storage
from kafkalog._kernels import segment_read
from kafkalog.abstract_index import data_end
from kafkalog.errors import CorruptIndexError, NotARegularFileError
from kafkalog.files import DELETED_SUFFIX
from kafkalog.index import OffsetIndex, TimeIndex
from kafkalog.time_index import ENTRY_DTYPE as TIME_ENTRY
from kafkalog.storage_local import file_kind, open_regular, open_regular_stat

if TYPE_CHECKING:
    from kafkalog.index import OffsetPosition
    from kafkalog.config import LogConfig

log = logging.getLogger(__name__)

_I = TypeVar("_I", OffsetIndex, TimeIndex)


class IndexedSegment(Protocol):
    """The segment's side of the contract (a ``LogSegment``): what a lazy index reads of the
    segment it belongs to, declared here so this module knows nothing else of one."""
    base_offset: int
    config: LogConfig
    read_only: bool
    recovering: bool
    report: Callable[..., None] | None

    @property
    def scan_lock(self) -> ContextManager[Any]: ...
    @property
    def index_lock(self) -> ContextManager[Any]: ...
    @property
    def index_path(self) -> str: ...
    @property
    def time_index_path(self) -> str: ...
    @property
    def log_path(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def offset_index(self) -> OffsetIndex: ...
    def batch_starts_at(self, position: int, offset: int) -> bool: ...
    def batches(self, start_position: int = 0, validate_crc: bool = False
                ) -> tuple[np.ndarray, int, int, str | None]: ...
    def read_next_offset(self) -> int: ...
    def rebuild_indexes(self) -> None: ...
    def learn_largest_timestamp(self, batches: np.ndarray) -> None: ...


class LazyIndex(Generic[_I]):
    """One index of ``segment`` (``cls``: OffsetIndex or TimeIndex), opened by ``get()``.

    Opening checks the index against the log (Kafka trusts an index after a clean shutdown;
    these checks are cheap and catch one that points outside the log): a damaged index of a
    writable segment is rebuilt from the log, a read-only segment reads without it. The
    segment's side of the contract: ``scan_lock`` and ``index_lock``, ``recovering``,
    ``rebuild_indexes()``, ``batch_starts_at()``, ``read_next_offset()``, ``batches()``,
    ``learn_largest_timestamp()``, ``offset_index`` and its public facts (paths, size, config,
    ``report``).
    """
    __slots__ = ("_segment", "_cls", "index", "distrusted", "_trim_to", "closes_between")

    def __init__(self, segment: IndexedSegment, cls: type[_I]) -> None:
        self._segment = segment
        self._cls: type[_I] = cls
        #: the open index, or None until it is first used (again, after a drop)
        self.index: _I | None = None
        #: an offset index found lying (``distrust``): scans start at the segment's start
        #: until it is rebuilt
        self.distrusted = False
        #: the size ``close`` trims the file to when it was dropped untrimmed (``drop``)
        self._trim_to: int | None = None
        #: ``replace_file``'s finding, for its report
        self.closes_between = False

    @property
    def path(self) -> str:
        segment = self._segment
        return segment.index_path if self._cls is OffsetIndex else segment.time_index_path

    @property
    def entry_size(self) -> int:
        return self._cls.entry_size

    def get(self) -> _I:
        """The index, opened now if it is not open."""
        index = self.index
        if index is None:
            index = self._load()
        return index

    def _load(self):
        segment = self._segment
        path = self.path
        for _ in range(3):
            # the scan lock first, as reads take it (opening a time index walks the segment
            # under the scan lock: index lock then scan lock deadlocked against a read)
            with segment.scan_lock, segment.index_lock:
                index = self.index
                if index is None:
                    index = self.index = self._open(path)
            if index is not None:
                return index
            # Within recover() a damaged index is replaced by a stand-in (the indexes are
            # rebuilt anyway, and a cut must go through its hook); otherwise it is rebuilt
            # from the log now. Rebuilt, not recovered: a cut of the .log here would fault
            # (SIGBUS) a reader that holds its mapping (this runs inside reads), and would
            # delete data without the loader's report or salvage; a damaged batch stays a
            # typed error for readers until the next recovery.
            segment.rebuild_indexes()
        raise CorruptIndexError(f"{path} could not be rebuilt from {segment.log_path}")

    def _open(self, path):
        """The index at ``path`` opened and checked; None when it was damaged and must be
        rebuilt."""
        segment, cls = self._segment, self._cls
        try:
            if storage.is_remote(path):   # objects are regular files (s3fs answers from
                mode = stat.S_IFREG if storage.exists(path) else None   # its listing)
            else:
                mode = os.stat(path).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            if not segment.read_only:
                raise NotARegularFileError(f"{path} is {file_kind(mode)}, not a regular file")
            log.warning("%s is %s; reading %s without it", path, file_kind(mode),
                        segment.log_path)
            return self._unindexed(path)
        if segment.read_only and mode is None:
            log.warning("%s is missing; reading %s without it", path, segment.log_path)
            return self._unindexed(path)
        try:
            index = cls(path, segment.base_offset, max_index_size=segment.config.max_index_size,
                        writable=not segment.read_only)
        except FileNotFoundError:
            if not segment.read_only:
                raise
            # deleted since the stat above (a writer's retention or truncation): as missing;
            # the read of a deleted .log is SegmentDeletedError
            log.warning("%s is missing; reading %s without it", path, segment.log_path)
            return self._unindexed(path)
        # Left at its preallocated size by a crash: the written entries end before the
        # all-zero tail.
        index.drop_zero_tail()
        try:
            index.sanity_check()
            # Kafka trusts an index after a clean shutdown; these checks are cheap (one
            # vectorized pass, one header read) and catch one that points outside the log.
            # A read-only view of a live log first forgets the writer's entries for data
            # appended after it looked at the .log (they are no damage).
            if cls is OffsetIndex:
                if segment.read_only:
                    index.drop_entries_past(segment.size)
                index.check_entries(segment.size)
                self._check_last_entry(index)
            elif index.entries:
                # offsets inside the segment: up to its last (a short walk from the last
                # offset index entry; time indexes are opened rarely)
                last = segment.read_next_offset() - 1
                if segment.read_only:
                    index.drop_entries_past(last)
                index.check_entries(last)
        except CorruptIndexError as e:
            index.close_handler()
            if segment.read_only:
                log.warning("%s; reading %s without it", e, segment.log_path)
                return self._unindexed(path)
            # A damaged index is rebuilt from the log, as Kafka's loader does.
            log.warning("%s; rebuilding it from %s", e, segment.log_path)
            if segment.report is not None:
                segment.report("rebuilt_index", path, segment.base_offset, reason=str(e))
            if segment.recovering:
                # recover() is rewriting it: an empty stand-in until then
                return cls(path, segment.base_offset, empty=True)
            return None
        return index

    def _check_last_entry(self, index):
        """The last offset index entry must point at a batch header that holds no offset
        above the entry's (a position inside the file can still be mid-batch)."""
        if index.entries == 0:
            return
        last = index.entry(index.entries - 1)
        if not self._segment.batch_starts_at(last.position, last.offset):
            raise CorruptIndexError(
                f"offset index {index.path} does not match its log: its last entry "
                f"(offset {last.offset}) points at position {last.position}, where no batch "
                f"holding it starts")

    def _unindexed(self, path):
        """A read-only segment's stand-in for a missing or damaged index: no entries (lookups
        scan from the start), nothing written; the largest timestamp comes from the batches."""
        segment = self._segment
        if self._cls is TimeIndex:
            segment.learn_largest_timestamp(segment.batches(0)[0])
        return self._cls(path, segment.base_offset, empty=True)

    def segment_read(self, buf: Any, *args: Any) -> tuple[int, int, Any, bool, bool]:
        """The ``segment_read`` kernel over ``buf`` with the offset index's current view (none
        while the index is distrusted: scans start at the segment's start).

        A roll's trim or a resize swaps the view, releasing the old one, and a reader's thread
        may take the view just before: the kernel then refuses the released view and the read
        runs again with the new one (a closed index's view is not replaced: that error stands).
        """
        while True:
            view = self._view()
            try:
                return segment_read(view, buf, *args)
            except ValueError:
                if self._view() is view:
                    raise

    def _view(self):
        if self.distrusted:
            return None
        index = self.index     # the caller's buffer() touched the segment
        return (index if index is not None else self._segment.offset_index).view

    def distrust(self, mapping: OffsetPosition) -> bool:
        """The offset index lies: its entry ``mapping`` points where no batch holding its
        offset starts (an index trusted after a clean shutdown). Scans start at the
        segment's start from now on; logged and reported once. Returns whether this is news
        (the segment then rebuilds the index when it may)."""
        segment = self._segment
        with segment.index_lock:
            if self.distrusted:
                return False
            self.distrusted = True
        reason = (f"its entry for offset {mapping.offset} points at position "
                  f"{mapping.position}, where no batch holding it starts")
        log.warning("offset index %s does not match its log: %s; reading %s from its start "
                    "and rebuilding the index", self.path, reason, segment.log_path)
        if segment.report is not None:
            segment.report("rebuilt_index", self.path, segment.base_offset, reason=reason)
        return True

    def flush(self) -> None:
        if self.index is not None:
            self.index.flush()

    def drop(self) -> None:
        """Let the open index go without trimming it (the descriptor cache's eviction); it is
        reopened on its next use. A writable one longer than its entries is remembered, so
        that ``close`` still trims the file: Kafka trims every index at close, and one left
        at its maximum size would be loaded as full."""
        index, self.index = self.index, None
        if index is not None and index.writable:
            size = index.entries * index.entry_size
            self._trim_to = size if index.length > size else None

    def close(self) -> None:
        """Trim the index to its entries and release it (Kafka's ``close``), also when it was
        dropped since it was last written."""
        index, trim_to, self._trim_to = self.index, self._trim_to, None
        if index is not None:
            index.close()
        elif trim_to is not None:
            try:
                os.truncate(self.path, trim_to)
            except FileNotFoundError:
                pass

    def close_handler(self) -> None:
        """Release the open index without trimming it."""
        if self.index is not None:
            self.index.close_handler()

    def rename_to(self, target: str) -> None:
        """Rename the index file to ``target`` (the open index's, or the file as it is on
        disk); a missing file is skipped."""
        index = self.index
        if index is not None:
            if os.path.exists(index.path):
                index.rename_to(target)
        elif os.path.exists(self.path):
            os.replace(self.path, target)

    def replace_file(self, data: bytes) -> int | None:
        """Make the index file hold exactly ``data`` (entries rebuilt from the log). Returns
        -1 when it already did, else how many valid entries (before an all-zero tail) it
        held, or None when it was missing. ``closes_between`` then says whether it was a
        time index holding these entries with the entries of earlier closes between them.

        Changed contents go to ``<path>.deleted`` renamed over the file: a reader still
        mapping the old file keeps it whole (a file cut under a mapping faults, SIGBUS), and a
        crash leaves a ``.deleted`` file, which loading removes."""
        path, entry_size = self.path, self.entry_size
        if not data:
            # An empty index (a small segment's offset index) that is empty already: one stat.
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            if st is not None and st.st_size == 0 and stat.S_ISREG(st.st_mode):
                return -1
        closed_between = False
        try:
            fd, st = open_regular_stat(path, os.O_RDWR)
        except FileNotFoundError:
            before = None
        else:
            try:
                size = st.st_size
                # past the first hole the file holds zeros: not read (an active segment's
                # index is sparse to 10 MiB)
                written = data_end(fd, size)
                same_entries = size >= len(data) and os.pread(fd, len(data), 0) == data
                if same_entries and size == len(data):
                    return -1
                if same_entries and not data and written == 0:
                    # no entries and no blocks (an idle partition's active segment after a
                    # crash): left sized as it is, as its segment is sized again at load (a
                    # cut and a regrow of every idle index made a restart take minutes)
                    return -1
                if same_entries and written <= 1 << 24 and not np.frombuffer(
                        os.pread(fd, max(0, written - len(data)), len(data)), np.uint8).any():
                    # the same entries and a preallocated zero tail: only the tail goes (a
                    # reader never reads past the entries it knows)
                    os.ftruncate(fd, len(data))
                    return -1
                before = _entries_before_zero_tail(fd, written, entry_size)
                closed_between = self._cls is TimeIndex and written <= 1 << 24 and \
                    _with_close_entries(os.pread(fd, before * entry_size, 0), data)
            finally:
                os.close(fd)
        temp = path + DELETED_SUFFIX
        fd = open_regular(temp, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(temp, path)
        self.closes_between = closed_between
        return before


def _with_close_entries(old, new):
    """Whether time index bytes ``old`` are the rebuilt entries ``new`` with entries between
    them in order, as a segment closed and reopened holds: each close appended the largest
    timestamp so far (as Kafka's), which a recovery, writing one final entry, does not."""
    size = TIME_ENTRY.itemsize
    if not new or len(old) % size or len(old) <= len(new):
        return False
    old_entries = np.frombuffer(old, TIME_ENTRY)
    new_entries = np.frombuffer(new, TIME_ENTRY)
    ts, offsets = old_entries["ts"], old_entries["rel"]
    if (ts[1:] <= ts[:-1]).any() or (offsets[1:] < offsets[:-1]).any() or \
            old_entries[-1] != new_entries[-1]:
        return False
    # every rebuilt entry among the old ones (timestamps increase: one search each)
    at = np.searchsorted(ts, new_entries["ts"])
    return bool((at < len(ts)).all() and (old_entries[np.minimum(at, len(ts) - 1)] ==
                                           new_entries).all())


def replace_index_files(segment: IndexedSegment, contents: Iterable[tuple[LazyIndex, bytes]]
                        ) -> list[tuple[str, int | None, int, bool]]:
    """Make each index file of ``segment`` hold exactly its bytes (``contents``: (LazyIndex,
    bytes) pairs, ``recovery_summary``'s), in one write each; a file that holds them already is
    left alone. The open index objects are dropped first (reopened lazily: the loader then
    holds no descriptor for a recovered segment). Returns, for each file changed, (path,
    entries before or None when it was missing, entries after, ``closes_between``)."""
    contents = list(contents)
    with segment.index_lock:
        # Dropped, not closed: a reader still holding one keeps its mapping (of the old
        # file: a changed index is written to a new file renamed over the old).
        for lazy, _ in contents:
            lazy.index, lazy._trim_to = None, None    # (the file is written whole)
    rebuilt = []
    for lazy, data in contents:
        before = lazy.replace_file(data)
        if before != -1:
            rebuilt.append((lazy.path, before, len(data) // lazy.entry_size,
                            lazy.closes_between))
    return rebuilt


def _entries_before_zero_tail(fd, size, entry_size):
    """How many entries an index file holds before its all-zero tail (for reports)."""
    if size > 1 << 24:
        return size // entry_size
    nonzero = np.flatnonzero(np.frombuffer(os.pread(fd, size, 0), np.uint8))
    return 0 if len(nonzero) == 0 else (int(nonzero[-1]) + entry_size) // entry_size


def _write_all(fd, data):
    view = memoryview(data)
    written = 0
    while written < len(view):
        written += os.pwrite(fd, view[written:], written)
