"""``LogSegments``: an immutable, sorted list of a log's segments (Kafka's ``LogSegments``).

Every change builds a new list, so a reader holding one sees a consistent log while appends,
rolls, cleaning and deletions go on; the log swaps its list under its lock.
"""
from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

if TYPE_CHECKING:
    from kafkalog.segment import LogSegment


class LogSegments:
    """The segments of a log by base offset, with the floor/higher/range queries readers need.

    The last segment is the active one. Offsets held by a segment run from its base offset to
    the next segment's base offset (the log end offset for the last).
    """
    __slots__ = ("_segments", "_bases", "_closed_largest")

    def __init__(self, segments: Iterable[LogSegment] = ()) -> None:
        self._segments = tuple(sorted(segments, key=lambda s: s.base_offset))
        self._bases = [s.base_offset for s in self._segments]
        self._closed_largest: tuple[list[int], list[int]] | None = None

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __getitem__(self, i: int) -> LogSegment:
        return self._segments[i]

    def __contains__(self, segment: LogSegment) -> bool:
        i = bisect.bisect_left(self._bases, segment.base_offset)
        return i < len(self._segments) and self._segments[i] is segment

    @property
    def first(self) -> LogSegment | None:
        return self._segments[0] if self._segments else None

    @property
    def active(self) -> LogSegment | None:
        """The last segment (the one appends go to)."""
        return self._segments[-1] if self._segments else None

    @property
    def size(self) -> int:
        """Bytes in all ``.log`` files."""
        return sum(s.size for s in self._segments)

    def floor(self, offset: int) -> LogSegment | None:
        """The segment with the largest base offset <= ``offset`` (the one that would hold
        it), or None."""
        i = bisect.bisect_right(self._bases, offset) - 1
        return self._segments[i] if i >= 0 else None

    def floor_and_higher(self, offset: int) -> tuple[LogSegment | None, LogSegment | None]:
        """(``floor(offset)``, the segment after it) in one search (a read's per-call work:
        the first is read, the second bounds it)."""
        i = bisect.bisect_right(self._bases, offset)
        segments = self._segments
        return (segments[i - 1] if i > 0 else None,
                segments[i] if i < len(segments) else None)

    def higher(self, base_offset: int) -> LogSegment | None:
        """The first segment whose base offset is > ``base_offset``, or None."""
        i = bisect.bisect_right(self._bases, base_offset)
        return self._segments[i] if i < len(self._segments) else None

    def next_base(self, segment: LogSegment, log_end_offset: int) -> int:
        """Where ``segment``'s offsets end: the next segment's base offset, or
        ``log_end_offset`` for the last."""
        nxt = self.higher(segment.base_offset)
        return nxt.base_offset if nxt is not None else log_end_offset

    def with_bounds(self, log_end_offset: int) -> list[tuple[LogSegment, int]]:
        """[(segment, end offset)]: each segment with the offset its successor starts at
        (``log_end_offset`` for the last)."""
        ends = self._bases[1:] + [log_end_offset]
        return list(zip(self._segments, ends))

    def range(self, from_offset: int, to_offset: int | None = None) -> Sequence[LogSegment]:
        """The segments that may hold offsets in [from_offset, to_offset) (to the end when
        ``to_offset`` is None), in order."""
        if to_offset is not None and to_offset <= from_offset:
            return ()
        lo = max(bisect.bisect_right(self._bases, from_offset) - 1, 0)
        hi = len(self._segments) if to_offset is None else \
            bisect.bisect_left(self._bases, to_offset)
        return self._segments[lo:max(hi, lo)]

    def by_largest_timestamp(self, timestamp: int) -> Iterator[LogSegment]:
        """The segments whose largest timestamp is >= ``timestamp``, in order (where Kafka's
        fetchOffsetByTimestamp looks). A closed segment's largest timestamp cannot change
        within one list (appends go to the last; truncation, rolls and cleaning make a new
        list), so they are read once per list and the first candidate is found by bisection
        over their running maximum; the active segment's is read each time."""
        cached = self._closed_largest
        if cached is None:
            largest = [s.largest_timestamp for s in self._segments[:-1]]
            running, top = [], -(2**63)
            for t in largest:
                top = max(top, t)
                running.append(top)
            cached = self._closed_largest = (largest, running)
        largest, running = cached
        for i in range(bisect.bisect_left(running, timestamp), len(largest)):
            if largest[i] >= timestamp:
                yield self._segments[i]
        if self._segments and self._segments[-1].largest_timestamp >= timestamp:
            yield self._segments[-1]

    def offset_for_timestamp(self, timestamp: int, log_start_offset: int
                             ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or above ``log_start_offset`` with a
        timestamp >= ``timestamp`` (>= 0), or None: Kafka's fetchOffsetByTimestamp over these
        segments (a loaded log's, or a remote partition's as listed)."""
        for segment in self.by_largest_timestamp(timestamp):
            found = segment.find_offset_by_timestamp(timestamp, log_start_offset)
            if found is not None:
                return (found.offset, found.timestamp)
        return None

    def replace(self, remove: Iterable[LogSegment] = (),
                add: Iterable[LogSegment] = ()) -> LogSegments:
        """A new list without the segments in ``remove`` (by identity) and with ``add``."""
        gone = {id(s) for s in remove}
        return LogSegments([s for s in self._segments if id(s) not in gone] + list(add))

    def __repr__(self) -> str:
        return f"LogSegments({self._bases!r})"
