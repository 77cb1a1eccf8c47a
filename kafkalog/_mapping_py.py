"""Twin of ``_mapping.pxi``: a writable ``FileMapping`` is CPython's ``mmap.mmap``, which keeps
a duplicate of the descriptor for as long as the mapping lives before Python 3.13 (from 3.13,
``trackfd=False`` keeps none, as the compiled ``FileMapping`` never does). A read-only one is
a copy of the file read with ``pread`` (``bytes``): the compiled module guards its read-only
mappings with a SIGBUS handler, which Python code cannot install, and a copy cannot fault
when another process shrinks the file."""
import mmap
import os
import sys

_NO_FD = {"trackfd": False} if sys.version_info >= (3, 13) else {}


def FileMapping(fd, length, writable=False, path=None):
    """``length`` bytes of the file open as ``fd`` (see ``_core.FileMapping``); read-only: at
    most what the file holds now, copied."""
    if writable:
        if length <= 0:
            raise ValueError(f"cannot map {length} bytes")
        return mmap.mmap(fd, length, access=mmap.ACCESS_WRITE, **_NO_FD)
    from kafkalog.storage_local import read_at_most    # (it imports the kernels)
    length = min(length, os.fstat(fd).st_size)
    if length <= 0:
        raise ValueError(f"cannot map {length} bytes")
    return read_at_most(fd, length)

