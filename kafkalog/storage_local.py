"""Local files as a storage backend: plain paths, read through the operating system, a whole
file mapped with ``mmap`` (no copy); and the one way kafkalog opens a local file it did not
create (``open_regular``: never blocking on a FIFO, refusing anything but a regular file)."""
from __future__ import annotations

import errno
import itertools
import os
import resource
import stat
from typing import Any, Iterator

from kafkalog._kernels import FileMapping
from kafkalog._typing import StrPath
from kafkalog.errors import (
    FileShrunkError, NotARegularFileError, ObjectChangedError, io_failure,
)
from kafkalog.storage_backend import Entry, StorageBackend, ahead


def file_kind(mode: int) -> str:
    """What a ``stat`` mode is, in words ("a FIFO", "a directory", ...)."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "not a regular file"


def map_file(path: StrPath, fd: int, size: int | None = None) -> Any:
    """A read-only mapping of the file at ``path`` open as ``fd``, of at most ``size`` bytes
    (all when None) and at most what ``fstat`` says it holds now (b"" when that is none): a
    writer may have cut it since ``size`` was listed, and a mapping past the end is a SIGBUS
    on the first read. The compiled mapping turns a cut during a read into
    ``FileShrunkError`` naming ``path`` (``_mapping.pxi``); the twin's is a copy."""
    now = os.fstat(fd).st_size
    length = now if size is None else min(size, now)
    if length <= 0:
        return b""
    try:
        return FileMapping(fd, length, False, os.fspath(path))
    except OSError as e:
        # the kernel's limit of mappings (ENOMEM) is a typed error naming its knob
        if e.errno == errno.ENOMEM:
            raise io_failure(f"mapping {os.fspath(path)} failed", e) from e
        raise


def cut_under(buf: Any) -> FileShrunkError | None:
    """FileShrunkError when ``buf`` maps (``map_file``) a file now shorter than the mapping,
    else None: a cut inside the mapping's last page reads as zeros, without the fault that
    the mapping's guard turns into that error, and readers meeting the zeros ask here before
    calling them damage."""
    path = getattr(buf, "path", None)
    if path is None or isinstance(buf, bytes):
        return None
    try:
        now = os.stat(path).st_size
    except OSError:
        return None
    return FileShrunkError(path, len(buf), now) if now < len(buf) else None


def open_regular(path: StrPath, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """``os.open`` that never blocks on a FIFO (O_NONBLOCK, which regular files ignore) and
    refuses anything but a regular file with NotARegularFileError. Returns the descriptor."""
    return open_regular_stat(path, flags, mode)[0]


def open_regular_stat(path: StrPath, flags: int = os.O_RDONLY,
                      mode: int = 0o644) -> tuple[int, os.stat_result]:
    """``open_regular`` that also returns the ``fstat`` it checked the file with (its size,
    without a second system call)."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotARegularFileError(f"{os.fspath(path)} is {file_kind(st.st_mode)}, not a "
                                   f"regular file")
    return fd, st


_RUSAGE = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
#: Directories listed at once where a walk finds them read off the disk (a cold cache).
DIRECTORIES_AT_ONCE = 8
_BATCH = 256        # directories listed between two looks at the blocks read


def _blocks_read() -> int:
    """Blocks this thread has read from storage devices (its page cache misses) so far."""
    return resource.getrusage(_RUSAGE).ru_inblock


class LocalStorage(StorageBackend):
    """``storage``'s calls for a local path (a missing one raises FileNotFoundError)."""

    def list_dir(self, path: str) -> list[Entry]:
        return self.list_dir_sized(path, None)

    def list_dir_sized(self, path: str, sized: tuple[str, ...] | None) -> list[Entry]:
        """``sized`` None: every entry's size. Else the kind of the others comes from the
        directory entry (its type, no ``stat``: a stat per file was most of the time of
        listing 100,000 partition directories); a symbolic link is still followed."""
        out = []
        with os.scandir(path) as scan:
            for e in scan:
                name = e.name
                if sized is not None and not name.endswith(sized):
                    if e.is_file(follow_symlinks=False):
                        out.append(Entry(name, -1, True, False))
                        continue
                    if e.is_dir(follow_symlinks=False):
                        out.append(Entry(name, -1, False, True))
                        continue
                    # a symbolic link (followed) or another kind: as a full listing
                try:
                    st = e.stat()
                except FileNotFoundError:
                    continue
                out.append(Entry(name, st.st_size, stat.S_ISREG(st.st_mode),
                                 stat.S_ISDIR(st.st_mode)))
        out.sort()
        return out

    def list_dirs_in(self, path: str, names: list[str],
                     sized: tuple[str, ...]) -> Iterator[tuple[str, list[Entry] | None]]:
        if len(names) > 1:
            try:
                with os.scandir(path) as scan:
                    # the inode number comes with the name (readdir's d_ino): no stat
                    inodes = {e.name: e.inode() for e in scan}
                names = sorted(names, key=lambda name: inodes.get(name, 0))
            except OSError:
                pass
        prefix = os.path.join(path, "")

        def listed(name):
            try:
                return name, self.list_dir_sized(prefix + name, sized)
            except (FileNotFoundError, NotADirectoryError):
                return name, None
        waiting = iter(names)
        # one at a time while the directories come from the cache (threads would only
        # contend for the GIL); ahead in threads once a batch was read off the disk
        while True:
            before = _blocks_read()
            batch = list(itertools.islice(waiting, _BATCH))
            yield from map(listed, batch)
            if len(batch) < _BATCH:
                return
            if _blocks_read() - before > len(batch):
                break
        yield from ahead(listed, waiting, DIRECTORIES_AT_ONCE, "kafkalog-list")

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

    def read_file(self, path: str, size: int | None = None) -> bytes:
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

    def open_buffer(self, path: str, size: int | None = None) -> Any:
        try:
            f = open(path, "rb")
        except OSError as e:
            # out of descriptors is a typed error naming the limit
            if e.errno in (errno.EMFILE, errno.ENFILE):
                raise io_failure(f"opening {path} failed", e) from e
            raise
        with f:
            return map_file(path, f.fileno())
