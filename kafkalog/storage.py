"""Where a read-only log's bytes come from: local files, or objects behind an fsspec URL.

The one room for storage. A path is either local (a plain path, or a ``file://`` URL, which
becomes one: read through ``mmap`` exactly as before, no copy) or remote (``s3://``,
``s3a://`` / ``s3n://`` as aliases of ``s3://``, ``gs://``, ``abfs://``, ``hdfs://``, any
protocol fsspec knows). Remote paths are strings like local ones (``os.path.join`` and
``basename`` work on them), so the loader, segments, indexes and checkpoints keep one
implementation: each asks this module to list a directory, read a small file whole, or give
the ``.log``'s bytes over a range.

A remote ``.log`` is a ``RangeBuffer``: an anonymous mapping as long as the object (address
space only: untouched pages cost no memory) into which the blocks a read needs are fetched
with ranged GETs, aligned to ``BLOCK_SIZE`` and fetched concurrently. Positions stay file
positions, so the kernels and every view of a batch run on it unchanged; a caller asks for
``ensure(start, end)`` before it reads [start, end). Fetched blocks stay while the buffer is
in the process's cache of remote buffers (``CACHE_BYTES`` of fetched blocks, least recently
used out first; a reader holding a buffer keeps it).

Kafka tiered storage: a prefix of objects written by Aiven's RemoteStorageManager is read
through a view, a path ``rsm+<url>`` that ``configure`` returns for it and that every function
here hands to ``kafkalog.tiered`` (see there): it lists, reads and ranges like a partition
directory whose ``.log`` buffers decode chunks on demand.

Credentials: ``configure(url, storage_options)`` records fsspec options (for S3: ``key``,
``secret``, ``endpoint_url``, ``client_kwargs``, ...) for the URL's bucket; without any, the
filesystem's own defaults apply (for S3 the standard AWS environment and files, incl.
``AWS_ENDPOINT_URL``). Requests that are throttled or fail with a 5xx are retried by the
client (botocore's ``standard`` retry mode, ``RETRY_ATTEMPTS`` attempts).
"""
from __future__ import annotations

import collections
import mmap
import os
import re
import stat
import threading
from typing import Any, Callable, Iterable, Mapping, NamedTuple, NoReturn

from kafkalog.errors import (
    KafkaLogError, LogNotFoundError, ObjectChangedError, ObjectStorageError,
    ReadOnlyStorageError, StorageAccessDeniedError,
)

BLOCK_SIZE = 8 * 1024 * 1024
CACHE_BYTES = int(os.environ.get("KAFKALOG_REMOTE_CACHE_BYTES", 256 * 1024 * 1024))
RETRY_ATTEMPTS = 8

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$")
_TIERED = "rsm+"
_ALIASES = {"s3a": "s3", "s3n": "s3"}
_lock = threading.Lock()
_options: dict[str, dict[str, Any]] = {}           # "<protocol>://<bucket>" -> options
_filesystems: dict[tuple[str, str], Any] = {}


# ------------------------------------------------------------------------------ paths
def is_remote(path: Any) -> bool:
    """True for a URL other than ``file://`` (read through fsspec, never mapped)."""
    if not isinstance(path, str):
        return False
    m = _URL.match(path)
    return m is not None and m.group(1).lower() != "file"


def normalize(path: Any) -> Any:
    """A ``file://`` URL as its local path, ``s3a://``/``s3n://`` as ``s3://``; anything else
    unchanged (a local path stays a local path, not made absolute)."""
    if not isinstance(path, str):
        return path
    m = _URL.match(path)
    if m is None:
        return path
    protocol, rest = m.group(1).lower(), m.group(2)
    if protocol.startswith(_TIERED):
        inner = normalize(path[len(_TIERED):])
        return _TIERED + (inner if is_remote(inner) else "file://" + inner)
    if protocol == "file":
        return rest if rest.startswith("/") else "/" + rest
    protocol = _ALIASES.get(protocol, protocol)
    return f"{protocol}://{rest.rstrip('/')}"


def _root(url: str) -> str:
    m = _URL.match(url)
    assert m is not None
    return f"{m.group(1)}://{m.group(2).split('/', 1)[0]}"


def configure(path: Any, storage_options: Mapping[str, Any] | None = None,
              rsm_keys: Mapping[str, Any] | None = None) -> Any:
    """Normalize ``path`` (see ``normalize``) and, for a remote one, record
    ``storage_options`` for its bucket (or host): every later read of that bucket in the
    process uses them, until other options are given. ``rsm_keys`` (key-pair id → RSA private
    key file or PEM) are registered for tiered-storage objects (``tiered.add_keys``). Returns
    the normalized path, or the tiered-storage view of a path naming Aiven's objects."""
    path = normalize(path)
    real = path[len(_TIERED):] if isinstance(path, str) and path.startswith(_TIERED) else path
    if storage_options is not None and is_remote(real):
        with _lock:
            _options[_root(real)] = dict(storage_options)
    from kafkalog import tiered
    tiered.add_keys(rsm_keys)
    return tiered.resolve(path)


def _tiered(path: Any) -> Any:
    """``kafkalog.tiered`` when ``path`` is inside a tiered-storage view, else None."""
    if isinstance(path, str) and path.startswith(_TIERED):
        from kafkalog import tiered
        return tiered
    return None


def check_writable(path: Any) -> None:
    """Raise ReadOnlyStorageError for a remote path: object stores are read, never written
    (they do not append; Kafka's own tiered storage copies whole segments)."""
    if is_remote(normalize(path)):
        raise ReadOnlyStorageError(
            f"{path}: remote logs are read-only; open them with read_only=True (writing needs "
            f"a local directory)")


def filesystem(path: str) -> Any:
    """The fsspec filesystem serving remote ``path``, with its bucket's options."""
    protocol = _URL.match(path).group(1)                # type: ignore[union-attr]
    root = _root(path)
    with _lock:
        options = dict(_options.get(root, {}))
        key = (root, repr(sorted(options.items(), key=lambda kv: kv[0])))
        fs = _filesystems.get(key)
        if fs is not None:
            return fs
    try:
        import fsspec
    except ImportError as e:
        raise ObjectStorageError(f"{path}: reading remote URLs needs fsspec "
                                 f"(pip install 'kafkalog[s3]')", url=path) from e
    if protocol == "s3":
        options = _s3_defaults(options)
    try:
        fs = fsspec.filesystem(protocol, **options)
    except ImportError as e:
        raise ObjectStorageError(f"{path}: no filesystem for {protocol}:// is installed "
                                 f"({e})", url=path) from e
    except ValueError as e:
        raise ObjectStorageError(f"{path}: {e}", url=path) from e
    with _lock:
        _filesystems[key] = fs
    return fs


def _s3_defaults(options):
    options.setdefault("skip_instance_cache", True)
    config = dict(options.get("config_kwargs") or {})
    # botocore retries throttling (503 SlowDown), 5xx and connection errors with backoff
    config.setdefault("retries", {"max_attempts": RETRY_ATTEMPTS, "mode": "standard"})
    options["config_kwargs"] = config
    # Older botocore ignores AWS_ENDPOINT_URL; newer honours it. Passing it explicitly is the
    # same either way and lets the CLI reach a local endpoint with no flags.
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "endpoint_url" not in options and \
            "endpoint_url" not in (options.get("client_kwargs") or {}):
        options["endpoint_url"] = endpoint
    return options


def refresh(path: Any) -> None:
    """Forget what the filesystem cached of remote ``path``'s listings (a log opened again
    sees objects written since)."""
    view = _tiered(path)
    if view is not None:
        view.refresh(path)
        path = view.real_path(path)
    if is_remote(path):
        try:
            filesystem(path).invalidate_cache()
        except (AttributeError, NotImplementedError):
            pass


def _fs_path(path):
    """The path as the filesystem names it (fsspec strips the protocol itself, but an alias
    like s3a:// is already normalized away)."""
    return path


def _raise_for(e: BaseException, path: str, what: str, missing: type[Exception] | None = None
               ) -> NoReturn:
    """Turn a filesystem exception into a kafkalog error naming ``path``."""
    if isinstance(e, KafkaLogError):
        raise e
    if isinstance(e, FileNotFoundError):
        if missing is not None:
            raise missing(f"{path}: {what}: no such object or prefix") from e
        raise e
    if isinstance(e, PermissionError):
        raise StorageAccessDeniedError(
            f"{path}: access denied while trying to {what} (check the credentials: "
            f"storage_options or the AWS_* environment): {e}", url=path) from e
    raise ObjectStorageError(f"{path}: could not {what}: {type(e).__name__}: {e}",
                             url=path) from e


# ------------------------------------------------------------------------------ listing
class Entry(NamedTuple):
    """A directory entry: ``name``, ``size`` in bytes, whether it is a regular file or a
    directory (an object store's objects are regular files, its prefixes directories)."""
    name: str
    size: int
    is_file: bool
    is_dir: bool


def list_dir(path: Any) -> list[Entry]:
    """The entries directly inside directory ``path``, by name. Raises FileNotFoundError (a
    local path) or LogNotFoundError (a URL) when there is no such directory."""
    view = _tiered(path)
    if view is not None:
        return view.list_dir(path)
    if not is_remote(path):
        out = []
        with os.scandir(path) as scan:
            for e in scan:
                try:
                    st = e.stat()
                except FileNotFoundError:
                    continue
                out.append(Entry(e.name, st.st_size, stat.S_ISREG(st.st_mode),
                                 stat.S_ISDIR(st.st_mode)))
        return sorted(out)
    fs = filesystem(path)
    try:
        infos = fs.ls(_fs_path(path), detail=True)
    except BaseException as e:
        _raise_for(e, path, "list the directory", LogNotFoundError)
    out = []
    prefix = path.split("://", 1)[1].rstrip("/") + "/"
    for info in infos:
        name = info["name"].rstrip("/")
        full = name if "://" not in name else name.split("://", 1)[1]
        if not full.startswith(prefix):
            continue                          # the directory itself, as some stores list it
        base = full[len(prefix):]
        if not base or "/" in base:
            continue
        is_dir = info.get("type") == "directory"
        out.append(Entry(base, int(info.get("size") or 0), not is_dir, is_dir))
    if not out and not fs.isdir(_fs_path(path)):
        raise LogNotFoundError(f"{path}: no such object or prefix")
    return sorted(out)


def listdir(path: Any) -> list[str]:
    """Names directly inside directory ``path`` (``os.listdir`` for a local path)."""
    if not is_remote(path):
        return os.listdir(path)
    return [e.name for e in list_dir(path)]


def _ask(path: Any, local: Any, method: str, what: str) -> bool:
    """``local(path)`` for a local path, else the filesystem's ``method`` (failures typed)."""
    view = _tiered(path)
    if view is not None:
        return bool(getattr(view, method)(path))
    if not is_remote(path):
        return bool(local(path))
    try:
        return bool(getattr(filesystem(path), method)(_fs_path(path)))
    except BaseException as e:
        _raise_for(e, path, what)


def isdir(path: Any) -> bool:
    """Whether ``path`` is a directory (for a URL: a prefix holding objects)."""
    return _ask(path, os.path.isdir, "isdir", "look at the directory")


def exists(path: Any) -> bool:
    """Whether a file (object) or directory ``path`` exists."""
    return _ask(path, os.path.exists, "exists", "look for the object")


def isfile(path: Any) -> bool:
    """Whether ``path`` is a regular file (for a URL: an object)."""
    return _ask(path, os.path.isfile, "isfile", "look for the object")


def abspath(path: Any) -> Any:
    """``os.path.abspath`` of a local path; a URL unchanged."""
    return path if is_remote(path) else os.path.abspath(path)


def open_file(path: Any) -> Any:
    """A binary file object for sequential reading: the local file, or a remote object read
    ahead in ``BLOCK_SIZE`` ranged GETs."""
    view = _tiered(path)
    if view is not None:
        return view.open_file(path)
    if not is_remote(path):
        return open(path, "rb")
    try:
        return _RemoteFile(path, filesystem(path).open(_fs_path(path), "rb",
                                                       block_size=BLOCK_SIZE))
    except BaseException as e:
        _raise_for(e, path, "open the object", LogNotFoundError)


class _RemoteFile:
    """A remote file object whose failures are kafkalog errors naming the URL."""

    def __init__(self, path, f):
        self.path, self._f = path, f

    def seek(self, pos, whence=0):
        return self._f.seek(pos, whence)

    def read(self, n=-1):
        try:
            return self._f.read(n)
        except FileNotFoundError as e:
            raise ObjectChangedError(f"{self.path} was deleted while it was read",
                                     url=self.path) from e
        except BaseException as e:
            _raise_for(e, self.path, "read the object")

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_file(path: Any) -> bytes:
    """The whole content of a small file (a checkpoint, an index, a snapshot). A missing one
    raises FileNotFoundError, local or remote."""
    view = _tiered(path)
    if view is not None:
        return view.read_file(path)
    if not is_remote(path):
        with open(path, "rb") as f:
            return f.read()
    try:
        return bytes(filesystem(path).cat_file(_fs_path(path)))
    except BaseException as e:
        _raise_for(e, path, "read the object")


def size_of(path: Any) -> int:
    """Bytes in file ``path``."""
    view = _tiered(path)
    if view is not None:
        return view.size_of(path)
    if not is_remote(path):
        return os.stat(path).st_size
    try:
        return int(filesystem(path).size(_fs_path(path)))
    except BaseException as e:
        _raise_for(e, path, "read the object's size", LogNotFoundError)


def modified_ms(path: Any) -> int:
    """The file's modification time, in milliseconds since the epoch (0 when unknown)."""
    view = _tiered(path)
    if view is not None:
        return view.modified_ms(path)
    if not is_remote(path):
        return int(os.stat(path).st_mtime * 1000)
    try:
        info = filesystem(path).info(_fs_path(path))
    except BaseException as e:
        _raise_for(e, path, "read the object's metadata")
    when = info.get("LastModified") or info.get("mtime") or info.get("last_modified")
    if hasattr(when, "timestamp"):
        return int(when.timestamp() * 1000)
    return int(float(when) * 1000) if isinstance(when, (int, float)) else 0


def read_files(paths: list[str]) -> list[bytes]:
    """The contents of several small files (remote ones requested concurrently)."""
    remote = [p for p in paths if is_remote(p) and _tiered(p) is None]
    if not remote or len(paths) == 1:
        return [read_file(p) for p in paths]
    try:
        got = filesystem(remote[0]).cat([_fs_path(p) for p in remote], on_error="return")
    except BaseException as e:
        _raise_for(e, remote[0], "read the objects")
    out = []
    for p in paths:
        data = got.get(p.split("://", 1)[1], got.get(p)) if is_remote(p) else None
        if data is None:
            data = read_file(p)
        elif isinstance(data, BaseException):
            _raise_for(data, p, "read the object")
        out.append(bytes(data))
    return out


def read_ranges(path: Any, ranges: list[tuple[int, int]]) -> list[bytes]:
    """Bytes [start, end) of file ``path`` for each range (remote ranges requested
    concurrently, one ranged GET each). A range past the end of the file is an
    ObjectChangedError: the caller knew the size."""
    if not is_remote(path):
        out = []
        with open(path, "rb") as f:
            for start, end in ranges:
                data = os.pread(f.fileno(), end - start, start)
                if len(data) != end - start:
                    raise ObjectChangedError(f"{path}: bytes [{start}, {end}) gave only "
                                             f"{len(data)} (the file is shorter)", url=path)
                out.append(data)
        return out
    fs = filesystem(path)
    try:
        if len(ranges) == 1:
            got = [fs.cat_file(_fs_path(path), start=ranges[0][0], end=ranges[0][1])]
        else:
            got = fs.cat_ranges([_fs_path(path)] * len(ranges), [a for a, _ in ranges],
                                [b for _, b in ranges], on_error="return")
    except BaseException as e:
        got = [e] * len(ranges)
    for (start, end), data in zip(ranges, got):
        if isinstance(data, FileNotFoundError):
            raise ObjectChangedError(f"{path} was deleted after it was listed",
                                     url=path) from data
        if isinstance(data, BaseException):
            _raise_for(data, path, f"read bytes [{start}, {end})")
        if len(data) != end - start:
            raise ObjectChangedError(f"{path}: bytes [{start}, {end}) gave {len(data)} bytes "
                                     f"(truncated or replaced since it was listed)", url=path)
    return [bytes(d) for d in got]


# ------------------------------------------------------------------------------ ranges
class RangeBuffer:
    """A remote file's bytes, fetched by aligned blocks on demand (see the module docstring).

    ``ensure(start, end)`` fetches the ``BLOCK_SIZE`` blocks covering [start, end) that are
    not here yet (concurrently, one ranged GET each) and returns the buffer, as long as the
    file; only the bytes ensured are meaningful. ``fetched`` counts the bytes fetched."""

    def __init__(self, path: str, size: int) -> None:
        self.path = path
        self.size = size
        self._mm: Any = mmap.mmap(-1, size) if size else b""
        self._have = bytearray((size + BLOCK_SIZE - 1) // BLOCK_SIZE)
        self._lock = threading.Lock()
        self.fetched = 0
        self.step = BLOCK_SIZE

    def ensure(self, start: int, end: int) -> Any:
        """The buffer with bytes [start, end) (clamped to the file) present."""
        start, end = max(0, start), min(end, self.size)
        if start >= end:
            return self._mm
        first, last = start // BLOCK_SIZE, (end - 1) // BLOCK_SIZE
        have = self._have
        if all(have[first:last + 1]):
            touch_buffer(self)
            return self._mm
        with self._lock:
            missing = [b for b in range(first, last + 1) if not have[b]]
            if missing:
                self._fetch(_runs(missing))
        touch_buffer(self, added=True)
        return self._mm

    def _fetch(self, runs):
        starts = [a * BLOCK_SIZE for a, _ in runs]
        ends = [min(self.size, (b + 1) * BLOCK_SIZE) for _, b in runs]
        fs = filesystem(self.path)
        try:
            if len(runs) == 1:
                results = [fs.cat_file(_fs_path(self.path), start=starts[0], end=ends[0])]
            else:
                results = fs.cat_ranges([_fs_path(self.path)] * len(runs), starts, ends,
                                        on_error="return")
        except BaseException as exc:
            results = [exc]
        for (a, b), s, e, data in zip(runs, starts, ends, results):
            if isinstance(data, BaseException):
                if isinstance(data, FileNotFoundError):
                    raise ObjectChangedError(
                        f"{self.path} was deleted after the log was opened (it was listed "
                        f"with {self.size} bytes)", url=self.path) from data
                _raise_for(data, self.path, f"read bytes [{s}, {e})")
            if len(data) != e - s:
                raise ObjectChangedError(
                    f"{self.path} changed after the log was opened: bytes [{s}, {e}) gave "
                    f"{len(data)} bytes (the object was listed with {self.size}; truncated or "
                    f"replaced)", url=self.path)
            self._mm[s:e] = data
            self.fetched += e - s
            for blk in range(a, b + 1):
                self._have[blk] = 1

    @property
    def resident(self) -> int:
        """Bytes of fetched blocks held."""
        return sum(self._have) * BLOCK_SIZE


def _runs(blocks: Iterable[int]) -> list[tuple[int, int]]:
    """The block ranges to fetch, one request each (so a long scan is fetched as concurrent
    requests of ``BLOCK_SIZE`` bytes)."""
    return [(b, b) for b in blocks]


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

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()


_CACHE = _BufferCache(CACHE_BYTES)


def range_buffer(path: str, size: int) -> Any:
    """The ``RangeBuffer`` of remote file ``path`` of ``size`` bytes (shared while cached);
    for a tiered-storage view's ``.log``, its ``tiered.ChunkBuffer``."""
    view = _tiered(path)
    if view is not None:
        return view.range_buffer(path, size)
    return _CACHE.get(path, size, lambda: RangeBuffer(path, size))


def cached_buffer(path: str, size: int, factory: Callable[[], Any]) -> Any:
    """The buffer cached for (``path``, ``size``), made by ``factory`` when there is none: a
    buffer with ``path``, ``size``, ``resident`` and ``ensure`` that calls
    ``touch_buffer``."""
    return _CACHE.get(path, size, factory)


def touch_buffer(buf: Any, added: bool = False) -> None:
    """Mark ``buf`` used (``added``: it holds more blocks now; older buffers may go)."""
    _CACHE.touch(buf, added)


def clear_cache() -> None:
    """Forget every fetched block (the next read of a remote file fetches again)."""
    _CACHE.clear()


def open_buffer(path: Any) -> Any:
    """A read-only buffer of a whole file: the mmap of a local one (b"" when empty), or a
    remote one fetched by concurrent ranged GETs."""
    path = normalize(path)
    if not is_remote(path):
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return b""
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    size = size_of(path)
    return range_buffer(path, size).ensure(0, size)


def reset() -> None:
    """Forget every recorded ``storage_options``, filesystem and fetched block (the next
    remote read starts from the environment again)."""
    with _lock:
        _options.clear()
        _filesystems.clear()
    clear_cache()
    from kafkalog import tiered
    tiered.reset()
