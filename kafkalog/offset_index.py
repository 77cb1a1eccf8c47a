"""``OffsetIndex`` (``.index``): a segment's sparse map from offset to the byte position of
its batch, with Kafka's append rules and checks."""
from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from kafkalog._kernels import index_lookup_many
from kafkalog._layout import (
    HEADER_SIZE_UP_TO_MAGIC, OFFSET_INDEX_ENTRY_SIZE, OFFSET_KEY, OFFSET_VALUE,
)
from kafkalog.abstract_index import AbstractIndex
from kafkalog.errors import CorruptIndexError, IndexFullError, InvalidOffsetError


class OffsetPosition(NamedTuple):
    """An offset index entry: an absolute offset and the byte position of its batch."""
    offset: int
    position: int



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



class OffsetIndex(AbstractIndex):
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

    def written_in_view(self, offset: int) -> None:
        """Count the entry for ``offset`` that ``ActiveSegmentAppender`` wrote through the
        held view (whose count it moved), within the allocated room."""
        self._n = self.view.entries
        self._last_offset = offset

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
                self._reserve((self._entries + 1) * 8)
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
            self._reserve((self._entries + n) * self.entry_size)
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
