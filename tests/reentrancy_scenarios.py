"""Hostile re-entrancy scenarios (issue 39), each run in its own process by
``test_reentrancy.py`` so that a signal fails one test: ``python reentrancy_scenarios.py NAME
DIR`` prints one JSON line of counted outcomes. What a test asserts on them: no offset
acknowledged or read twice, every record read equals what was appended, and only "already
executing" ValueErrors or ``kafkalog.errors`` exceptions.

The garbage collector is the hostile caller: ``gc.set_threshold(1)`` makes nearly every
allocation of a tracked object inside a kernel run a collection, which runs ``gc.callbacks``,
``__del__`` and ``weakref.finalize`` callbacks that call back into the object mid-call.
"""
import collections
import contextlib
import gc
import json
import os
import pickle
import sys
import threading
import weakref

from kafkalog import Log, Record, errors, iter_batches

N_BATCHES = 40
PER_BATCH = 5


def _expected(i, j):
    return (b"k%d-%d" % (i, j), b"v%d-%d" % (i, j) * 3, (("h", b"%d" % j), ("g", None)))


def _fill(path, compression=None):
    log = Log.open(path, {"segment.bytes": 1 << 20})
    for i in range(N_BATCHES):
        log.append([Record(key=k, value=v, headers=h, timestamp=1000 + i)
                    for k, v, h in (_expected(i, j) for j in range(PER_BATCH))],
                   compression=compression)
    return log


class _Outcomes:
    def __init__(self):
        self.counts = collections.Counter()
        self.seen = collections.Counter()

    def error(self, e):
        if isinstance(e, ValueError) and "already executing" in str(e):
            self.counts["already_executing"] += 1
        elif isinstance(e, errors.KafkaLogError):
            self.counts["typed:" + type(e).__name__] += 1
        else:
            self.counts["untyped:" + type(e).__name__ + ":" + str(e)[:60]] += 1

    def record(self, r):
        i, j = divmod(r.offset, PER_BATCH)
        self.seen[r.offset] += 1
        key, value, headers = _expected(i, j)
        if (r.key, r.value, r.headers) != (key, value, headers):
            self.counts["wrong_record"] += 1
        else:
            self.counts["records"] += 1

    def report(self, **extra):
        gc.collect()          # (finalizers still pending run now, not at exit)
        out = dict(self.counts)
        out["repeated"] = sum(1 for n in self.seen.values() if n > 1)
        out.update(extra)
        print(json.dumps(out))


class _Hostile:
    """Cyclic garbage whose finalizers call ``fn`` (``__del__``, or a weakref.finalize)."""

    def __init__(self, fn, how):
        self.me = self
        if how == "finalize":
            weakref.finalize(self, fn)
        else:
            self.fn = fn

    def __del__(self):
        fn = getattr(self, "fn", None)
        if fn is not None:
            fn()


@contextlib.contextmanager
def _hostile_gc(how, fn, out, ready=lambda: True, threshold=1):
    """Within: ``fn`` called from inside the collections that nearly every allocation runs
    (``threshold``), by finalizers of kind ``how`` (gc_callback, del, finalize); once at a
    time in a thread, and not before ``ready()``; its errors counted. Yields ``more()``, which
    makes garbage (a finalizer) for the next collections."""
    busy = threading.local()

    def call():
        if getattr(busy, "on", False) or not ready():
            return
        busy.on = True
        try:
            fn()
        except StopIteration:
            pass
        except Exception as e:
            out.error(e)
        finally:
            busy.on = False

    junk = []
    if how == "gc_callback":
        gc.callbacks.append(lambda phase, info: phase == "start" and call())
    gc.set_threshold(threshold)
    try:
        yield lambda: how != "gc_callback" and (junk.append(_Hostile(call, how)) or junk.clear())
    finally:
        gc.set_threshold(700)
        gc.callbacks.clear()


def records_reentered(path, how, compression=None, after=1):
    """One ``log.records()`` iterator advanced from inside its own ``next`` (once ``after``
    records were read: then inside a batch's kernel iterator)."""
    log = _fill(path, compression)
    out = _Outcomes()
    _drain_reentered(log.records(), how, out, out.record,
                     lambda: sum(out.seen.values()) >= int(after))
    out.report(missing=N_BATCHES * PER_BATCH - len(out.seen))


def _drain_reentered(it, how, out, take, ready=lambda: True):
    """``take`` each item of ``it``, while finalizers (``how``) advance ``it`` too (once
    ``ready()``) from inside the collections its ``next`` runs."""
    with _hostile_gc(how, lambda: take(next(it)), out, ready) as more:
        while True:
            more()
            try:
                item = next(it)
            except StopIteration:
                break
            except Exception as e:
                out.error(e)
                continue
            take(item)


def records_threads(path, n_threads=4, compression=None):
    """One ``log.records()`` iterator shared by threads, from its first record on."""
    log = _fill(path, compression)
    out = _Outcomes()
    it = log.records()
    lock = threading.Lock()       # (for the counters, not the iterator)
    got = [next(it)]
    out.record(got[0])

    def work():
        while True:
            try:
                r = next(it)
            except StopIteration:
                return
            except Exception as e:
                with lock:
                    out.error(e)
                continue
            got.append(r)
            with lock:
                out.record(r)

    sys.setswitchinterval(1e-6)
    gc.set_threshold(1)
    threads = [threading.Thread(target=work) for _ in range(int(n_threads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.set_threshold(700)
    out.report(missing=N_BATCHES * PER_BATCH - len(out.seen))


def record_delete(path):
    """A Record's fields deleted through their descriptors, then used."""
    log = _fill(path)
    other = Log.open(path + "-append")
    out = _Outcomes()
    for field in ("offset", "timestamp", "timestamp_type", "key", "value", "headers"):
        for use in ("eq", "hash", "repr", "pickle", "append", "iterate"):
            if use == "iterate":
                it = log.records()
                r = next(it)
            else:
                r = Record(key=b"k", value=b"v", headers=[("h", b"x")], timestamp=5)
            try:
                getattr(Record, field).__delete__(r)
                out.counts["deleted"] += 1
            except (AttributeError, TypeError):
                out.counts["refused"] += 1
            try:
                if use == "eq":
                    r == Record(key=b"k")
                elif use == "hash":
                    hash(r)
                elif use == "repr":
                    repr(r)
                elif use == "pickle":
                    pickle.loads(pickle.dumps(r))
                elif use == "append":
                    other.append([r])
                else:
                    del r       # the iterator's spare record: made again in place
                    for r in it:
                        out.record(r)
                    out.seen.clear()        # (the log is read once per field)
            except (AttributeError, TypeError) as e:
                out.counts["use_refused:" + type(e).__name__] += 1
            except Exception as e:
                out.error(e)
    out.report()


def _acknowledge(out, infos, log):
    """Count acknowledged offsets; reopen the log and check each reads back its record."""
    acked = collections.Counter()
    for info, value in infos:
        for offset in range(info.first_offset, info.last_offset + 1):
            acked[offset] += 1
    out.counts["acknowledged"] = len(acked)
    out.counts["acked_twice"] = sum(1 for n in acked.values() if n > 1)
    path, config = log.path, log.config
    try:
        log.close()
    except Exception as e:
        out.counts["close_raised:" + type(e).__name__] += 1
        return
    with Log.open(path, config) as again:
        stored = {r.offset: r.value for r in again.records()}
    by_offset = {}
    for info, value in infos:
        by_offset[info.first_offset] = value
    out.counts["wrong_readback"] = sum(1 for o, v in by_offset.items() if stored.get(o) != v)
    out.counts["stored"] = len(stored)
    out.counts["stored_not_acked"] = len(set(stored) - set(acked))


def append_reentered(path, how, nested_call="append", n=300):
    """``log.append`` of one record at a time, with finalizers that call ``nested_call``
    (``append`` or ``roll``) on the same log in the same thread meanwhile."""
    log = Log.open(path, {"segment.bytes": 1 << 20})
    out = _Outcomes()
    infos = [(log.append([Record(value=b"first")]), b"first")]

    def nested():
        if nested_call == "roll":
            log.roll()
            out.counts["nested_roll"] += 1
        else:
            value = b"nested-%d" % len(infos)
            infos.append((log.append([Record(value=value)]), value))

    with _hostile_gc(how, nested, out) as more:
        for i in range(int(n)):
            more()
            value = b"outer-%d" % i
            try:
                infos.append((log.append([Record(value=value)]), value))
            except Exception as e:
                out.error(e)
    _acknowledge(out, infos, log)
    out.report()


def batches_reentered(path, how):
    """One ``iter_batches`` iterator advanced from inside its own ``next``."""
    _fill(path).close()
    seg = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".log"))[0]
    out = _Outcomes()
    batches = []
    _drain_reentered(iter_batches(seg), how, out, batches.append)
    for b in batches:
        try:
            ok = b.is_valid() and b.base_offset % PER_BATCH == 0 and len(list(b)) == PER_BATCH
        except Exception as e:
            out.error(e)
            continue
        out.seen[b.base_offset] += 1
        out.counts["valid" if ok else "invalid"] += 1
    out.report(missing=N_BATCHES - len(out.seen))


def swap_after_shutdown(path):
    """A compaction whose swap runs after its LogManager's scheduler was shut down (what
    ``LogManager.shutdown()`` racing its own compaction task does): the swap completes and
    deletes the old segments at once, or stops before it starts; never half done."""
    from kafkalog.scheduler import Scheduler
    scheduler = Scheduler()
    out = _Outcomes()
    log = Log.open(path, {"cleanup.policy": "compact", "segment.bytes": 4096,
                          "min.cleanable.dirty.ratio": 0.01, "file.delete.delay.ms": 60_000},
                   scheduler=scheduler)
    for i in range(400):
        log.append([Record(key=b"k%d" % (i % 10), value=b"v%d" % i, timestamp=1000 + i)])
    log.update_high_watermark(log.log_end_offset)
    log.roll()
    expected = {r.key: r.value for r in log.records()}
    scheduler.shutdown()
    try:
        stats = log.compact()
        out.counts["aborted" if getattr(stats, "aborted", False) else "compacted"] += 1
    except Exception as e:
        out.error(e)
    try:
        log.close()
    except Exception as e:
        out.counts["close_raised:" + type(e).__name__] += 1
    out.counts["left_over"] = sum(1 for f in os.listdir(path)
                                  if f.endswith((".swap", ".cleaned", ".deleted")))
    with Log.open(path, {"cleanup.policy": "compact"}) as again:
        latest = {r.key: r.value for r in again.records()}
        out.counts["wrong_latest"] = int(latest != expected)
        out.counts["swap_finished_at_open"] = sum(
            1 for action in again.recovery_report.actions if "swap" in str(action))
    out.report()


def log_threads(path, writers=3, appends=100, rolls=20, how="gc_callback"):
    """Threads appending to, rolling and reading one ``Log``, and finalizers that append
    from inside whatever runs when the collector does: every acknowledged offset once, each
    reading back its value; readers see increasing offsets holding acknowledged values."""
    log = Log.open(path, {"segment.bytes": 1 << 20})
    out = _Outcomes()
    infos = []
    lock = threading.RLock()      # (for the counters; a finalizer may run under it)

    def append(value):
        try:
            info = log.append([Record(value=value)])
        except Exception as e:
            with lock:
                out.error(e)
            return
        with lock:
            infos.append((info, value))

    def writer(w):
        for i in range(int(appends)):
            append(b"w%d-%d" % (w, i))

    def roller():
        for _ in range(int(rolls)):
            try:
                log.roll()
            except Exception as e:
                with lock:
                    out.error(e)

    def reader():
        for _ in range(5):
            last = -1
            for r in log.records():
                if r.offset <= last or not r.value.startswith((b"w", b"gc-")):
                    with lock:
                        out.counts["bad_read"] += 1
                last = r.offset

    sys.setswitchinterval(1e-5)
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(int(writers))]
    threads += [threading.Thread(target=roller), threading.Thread(target=reader)]
    # (at most 200 appends from finalizers: each one's allocations run more collections)
    budget = int(writers) * int(appends) + 200
    with _hostile_gc(how, lambda: append(b"gc-%d" % len(infos)), out,
                     lambda: len(infos) < budget, threshold=5) as more:
        for t in threads:
            t.start()
        for _ in range(200):
            more()
        for t in threads:
            t.join()
    _acknowledge(out, infos, log)
    out.report()

if __name__ == "__main__":
    # DIR then scenarios, each NAME[:key=value,...]: run in turn, each in its own directory
    directory, *scenarios = sys.argv[1:]
    for n, spec in enumerate(scenarios):
        name, _, args = spec.partition(":")
        kwargs = dict(a.split("=", 1) for a in args.split(",") if a)
        print(json.dumps({"start": spec}), flush=True)
        globals()[name](os.path.join(directory, f"s{n}", "t-0"), **kwargs)
        sys.stdout.flush()
