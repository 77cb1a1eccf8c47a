#!/usr/bin/env python3
"""Threads racing on one log: ``python scripts/stress_threads.py --seconds 30 --runs 3
[--kernels compiled|python|both] [--scenario delete|compact|all] [--seed S] [--gc-burst N]``.

Each run is a child process (a signal fails one run and is reported with its number) in
which, for ``--seconds``, threads share one writable ``Log`` and open read-only ``Log``s of
its directory (as another process's reader would):

- the writer, the one thread that moves offsets: plain, compressed, idempotent and
  transactional appends (transactions committed or aborted by a marker), ``truncate_to``;
- retention (``delete_old_segments``, ``delete_records``), the cleaner (``compact``, in the
  compact scenario), ``roll`` and ``flush``;
- readers of ``records``/``record_tables``/``read``/``read(zero_copy=True)``/
  ``offset_for_timestamp`` and ``records(isolation="committed")`` on both logs;
- GC pressure: a low collection threshold, ``gc.collect``, and cycles whose ``__del__``
  reads the log (so the GC runs reads inside any allocation of any thread);
- ``records``/``record_tables`` iterators shared by the reader threads and ``__del__``.

Every value names its offset, the writer's generation (bumped by each truncation) and its
kind, with a padding derived from them, so a reader checks each row by itself: offsets
strictly increasing, the value the writer wrote at that offset, nothing past what was
appended, no aborted or not yet committed record under read_committed, CRCs (``read``'s
bytes are walked with CRC validation). Findings: an exception that is not a
``kafkalog.errors`` one, a wrong row, a typed error other than those a live log gives
(OffsetOutOfRangeError, LogClosedError, and a read-only view's FileShrunkError or
SegmentDeletedError saying reopen; counted apart from the others), a hung thread, a
signal. Prints a tally per run and exits 1 on any finding. Run it under ``nice -n 10``: the machine may be shared.
"""
import argparse
import collections
import faulthandler
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = {"compiled": {}, "python": {"KAFKALOG_NO_EXTENSIONS": "1"}}
SCENARIOS = {
    # size-based retention (the records' timestamps are now: time retention never fires)
    "delete": {"segment.bytes": 16 * 1024, "retention.bytes": 96 * 1024, "retention.ms": -1,
               "index.interval.bytes": 512},
    "compact": {"segment.bytes": 16 * 1024, "cleanup.policy": "compact,delete",
                "retention.bytes": 160 * 1024, "retention.ms": -1,
                "min.cleanable.dirty.ratio": 0.01, "index.interval.bytes": 512},
}


# ----------------------------------------------------------------------------- the child
def value_of(offset, gen, kind):
    head = b"%d|%d|%s|" % (offset, gen, kind)
    return head + head[::-1] * (offset % 5)


def parse(value):
    """(offset, gen, kind) a value names, None when it is not one the writer makes."""
    try:
        offset, gen, kind, _ = value.split(b"|", 3)
        offset, gen = int(offset), int(gen)
    except (ValueError, AttributeError):
        return None
    return (offset, gen, kind) if value == value_of(offset, gen, kind) else None


class Child:
    def __init__(self, directory, scenario, seconds, seed, gc_burst=5):
        from kafkalog import Log, errors
        self.Log = Log
        self.errors = errors
        self.expected = (errors.OffsetOutOfRangeError, errors.LogClosedError)
        # a read-only view's refusal of a tail the writer rewrote or deleted: reopen
        self.reopen = (errors.FileShrunkError, errors.SegmentDeletedError)
        self.dir = directory
        self.config = SCENARIOS[scenario]
        self.scenario = scenario
        self.seconds = seconds
        self.seed = seed
        self.gc_burst = gc_burst            # cycles with a reading __del__ made per GC step
        self.log = Log.open(directory, self.config)
        self.stop = threading.Event()
        self.lock = threading.RLock()       # (__del__ may take it in a thread holding it)
        self.findings = {}                  # key -> [count, example]
        self.counts = collections.Counter()
        self.written = collections.defaultdict(set)   # offset -> generations written there
        self.planned_end = 0                # the highest log end an append may have made
        self.committing = set()             # offsets of transactions whose commit has begun
        self.gen = 0
        self.shared, self.seen = {}, {}       # iterators the threads share, offsets they gave

    # --- findings
    def finding(self, where, kind, detail, tb=None):
        key = (where, kind, str(detail)[:100])
        with self.lock:
            entry = self.findings.setdefault(key, [0, tb or ""])
            entry[0] += 1

    def guarded(self, where, fn):
        def run():
            rng = random.Random(hash((self.seed, where)))
            while not self.stop.is_set():
                try:
                    fn(rng)
                except self.expected as e:
                    self.counts[f"{where}: {type(e).__name__}"] += 1
                except self.errors.KafkaLogError as e:
                    self.finding(where, "typed " + type(e).__name__, e, traceback.format_exc())
                except ValueError as e:
                    if "already executing" not in str(e):
                        self.finding(where, "untyped ValueError", e, traceback.format_exc())
                    else:
                        self.counts[f"{where}: generator already executing"] += 1
                except AssertionError as e:
                    self.finding(where, "wrong row", e, traceback.format_exc())
                except Exception as e:  # noqa: BLE001
                    self.finding(where, "untyped " + type(e).__name__, e, traceback.format_exc())
        return threading.Thread(target=run, name=where, daemon=True)

    # --- the writer
    def write_batch(self, rng, kind, n, **kwargs):
        from kafkalog import Record
        log = self.log
        base = log.log_end_offset          # the writer is the one thread moving it
        self.planned_end = max(self.planned_end, base + n)
        for o in range(base, base + n):
            self.written[o].add(self.gen)
        info = log.append([Record(key=b"k%d" % (o % 40), value=value_of(o, self.gen, kind))
                           for o in range(base, base + n)], **kwargs)
        assert info.first_offset == base and info.last_offset == base + n - 1, (info, base, n)
        return base

    def writer(self, rng):
        from kafkalog import build_control_batch
        log = self.log
        op = rng.random()
        if op < 0.45:
            self.write_batch(rng, b"P", rng.randint(1, 20))
        elif op < 0.6:
            self.write_batch(rng, b"Z", rng.randint(1, 30), compression="gzip")
        elif op < 0.75:
            pid, epoch, seq = self.idempotent
            n = rng.randint(1, 10)
            self.write_batch(rng, b"I", n, producer_id=pid, producer_epoch=epoch,
                             base_sequence=seq)
            self.idempotent = (pid, epoch, seq + n)
        elif op < 0.97:
            pid = self.txn_pid
            self.txn_epoch += 1
            commit = rng.random() < 0.6
            first = log.log_end_offset
            seq = 0
            for _ in range(rng.randint(1, 3)):
                n = rng.randint(1, 8)
                self.write_batch(rng, b"C" if commit else b"A", n, producer_id=pid,
                                 producer_epoch=self.txn_epoch, base_sequence=seq,
                                 transactional=True)
                seq += n
            if commit:
                self.committing.update(range(first, log.log_end_offset))
            marker = log.log_end_offset
            self.written[marker].add(self.gen)
            self.planned_end = max(self.planned_end, marker + 1)
            log.append(build_control_batch("commit" if commit else "abort", producer_id=pid,
                                           producer_epoch=self.txn_epoch))
            self.last_marker_end = marker + 1
            if self.txn_epoch > 30000:
                self.txn_pid, self.txn_epoch = self.txn_pid + 1, 0
        elif op < 0.975:
            self.check_layout()
        else:
            # a follower's truncation, never into the last transaction (its marker would go
            # and leave it open for ever)
            end = log.log_end_offset
            target = max(self.last_marker_end, end - rng.randint(1, 40), log.log_start_offset)
            if target < end:
                log.truncate_to(target)
                self.gen += 1
                pid, epoch, _ = self.idempotent
                self.idempotent = (pid, epoch + 1, 0)     # its sequences were cut
                self.counts["truncations"] += 1

    def check_layout(self):
        """Each segment's batches lie in [its base offset, the next segment's) (checked by
        the writer, so no append nor truncation runs meanwhile)."""
        segments = list(self.log.segments)
        for segment, nxt in zip(segments, segments[1:] + [None]):
            batches = segment.batches()[0]
            if len(batches):
                first, last = int(batches["base_offset"][0]), int(batches["last_offset"][-1])
                limit = self.log.log_end_offset if nxt is None else nxt.base_offset
                assert segment.base_offset <= first and last < limit, \
                    f"segment {segment.base_offset} holds {first}-{last}, the next starts " \
                    f"at {limit}: {[s.base_offset for s in segments]}"
        self.counts["layout checks"] += 1

    # --- retention, cleaner, roll, flush
    def retention(self, rng):
        log = self.log
        if rng.random() < 0.2:
            start, hwm = log.log_start_offset, log.high_watermark
            if hwm > start:
                log.delete_records(rng.randint(start, start + (hwm - start) // 4))
        self.counts["segments deleted"] += log.delete_old_segments()
        time.sleep(0.005)

    def cleaner(self, rng):
        stats = self.log.compact()
        self.counts["compactions"] += 1
        self.counts["compactions aborted"] += bool(getattr(stats, "aborted", False))
        time.sleep(0.01)

    def roller(self, rng):
        if rng.random() < 0.3:
            self.log.roll()
        else:
            self.log.flush()
        time.sleep(0.01)

    # --- readers
    def check_rows(self, rows, isolation, start):
        """rows: (offset, value); each is the writer's value for its offset."""
        last = start - 1
        n = 0
        for offset, value in rows:
            assert offset > last, f"offset {offset} after {last}"
            last = offset
            named = parse(value)
            assert named is not None, f"offset {offset}: a value nobody wrote {value[:40]!r}"
            o, gen, kind = named
            assert o == offset, f"offset {offset} holds the value of offset {o}"
            assert gen in self.written[offset], f"offset {offset}: generation {gen} not written"
            assert offset < self.planned_end, f"offset {offset} past the appended end"
            if isolation == "committed":
                assert kind != b"A", f"offset {offset}: an aborted record read committed"
                assert kind != b"C" or offset in self.committing, \
                    f"offset {offset}: an open transaction's record read committed"
            n += 1
        self.counts["rows checked"] += n

    def reader(self, log, rng):
        start = max(log.log_start_offset, log.log_end_offset - rng.randint(0, 3000))
        op = rng.randrange(7)
        if op == 6 and log is self.log:
            self.advance_shared(rng, rng.randint(1, 50))
        elif op == 0:
            self.check_rows(((r.offset, r.value) for r in log.records(start)), "log_end", start)
        elif op == 1:
            self.check_rows(((r.offset, r.value) for r in log.records(
                start, isolation="committed")), "committed", start)
        elif op == 2:
            for table in log.record_tables(start, max_bytes=rng.choice([1000, 64 * 1024])):
                offsets = table.records["offset"]
                self.check_rows(((int(offsets[i]), table.value(i)) for i in range(len(table))),
                                "log_end", start)
                start = int(offsets[-1]) + 1 if len(offsets) else start
        elif op in (3, 4):
            from kafkalog import iter_batches
            info = log.read(start, max_bytes=rng.choice([100, 4096, 65536]),
                            zero_copy=op == 4)
            data = bytes(info.records)
            rows = []
            for batch in iter_batches(data):          # CRCs checked
                if batch.last_offset < start:
                    continue
                if batch.is_control:
                    continue
                rows += [(r.offset, r.value) for r in batch if r.offset >= start]
            self.check_rows(rows, "log_end", start)
        else:
            ts = int(time.time() * 1000) - rng.randint(0, 3000)
            found = log.offset_for_timestamp(ts)
            if found is not None:
                assert found[1] >= ts, (ts, found)
                self.counts["timestamp lookups"] += 1

    def advance_shared(self, rng, n):
        """Take up to ``n`` items from an iterator that reader threads and ``__del__`` share
        (a second ``next`` while one runs is "already executing"): each value the writer's for
        its offset, no offset twice."""
        kind = rng.choice(["records", "tables"])
        it = self.shared.get(kind)
        if it is None:
            start = self.log.log_start_offset
            it = self.shared[kind] = self.log.records(start) if kind == "records" else \
                self.log.record_tables(start, max_bytes=4096)
            self.seen[kind] = set()
        seen = self.seen[kind]
        for _ in range(n):
            item = next(it, None)
            if item is None:
                self.shared[kind] = None
                return
            rows = [(item.offset, item.value)] if kind == "records" else \
                [(int(o), item.value(i)) for i, o in enumerate(item.records["offset"])]
            self.check_rows(rows, "log_end", -1)
            with self.lock:
                again = seen.intersection(o for o, _ in rows)
                seen.update(o for o, _ in rows)
            assert not again, f"offsets {sorted(again)[:5]} returned twice by one iterator"
        self.counts["shared iterator items"] += n

    def writer_log_reader(self, rng):
        self.reader(self.log, rng)

    def read_only_reader(self, rng):
        # another process's reader: opens the directory as it is, reads a few times, closes
        log = self.Log.open(self.dir, read_only=True)
        try:
            for _ in range(rng.randint(1, 10)):
                try:
                    self.reader(log, rng)
                except self.expected + self.reopen as e:
                    self.counts[f"read-only: {type(e).__name__}"] += 1
        finally:
            log.close()
        self.counts["read-only opens"] += 1

    # --- GC pressure
    def gc_pressure(self, rng):
        child = self

        class Reads:
            def __init__(self):
                self.cycle = self

            def __del__(self):
                try:
                    log = child.log
                    start = log.log_start_offset
                    pick = rng.random()
                    if pick < 0.3:
                        it = log.records(start)
                        next(it, None)
                    elif pick < 0.6:
                        log.read(start, 1000)
                    else:
                        child.advance_shared(rng, rng.randint(1, 3))
                    child.counts["reads in __del__"] += 1
                except child.expected:
                    pass
                except ValueError as e:
                    if "already executing" not in str(e):
                        child.finding("__del__", "untyped ValueError", e,
                                      traceback.format_exc())
                except AssertionError as e:
                    child.finding("__del__", "wrong row", e, traceback.format_exc())
                except Exception as e:  # noqa: BLE001
                    child.finding("__del__", type(e).__name__, e, traceback.format_exc())
        for _ in range(self.gc_burst):
            Reads()
        if rng.random() < 0.2:
            gc.collect()
        time.sleep(0.01)

    def run(self):
        from kafkalog import build_control_batch  # noqa: F401  (imported before the threads)
        self.idempotent = (1000, 0, 0)
        self.txn_pid, self.txn_epoch = 2000, 0
        self.last_marker_end = 0
        gc.set_threshold(200, 5, 5)
        threads = [self.guarded("writer", self.writer),
                   self.guarded("retention", self.retention),
                   self.guarded("roll/flush", self.roller),
                   self.guarded("reader 1", self.writer_log_reader),
                   self.guarded("reader 2", self.writer_log_reader),
                   self.guarded("read-only reader", self.read_only_reader),
                   self.guarded("gc", self.gc_pressure)]
        if self.scenario == "compact":
            threads.append(self.guarded("cleaner", self.cleaner))
        for t in threads:
            t.start()
        time.sleep(self.seconds)
        self.stop.set()
        deadline = time.monotonic() + 60
        for t in threads:
            t.join(max(0.1, deadline - time.monotonic()))
        hung = [t.name for t in threads if t.is_alive()]
        if hung:
            self.finding(", ".join(hung), "hung", "did not stop within 60 s")
            faulthandler.dump_traceback(all_threads=True)
            return self.result()
        gc.set_threshold(700, 10, 10)
        self.counts["log end"] = self.log.log_end_offset
        self.log.close()
        return self.result()

    def result(self):
        return {"findings": [[k[0], k[1], k[2], v[0], v[1]] for k, v in self.findings.items()],
                "counts": dict(self.counts)}


def child_main(args):
    faulthandler.enable()
    faulthandler.dump_traceback_later(args.seconds + 120, exit=True)   # a deadlock's stacks
    sys.path.insert(0, ROOT)
    with tempfile.TemporaryDirectory(prefix="stress-threads-") as d:
        result = Child(os.path.join(d, "topic-0"), args.scenario, args.seconds,
                       args.seed, args.gc_burst).run()
    print(json.dumps(result))
    return 0


# ----------------------------------------------------------------------------- the parent
def run_one(kernels, scenario, seconds, seed, gc_burst):
    env = dict(os.environ, **KINDS[kernels])
    env.pop("KAFKALOG_NO_EXTENSIONS", None) if kernels == "compiled" else None
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--scenario", scenario,
           "--seconds", str(seconds), "--seed", str(seed), "--gc-burst", str(gc_burst)]
    p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if p.returncode < 0:
        return {"findings": [["process", f"signal {-p.returncode}", p.stderr[-3000:], 1, ""]],
                "counts": {}}
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"findings": [["process", f"exit {p.returncode}", p.stderr[-3000:], 1, ""]],
                "counts": {}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--kernels", choices=["compiled", "python", "both"], default="both")
    ap.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gc-burst", type=int, default=5,
                    help="cycles with a reading __del__ made per GC step (more: more GC)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child_main(args)
    kernels = ["compiled", "python"] if args.kernels == "both" else [args.kernels]
    scenarios = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    severe = typed = 0
    for run in range(args.runs):
        for k in kernels:
            for s in scenarios:
                seed = args.seed + run
                result = run_one(k, s, args.seconds, seed, args.gc_burst)
                counts = result["counts"]
                print(f"run {run} {k:8} {s:8} seed {seed}: {len(result['findings'])} "
                      f"finding(s); rows checked {counts.get('rows checked', 0)}, "
                      f"log end {counts.get('log end', '?')}", flush=True)
                print("    " + ", ".join(f"{c}={n}" for c, n in sorted(counts.items())),
                      flush=True)
                for where, kind, detail, n, tb in result["findings"]:
                    if kind.startswith("typed"):
                        typed += 1
                    else:
                        severe += 1
                    print(f"  FINDING {where}: {kind} x{n}: {detail}")
                    if tb:
                        print("    " + tb.strip().replace("\n", "\n    "))
    print(f"findings: {severe} untyped, wrong rows, hangs or signals; {typed} typed errors "
          f"other than OffsetOutOfRangeError/LogClosedError")
    return 1 if severe or typed else 0


if __name__ == "__main__":
    sys.exit(main())
