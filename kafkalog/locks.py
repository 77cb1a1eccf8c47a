"""Advisory locks that keep two writers off the same log dir or partition.

``flock`` locks belong to an open file description, so a second open of the same path conflicts
even inside one process: a second ``LogManager`` or a second writable ``Log`` of a partition is
refused wherever it runs. The kernel drops the locks of a process that dies, so a crash leaves
nothing to clean up.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading

from kafkalog.errors import LogDirLockedError, ReentrantCallError, SymlinkOutsideError, io_failure
from kafkalog.files import LOCK_FILE


def writer_holds(path: str | os.PathLike[str]) -> bool:
    """Whether a writer (a writable ``Log`` or a ``LogManager``, in any process) holds the
    lock of the directory ``path``, found without taking it (a reader must not make a writer's
    open fail): ``/proc/locks`` on Linux; elsewhere a shared lock tried and dropped at once."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        try:
            FileLock(os.fspath(path), shared=True).release()
        except LogDirLockedError:
            return True
        return False
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any(fields[1] == "FLOCK" and key in fields
               for fields in (line.split() for line in lines) if len(fields) > 5)


class FileLock:
    """A held ``flock`` on ``path`` (a file or a directory); ``release()`` drops it.

    ``shared``: several holders may share it, none while an exclusive one is held (standalone
    partition writers share their log dir's ``.lock``; a ``LogManager`` holds it alone).
    ``create``: create the file when missing (a directory is never created).
    """

    def __init__(self, path: str, *, shared: bool = False, create: bool = False,
                 holder: str = "another writer") -> None:
        self.path = path
        flags = os.O_RDONLY
        if create:
            # O_NOFOLLOW: creating the lock file must not create or open what a link leads to
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
        try:
            # O_NONBLOCK: a FIFO planted under the lock's name must not hang the open.
            self._fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as e:
            if create and e.errno == errno.ELOOP:
                raise SymlinkOutsideError(
                    f"{path} is a symbolic link (to {os.path.realpath(path)}): a lock file is "
                    "never created through one", path=path, target=os.path.realpath(path)) from None
            raise io_failure(f"cannot open {path} to lock it: {e}", e) from e
        try:
            fcntl.flock(self._fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            self._fd = -1
            raise LogDirLockedError(f"failed to acquire lock on {path}: {holder} is using it") \
                from None

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        """Drop the lock (closing the descriptor drops it even if unlocking fails)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            except OSError:
                pass
            finally:
                os.close(fd)

    def __repr__(self) -> str:
        return f"FileLock({self.path!r}, held={self.held})"


class MutationGuard:
    """``guard(what)``: hold ``lock`` (re-entrant: an object's calls nest) for a call that
    changes the object (``what``). A call re-entered from the thread running one (by a
    finalizer or GC callback an allocation inside the first one ran) would change what the
    first is midway through: ReentrantCallError instead, before anything is done. ``busy()``
    names a call running under the lock that the guard did not start (or None). Other
    threads wait for the lock, as before."""

    def __init__(self, lock, name, busy=lambda: None):
        self.lock, self._name, self._busy = lock, name, busy
        self._running: dict[int, str] = {}       # by thread id (several: see Condition.wait)

    @contextlib.contextmanager
    def __call__(self, what):
        with self.lock:
            me = threading.get_ident()
            running = self._running.get(me) or self._busy()
            if running is not None:
                raise ReentrantCallError(
                    f"{what} of {self._name} called while its {running} is running in the same "
                    f"thread (from a finalizer or GC callback?): refused, nothing done")
            self._running[me] = what
            try:
                yield
            finally:
                del self._running[me]


def lock_partition(path: str, managed: bool) -> list[FileLock]:
    """The locks a writer holds: the partition directory itself (no file is created), and,
    shared, the log dir's ``.lock`` when the partition lives in a log dir a ``LogManager``
    has used (a ``LogManager`` holds that one alone and takes only the partition's)."""
    holder = "another writer (a Log or a LogManager, in this or another process)"
    locks = [FileLock(path, holder=holder)]
    dir_lock = os.path.join(os.path.dirname(path), LOCK_FILE)
    if not managed and os.path.exists(dir_lock):
        try:
            locks.append(FileLock(dir_lock, shared=True,
                                  holder=f"a LogManager (log dir of {path})"))
        except BaseException:
            locks[0].release()
            raise
    return locks
