"""What every storage backend shares: the interface ``kafkalog.storage`` dispatches to, the
directory ``Entry``, URL parsing, and the process's cache of remote buffers.

A backend serves the paths of one kind: ``storage_local`` plain paths (and ``file://``),
``storage_fsspec`` the URLs of any protocol fsspec knows, and a registered scheme its own
(``kafkalog.tiered`` registers ``rsm+``: views of tiered-storage objects). ``storage.register``
names the scheme a backend serves; ``storage`` then hands it exactly the calls of
``StorageBackend`` for those paths, with paths already normalized.
"""
from __future__ import annotations

import abc
import collections
import os
import re
import threading
from typing import Any, Callable, Iterator, Mapping, NamedTuple, TypeVar

from kafkalog.errors import ObjectStorageError

#: Bytes per ranged request: a remote ``.log`` is fetched in blocks of this size, and a
#: tiered segment's chunks in requests of at most this many stored bytes. Read at each call
#: (tests and benchmarks change it).
BLOCK_SIZE = 8 * 1024 * 1024
CACHE_BYTES = int(os.environ.get("KAFKALOG_REMOTE_CACHE_BYTES", 256 * 1024 * 1024))

_T = TypeVar("_T")
_R = TypeVar("_R")
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$")


def split_url(path: Any) -> tuple[str, str] | None:
    """(protocol as written, the rest after ``://``) of a URL; None for anything else."""
    if not isinstance(path, str):
        return None
    m = _URL.match(path)
    return None if m is None else (m.group(1), m.group(2))


class Entry(NamedTuple):
    """A directory entry: ``name``, ``size`` in bytes, whether it is a regular file or a
    directory (an object store's objects are regular files, its prefixes directories)."""
    name: str
    size: int
    is_file: bool
    is_dir: bool


class StorageBackend(abc.ABC):
    """The calls ``kafkalog.storage`` makes for a path of the backend's kind (see there for
    what each returns). A backend implements the listing and reading calls; the rest have the
    defaults below."""

    @abc.abstractmethod
    def list_dir(self, path: str) -> list[Entry]:
        ...

    @abc.abstractmethod
    def isdir(self, path: str) -> bool:
        ...

    @abc.abstractmethod
    def isfile(self, path: str) -> bool:
        ...

    @abc.abstractmethod
    def open_file(self, path: str) -> Any:
        ...

    @abc.abstractmethod
    def read_file(self, path: str, size: int | None = None) -> bytes:
        """The file's bytes (``size``: its size, when listed already)."""

    @abc.abstractmethod
    def size_of(self, path: str) -> int:
        ...

    @abc.abstractmethod
    def modified_ms(self, path: str) -> int:
        ...

    def list_dir_sized(self, path: str, sized: tuple[str, ...]) -> list[Entry]:
        """``list_dir`` where only files whose names end in ``sized`` need their ``size``;
        a backend where a size costs a call per file (a ``stat``) gives the others -1."""
        return self.list_dir(path)

    def list_dirs_in(self, path: str, names: list[str],
                     sized: tuple[str, ...]) -> Iterator[tuple[str, list[Entry] | None]]:
        prefix = os.path.join(path, "")
        for name in names:
            try:
                yield name, self.list_dir_sized(prefix + name, sized)
            except (FileNotFoundError, NotADirectoryError):
                yield name, None

    def listdir(self, path: str) -> list[str]:
        return [e.name for e in self.list_dir(path)]

    def exists(self, path: str) -> bool:
        return self.isdir(path) or self.isfile(path)

    def read_files(self, paths: list[str], sizes: list[int] | None = None) -> list[bytes]:
        """The files' bytes (``sizes``: theirs, when listed already)."""
        if sizes is None:
            return [self.read_file(p) for p in paths]
        return [self.read_file(p, n) for p, n in zip(paths, sizes)]

    def read_ranges(self, path: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        raise ObjectStorageError(f"{path}: this storage is not read by byte ranges", url=path)

    def range_buffer(self, path: str, size: int) -> Any:
        raise ObjectStorageError(f"{path}: this storage is not read by byte ranges", url=path)

    def open_buffer(self, path: str, size: int | None = None) -> Any:
        """The buffer of the whole file (``size``: its size, when listed already)."""
        size = self.size_of(path) if size is None else size
        return self.range_buffer(path, size).ensure(0, size)

    def list_tree(self, path: str) -> dict[str, list[Entry]] | None:
        """{directory: its entries (as ``list_dir``)} for ``path`` and every directory below
        it, from one recursive listing (an object store's paged listing of every key under
        the prefix); None where listing one directory at a time costs no more (local files,
        views), so callers list as they walk."""
        return None

    def groups_partitions(self, path: str) -> bool:
        """Whether directory ``path`` is no partition but groups partition directories
        (a tiered-storage view's topic prefix), so a log dir's listing looks inside it."""
        return False

    def set_options(self, path: str, options: Mapping[str, Any]) -> None:
        """Record client options (credentials, endpoint) for ``path``'s bucket."""

    def resolve(self, path: Any, keys: Mapping[str, Any] | None) -> Any:
        """The path this backend shows ``path`` as (``storage.locate`` asks every
        registered backend), with ``keys`` (private keys by id) for what it decrypts."""
        return path

    def shown(self, path: str) -> str:
        """``path`` as messages show it: what the user named (a view's real objects)."""
        return path

    def shown_below(self, path: str) -> list[str]:
        """Directories a few levels below directory ``path`` that this view shows as log
        dirs (asked only to say where to look when ``path`` holds no partition)."""
        return []

    def refresh(self, path: str) -> None:
        """Forget what is cached of ``path``'s listings."""

    def reset(self) -> None:
        """Forget every option, client and cached listing."""


# ------------------------------------------------------------------------------ at once
def ahead(fn: Callable[[_T], _R], items: Iterator[_T], at_once: int,
          name: str) -> Iterator[_R]:
    """``fn(item)`` of each of ``items``, in order, ``at_once`` of them running in threads
    (named ``name``) ahead of the one consumed, each in a copy of the caller's context (its
    progress bar); an error is raised where its item comes."""
    import concurrent.futures
    import contextvars
    import itertools
    pending: collections.deque[concurrent.futures.Future[_R]] = collections.deque()
    with concurrent.futures.ThreadPoolExecutor(at_once, thread_name_prefix=name) as pool:
        try:
            for item in itertools.islice(items, at_once):
                pending.append(pool.submit(contextvars.copy_context().run, fn, item))
            while pending:
                result = pending.popleft().result()
                for item in itertools.islice(items, 1):
                    pending.append(pool.submit(contextvars.copy_context().run, fn, item))
                yield result
        finally:
            for future in pending:        # the consumer stopped early, or one failed
                future.cancel()


# ------------------------------------------------------------------------------ buffers
class _BufferCache:
    """Remote buffers by (path, size), least recently used first; past ``CACHE_BYTES`` of
    fetched blocks the oldest are forgotten (a reader holding one keeps it)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._lru: collections.OrderedDict[tuple[str, int], Any] = \
            collections.OrderedDict()

    def get(self, path: str, size: int, factory: Callable[[], Any]) -> Any:
        key = (path, size)
        with self._lock:
            buf = self._lru.get(key)
            if buf is None:
                buf = self._lru[key] = factory()
            else:
                self._lru.move_to_end(key)
            return buf

    def touch(self, buf: Any, added: bool = False) -> None:
        with self._lock:
            key = (buf.path, buf.size)
            if self._lru.get(key) is buf:
                self._lru.move_to_end(key)
            if not added:
                return
            total = sum(b.resident for b in self._lru.values())
            for k in list(self._lru):
                if total <= self.limit:
                    break
                victim = self._lru[k]
                if victim is buf:
                    continue
                total -= victim.resident
                del self._lru[k]

    def buffers(self) -> list[Any]:
        with self._lock:
            return list(self._lru.values())

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()


_CACHE = _BufferCache(CACHE_BYTES)


def cached_buffer(path: str, size: int, factory: Callable[[], Any]) -> Any:
    """The buffer cached for (``path``, ``size``), made by ``factory`` when there is none: a
    buffer with ``path``, ``size``, ``resident`` and ``ensure`` that calls
    ``touch_buffer``."""
    return _CACHE.get(path, size, factory)


def touch_buffer(buf: Any, added: bool = False) -> None:
    """Mark ``buf`` used (``added``: it holds more blocks now; older buffers may go)."""
    _CACHE.touch(buf, added)


def cached_buffers() -> list[Any]:
    """The buffers in the cache, least recently used first (their ``fetched`` counts the
    bytes each fetched)."""
    return _CACHE.buffers()


def clear_cache() -> None:
    """Forget every fetched block (the next read of a remote file fetches again)."""
    _CACHE.clear()
