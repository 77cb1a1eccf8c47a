"""Twin of ``_mapping.pxi``: a writable ``FileMapping`` is CPython's ``mmap.mmap``, which keeps
a duplicate of the descriptor for as long as the mapping lives before Python 3.13 (from 3.13,
``trackfd=False`` keeps none, as the compiled ``FileMapping`` never does), and so is a
read-only one of a file open for writing (the writer's own). Any other read-only one is a copy
of the file read with ``pread``: the compiled module guards its read-only mappings with
a SIGBUS handler, which Python code cannot install, and a copy cannot fault when another
process cuts the file."""
import fcntl
import mmap
import os
import sys

_NO_FD = {"trackfd": False} if sys.version_info >= (3, 13) else {}


class _Copy(bytes):
    """A read-only ``FileMapping``'s bytes, with what callers use of a mapping."""
    closed = False
    faulted = False     # a copy never is
    writable = False

    def __setitem__(self, key, value):
        raise TypeError("mmap can't modify a readonly memory map.")

    def close(self):
        pass


def FileMapping(fd, length, writable=False, path=None):
    """``length`` bytes of the file open as ``fd`` (see ``_core.FileMapping``); read-only: at
    most what the file holds now, copied."""
    if length <= 0:
        raise ValueError(f"cannot map {length} bytes")
    if writable or fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDWR:
        # a file open for writing is its writer's own: mapped, so that changes made in place
        # are seen as through the compiled mapping (a copy would keep the bytes as they were)
        return mmap.mmap(fd, length, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ,
                         **_NO_FD)
    # one pread: a regular file gives all it holds up to length (a 2 GiB read at most, as
    # Linux's; a segment is 1 GiB by default)
    return _Copy(os.pread(fd, min(length, os.fstat(fd).st_size), 0))
