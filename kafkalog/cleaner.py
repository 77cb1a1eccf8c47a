"""Log compaction (``cleanup.policy=compact``), as Kafka's LogCleaner does it.

One pass over a log: the dirty range runs from the first dirty offset (the cleaner checkpoint,
or the log start) to the first uncleanable offset (the active segment, the first unstable
offset, segments newer than ``min.compaction.lag.ms``). A key -> last offset map is built over
it within a memory budget (a full map ends the pass early: a partial clean). Then every segment
below the first uncleanable offset is rewritten, grouped up to ``segment.bytes``, keeping for
each key only its latest record, dropping records of aborted transactions and records without
a key, keeping tombstones and transaction markers until ``delete.retention.ms`` after the
first clean that saw them (the delete horizon written into the batch), and keeping every
producer's last batch (empty if need be) so that producer state survives.

Each group is written as ``.cleaned``, renamed ``.swap`` once whole, and swapped in for the
old segments; a crash at any step is finished or undone by the next load (``Log.open``).
"""
import collections
import contextlib
import logging
import threading
import time

import numpy as np

from kafkalog._kernels import walk_batches
from kafkalog.codecs import CODEC_NAMES
from kafkalog.errors import CleaningAbortedError
from kafkalog.isolation import AbortedTxnFilter
from kafkalog._kernels import Record
from kafkalog.builder import build_batch
from kafkalog.records import (
    CONTROL_MASK, COMPRESSION_MASK, DELETE_HORIZON_MASK, TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK, decode_batches,
)

log = logging.getLogger(__name__)

DEFAULT_MAP_MEMORY = 128 * 1024 * 1024
# Memory charged per key in the map: the key's bytes plus what a Python dict entry, the
# bytes object and the int offset cost (measured on CPython 3.11: ~100 bytes).
MAP_ENTRY_OVERHEAD = 100

CleanerStats = collections.namedtuple(
    "CleanerStats", "first_dirty_offset first_uncleanable_offset segments_cleaned bytes_read "
                    "bytes_written records_read records_retained map_keys map_memory_bytes "
                    "elapsed_s partial aborted")

CleaningSnapshot = collections.namedtuple(
    "CleaningSnapshot", "segments log_start_offset log_end_offset high_watermark "
                        "first_dirty_offset first_unstable_offset producer_last_offsets config")
CleaningSnapshot.__doc__ = """What a cleaner pass needs of a log, taken together under the
log's lock (``Log.cleaning_snapshot``): the cleaner never reads a log's live state."""


class CleaningCoordinator:
    """One log's cleaning state, kept as Kafka's ``LogCleanerManager`` keeps it: in progress,
    aborted, paused. Every method is called with the log's lock held.

    Operations that would invalidate a pass (truncation, ``truncate_fully_and_start_at``,
    ``delete_records``, close) run inside ``paused()``: it marks a running pass aborted and
    waits (releasing the lock) until the pass has stopped and removed its files; no pass starts
    while paused.
    """

    def __init__(self, lock):
        self._cond = threading.Condition(lock)
        self._in_progress = False
        self._aborted = False
        self._paused = 0

    def try_begin(self):
        if self._paused or self._in_progress:
            return False
        self._in_progress, self._aborted = True, False
        return True

    def check_aborted(self):
        if self._aborted:
            raise CleaningAbortedError("log cleaning was aborted")

    def end(self):
        self._in_progress = self._aborted = False
        self._cond.notify_all()

    @contextlib.contextmanager
    def paused(self):
        self._paused += 1
        try:
            if self._in_progress:
                self._aborted = True
                while self._in_progress:
                    self._cond.wait()
            yield
        finally:
            self._paused -= 1


def cleanable_range(snapshot, now_ms):
    """(first dirty offset, first uncleanable offset) of a log's ``CleaningSnapshot``."""
    segments = snapshot.segments
    first_dirty = max(snapshot.first_dirty_offset, snapshot.log_start_offset)
    uncleanable = segments.active.base_offset
    if snapshot.first_unstable_offset is not None:
        uncleanable = min(uncleanable, snapshot.first_unstable_offset)
    uncleanable = min(uncleanable, snapshot.high_watermark)
    lag = snapshot.config["min.compaction.lag.ms"]
    if lag > 0:
        for s in segments:
            if s.largest_timestamp > now_ms - lag:
                uncleanable = min(uncleanable, s.base_offset)
                break
    return first_dirty, uncleanable


def dirty_ratio(snapshot, now_ms):
    """Dirty bytes / (clean + dirty bytes) below the first uncleanable offset."""
    first_dirty, uncleanable = cleanable_range(snapshot, now_ms)
    clean = dirty = 0
    for s, end in snapshot.segments.with_bounds(snapshot.log_end_offset):
        if end <= uncleanable:
            if end <= first_dirty:
                clean += s.size
            else:
                dirty += s.size
    return dirty / (clean + dirty) if clean + dirty else 0.0


def needs_cleaning(snapshot, now_ms):
    """Kafka's should-we-clean policy: the dirty ratio reaches ``min.cleanable.dirty.ratio``,
    or the oldest dirty data is older than ``max.compaction.lag.ms``."""
    config = snapshot.config
    if dirty_ratio(snapshot, now_ms) >= config["min.cleanable.dirty.ratio"]:
        return True
    first_dirty, _ = cleanable_range(snapshot, now_ms)
    for s in snapshot.segments:
        if s.base_offset >= first_dirty:
            return now_ms - s.largest_timestamp > config["max.compaction.lag.ms"]
    return False


class _Segment:
    """A segment's batches and records, decoded once for the map and the rewrite."""

    def __init__(self, segment, aborted_filter):
        self.segment = segment
        self.buf = segment.buffer()
        self.batches = walk_batches(self.buf, validate_crc=False)[0]
        self.table = decode_batches(self.buf, self.batches, segment.log_path)
        # Batches of aborted transactions (fed in offset order, segment after segment).
        self.aborted = aborted_filter.aborted_mask(self.batches)
        self._keys = None

    def keys(self):
        if self._keys is None:
            self._keys = self.table.keys()
        return self._keys


def build_offset_map(dirty, first_dirty, uncleanable, memory_budget):
    """key -> latest offset over [first_dirty, uncleanable); returns (map, end offset, memory):
    the end is where a full map stopped (a partial clean) or ``uncleanable``."""
    offset_map = {}
    memory = 0
    for item in dirty:
        recs = item.table.records
        batch_rows = item.batches[item.table.batch]
        control = (batch_rows["attributes"] & CONTROL_MASK) != 0
        aborted_rows = item.aborted[item.table.batch]
        usable = ((recs["offset"] >= first_dirty) & (recs["offset"] < uncleanable) & ~control
                  & ~aborted_rows & (recs["key_len"] >= 0))
        keys = item.keys()
        chosen = np.nonzero(usable)[0].tolist()
        # later offsets of the same key overwrite earlier ones: the map keeps the latest
        new_keys = dict(zip([keys[i] for i in chosen], recs["offset"][usable].tolist()))
        added = sum(len(k) + MAP_ENTRY_OVERHEAD for k in new_keys if k not in offset_map)
        if offset_map and memory + added > memory_budget:
            return offset_map, item.segment.base_offset, memory       # a partial clean
        offset_map.update(new_keys)
        memory += added
    return offset_map, uncleanable, memory


def clean(snapshot, now_ms, memory_budget, replace, check_aborted):
    """One cleaner pass over a log's ``CleaningSnapshot``; returns ``CleanerStats``.

    ``replace(group, data)`` swaps the rewritten bytes of a group of segments in (``Log``
    does it under its lock, raising CleaningAbortedError when the pass was aborted or the
    group changed); ``check_aborted()`` raises CleaningAbortedError between segments. Called
    by ``Log.compact``.
    """
    started = time.perf_counter()
    first_dirty, uncleanable = cleanable_range(snapshot, now_ms)
    bounds = snapshot.segments.with_bounds(snapshot.log_end_offset)[:-1]   # never the active
    cleanable = [s for s, end in bounds if end <= uncleanable]
    if first_dirty >= uncleanable or not cleanable:
        return CleanerStats(first_dirty, uncleanable, 0, 0, 0, 0, 0, 0, 0,
                            time.perf_counter() - started, False, False)
    aborted = AbortedTxnFilter(t for s in snapshot.segments
                               for t in s.txn_index.all_aborted_txns())
    decoded = {}
    for s in cleanable:
        check_aborted()
        decoded[id(s)] = _Segment(s, aborted)
    dirty = [decoded[id(s)] for s, end in bounds if first_dirty < end <= uncleanable]
    offset_map, end, memory = build_offset_map(dirty, first_dirty, uncleanable, memory_budget)
    partial = end < uncleanable
    to_clean = [s for s, e in bounds if e <= end]
    horizon = now_ms + snapshot.config["delete.retention.ms"]
    stats = collections.Counter()
    for group in _groups(to_clean, snapshot.config["segment.bytes"]):
        check_aborted()
        data = b"".join(_rewrite(decoded[id(s)], offset_map, snapshot.producer_last_offsets,
                                 now_ms, horizon, stats) for s in group)
        stats["bytes_read"] += sum(s.size for s in group)
        stats["bytes_written"] += len(data)
        replace(group, data)
    return CleanerStats(first_dirty, end, len(to_clean), stats["bytes_read"],
                        stats["bytes_written"], stats["records_read"], stats["records_retained"],
                        len(offset_map), memory, time.perf_counter() - started, partial, False)


def _groups(segments, max_bytes):
    """Consecutive segments whose sizes add up to at most ``max_bytes`` (and whose offsets fit
    one segment's relative offsets)."""
    group, size = [], 0
    for s in segments:
        if group and (size + s.size > max_bytes or
                      s.base_offset - group[0].base_offset > 2**31 - 1 - 2**30):
            yield group
            group, size = [], 0
        group.append(s)
        size += s.size
    if group:
        yield group


def _rewrite(item, offset_map, last_batch_of, now_ms, horizon, stats):
    """The retained bytes of one segment."""
    out = []
    batches, table, buf = item.batches, item.table, item.buf
    aborted_mask = item.aborted
    starts = np.searchsorted(table.batch, np.arange(len(batches) + 1))
    recs = table.records
    keys = item.keys()
    # The latest offset of each record's key (-1: not in the map) for the whole segment.
    latest_of = np.array([offset_map.get(k, -1) if k is not None else -1 for k in keys],
                         dtype=np.int64)
    superseded = latest_of > recs["offset"]
    for b, row in enumerate(batches):
        lo, hi = int(starts[b]), int(starts[b + 1])
        stats["records_read"] += hi - lo
        attributes = int(row["attributes"])
        has_horizon = row["magic"] == 2 and bool(attributes & DELETE_HORIZON_MASK)
        horizon_passed = has_horizon and now_ms >= int(row["base_timestamp"])
        is_control = row["magic"] == 2 and bool(attributes & CONTROL_MASK)
        pid = int(row["producer_id"])
        last_of_producer = pid >= 0 and last_batch_of.get(pid) == int(row["last_offset"])
        if is_control:
            keep = np.full(hi - lo, not horizon_passed)
        elif aborted_mask[b]:
            keep = np.zeros(hi - lo, dtype=bool)
        else:
            r = recs[lo:hi]
            keep = (r["key_len"] >= 0) & ~superseded[lo:hi]
            tombstones = r["value_len"] < 0
            if horizon_passed:
                keep &= ~tombstones
        retained = int(keep.sum())
        stats["records_retained"] += retained
        needs_horizon = not has_horizon and (is_control or
                                             bool((recs["value_len"][lo:hi][keep] < 0).any()))
        if retained == hi - lo and not needs_horizon:
            p = int(row["position"])
            out.append(bytes(buf[p:p + int(row["size"])]))      # unchanged: copied as is
            continue
        if retained == 0 and not last_of_producer:
            continue
        out.append(_rebuild(row, table, lo, keep, horizon if needs_horizon else
                            (int(row["base_timestamp"]) if has_horizon else None)))
    return b"".join(out)


def _rebuild(row, table, lo, keep, delete_horizon):
    records = []
    for j in np.nonzero(keep)[0]:
        i = lo + int(j)
        r = table.records[i]
        records.append(Record(key=table.key(i), value=table.value(i),
                              timestamp=int(r["timestamp"]), headers=table.headers_of(i),
                              offset=int(r["offset"])))
    attributes = int(row["attributes"])
    return build_batch(
        records, base_offset=int(row["base_offset"]), last_offset=int(row["last_offset"]),
        compression=CODEC_NAMES.get(attributes & COMPRESSION_MASK, "none"),
        producer_id=int(row["producer_id"]), producer_epoch=int(row["producer_epoch"]),
        base_sequence=int(row["base_sequence"]),
        transactional=bool(attributes & TRANSACTIONAL_MASK),
        is_control=bool(attributes & CONTROL_MASK),
        timestamp_type="log_append_time" if attributes & TIMESTAMP_TYPE_MASK else "create_time",
        log_append_time=int(row["max_timestamp"]), max_timestamp=int(row["max_timestamp"]),
        partition_leader_epoch=int(row["partition_leader_epoch"]),
        delete_horizon_ms=delete_horizon)
