"""Progress of long work, for whoever shows it: the library reports, it never prints.

Dump, verify, salvage, recovery and the internal-topic replays call ``advance(nbytes)`` as
they get through a segment's bytes; ``reporting(callback)`` makes ``callback(nbytes)`` hear of
them in this thread (a context variable: a caller's report is not mixed with another
thread's) until the block ends. ``kafkalog``'s command line shows them as a progress bar.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Iterator

_listener: contextvars.ContextVar[Callable[[int], object] | None] = \
    contextvars.ContextVar("kafkalog_progress", default=None)


@contextlib.contextmanager
def reporting(callback: Callable[[int], object]) -> Iterator[None]:
    """Within the block, ``callback(nbytes)`` is called as the work of this thread gets
    through ``nbytes`` more bytes of log."""
    token = _listener.set(callback)
    try:
        yield
    finally:
        _listener.reset(token)


def advance(nbytes: int) -> None:
    """Report ``nbytes`` more bytes of log gone through (nothing when no one listens)."""
    callback = _listener.get()
    if callback is not None and nbytes > 0:
        callback(nbytes)
