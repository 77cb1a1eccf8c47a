"""A tiered segment's ``.log`` read by chunks: ``ChunkBuffer`` fetches, decrypts and
decompresses only the chunks covering the bytes a read asks for (one ranged request per run
of adjacent chunks), and ``LogReader`` reads it sequentially."""
from __future__ import annotations

import io
import mmap
import threading
from typing import Any

from kafkalog import storage, storage_backend
from kafkalog.errors import CorruptTieredObjectError, TieredStorageError
from kafkalog.files import LOG_SUFFIX
from kafkalog.storage_backend import touch_buffer
from kafkalog.tiered.manifest import Segment


class ChunkBuffer:
    """A view ``.log``'s original bytes, decoded by chunks on demand: the interface of
    ``storage_fsspec.RangeBuffer`` (``ensure``, ``fetched``, ``resident``, ``step``) over
    Aiven's chunk index."""

    def __init__(self, path: str, segment: Segment) -> None:
        self.path = path
        self.segment = segment
        self.size = segment.size
        self.step = segment.chunk_size
        self._mm: Any = mmap.mmap(-1, self.size) if self.size else b""
        self._have = bytearray(segment.chunk_count)
        self._lock = threading.Lock()
        self.fetched = 0

    def _check_object(self):
        s = self.segment
        log_path = s.partition.object_path(s, LOG_SUFFIX)
        if s.log_object_size is None:
            raise CorruptTieredObjectError(f"{log_path} is missing (its manifest is "
                                           f"{s.manifest_path})", object=log_path)
        if s.chunk_offsets[-1] != s.log_object_size:
            raise CorruptTieredObjectError(
                f"{log_path}: the manifest's {s.chunk_count} chunk sizes add up to "
                f"{s.chunk_offsets[-1]} bytes, but the object has {s.log_object_size}",
                object=log_path)
        return log_path

    def ensure(self, start: int, end: int) -> Any:
        """The buffer with original bytes [start, end) (clamped) present."""
        start, end = max(0, start), min(end, self.size)
        if start >= end:
            return self._mm
        first, last = start // self.step, (end - 1) // self.step
        if all(self._have[first:last + 1]):
            touch_buffer(self)
            return self._mm
        with self._lock:
            missing = [i for i in range(first, last + 1) if not self._have[i]]
            if missing:
                self._fetch(missing)
        touch_buffer(self, added=True)
        return self._mm

    def _fetch(self, missing, errors=None):
        """Fetch and decode chunks ``missing``; a chunk that does not decode raises, or with
        ``errors`` (a list) is appended there and left missing."""
        s = self.segment
        log_path = self._check_object()
        runs = _runs(missing, s.chunk_offsets, storage_backend.BLOCK_SIZE)
        stored = storage.read_ranges(log_path, [(s.chunk_offsets[a], s.chunk_offsets[b + 1])
                                                for a, b in runs])
        s.requests += len(runs)
        for (a, b), data in zip(runs, stored):
            view = memoryview(data)
            base = s.chunk_offsets[a]
            for i in range(a, b + 1):
                try:
                    chunk = s.decode_chunk(i, view[s.chunk_offsets[i] - base:
                                                   s.chunk_offsets[i + 1] - base])
                except CorruptTieredObjectError as e:
                    if errors is None:
                        raise
                    errors.append(e)
                    continue
                lo, hi = s.chunk_span(i)
                self._mm[lo:hi] = chunk
                self._have[i] = 1
                s.fetched_chunks += 1
                s.decoded_chunks += 1
            self.fetched += len(data)

    def check(self) -> list[TieredStorageError]:
        """Fetch and decode every chunk not decoded yet; the errors met, one per damaged
        chunk (an object whose chunk index does not fit it, or a data key that cannot be
        unwrapped: that error alone)."""
        errors: list[TieredStorageError] = []
        with self._lock:
            missing = [i for i, have in enumerate(self._have) if not have]
            try:
                if missing:
                    self._fetch(missing, errors)
            except TieredStorageError as e:
                return [e]
        return errors

    @property
    def resident(self) -> int:
        return sum(self._have) * self.step

    @property
    def chunks_present(self) -> int:
        return sum(self._have)


def _runs(chunks, offsets, limit):
    """Adjacent missing chunks grouped into requests of at most ``limit`` stored bytes (one
    chunk at least)."""
    runs: list[tuple[int, int]] = []
    for i in chunks:
        if runs and runs[-1][1] == i - 1 and offsets[i + 1] - offsets[runs[-1][0]] <= limit:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


class LogReader(io.RawIOBase):
    """A sequential file object over a ``ChunkBuffer``."""

    def __init__(self, buffer: ChunkBuffer) -> None:
        super().__init__()
        self._buffer = buffer
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._buffer.size}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = self._buffer.size if n is None or n < 0 else min(self._buffer.size, self._pos + n)
        if end <= self._pos:
            return b""
        data = bytes(self._buffer.ensure(self._pos, end)[self._pos:end])
        self._pos = end
        return data
