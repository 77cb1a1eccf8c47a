"""A small background scheduler: one daemon thread running delayed and periodic tasks (file
deletion after ``file.delete.delay.ms``, LogManager's retention, flush and checkpoint tasks)."""
import heapq
import itertools
import logging
import threading
import time

log = logging.getLogger(__name__)


class Scheduler:
    """Runs callables at a time in the future, once or periodically, on one daemon thread."""

    def __init__(self, name="kafkalog-scheduler"):
        self._queue = []
        self._counter = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._running = 0             # tasks the thread is running now
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def schedule_once(self, delay_s, fn, now_if_stopped=False):
        """Run ``fn`` once after ``delay_s``. Once the scheduler is shut down: RuntimeError,
        or with ``now_if_stopped`` ``fn`` runs at once in the caller (work that must not be
        lost, as ``run_pending_now`` runs it at shutdown: a task racing the shutdown, such
        as a compaction's swap, then completes instead of failing half way)."""
        with self._cond:
            stopped = self._stopped
            if not stopped:
                self._push(time.monotonic() + max(0.0, delay_s), fn, None)
        if stopped:
            if not now_if_stopped:
                raise RuntimeError("scheduler is shut down")
            fn()

    def schedule_periodic(self, period_s, fn, initial_delay_s=None):
        delay = period_s if initial_delay_s is None else initial_delay_s
        self._push(time.monotonic() + delay, fn, period_s)

    def _push(self, when, fn, period):
        with self._cond:
            if self._stopped:
                raise RuntimeError("scheduler is shut down")
            heapq.heappush(self._queue, (when, next(self._counter), fn, period))
            self._cond.notify()

    def _run(self):
        while True:
            with self._cond:
                while not self._stopped and (not self._queue or
                                             self._queue[0][0] > time.monotonic()):
                    timeout = self._queue[0][0] - time.monotonic() if self._queue else None
                    self._cond.wait(timeout)
                if self._stopped:
                    return
                when, _, fn, period = heapq.heappop(self._queue)
                if period is not None:
                    heapq.heappush(self._queue, (when + period, next(self._counter), fn, period))
                self._running += 1
            try:
                fn()
            except Exception:                 # a failed task must not stop the others
                log.exception("scheduled task failed")
            finally:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    def run_pending_now(self):
        """Run every one-shot task at once (used at shutdown so deletions are not lost), and
        wait for a task the scheduler's thread is running to finish."""
        with self._cond:
            due = [item for item in self._queue if item[3] is None]
            self._queue = [item for item in self._queue if item[3] is not None]
            heapq.heapify(self._queue)
        for _, _, fn, _ in sorted(due):
            try:
                fn()
            except Exception:
                log.exception("scheduled task failed")
        if threading.current_thread() is not self._thread:
            # bounded: a running task may wait for a lock the caller holds (as join below)
            with self._cond:
                self._cond.wait_for(lambda: not self._running, timeout=5)

    def shutdown(self, run_pending=True):
        # Stopped first: the thread starts no task after the one it is running, which
        # run_pending_now waits for (with tasks due all the time, it would wait in vain for
        # the thread to be idle).
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if run_pending:
            self.run_pending_now()
        self._thread.join(timeout=5)


_default = None
_default_lock = threading.Lock()


def default_scheduler():
    """The process-wide scheduler used by logs opened without one."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Scheduler()
        return _default
