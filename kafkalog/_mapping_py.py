"""Twin of ``_mapping.pxi``: ``FileMapping`` is CPython's ``mmap.mmap``, which keeps a
duplicate of the descriptor for as long as the mapping lives before Python 3.13 (from 3.13,
``trackfd=False`` keeps none, as the compiled ``FileMapping`` never does)."""
import mmap
import sys

_NO_FD = {"trackfd": False} if sys.version_info >= (3, 13) else {}


def FileMapping(fd, length, writable=False):
    """``length`` bytes of the file open as ``fd`` (see ``_core.FileMapping``)."""
    if length <= 0:
        raise ValueError(f"cannot map {length} bytes")
    return mmap.mmap(fd, length, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ,
                     **_NO_FD)
