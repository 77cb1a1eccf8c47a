"""Local files as a storage backend: plain paths, read through the operating system, a whole
file mapped with ``mmap`` (no copy)."""
from __future__ import annotations

import mmap
import os
import stat
from typing import Any

from kafkalog.errors import ObjectChangedError
from kafkalog.storage_backend import Entry, StorageBackend


class LocalStorage(StorageBackend):
    """``storage``'s calls for a local path (a missing one raises FileNotFoundError)."""

    def list_dir(self, path: str) -> list[Entry]:
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

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def isfile(self, path: str) -> bool:
        return os.path.isfile(path)

    def open_file(self, path: str) -> Any:
        return open(path, "rb")

    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def size_of(self, path: str) -> int:
        return os.stat(path).st_size

    def modified_ms(self, path: str) -> int:
        return int(os.stat(path).st_mtime * 1000)

    def read_ranges(self, path: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        out = []
        with open(path, "rb") as f:
            for start, end in ranges:
                data = os.pread(f.fileno(), end - start, start)
                if len(data) != end - start:
                    raise ObjectChangedError(f"{path}: bytes [{start}, {end}) gave only "
                                             f"{len(data)} (the file is shorter)", url=path)
                out.append(data)
        return out

    def open_buffer(self, path: str) -> Any:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return b""
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
