"""The descriptor cache: the cap on how many segments of the process hold open file
descriptors and mappings at once (``set_max_open_segments``).

Kafka keeps every segment open, so its file limit must grow with the log; here a segment
opens its files when first used, and past the cap the least recently used segments no
operation has pinned give theirs back (reopened lazily on their next use).
"""
from __future__ import annotations

import collections
import os
import threading
from typing import Protocol


class CacheMember(Protocol):
    """What the cache needs of a member (a ``LogSegment``): it knows nothing else of one."""
    pins: int
    evictable: bool

    def drop_handles(self) -> None: ...

DEFAULT_MAX_OPEN_SEGMENTS = 256


class Descriptor:
    """An open file descriptor, closed when the last holder drops it. A segment drops its
    own reference to let the descriptor go (LRU eviction); a reader that took it for a
    ``pread`` keeps it open until the call returns, so a number is never reused under it."""
    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass


class DescriptorCache:
    """The process's segments holding descriptors or mappings, least recently used first.

    A segment opens its ``.log`` and index files when it is first used and enters this list;
    past ``limit`` the least recently used segments that no operation has pinned drop their
    descriptors and mappings (reopened lazily on their next use). Dropping only releases the
    segment's references: a reader still holding a mapping, an index or a descriptor keeps
    it until it is done. Mappings keep no descriptor (``FileMapping``, as Kafka's), so a
    process holds at most ``limit`` descriptors for segments (a ``.log`` written or read by
    ``pread``), however many segments its logs have, and the active segments' mappings
    (Kafka keeps every segment open; its file limit must grow with the log).

    A member is a segment with ``pins`` (operations in progress that forbid eviction; changed
    under the cache's lock), ``evictable`` (False once it is closed or deleted) and
    ``drop_handles()`` (called under the cache's lock to let its handles go)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._lru: collections.OrderedDict[CacheMember, None] = collections.OrderedDict()
        #: listed segments no operation pins (the ones eviction may take): a log dir of
        #: thousands of partitions lists thousands of pinned active segments, and looking
        #: through them at every touch of a new segment made opening it quadratic
        self._unpinned = 0
        #: ``move_to_end(segment)``: ``touch``'s fast path for a listed segment, one C call
        #: (KeyError for one not listed)
        self.move_to_end = self._lru.move_to_end

    def touch(self, segment: CacheMember) -> None:
        """``segment`` was used: make it the most recent; evict beyond the limit."""
        lru = self._lru
        try:
            # A listed segment (every read of an open one) moves without the lock: one C
            # call under the GIL; ``_evict`` iterates over a copy of the order.
            lru.move_to_end(segment)
            return
        except KeyError:
            pass
        with self._lock:
            if segment in lru:
                lru.move_to_end(segment)
                return
            if not segment.evictable:
                return
            lru[segment] = None
            if segment.pins == 0:
                self._unpinned += 1
            if len(lru) > self.limit:
                # Not the segment being touched: its caller is about to use the handles it
                # just opened (an index dropped under its user and then resized stayed at
                # its maximum size). With every other one pinned the list grows instead.
                self._evict(len(lru) - self.limit, keep=segment)

    def _evict(self, n, keep=None):
        lru = self._lru
        n = min(n, self._unpinned - (keep is not None and keep.pins == 0 and keep in lru))
        victims = []
        # The least recently used first; a pinned one (or ``keep``) met on the way is in use,
        # so it moves to the end as a touch would: each is passed over once, not at every
        # eviction.
        for _ in range(len(lru)):
            if len(victims) >= n:
                break
            s = next(iter(lru))
            if s.pins or s is keep:
                lru.move_to_end(s)
                continue
            del lru[s]
            victims.append(s)
        self._unpinned -= len(victims)
        for s in victims:
            s.drop_handles()

    def pin(self, segment: CacheMember) -> None:
        with self._lock:
            if segment.pins == 0 and segment in self._lru:
                self._unpinned -= 1
            segment.pins += 1

    def unpin(self, segment: CacheMember) -> None:
        with self._lock:
            segment.pins -= 1
            if segment.pins == 0 and segment in self._lru:
                self._unpinned += 1

    def pinned(self, segment: CacheMember) -> Pinned:
        """``with cache.pinned(segment):`` no eviction of it while a multi-step operation
        runs."""
        return Pinned(self, segment)

    def forget(self, segment: CacheMember) -> None:
        with self._lock:
            if segment in self._lru:
                del self._lru[segment]
                if segment.pins == 0:
                    self._unpinned -= 1

    def set_limit(self, limit: int) -> int:
        if limit < 1:
            raise ValueError(f"the open segment limit must be at least 1, not {limit}")
        with self._lock:
            old, self.limit = self.limit, limit
            if len(self._lru) > limit:
                self._evict(len(self._lru) - limit)
        return old

    def __len__(self) -> int:
        return len(self._lru)


class Pinned:
    """``with cache.pinned(segment):`` no eviction while a multi-step operation runs."""
    __slots__ = ("cache", "segment")

    def __init__(self, cache: DescriptorCache, segment: CacheMember) -> None:
        self.cache = cache
        self.segment = segment

    def __enter__(self) -> None:
        self.cache.pin(self.segment)

    def __exit__(self, *exc: object) -> None:
        self.cache.unpin(self.segment)


#: the process's one cache, which every ``LogSegment`` enters
OPEN_SEGMENTS = DescriptorCache(int(os.environ.get("KAFKALOG_MAX_OPEN_SEGMENTS",
                                                   DEFAULT_MAX_OPEN_SEGMENTS)))


def set_max_open_segments(limit: int) -> int:
    """Set how many segments of the process may hold descriptors and mappings at once (the
    least recently used beyond it release theirs; default 256, or the
    ``KAFKALOG_MAX_OPEN_SEGMENTS`` environment variable). Each holds at most one descriptor
    (its ``.log``'s) and three mappings (the ``.log`` and its two indexes), which keep no
    descriptor. Returns the previous limit."""
    return OPEN_SEGMENTS.set_limit(limit)


def open_segment_count() -> int:
    """How many segments hold descriptors or mappings now (at most the limit, plus those
    pinned by operations in progress)."""
    return len(OPEN_SEGMENTS)
