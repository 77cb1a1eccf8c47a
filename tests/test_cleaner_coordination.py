"""Compaction coordinated with the operations that change a log's segments, as Kafka's
LogCleanerManager coordinates them (a truncation, a full truncation, DeleteRecords, retention
and close abort or wait for a cleaning in progress).

Each race runs ``log.compact()`` on one thread and the other operation on a second thread a
seeded random delay later (mostly 0-5 ms, sometimes anywhere in the compaction), on a copy of
a log of 3,000 one-record appends over 50 keys in 4096-byte segments. Only the timing is
random; what is asserted is the same for every interleaving:

* neither thread fails, except that ``compact()`` may refuse a closed log or report that it
  was aborted with a typed ``KafkaLogError`` (never ``LogDirFailureError``); the log never goes
  offline (``log.failed is None``);
* no ``.cleaned`` or ``.swap`` file is left once both threads are done;
* after close and ``Log.open`` again the log holds what a model of the appends says. Every
  record written is ``key_of(offset)`` -> ``b"<offset>"``, so the model is: only records that
  were written, at their offsets; the latest value of every key in the range the operation
  leaves is there (compaction may drop superseded records, nothing else); the log end offset
  the operation sets;
* for close, no segment file changes once ``close()`` has returned (the cleaning was stopped
  first, as Kafka stops the cleaner before it closes a log).

Each key owns a block of 60 consecutive offsets (key-00: 0-59, key-01: 60-119, ...), so the
latest value of every key (59, 119, ..., 2999) lies in a different segment: losing any of
them is seen. Truncation points are block boundaries: a compaction that finishes before the
truncation may legitimately drop a record superseded by a record at or above the truncation
point (Kafka loses those too), so a model that holds for every interleaving needs no key to
straddle the truncation point.
"""
import os
import random
import shutil
import threading
import time

import pytest

from kafkalog import Log, Record
from kafkalog.errors import KafkaLogError, LogClosedError, LogDirFailureError

RECORDS = 3000
KEYS = 50
BLOCK = RECORDS // KEYS                  # consecutive offsets per key
TIMESTAMP = 1_700_000_000_000
SEEDS = range(10)
SHORT_DELAY_S = 0.005                    # "a few milliseconds later"
JOIN_TIMEOUT_S = 60

COMPACTING = {"cleanup.policy": "compact", "segment.bytes": 4096, "file.delete.delay.ms": 0}
# Size-based retention only: the records' timestamps (2023) would let time retention take all.
RETENTION = dict(COMPACTING, **{"cleanup.policy": "compact,delete", "retention.bytes": 8192,
                                "retention.ms": -1})


def key_of(offset):
    """The key written at ``offset``: each of the 50 keys takes 60 consecutive offsets."""
    return b"key-%02d" % (offset // BLOCK)


def value_of(offset):
    return b"%d" % offset


def build_compacting_log(path, records=RECORDS, **overrides):
    """A compacting log (cleanup.policy=compact, segment.bytes=4096) of ``records``
    one-record appends over 50 keys, value = the offset; returned open."""
    log = Log.open(path, dict(COMPACTING, **overrides))
    for offset in range(records):
        info = log.append([Record(key=key_of(offset), value=value_of(offset),
                                  timestamp=TIMESTAMP)])
        assert info.first_offset == offset
    return log


def latest_offsets(lo, hi):
    """{key: latest offset} over the records written at offsets [lo, hi)."""
    latest = {}
    for offset in range(max(lo, 0), min(hi, RECORDS)):
        latest[key_of(offset)] = offset
    return latest


def contents(log):
    return [(r.offset, r.key, r.value) for r in log.records()]


def assert_model(records, lo, hi, where):
    """Only written records, in [lo, hi), offsets increasing, and every key's latest value
    in [lo, hi) present."""
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)), f"{where}: offsets out of order"
    outside = [o for o in offsets if not lo <= o < hi]
    assert not outside, f"{where}: records outside [{lo}, {hi}): {outside[:10]}"
    wrong = [(o, k, v) for o, k, v in records if (k, v) != (key_of(o), value_of(o))]
    assert not wrong, f"{where}: records that were never written: {wrong[:5]}"
    missing = sorted(set(latest_offsets(lo, hi).values()) - set(offsets))
    assert not missing, f"{where}: the latest value of these keys is gone (offsets " \
                        f"{missing[:10]}, {len(missing)} keys)"


def leftovers(path):
    return sorted(n for n in os.listdir(path) if n.endswith((".cleaned", ".swap")))


def live_files(path):
    """(name, size) of the segment files, leaving out ``.deleted`` ones (removed in the
    background by the scheduler)."""
    out = []
    for name in os.listdir(path):
        if ".deleted" not in name:
            try:
                out.append((name, os.path.getsize(os.path.join(path, name))))
            except FileNotFoundError:
                pass
    return sorted(out)


def documented_compaction_error(error):
    """A compaction refused on a closed log (``LogClosedError``), or one that reports being
    aborted by the concurrent operation (a ``KafkaLogError`` whose type names an abort,
    Kafka's LogCleaningAbortedException). Never a log dir failure."""
    if not isinstance(error, KafkaLogError) or isinstance(error, LogDirFailureError):
        return False
    return isinstance(error, LogClosedError) or "abort" in type(error).__name__.lower()


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A closed compacting log (copied for every race), and how long one compaction of it
    takes here (to spread the longer delays over a whole compaction)."""
    root = tmp_path_factory.mktemp("template")
    path = root / "built" / "c-0"
    build_compacting_log(path).close()
    shutil.copytree(path, root / "timing" / "c-0")
    log = Log.open(root / "timing" / "c-0", COMPACTING, clean_shutdown=True)
    started = time.perf_counter()
    assert log.compact().segments_cleaned > 0
    elapsed = time.perf_counter() - started
    log.close()
    return path, elapsed


# --- the operations raced against compaction ---------------------------------------------------
# name: (config, choose(rng) -> argument, check(race, argument)); a check reads the
# live log's offsets recorded when both threads were done, then reopens the log.

def _check_truncate_to(ctx, k):
    assert ctx.live_end == k, f"{ctx.where}: log end offset {ctx.live_end} after " \
                              f"truncate_to({k})"
    reopened = ctx.reopen()
    assert_model(contents(reopened), 0, k, ctx.where + " after reopen")
    assert reopened.log_end_offset == k, \
        f"{ctx.where}: log end offset {reopened.log_end_offset} after reopen, truncated to {k}"


def _check_truncate_fully(ctx, n):
    assert (ctx.live_start, ctx.live_end) == (n, n), ctx.where
    reopened = ctx.reopen()
    got = contents(reopened)
    assert not got, f"{ctx.where}: records after truncate_fully_and_start_at({n}): {got[:5]}"
    assert (reopened.log_start_offset, reopened.log_end_offset) == (n, n), \
        f"{ctx.where}: after reopen log start {reopened.log_start_offset}, log end " \
        f"{reopened.log_end_offset}; want an empty log at {n}"


def _check_delete_records(ctx, n):
    assert ctx.live_start >= n, f"{ctx.where}: log start offset {ctx.live_start} < {n}"
    assert ctx.live_end == RECORDS, ctx.where
    # A broker gives the log start offset back from its log-start-offset-checkpoint.
    reopened = ctx.reopen(log_start_offset=n)
    assert reopened.log_start_offset >= n, ctx.where
    assert_model(contents(reopened), n, RECORDS, ctx.where + " after reopen")
    assert reopened.log_end_offset == RECORDS, ctx.where


def _check_retention(ctx, _):
    assert ctx.live_end == RECORDS, ctx.where
    reopened = ctx.reopen()
    start = reopened.log_start_offset
    assert start == ctx.live_start, \
        f"{ctx.where}: log start offset {start} after reopen, {ctx.live_start} before: " \
        f"deleted segments came back"
    assert_model(contents(reopened), start, RECORDS, ctx.where + " after reopen")
    assert reopened.log_end_offset == RECORDS, ctx.where


def _check_close(ctx, _):
    reopened = ctx.reopen()
    assert_model(contents(reopened), 0, RECORDS, ctx.where + " after reopen")
    assert reopened.log_end_offset == RECORDS, ctx.where
    # Kafka stops (aborts) a cleaning before the log closes: once close() has returned, no
    # segment file may appear, disappear or change size.
    assert ctx.files_after_join == ctx.files_at_close, \
        f"{ctx.where}: the compaction changed the log's files after close() returned: " \
        f"{sorted(set(ctx.files_after_join) ^ set(ctx.files_at_close))[:6]}"


OPERATIONS = {
    "truncate_to": (COMPACTING, lambda rng: BLOCK * rng.randrange(10, KEYS),
                    _check_truncate_to),
    "truncate_fully_and_start_at": (COMPACTING, lambda rng: rng.randrange(0, 2 * RECORDS),
                                    _check_truncate_fully),
    "delete_records": (COMPACTING, lambda rng: rng.randrange(1, RECORDS + 1),
                       _check_delete_records),
    "delete_old_segments": (RETENTION, lambda rng: None, _check_retention),
    "close": (COMPACTING, lambda rng: None, _check_close),
}


class _Race:
    """One interleaving: compaction on one thread, ``op`` a delay later on another."""

    def __init__(self, path, config, op, arg, delay_s, where):
        self.path, self.config, self.op, self.arg = path, config, op, arg
        self.delay_s, self.where = delay_s, where
        self.errors = {}
        self.files_at_close = None
        self.opened = []

    def run(self):
        log = Log.open(self.path, self.config, clean_shutdown=True)
        self.opened.append(log)
        barrier = threading.Barrier(2)

        def compaction():
            barrier.wait()
            try:
                log.compact()
            except Exception as e:  # noqa: BLE001 - judged below
                self.errors["compact"] = e

        def operation():
            barrier.wait()
            if self.delay_s:
                time.sleep(self.delay_s)
            try:
                if self.op == "close":
                    log.close()
                    self.files_at_close = live_files(self.path)
                elif self.arg is None:
                    getattr(log, self.op)()
                else:
                    getattr(log, self.op)(self.arg)
            except Exception as e:  # noqa: BLE001 - judged below
                self.errors[self.op] = e

        threads = [threading.Thread(target=compaction, name="compaction"),
                   threading.Thread(target=operation, name=self.op)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(JOIN_TIMEOUT_S)
        hung = [t.name for t in threads if t.is_alive()]
        assert not hung, f"{self.where}: {hung} still running after {JOIN_TIMEOUT_S} s"
        self.files_after_join = live_files(self.path)
        self.left = leftovers(self.path)
        self.failed = log.failed
        self.live_start, self.live_end = log.log_start_offset, log.log_end_offset
        return log

    def reopen(self, **kwargs):
        log = Log.open(self.path, self.config, **kwargs)
        self.opened.append(log)
        return log

    def close_all(self):
        for log in self.opened:
            try:
                log.close()
            except Exception:  # noqa: BLE001 - a cleanup after a failure already reported
                pass


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_compaction_racing(tmp_path, template, op):
    template_path, compaction_s = template
    config, choose, check = OPERATIONS[op]
    for seed in SEEDS:
        rng = random.Random(f"{op}/{seed}")
        arg = choose(rng)
        long_delay = rng.random() < 0.25
        delay_s = rng.uniform(0, compaction_s if long_delay else SHORT_DELAY_S)
        where = f"{op}({'' if arg is None else arg}) {delay_s * 1000:.2f} ms into " \
                f"compaction (seed {seed})"
        path = tmp_path / f"seed-{seed}" / "c-0"
        shutil.copytree(template_path, path)
        race = _Race(path, config, op, arg, delay_s, where)
        try:
            log = race.run()
            bad = {who: e for who, e in race.errors.items()
                   if who != "compact" or not documented_compaction_error(e)}
            assert not bad, f"{where}: " + "; ".join(
                f"{who} raised {type(e).__name__}: {str(e)[:300]}" for who, e in bad.items())
            assert race.failed is None, f"{where}: the log went offline: {race.failed!r}"
            assert not race.left, f"{where}: left behind: {race.left}"
            log.close()
            check(race, arg)
        finally:
            race.close_all()
        shutil.rmtree(path.parent)


# --- truncation's log end offset ---------------------------------------------------------------

@pytest.mark.parametrize("target", [2229, 1300])
def test_truncate_to_sets_the_log_end_offset_to_the_target_after_compaction(tmp_path, template,
                                                                            target):
    """Kafka's LocalLog.truncateTo: the log end offset becomes the target offset even when
    compaction removed the records just below it (2229: 2220-2228 are gone, the last record
    left below it is 2219; 1300: 1260-1299 are gone, 1259 is left), not the end of the data
    left below it; the next append takes the target offset."""
    shutil.copytree(template[0], tmp_path / "c-0")
    log = Log.open(tmp_path / "c-0", COMPACTING, clean_shutdown=True)
    stats = log.compact()
    assert stats.first_uncleanable_offset > target
    retained = [o for o, _, _ in contents(log) if o < target]
    assert retained == [BLOCK * (i + 1) - 1 for i in range(target // BLOCK)]
    assert target - 1 not in retained
    log.truncate_to(target)
    assert log.log_end_offset == target
    assert [o for o, _, _ in contents(log)] == retained
    info = log.append([Record(key=b"next", value=b"next", timestamp=TIMESTAMP)])
    assert info.first_offset == target
    log.close()
