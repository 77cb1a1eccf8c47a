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

The map is Kafka's SkimpyOffsetMap in shape (``offset_map_put``/``offset_map_get`` kernels): a
flat table of 24-byte entries (a 128-bit hash of the key, the latest offset), at most
``MAP_LOAD_FACTOR`` full, sized for the dirty range within the memory budget. Uncompressed v2
batches are rewritten by the ``compact_batches`` kernel (kept record bytes copied, their
timestamp deltas written again); compressed and legacy batches are rebuilt through
``build_batch``.

Each group is written as ``.cleaned``, renamed ``.swap`` once whole, and swapped in for the
old segments; a crash at any step is finished or undone by the next load (``Log.open``).

``clean_log`` runs a pass over a live log the way Kafka's LogCleaner does: the log's
``CleaningCoordinator`` (Kafka's LogCleanerManager) marks it begun (refused while paused or
running), the pass reads only the snapshot, each group is swapped in by ``Log.replace_segments``
under the log's lock, and the coordinator ends it.
"""
import collections
import contextlib
import functools
import logging
import threading
import time

import numpy as np

from kafkalog._kernels import (
    COMPACT_COPY, COMPACT_DROP, COMPACT_REBUILD, OFFSET_MAP_ENTRY_BYTES, compact_batches,
    offset_map_get, offset_map_put, walk_batches,
)
from kafkalog.codecs import CODEC_NAMES
from kafkalog.control_records import ControlType, parse_control_record
from kafkalog.errors import CleaningAbortedError
from kafkalog.isolation import AbortedTxnFilter
from kafkalog.local_log import create_cleaned_segment
from kafkalog._kernels import Record
from kafkalog.builder import build_batch
from kafkalog.records import (
    CONTROL_MASK, COMPRESSION_MASK, DELETE_HORIZON_MASK, TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK, decode_batches,
)

log = logging.getLogger(__name__)

DEFAULT_MAP_MEMORY = 128 * 1024 * 1024
# Kafka's log.cleaner.io.buffer.load.factor: how full the map's table may get.
MAP_LOAD_FACTOR = 0.9

CleanerStats = collections.namedtuple(
    "CleanerStats", "first_dirty_offset first_uncleanable_offset segments_cleaned bytes_read "
                    "bytes_written records_read records_retained map_keys map_memory_bytes "
                    "elapsed_s partial aborted")

CleaningSnapshot = collections.namedtuple(
    "CleaningSnapshot", "segments log_start_offset log_end_offset high_watermark "
                        "first_dirty_offset first_unstable_offset producer_last_records config")
CleaningSnapshot.__doc__ = """What a cleaner pass needs of a log, taken together under the
log's lock (``Log.cleaning_snapshot``): the cleaner never reads a log's live state."""


class CleaningCoordinator:
    """One log's cleaning state, kept as Kafka's ``LogCleanerManager`` keeps it: in progress,
    aborted, paused. Every method is called with the log's lock (``lock``, re-entrant) held;
    ``check_aborted``, which a running pass calls between segments, takes it itself.

    Operations that would invalidate a pass (truncation, ``truncate_fully_and_start_at``,
    ``delete_records``, close) run inside ``paused()``: it marks a running pass aborted and
    waits (releasing the lock) until the pass has stopped and removed its files; no pass starts
    while paused.
    """

    def __init__(self, lock):
        self.lock = lock
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
        with self.lock:
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


class OffsetMap:
    """Key -> latest offset, in a flat table of ``OFFSET_MAP_ENTRY_BYTES`` entries (see the
    module docstring); ``len()`` keys, ``memory`` bytes of entries they use."""

    def __init__(self, keys: int) -> None:
        slots = 1 << max(10, int(np.ceil(keys / MAP_LOAD_FACTOR)) - 1).bit_length()
        self.slots = np.zeros((slots, 3), dtype=np.uint64)
        self.limit = int(slots * MAP_LOAD_FACTOR)
        self.count = 0

    def __len__(self) -> int:
        return self.count

    @property
    def memory(self) -> int:
        return self.count * OFFSET_MAP_ENTRY_BYTES

    def put(self, table, use):
        """Put the used records' keys; False (nothing changed beyond what fit) when full."""
        self.count, stop = offset_map_put(self.slots, self.count, self.limit, table.data,
                                          table.records, use)
        return stop == len(table.records)

    def latest(self, table):
        """The latest offset held for each record's key (-1: none)."""
        return offset_map_get(self.slots, table.data, table.records)


def _usable(item, first_dirty, uncleanable):
    """The records of a segment that go into the map: keyed, in the dirty range, neither
    control records nor records of aborted transactions."""
    recs = item.table.records
    skipped = ((item.batches["attributes"] & CONTROL_MASK) != 0) | item.aborted
    offsets = recs["offset"]
    return ((offsets >= first_dirty) & (offsets < uncleanable) & ~skipped[item.table.batch]
            & (recs["key_len"] >= 0))


def build_offset_map(dirty, first_dirty, uncleanable, memory_budget):
    """Key -> latest offset over [first_dirty, uncleanable); returns (map, end offset): the
    end is where a full map stopped (a partial clean, at a segment's start) or
    ``uncleanable``. A segment goes in whole or not at all; the first always does, even when
    it alone has more keys than the budget holds."""
    usable = [_usable(item, first_dirty, uncleanable) for item in dirty]
    counts = [int(u.sum()) for u in usable]
    budget_keys = int(memory_budget // OFFSET_MAP_ENTRY_BYTES * MAP_LOAD_FACTOR)
    offset_map = OffsetMap(max(counts[0] if counts else 0, min(sum(counts), budget_keys)))
    for item, use, n in zip(dirty, usable, counts):
        if len(offset_map) and len(offset_map) + n > offset_map.limit:
            return offset_map, item.segment.base_offset                # a partial clean
        offset_map.put(item.table, use.view(np.uint8))
    return offset_map, uncleanable
def clean(snapshot, now_ms, memory_budget, replace, check_aborted):
    """One cleaner pass over a log's ``CleaningSnapshot``; returns ``CleanerStats``.

    ``replace(group, data)`` swaps the rewritten bytes of a group of segments in (``Log``
    does it under its lock, raising CleaningAbortedError when the pass was aborted or the
    group changed); ``check_aborted()`` raises CleaningAbortedError between segments. Called
    by ``clean_log``.
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
    offset_map, end = build_offset_map(dirty, first_dirty, uncleanable, memory_budget)
    partial = end < uncleanable
    to_clean = [s for s, e in bounds if e <= end]
    horizon = now_ms + snapshot.config["delete.retention.ms"]
    stats = collections.Counter()
    txns = _Transactions()
    for group in _groups(to_clean, snapshot.config["segment.bytes"]):
        check_aborted()
        data = b"".join(_rewrite(decoded[id(s)], offset_map, snapshot.producer_last_records,
                                 now_ms, horizon, stats, txns) for s in group)
        stats["bytes_read"] += sum(s.size for s in group)
        stats["bytes_written"] += len(data)
        replace(group, data)
    return CleanerStats(first_dirty, end, len(to_clean), stats["bytes_read"],
                        stats["bytes_written"], stats["records_read"], stats["records_retained"],
                        len(offset_map), offset_map.memory, time.perf_counter() - started,
                        partial, False)


def clean_log(target, snapshot, coordinator, now_ms, memory_budget, time_fn, offline):
    """One cleaner pass over the log ``target`` (``Log.compact``) from ``snapshot``, taken
    when ``coordinator`` (its ``CleaningCoordinator``) marked the pass begun, or None when it
    refused; returns ``CleanerStats``, ``aborted`` when a truncation, deletion or close
    stopped the pass or another was running. ``time_fn`` dates the cleaned segments;
    ``offline(what, error)`` takes the log offline after an I/O error and returns the
    LogDirFailureError to raise."""
    if snapshot is None:
        return _aborted(target.first_dirty_offset)
    try:
        stats = clean(snapshot, now_ms, memory_budget,
                      functools.partial(_swap_in, target, time_fn), coordinator.check_aborted)
        with coordinator.lock:
            target.first_dirty_offset = max(target.first_dirty_offset,
                                            stats.first_uncleanable_offset)
        return stats
    except CleaningAbortedError:
        log.info("%s: cleaning aborted", target.path)
        return _aborted(snapshot.first_dirty_offset)
    except OSError as e:
        with coordinator.lock:
            raise offline("compaction", e) from e
    finally:
        with coordinator.lock:
            coordinator.end()


def _aborted(first_dirty_offset):
    return CleanerStats(first_dirty_offset, first_dirty_offset, 0, 0, 0, 0, 0, 0, 0, 0.0, False,
                        True)


def _swap_in(target, time_fn, group, data):
    """The cleaned bytes of ``group`` (consecutive segments) written as a new segment outside
    the log's lock, then swapped in under it; when the log refuses (the pass was aborted, the
    group is no longer in the log) the new files go and the pass stops."""
    piece, _ = create_cleaned_segment(target.path, group[0].base_offset, data, target.config,
                                      time_fn)
    try:
        piece.txn_index.reset()
        for old in group:          # the aborted transactions stay known to readers
            for txn in old.txn_index.all_aborted_txns():
                piece.txn_index.append(txn)
        target.replace_segments([piece], group)
        piece = None
    finally:
        if piece is not None:
            piece.delete_files()


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


class _Transactions:
    """Kafka's CleanedTransactionMetadata for one pass: the producers whose transaction has a
    batch in the segments rewritten so far (committed or aborted) and no marker yet. A
    marker may go only once no batch of its transaction is left (else a reload would take
    the transaction for open, or its aborted records for live)."""

    def __init__(self):
        self.committed = set()
        self.aborted = set()

    def discardable_markers(self, item, is_control, transactional, starts):
        """For each batch of ``item``, in offset order: a marker whose transaction has no
        batch left (an empty control batch was cleaned already: discardable too)."""
        discard = np.zeros(len(item.batches), dtype=bool)
        pids = item.batches["producer_id"].tolist()
        for b in np.flatnonzero(transactional).tolist():
            pid = pids[b]
            if not is_control[b]:
                (self.aborted if item.aborted[b] else self.committed).add(pid)
                continue
            kind = ControlType.ABORT if starts[b] == starts[b + 1] else parse_control_record(
                item.table.key(int(starts[b])), None)[0]
            ongoing = self.aborted if kind == ControlType.ABORT else self.committed
            discard[b] = pid not in ongoing or starts[b] == starts[b + 1]
            ongoing.discard(pid)
        return discard


def _is_last_of_producer(last_records, pid, last_offset, control, epoch):
    """Whether compaction keeps the batch (empty if need be) for its producer's state: the
    batch of its last data offset, or, for a producer known only by markers, its markers of
    the current epoch (Kafka's isBatchLastRecordOfProducer)."""
    last = last_records.get(pid) if pid >= 0 else None
    if last is None:
        return False
    return last[0] == last_offset if last[0] >= 0 else control and epoch == last[1]


def _rewrite(item, offset_map, last_records, now_ms, horizon, stats, txns):
    """The retained bytes of one segment: what to do with each batch decided for all batches
    at once, then runs of uncompressed v2 batches written by the ``compact_batches`` kernel and
    other batches that lose records rebuilt one by one."""
    batches, table = item.batches, item.table
    n = len(batches)
    recs = table.records
    of = table.batch
    attributes = batches["attributes"].astype(np.int64)
    v2 = batches["magic"] == 2
    has_horizon = v2 & ((attributes & DELETE_HORIZON_MASK) != 0)
    horizon_passed = has_horizon & (now_ms >= batches["base_timestamp"])
    is_control = v2 & ((attributes & CONTROL_MASK) != 0)
    tombstone = recs["value_len"] < 0
    starts = np.searchsorted(of, np.arange(n + 1))
    discard = txns.discardable_markers(item, is_control,
                                       v2 & ((attributes & TRANSACTIONAL_MASK) != 0), starts)
    keep = (recs["key_len"] >= 0) & ~(offset_map.latest(table) > recs["offset"])
    if (horizon_passed | is_control | item.aborted).any():      # else no record needs them
        keep &= ~(horizon_passed[of] & tombstone)
        keep = np.where(is_control[of], ~(horizon_passed & discard)[of], keep)
        keep &= ~item.aborted[of]
    counts = np.diff(starts)
    retained = np.diff(np.concatenate(([0], np.cumsum(keep)))[starts])
    kept_tombstones = np.diff(np.concatenate(([0], np.cumsum(keep & tombstone)))[starts])
    needs_horizon = ~has_horizon & ((is_control & discard) | (kept_tombstones > 0))
    last_of_producer = np.array(
        [_is_last_of_producer(last_records, *row) for row in zip(
            batches["producer_id"].tolist(), batches["last_offset"].tolist(),
            is_control.tolist(), batches["producer_epoch"].tolist())], dtype=bool)
    action = np.full(n, COMPACT_REBUILD, dtype=np.int8)
    # (an empty batch is copied only while it holds its producer's state)
    action[(retained == counts) & ~needs_horizon & ((counts > 0) | last_of_producer)] = \
        COMPACT_COPY
    action[(retained == 0) & ~last_of_producer & (action != COMPACT_COPY)] = COMPACT_DROP
    batch_horizon = np.where(needs_horizon, horizon,
                             np.where(has_horizon, batches["base_timestamp"], -1))
    stats["records_read"] += len(recs)
    stats["records_retained"] += int(retained.sum())
    # the kernel rewrites uncompressed v2 batches (their records are ``buf``'s own bytes)
    fast = v2 & ((attributes & COMPRESSION_MASK) == 0)
    out = []
    b = 0
    while b < n:
        if fast[b]:
            e = b + int(np.argmin(fast[b:])) if not fast[b:].all() else n
            out.append(compact_batches(item.buf, batches[b:e],
                                       keep[starts[b]:starts[e]].view(np.uint8),
                                       action[b:e], batch_horizon[b:e].astype(np.int64)))
            b = e
            continue
        if action[b] == COMPACT_COPY:
            p = int(batches["position"][b])
            out.append(bytes(item.buf[p:p + int(batches["size"][b])]))
        elif action[b] == COMPACT_REBUILD:
            out.append(_rebuild(batches[b], table, int(starts[b]),
                                keep[starts[b]:starts[b + 1]],
                                None if batch_horizon[b] < 0 else int(batch_horizon[b])))
        b += 1
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
