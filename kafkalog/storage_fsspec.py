"""Objects behind an fsspec URL as a storage backend (``s3://``, ``gs://``, ``abfs://``,
``hdfs://``, any protocol fsspec knows), read-only.

A remote ``.log`` is a ``RangeBuffer``: an anonymous mapping as long as the object (address
space only: untouched pages cost no memory) into which the blocks a read needs are fetched
with ranged GETs, aligned to ``storage_backend.BLOCK_SIZE`` and fetched concurrently.
Positions stay file positions, so the kernels and every view of a batch run on it unchanged;
a caller asks for ``ensure(start, end)`` before it reads [start, end). Fetched blocks stay
while the buffer is in the process's cache of remote buffers.

Credentials: ``set_options`` records fsspec options (for S3: ``key``, ``secret``,
``endpoint_url``, ``client_kwargs``, ...) for the URL's bucket; without any, the filesystem's
own defaults apply (for S3 the standard AWS environment and files, incl.
``AWS_ENDPOINT_URL``). Requests that are throttled or fail with a 5xx are retried by the
client (botocore's ``standard`` retry mode, ``RETRY_ATTEMPTS`` attempts).
"""
from __future__ import annotations

import mmap
import os
import threading
from typing import Any, Iterable, Mapping, NoReturn

from kafkalog import storage_backend
from kafkalog.errors import (
    KafkaLogError, LogNotFoundError, ObjectChangedError, ObjectStorageError,
    StorageAccessDeniedError,
)
from kafkalog.storage_backend import (
    Entry, StorageBackend, cached_buffer, split_url, touch_buffer,
)

RETRY_ATTEMPTS = 8

_lock = threading.Lock()
_options: dict[str, dict[str, Any]] = {}           # "<protocol>://<bucket>" -> options
_filesystems: dict[tuple[str, str], Any] = {}


def _root(url: str) -> str:
    parts = split_url(url)
    assert parts is not None
    return f"{parts[0]}://{parts[1].split('/', 1)[0]}"


def filesystem(path: str) -> Any:
    """The fsspec filesystem serving remote ``path``, with its bucket's options."""
    protocol = split_url(path)[0]                       # type: ignore[index]
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


class FsspecStorage(StorageBackend):
    """``storage``'s calls for a URL, each failure a kafkalog error naming it."""

    def set_options(self, path: str, options: Mapping[str, Any]) -> None:
        with _lock:
            _options[_root(path)] = dict(options)

    def reset(self) -> None:
        with _lock:
            _options.clear()
            _filesystems.clear()

    def refresh(self, path: str) -> None:
        try:
            filesystem(path).invalidate_cache()
        except (AttributeError, NotImplementedError):
            pass

    def list_dir(self, path: str) -> list[Entry]:
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

    def list_tree(self, path: str) -> dict[str, list[Entry]]:
        fs = filesystem(path)
        try:
            infos = fs.find(_fs_path(path), withdirs=True, detail=True)
        except BaseException as e:
            _raise_for(e, path, "list the prefix", LogNotFoundError)
        protocol, rest = path.split("://", 1)
        root = rest.rstrip("/")
        tree: dict[str, list[Entry]] = {root: []}
        for info in infos.values():
            full = info["name"].rstrip("/")
            full = full.split("://", 1)[1] if "://" in full else full
            if full == root:
                continue           # the prefix itself, or an object so named (no prefix)
            if not full.startswith(root + "/"):
                continue
            parent, _, name = full.rpartition("/")
            is_dir = info.get("type") == "directory"
            tree.setdefault(parent, []).append(Entry(name, int(info.get("size") or 0),
                                                     not is_dir, is_dir))
            if is_dir:
                tree.setdefault(full, [])
        if not tree[root]:
            raise LogNotFoundError(f"{path}: no such object or prefix")
        return {f"{protocol}://{d}": sorted(set(entries)) for d, entries in tree.items()}

    def _ask(self, path, method, what):
        try:
            return bool(getattr(filesystem(path), method)(_fs_path(path)))
        except BaseException as e:
            _raise_for(e, path, what)

    def isdir(self, path: str) -> bool:
        return self._ask(path, "isdir", "look at the directory")

    def exists(self, path: str) -> bool:
        return self._ask(path, "exists", "look for the object")

    def isfile(self, path: str) -> bool:
        return self._ask(path, "isfile", "look for the object")

    def open_file(self, path: str) -> Any:
        try:
            return _RemoteFile(path, filesystem(path).open(
                _fs_path(path), "rb", block_size=storage_backend.BLOCK_SIZE))
        except BaseException as e:
            _raise_for(e, path, "open the object", LogNotFoundError)

    def read_file(self, path: str, size: int | None = None) -> bytes:
        if size is not None:
            return self.read_files([path], [size])[0]
        try:
            return bytes(filesystem(path).cat_file(_fs_path(path)))
        except BaseException as e:
            _raise_for(e, path, "read the object")

    def size_of(self, path: str) -> int:
        try:
            return int(filesystem(path).size(_fs_path(path)))
        except BaseException as e:
            _raise_for(e, path, "read the object's size", LogNotFoundError)

    def modified_ms(self, path: str) -> int:
        try:
            info = filesystem(path).info(_fs_path(path))
        except BaseException as e:
            _raise_for(e, path, "read the object's metadata")
        when = info.get("LastModified") or info.get("mtime") or info.get("last_modified")
        if hasattr(when, "timestamp"):
            return int(when.timestamp() * 1000)
        return int(float(when) * 1000) if isinstance(when, (int, float)) else 0

    def read_files(self, paths: list[str], sizes: list[int] | None = None) -> list[bytes]:
        """The objects' contents, requested concurrently (one filesystem: the first's); those
        of listed ``sizes`` by ranged GETs of those bytes (a whole GET asks the size first:
        a HEAD each). An object shorter than listed is an ObjectChangedError; a missing one
        FileNotFoundError, as when not listed."""
        if sizes is not None:
            return self._read_listed(paths, sizes)
        if len(paths) == 1:
            return [self.read_file(paths[0])]
        try:
            got = filesystem(paths[0]).cat([_fs_path(p) for p in paths], on_error="return")
        except BaseException as e:
            _raise_for(e, paths[0], "read the objects")
        out = []
        for p in paths:
            data = got.get(p.split("://", 1)[1], got.get(p))
            if data is None:
                data = self.read_file(p)
            elif isinstance(data, BaseException):
                _raise_for(data, p, "read the object")
            out.append(bytes(data))
        return out

    def _read_listed(self, paths: list[str], sizes: list[int]) -> list[bytes]:
        asked = [(p, n) for p, n in zip(paths, sizes) if n]      # an empty object: b""
        try:
            got = filesystem(paths[0]).cat_ranges(
                [_fs_path(p) for p, _ in asked], [0] * len(asked), [n for _, n in asked],
                on_error="return") if asked else []
        except BaseException as e:
            got = [e] * len(asked)
        by_path = {}
        for (p, n), data in zip(asked, got):
            if isinstance(data, BaseException):
                _raise_for(data, p, "read the object")
            if len(data) != n:
                raise ObjectChangedError(f"{p}: gave {len(data)} bytes, listed with {n} "
                                         f"(truncated or replaced since)", url=p)
            by_path[p] = bytes(data)
        return [by_path.get(p, b"") for p in paths]

    def read_ranges(self, path: str, ranges: list[tuple[int, int]]) -> list[bytes]:
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
                raise ObjectChangedError(f"{path}: bytes [{start}, {end}) gave {len(data)} "
                                         f"bytes (truncated or replaced since it was listed)",
                                         url=path)
        return [bytes(d) for d in got]

    def range_buffer(self, path: str, size: int) -> RangeBuffer:
        return cached_buffer(path, size, lambda: RangeBuffer(path, size))


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


class RangeBuffer:
    """A remote file's bytes, fetched by aligned blocks on demand (see the module docstring).

    ``ensure(start, end)`` fetches the ``BLOCK_SIZE`` blocks covering [start, end) that are
    not here yet (concurrently, one ranged GET each) and returns the buffer, as long as the
    file; only the bytes ensured are meaningful. ``fetched`` counts the bytes fetched."""

    def __init__(self, path: str, size: int) -> None:
        self.path = path
        self.size = size
        self.step = block = storage_backend.BLOCK_SIZE
        self._mm: Any = mmap.mmap(-1, size) if size else b""
        self._have = bytearray((size + block - 1) // block)
        self._lock = threading.Lock()
        self.fetched = 0

    def ensure(self, start: int, end: int) -> Any:
        """The buffer with bytes [start, end) (clamped to the file) present."""
        start, end = max(0, start), min(end, self.size)
        if start >= end:
            return self._mm
        first, last = start // self.step, (end - 1) // self.step
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
        block = self.step
        starts = [a * block for a, _ in runs]
        ends = [min(self.size, (b + 1) * block) for _, b in runs]
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
        """Bytes of fetched blocks held (the last block only as long as the file: an object
        smaller than a block holds its size, not a block)."""
        held = sum(self._have) * self.step
        return held - (len(self._have) * self.step - self.size) if self._have and \
            self._have[-1] else held


def _runs(blocks: Iterable[int]) -> list[tuple[int, int]]:
    """The block ranges to fetch, one request each (so a long scan is fetched as concurrent
    requests of ``BLOCK_SIZE`` bytes)."""
    return [(b, b) for b in blocks]
