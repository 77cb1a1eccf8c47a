"""What a Spark Python worker does once, whichever reader (batch or streaming) runs in it."""
from __future__ import annotations

import gc


def freeze_worker_heap() -> None:
    """In a Spark task, once per Python worker: take the objects the worker holds by now
    (mostly the modules of PySpark, pyarrow, numpy and kafkalog) out of the cyclic garbage
    collector's sight (``gc.freeze``). PySpark's daemon runs a full ``gc.collect()`` after
    every task of a reused worker, which walks all of them: 30 ms of the worker's CPU per
    task here, half of what handing 10 million narrow rows to Spark costs a worker. They are
    still freed by reference counting; only cycles among them (modules live as long as the
    worker) are no longer looked for."""
    from pyspark import TaskContext
    if gc.get_freeze_count() or TaskContext.get() is None:    # done, or not in a worker
        return
    gc.collect()                       # what is garbage now is not kept forever
    gc.freeze()
