"""What a Spark Python worker does once, whichever reader (batch or streaming) runs in it."""
from __future__ import annotations

import gc
from typing import Any

# glibc's mallopt parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def _mallopt() -> Any:
    """glibc's ``mallopt``, or None where the C library has none (musl, macOS)."""
    import ctypes
    try:
        return getattr(ctypes.CDLL(None), "mallopt", None)
    except OSError:
        return None


def tune_worker_process() -> None:
    """In a Spark task, once per Python worker: two process-wide settings PySpark leaves at
    their defaults, which cost a reading worker most of its CPU.

    - The objects the worker holds by now (mostly the modules of PySpark, pyarrow, numpy and
      kafkalog) are taken out of the cyclic garbage collector's sight (``gc.freeze``).
      PySpark's daemon runs a full ``gc.collect()`` after every task of a reused worker,
      which walked all of them: 30 ms of CPU per task. They are still freed by reference
      counting; only cycles among them (modules live as long as the worker) are not looked
      for.
    - glibc's malloc gave each decoded chunk's arrays (a few MB) back to the system when they
      were freed and faulted in fresh zeroed pages for the next chunk's: page faults took 0.2 s
      of the 0.5 s of CPU that reading 10 million records of three narrow columns took, 0.6 s
      of 1.2 s for all columns. Blocks under 32 MiB come from the heap and up to 64 MiB of
      free heap is kept (``mallopt``): a bench worker's peak RSS went from 230 to 260 MB."""
    from pyspark import TaskContext
    if gc.get_freeze_count() or TaskContext.get() is None:    # done, or not in a worker
        return
    gc.collect()                       # what is garbage now is not kept forever
    gc.freeze()
    mallopt = _mallopt()
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, 32 << 20)
        mallopt(_M_TRIM_THRESHOLD, 64 << 20)
