"""Where a read-only log's bytes come from: local files, objects behind an fsspec URL, or a
registered view of other objects.

The one room for storage. A path is either local (a plain path, or a ``file://`` URL, which
becomes one: read through ``mmap`` exactly as before, no copy) or remote (``s3://``,
``s3a://`` / ``s3n://`` as aliases of ``s3://``, ``gs://``, ``abfs://``, ``hdfs://``, any
protocol fsspec knows). Remote paths are strings like local ones (``os.path.join`` and
``basename`` work on them), so the loader, segments, indexes and checkpoints keep one
implementation: each asks this module to list a directory, read a small file whole, or give
the ``.log``'s bytes over a range (a remote one as a buffer whose blocks are fetched on
demand, see ``storage_fsspec.RangeBuffer``).

Each call is handed to the backend serving the path (``storage_backend.StorageBackend``):
``storage_local`` for a local path, ``storage_fsspec`` for a URL, or the backend registered
for its scheme (``register``). A scheme ending in ``+`` is a view of the objects at the URL
after it: ``kafkalog.tiered`` registers ``rsm+``, a view that shows Kafka tiered-storage
objects as partition directories and that ``locate`` resolves a path naming them to.

A path is resolved once into a ``Location`` (``locate``): its root, backend, storage options
and tiered-storage keys, one value that discovery, planning and reading carry. A caller that
listed remote directories already (``list_tree``: discovery's one listing) hands the entries to
what it opens with ``listed``: files' existence and sizes are then answered from them, with no
LIST or HEAD. Credentials:
``locate(url, storage_options)`` records fsspec options for the URL's bucket (see
``storage_fsspec``); without any, the filesystem's own defaults apply.
"""
from __future__ import annotations

import contextlib
import contextvars
import errno
import os
from typing import Any, Callable, Iterator, Mapping

from kafkalog.errors import ReadOnlyStorageError
from kafkalog.storage_backend import (
    Entry as Entry, StorageBackend, clear_cache as clear_cache, split_url,
)
from kafkalog.storage_fsspec import FsspecStorage
from kafkalog.storage_local import LocalStorage, open_regular

_ALIASES = {"s3a": "s3", "s3n": "s3"}
_LOCAL: StorageBackend = LocalStorage()
_FSSPEC: StorageBackend = FsspecStorage()
_backends: dict[str, StorageBackend] = {}          # "<scheme>" or "<view scheme>+" -> backend


def register(scheme: str, backend: StorageBackend) -> None:
    """Serve the URLs of ``scheme`` with ``backend``; a scheme ending in ``+`` (``rsm+``) is
    a view, whose URLs are ``<scheme><url of the objects it shows>``, its scheme optionally
    qualified by the view (``rsm.<qualifier>+``: the tiered view's keyring). Every later
    ``locate`` also asks ``backend`` what it shows a path as (``resolve``)."""
    _backends[scheme.lower()] = backend


def _view_prefix(protocol: str) -> str | None:
    """The view part of a view URL's (lower-cased) protocol, as written (``rsm+``, or with the
    view's own qualifier after a dot, ``rsm.<qualifier>+``); None for any other protocol."""
    view, plus, _ = protocol.partition("+")
    if plus and view.partition(".")[0] + plus in _backends:
        return view + plus
    return None


def _backend(path: Any) -> StorageBackend:
    url = split_url(path)
    if url is None:
        return _LOCAL
    protocol = url[0].lower()
    if protocol == "file":
        return _LOCAL
    view = _view_prefix(protocol)
    if view is not None:
        return _backends[view.partition(".")[0].rstrip("+") + "+"]
    return _backends.get(protocol, _FSSPEC)


# ------------------------------------------------------------------------------ paths
def is_remote(path: Any) -> bool:
    """True for a URL other than ``file://`` (read through fsspec, never mapped)."""
    url = split_url(path)
    return url is not None and url[0].lower() != "file"


def is_view(path: Any) -> bool:
    """True for a registered view's path (``rsm+...``: tiered-storage objects shown as
    partition directories)."""
    url = split_url(path)
    return url is not None and _view_prefix(url[0].lower()) is not None


def normalize(path: Any) -> Any:
    """A ``file://`` URL as its local path, ``s3a://``/``s3n://`` as ``s3://``, the URL inside
    a view's so too (a local one as ``file://``); anything else unchanged (a local path stays
    a local path, not made absolute)."""
    url = split_url(path)
    if url is None:
        return path
    protocol, rest = url[0].lower(), url[1]
    view = _view_prefix(protocol)
    if view is not None:
        inner = normalize(path[len(view):])
        return view + (inner if is_remote(inner) else "file://" + inner)
    if protocol == "file":
        return rest if rest.startswith("/") else "/" + rest
    protocol = _ALIASES.get(protocol, protocol)
    return f"{protocol}://{rest.rstrip('/')}"


def set_options(path: Any, storage_options: Mapping[str, Any]) -> None:
    """Record ``storage_options`` for the bucket (or host) of remote ``path`` (normalized):
    every later read of that bucket in the process uses them, until other options are given
    (a local path has none)."""
    _backend(path).set_options(path, storage_options)


class Location:
    """A path resolved once (``locate``): where a read's bytes come from and how to reach
    them, carried as one value through discovery, planning and reading.

    ``root``: the path normalized (``normalize``), or the view a registered view shows it as
    (the tiered-storage view of Aiven's objects, naming the keyring of ``rsm_keys``);
    ``options``: the filesystem's storage options for a remote root (None: its defaults);
    ``rsm_keys``: key-pair id -> RSA private key (PEM file or text) of encrypted
    tiered-storage segments (None: none); ``backend``: the ``StorageBackend`` serving
    ``root``. Immutable and picklable: unpickled in another process (a Spark worker), its
    options and keys are recorded there too, without resolving ``root`` again."""
    __slots__ = ("root", "options", "rsm_keys")
    root: str
    options: dict[str, Any] | None
    rsm_keys: dict[str, Any] | None

    def __init__(self, root: str, options: Mapping[str, Any] | None = None,
                 rsm_keys: Mapping[str, Any] | None = None) -> None:
        # copies: a caller's dict changed later does not change the location
        object.__setattr__(self, "root", root)
        object.__setattr__(self, "options", None if options is None else dict(options))
        object.__setattr__(self, "rsm_keys", dict(rsm_keys) if rsm_keys else None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Location is immutable ({name})")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_recorded, (self.root, self.options, self.rsm_keys))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Location) and (self.root, self.options, self.rsm_keys) == \
            (other.root, other.options, other.rsm_keys)

    __hash__ = None  # type: ignore[assignment]   # options are dicts

    def __repr__(self) -> str:          # never the options or keys: they hold credentials
        return f"Location({self.root!r})"

    @property
    def backend(self) -> StorageBackend:
        return _backend(self.root)

    @property
    def is_remote(self) -> bool:
        return is_remote(self.root)

    def task_options(self, path: Any) -> dict[str, Any] | None:
        """The storage options a read task of ``path`` (below ``root``) carries: ``options``
        for a remote path; None for a local one (a local task carries no credentials)."""
        return None if self.options is None or not is_remote(path) else self.options


def locate(path: Any, storage_options: Mapping[str, Any] | None = None,
           rsm_keys: Mapping[str, Any] | None = None) -> Location:
    """The ``Location`` of ``path`` (a local path, ``file://`` or fsspec URL, a tiered-storage
    prefix or object): the one place a path is resolved. Normalizes it (``normalize``),
    records ``storage_options`` for a remote one's bucket (``set_options``), and asks the
    registered views what they show it as with ``rsm_keys`` (``kafkalog.tiered``: the view
    of a path naming Aiven's objects, whose keyring those keys are)."""
    root = normalize(path)
    if storage_options is not None:
        set_options(root, storage_options)
    for backend in list(_backends.values()):
        root = backend.resolve(root, rsm_keys)
    return Location(root, storage_options, rsm_keys)


def locate_each(paths: Any, storage_options: Mapping[str, Any] | None = None,
                rsm_keys: Mapping[str, Any] | None = None) -> list[Location]:
    """``paths`` (one path or several) located once each (``locate``); a ``Location`` among
    them is taken as it is (located already, as a Spark share's were on the driver)."""
    return [p if isinstance(p, Location) else locate(os.fspath(p), storage_options, rsm_keys)
            for p in each_path(paths)]


def each_path(paths: Any) -> list[Any]:
    """``paths`` as a list: one path (a ``str``, ``os.PathLike`` or ``Location``) or several."""
    return [paths] if isinstance(paths, (str, os.PathLike, Location)) else list(paths)


def _recorded(root: str, options: Mapping[str, Any] | None,
              rsm_keys: Mapping[str, Any] | None) -> Location:
    """A ``Location`` unpickled: its options and its view's keys recorded in this process
    (``root`` is resolved already: no listing)."""
    if options is not None:
        set_options(root, options)
    if rsm_keys:
        _backend(root).resolve(root, rsm_keys)
    return Location(root, options, rsm_keys)


def shown(path: Any) -> Any:
    """``path`` as messages show it: a view path (``rsm.<token>+...``) as the real objects it
    stands for, any other path unchanged."""
    return _backend(path).shown(path)


def shown_below(path: Any) -> list[str]:
    """Directories a few levels below directory ``path`` that a registered view shows as log
    dirs (an Aiven storage root's key prefix holding tiered topic prefixes): where to look
    when ``path`` holds no partition. Lists directories: for error messages only."""
    return [found for backend in list(_backends.values()) for found in backend.shown_below(path)]


def check_writable(path: Any) -> None:
    """Raise ReadOnlyStorageError for a remote path: object stores are read, never written
    (they do not append; Kafka's own tiered storage copies whole segments)."""
    if is_remote(normalize(path)):
        raise ReadOnlyStorageError(
            f"{path}: remote logs are read-only; open them with read_only=True (writing needs "
            f"a local directory)")


def refresh(path: Any) -> None:
    """Forget what was cached of remote ``path``'s listings (a log opened again sees objects
    written since)."""
    _backend(path).refresh(path)


def abspath(path: Any) -> Any:
    """``os.path.abspath`` of a local path; a URL unchanged."""
    return path if is_remote(path) else os.path.abspath(path)


# ------------------------------------------------------------------------------ listed
class Listed:
    """Remote directories' entries a caller listed already (``listed``), by directory, those
    of an ``outer`` listing too; each directory's entries by name made on first use. Made
    once, entered by each of the threads that read below it (``listed(this)``: no copy).
    ``keep_read``: the files read within are kept (up to ``KEEP_READ_BYTES``), and read again
    from here (a listed file is the snapshot's: its bytes do not change)."""
    __slots__ = ("_dirs", "_outer", "_by_name", "_read", "_kept_bytes")

    #: Bytes of files a ``keep_read`` listing keeps at most (the small files an open and a
    #: check both read; not every index of a long partition).
    KEEP_READ_BYTES = 16 * 1024 * 1024

    def __init__(self, dirs: Mapping[str, list[Entry]], outer: Listed | None = None,
                 keep_read: bool = False) -> None:
        self._dirs = {d.rstrip("/"): e for d, e in dirs.items() if is_remote(d)}
        self._outer = outer
        self._by_name: dict[str, dict[str, Entry]] = {}
        self._read: dict[str, bytes] | None = {} if keep_read else None
        self._kept_bytes = 0

    def entries(self, directory: str) -> list[Entry] | None:
        """The entries of ``directory`` as listed (None: not listed)."""
        found = self._dirs.get(directory)
        return found if found is not None or self._outer is None else \
            self._outer.entries(directory)

    def entry(self, path: str) -> tuple[bool, Entry | None]:
        """(whether the listing knows ``path``, its entry: None when it is not there)."""
        parent, _, name = path.rpartition("/")
        if self._outer is not None and parent not in self._dirs and path not in self._dirs:
            return self._outer.entry(path)
        names = self._by_name.get(parent)
        if names is None:
            entries = self._dirs.get(parent)
            if entries is None:
                # a directory listed without its parent (the root a caller listed)
                return (True, Entry(name, 0, False, True)) if path in self._dirs else \
                    (False, None)
            names = self._by_name[parent] = {e.name: e for e in entries}
        return True, names.get(name)

    def tree(self, path: str) -> dict[str, list[Entry]] | None:
        """``path``'s directory and those below it, when every one of them was listed."""
        out, todo = {}, [path]
        while todo:
            d = todo.pop()
            entries = self.entries(d)
            if entries is None:
                return None
            out[d] = list(entries)
            todo.extend(f"{d}/{e.name}" for e in entries if e.is_dir)
        return out

    def read(self, paths: list[str], fetch: Callable[[list[str]], list[bytes]]
             ) -> list[bytes]:
        """The bytes of listed files ``paths``: those kept (``keep_read``, here or outside),
        the others ``fetch(those paths)`` (at once), kept then while the budget lasts."""
        listing: Listed | None = self
        while listing is not None and listing._read is None:
            listing = listing._outer
        if listing is None:
            return fetch(paths)
        kept = listing._read
        assert kept is not None
        missing = [p for p in paths if p not in kept]
        fetched = dict(zip(missing, fetch(missing))) if missing else {}
        for p, data in fetched.items():
            if listing._kept_bytes + len(data) <= self.KEEP_READ_BYTES:
                kept[p] = data
                listing._kept_bytes += len(data)
        return [fetched[p] if p in fetched else kept[p] for p in paths]


_listed: contextvars.ContextVar[Listed | None] = contextvars.ContextVar("kafkalog_listed",
                                                                        default=None)


@contextlib.contextmanager
def listed(dirs: Mapping[str, list[Entry]] | Listed, keep_read: bool = False
           ) -> Iterator[None]:
    """Within: the remote directories of ``dirs`` ({directory: its entries}, as ``list_tree``
    or ``log_dirs.partition_listing`` gave them) are what the listing said, the snapshot a
    read of them sees: listing them, whether a file in them exists, is a file or directory,
    and a file's size are answered from ``dirs`` (no LIST, no HEAD), a file missing from them
    is missing (no GET), a listed one read by a GET of its listed size (``keep_read``: read
    once within). Local paths, and remote ones in directories not listed, are asked as
    always. Holds for the calling context (the threads ``log_dirs.each_partition`` runs it
    in), nested ones adding to it (a ``Listed`` is entered as it is)."""
    if not isinstance(dirs, Listed):
        dirs = Listed(dirs, _listed.get(), keep_read)
    token = _listed.set(dirs)
    try:
        yield
    finally:
        _listed.reset(token)


def listed_entries(directory: Any) -> list[Entry] | None:
    """The entries of remote ``directory`` in the listing here (``listed``); None: none."""
    known = _listed.get()
    return None if known is None or not isinstance(directory, str) or \
        not is_remote(directory) else known.entries(directory.rstrip("/"))


def _known(path: Any) -> tuple[bool, Entry | None]:
    """(whether ``listed`` knows remote ``path``, its entry or None when missing)."""
    known = _listed.get()
    if known is None or not isinstance(path, str) or not is_remote(path):
        return False, None
    return known.entry(path.rstrip("/"))


# ------------------------------------------------------------------------------ listing
def list_dir(path: Any, sized: tuple[str, ...] | None = None) -> list[Entry]:
    """The entries directly inside directory ``path``, by name. Raises FileNotFoundError (a
    local path) or LogNotFoundError (a URL) when there is no such directory. ``sized``: only
    the files whose names end so need their ``size`` (a local listing gives the others -1,
    without a ``stat`` each)."""
    entries = listed_entries(path)
    if entries is not None:
        return list(entries)
    backend = _backend(path)
    return backend.list_dir(path) if sized is None else backend.list_dir_sized(path, sized)


def list_tree(path: Any) -> dict[str, list[Entry]] | None:
    """{directory: its entries, by name} for directory ``path`` and every directory below it,
    from one recursive listing of an object store (1,000 keys per request, no request per
    directory; for a tiered-storage view, of the objects it shows); None for a local path,
    which is listed a directory at a time (``list_dir``). Raises as ``list_dir`` does for
    ``path``."""
    known = _listed.get()
    tree = None if known is None or not isinstance(path, str) or not is_remote(path) else \
        known.tree(path.rstrip("/"))
    return tree if tree is not None else _backend(path).list_tree(path)


def list_dirs_in(path: Any, names: list[str],
                 sized: tuple[str, ...]) -> Iterator[tuple[str, list[Entry] | None]]:
    """(name, ``list_dir(<path>/<name>, sized)``) of each of ``names``, directories in
    directory ``path`` (None for one gone since), in the order the storage lists them fastest:
    a local file system's by inode number (with a cold cache their inodes and blocks are read
    off the disk mostly in sequence, as GNU fts walks a big directory), several at once once
    they are found to come from the disk; any other storage's one after the other as given."""
    return _backend(path).list_dirs_in(path, names, sized)


def listdir(path: Any) -> list[str]:
    """Names directly inside directory ``path`` (``os.listdir`` for a local path)."""
    entries = listed_entries(path)
    return [e.name for e in entries] if entries is not None else _backend(path).listdir(path)


def isdir(path: Any) -> bool:
    """Whether ``path`` is a directory (for a URL: a prefix holding objects)."""
    known, entry = _known(path)
    return (entry is not None and entry.is_dir) if known else _backend(path).isdir(path)


def exists(path: Any) -> bool:
    """Whether a file (object) or directory ``path`` exists."""
    known, entry = _known(path)
    return entry is not None if known else _backend(path).exists(path)


def isfile(path: Any) -> bool:
    """Whether ``path`` is a regular file (for a URL: an object)."""
    known, entry = _known(path)
    return (entry is not None and entry.is_file) if known else _backend(path).isfile(path)


def groups_partitions(path: Any) -> bool:
    """Whether directory ``path`` is no partition directory but holds partition directories
    (a tiered-storage view's topic prefix inside a prefix of topics)."""
    return _backend(path).groups_partitions(path)


# ------------------------------------------------------------------------------ reading
def open_file(path: Any) -> Any:
    """A binary file object for sequential reading: the local file, or a remote object read
    ahead in ``BLOCK_SIZE`` ranged GETs."""
    return _backend(path).open_file(path)


def read_file(path: Any) -> bytes:
    """The whole content of a small file (a checkpoint, an index, a snapshot). A missing one
    raises FileNotFoundError, local or remote."""
    size = _listed_size(path)
    known = _listed.get()
    if size is None or known is None:
        return _backend(path).read_file(path)
    # a registered backend may take no size: it is passed only when listed
    return known.read([path], lambda _: [_backend(path).read_file(path, size)])[0]


def _listed_size(path: Any) -> int | None:
    """The size ``listed`` gives file ``path`` (None: not listed); FileNotFoundError for a
    file it says is not there (as reading it would raise)."""
    known, entry = _known(path)
    if not known:
        return None
    if entry is None or not entry.is_file:
        raise FileNotFoundError(errno.ENOENT, "not in the listing of its directory", path)
    return entry.size


def read_regular_file(path: Any) -> bytes:
    """The bytes of a small file (a checkpoint, a snapshot), which must be a regular file
    (``storage_local.open_regular``; a remote one is read whole; a missing one is
    FileNotFoundError)."""
    if is_remote(path):
        return read_file(path)
    with os.fdopen(open_regular(path), "rb") as f:
        return f.read()


def size_of(path: Any) -> int:
    """Bytes in file ``path`` (within ``listed``: its listed size, FileNotFoundError when the
    listing shows none, as ``read_file``)."""
    size = _listed_size(path)
    return size if size is not None else _backend(path).size_of(path)


def modified_ms(path: Any) -> int:
    """The file's modification time, in milliseconds since the epoch (0 when unknown)."""
    return _backend(path).modified_ms(path)


def read_files(paths: list[str]) -> list[bytes]:
    """The contents of several small files (remote ones requested concurrently; within a
    ``listed(..., keep_read=True)``, kept as ``read_file`` keeps them)."""
    sizes = [_listed_size(p) for p in paths]
    known = _listed.get()
    if known is not None and paths and None not in sizes:
        return known.read(paths, _read_files)
    return _read_files(paths, sizes)


def _read_files(paths: list[str], sizes: list[int | None] | None = None) -> list[bytes]:
    sizes = [_listed_size(p) for p in paths] if sizes is None else sizes
    out: list[bytes] = [b""] * len(paths)
    by_backend: dict[int, tuple[StorageBackend, list[int]]] = {}
    for i, p in enumerate(paths):
        backend = _backend(p)
        by_backend.setdefault(id(backend), (backend, []))[1].append(i)
    for backend, slots in by_backend.values():
        listed_sizes = [sizes[i] for i in slots]
        got = backend.read_files([paths[i] for i in slots]) if None in listed_sizes else \
            backend.read_files([paths[i] for i in slots], listed_sizes)   # type: ignore
        for i, data in zip(slots, got):
            out[i] = data
    return out


def read_ranges(path: Any, ranges: list[tuple[int, int]]) -> list[bytes]:
    """Bytes [start, end) of file ``path`` for each range (remote ranges requested
    concurrently, one ranged GET each). A range past the end of the file is an
    ObjectChangedError: the caller knew the size."""
    return _backend(path).read_ranges(path, ranges)


def range_buffer(path: str, size: int) -> Any:
    """The buffer of remote file ``path`` of ``size`` bytes, shared while the process's cache
    keeps it: ``ensure(start, end)`` returns it with bytes [start, end) present (a
    ``storage_fsspec.RangeBuffer``; for a tiered-storage view's ``.log``, its
    ``tiered.ChunkBuffer``)."""
    return _backend(path).range_buffer(path, size)


def open_buffer(path: Any) -> Any:
    """A read-only buffer of a whole file: the mmap of a local one (b"" when empty), or a
    remote one fetched by concurrent ranged GETs."""
    path = normalize(path)
    return _backend(path).open_buffer(path, _listed_size(path))


def reset() -> None:
    """Forget every recorded ``storage_options``, filesystem, fetched block and view listing
    (the next remote read starts from the environment again)."""
    for backend in (_LOCAL, _FSSPEC, *_backends.values()):
        backend.reset()
    clear_cache()
