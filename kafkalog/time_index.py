"""``TimeIndex`` (``.timeindex``): a segment's sparse map from timestamp to offset, with
Kafka's append rules and checks."""
from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from kafkalog._kernels import index_lookup_many
from kafkalog._layout import TIME_INDEX_ENTRY_SIZE, TIME_KEY, TIME_VALUE
from kafkalog.abstract_index import AbstractIndex
from kafkalog.errors import (
    CorruptIndexError, IndexFullError, InvalidOffsetError, InvalidTimestampError,
)

#: a time index entry as the file holds it: (timestamp, offset relative to the base)
ENTRY_DTYPE = np.dtype([("ts", ">i8"), ("rel", ">i4")])


class TimestampOffset(NamedTuple):
    """A time index entry: a timestamp (ms) and an absolute offset."""
    timestamp: int
    offset: int



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



class TimeIndex(AbstractIndex):
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

    def written_in_view(self, entry: TimestampOffset) -> None:
        """Count ``entry``, which ``ActiveSegmentAppender`` wrote through the held view (whose
        count it moved), within the allocated room."""
        self._n = self.view.entries
        self._last_entry = entry

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
                self._reserve((self._entries + 1) * 12)
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
            self._reserve((self._entries + n) * self.entry_size)
            entries = np.empty(n, dtype=ENTRY_DTYPE)
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
