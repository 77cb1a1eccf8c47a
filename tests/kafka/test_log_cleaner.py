# Port of apache/kafka core/src/test/scala/unit/kafka/log/LogCleanerTest.scala (commit 1eb7644349cb07139d6a3c1ad1986979647cac99)
"""Kafka's LogCleanerTest cases, run against ``Log.compact`` (``kafkalog.cleaner``): one test
per upstream test, with its inputs and expected values. The cases write and clean whole
logs, so they run once, with the kernels of the run (``KAFKALOG_NO_EXTENSIONS=1`` runs them
with the pure-Python twins), and without fsync (``ported.no_fsync``).

Upstream's ``cleaner.clean(LogToClean(log, dirty, activeSegment.baseOffset))`` is
``clean(log, dirty)``: the log's first dirty offset set to ``dirty``, then one pass of
``Log.compact`` (whose range ends at the active segment), and ``doClean(..., currentTime)``
passes ``now_ms``. Records are upstream's: key and value the key's digits, markers without a
partition leader epoch.

Deliberate differences:

- kafkalog's offset map takes a dirty segment whole or not at all (Kafka's stops inside a
  segment when its map is full), and it is sized from a memory budget; the cases that clean
  with a map of a few slots, or with a map of keys given from outside, are skipped.
- A pass with nothing dirty does nothing (as Kafka's cleaner manager never picks such a
  log); where upstream cleans again from a first dirty offset at the first uncleanable one
  (the active segment, an open transaction), to see
  markers and tombstones past their delete horizon go, the port cleans from 0, which, the
  earlier passes having cleaned everything below, keeps the same records.
- A cleaned segment keeps the transaction index entries of the segments it replaces, also of
  transactions no record of which is left (Kafka drops those); a read_committed reader only
  skips records, so an entry without records changes nothing it reads. Where upstream checks
  that such entries are gone, the port checks what kafkalog keeps.
"""
import pytest

from kafkalog import build_batch, iter_batches
from kafkalog.cleaner import cleanable_range
from kafkalog.config import LogConfig

from ported import (
    append_end_txn_marker, idempotent_appender, keyed_records, log_config, no_api, no_api_cases,
    open_log,
)
from ported import _no_fsync_fixture, _time_fixture, _closing_fixture  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("no_fsync")

TOMBSTONE_RETENTION_MS = 86_400_000
LARGE_TIMESTAMP = 2**63 - 1 - TOMBSTONE_RETENTION_MS - 1
LONG_MAX = 2**63 - 1
NO_MAP_SLOTS = ("kafkalog's cleaner takes no offset map of a given number of slots or of keys "
                "given from outside (FakeOffsetMap); its map is built over the dirty range, "
                "whole segments at a time, within a memory budget")
NO_READ_BUFFER = ("kafkalog's cleaner has no read buffer bounded by max.message.bytes to "
                  "overflow or to size from a corrupt header: it decodes a segment whole")
NO_GROUPING = ("kafkalog's grouping of segments by size is internal to the pass (no "
               "groupSegmentsBySize)")
NO_CLEANER_THREADS = ("kafkalog has no LogCleaner threads, metrics or throttler: a pass is "
                      "Log.compact, called by its user")


@pytest.fixture
def make_log(tmp_path, time, closing):
    """Upstream's ``makeLog``: a compacted log of 1 KiB segments; the settings given (as
    ``ported.log_config`` takes them) override."""
    def make(name="test-0", recovery_point=0, **settings):
        config = log_config({"segment.bytes": 1024, "segment.index.bytes": 1024,
                             "cleanup.policy": "compact"}, **settings)
        return closing(open_log(str(tmp_path / name), config, time,
                                recovery_point=recovery_point))
    return make


def clean(log, first_dirty, now_ms=None):
    """``cleaner.doClean(LogToClean(log, first_dirty, active base offset), now_ms)``: returns
    (the next first dirty offset, the pass's ``CleanerStats``). From the first uncleanable
    offset on nothing is dirty, and the pass cleans from 0 (see the module's docstring)."""
    _, uncleanable = cleanable_range(log.cleaning_snapshot(), now_ms or 0)
    log.first_dirty_offset = first_dirty if first_dirty < uncleanable else 0
    stats = log.compact(now_ms)
    return log.first_dirty_offset, stats


def two_pass_clean(log, first_dirty, now_ms):
    """Upstream's ``runTwoPassClean``: the first pass dates the tombstones and markers, the
    second comes after their retention and removes them."""
    clean(log, first_dirty, now_ms)
    return clean(log, first_dirty, now_ms + TOMBSTONE_RETENTION_MS + 1)[0]


def batches_in_log(log):
    for segment in log.segments:
        yield from iter_batches(segment.read_bytes(0, segment.size))


def keys_in_log(log):
    return [int(r.key) for b in batches_in_log(log) if not b.is_control for r in b
            if r.key is not None and r.value is not None]


def offsets_in_log(log):
    return [r.offset for b in batches_in_log(log) for r in b
            if r.key is not None and r.value is not None]


def last_offsets_per_batch(log):
    return [b.last_offset for b in batches_in_log(log)]


def batch_base_offsets(log):
    return [b.base_offset for b in batches_in_log(log)]


def last_sequences(log):
    return {b.producer_id: b.last_sequence for b in batches_in_log(log)
            if not b.is_control and b.producer_id >= 0}


def unkeyed_count(log):
    return sum(1 for b in batches_in_log(log) for r in b if r.value is not None and r.key is None)


def append_record(log, key, value, producer_id=-1, epoch=-1, sequence=-1, timestamp=-1):
    """Upstream's ``record(key, value, ...)``: one record, no timestamp, as a leader."""
    return log.append([dict(key=None if key is None else str(key).encode(),
                            value=None if value is None else str(value).encode(),
                            timestamp=timestamp)],
                      producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)


def marker(log, producer_id, control, time, epoch=0):
    """Upstream's ``commitMarker`` / ``abortMarker``, appended by the coordinator."""
    return append_end_txn_marker(log, producer_id, epoch, control, time.ms, leader_epoch=-1)


def append_until_segments(log, n):
    while len(log.segments) < n:
        append_record(log, log.log_end_offset, log.log_end_offset)


test_remove_metrics_on_close = no_api(NO_CLEANER_THREADS)
test_metrics_active_after_reconfiguration = no_api(NO_CLEANER_THREADS)
test_clean_segments = no_api(NO_MAP_SLOTS)
test_clean_segments_with_concurrent_segment_deletion = no_api(
    "kafkalog's cleaner has no hook to delete segments between its map and its rewrite; a "
    "deletion aborts the pass instead (test_cleaner_coordination)")
test_size_trimmed_for_preallocated_and_compacted_topic = no_api(
    "kafkalog has no file preallocation (log.preallocate)")


def test_duplicate_check_after_cleaning(make_log, time):
    log = make_log(segment_bytes=2048)
    pid1, pid2, pid3, pid4 = 1, 2, 3, 4
    idempotent_appender(log, pid1, 0, time)([1, 2, 3])
    idempotent_appender(log, pid2, 0, time)([3, 1, 4])
    idempotent_appender(log, pid3, 0, time)([1, 4])
    log.roll()
    clean(log, 0)
    assert last_offsets_per_batch(log) == [2, 5, 7]
    assert last_sequences(log) == {pid1: 2, pid2: 2, pid3: 1}
    assert keys_in_log(log) == [2, 3, 1, 4]
    assert offsets_in_log(log) == [1, 3, 6, 7]
    # reloaded (recovery from 0), the cleaner kept every producer's sequence: retries are
    # recognised as duplicates
    log.close()
    log = make_log(segment_bytes=2048)
    for pid, keys, first, last in ((pid1, [1, 2, 3], 0, 2), (pid3, [1, 4], 6, 7),
                                   (pid2, [3, 1, 4], 3, 5)):
        info = idempotent_appender(log, pid, 0, time)(keys)
        assert (info.first_offset, info.last_offset) == (first, last)
    # one more append and clean, deleting from producer 1's batch again
    idempotent_appender(log, pid4, 0, time)([2])
    log.roll()
    clean(log, 0)
    assert last_sequences(log) == {pid1: 2, pid2: 2, pid3: 1, pid4: 0}
    assert last_offsets_per_batch(log) == [2, 5, 7, 8]
    assert keys_in_log(log) == [3, 1, 4, 2]
    assert offsets_in_log(log) == [3, 6, 7, 8]
    log.close()
    log = make_log(segment_bytes=2048)
    info = idempotent_appender(log, pid1, 0, time)([1, 2, 3])
    assert (info.first_offset, info.last_offset) == (0, 2)


test_multi_pass_segment_cleaning_with_aborted_transactions = no_api(NO_MAP_SLOTS)


def test_basic_transaction_aware_cleaning(make_log, time):
    log = make_log(segment_bytes=2048)
    producer1 = idempotent_appender(log, 1, 0, time, transactional=True)
    producer2 = idempotent_appender(log, 2, 0, time, transactional=True)
    producer1([1, 2])
    producer2([2, 3])
    producer1([3, 4])
    marker(log, 1, "abort", time)
    marker(log, 2, "commit", time)
    producer1([2])
    marker(log, 1, "commit", time)
    aborted = log.aborted_transactions(log.log_start_offset, log.log_end_offset)
    log.roll()
    clean(log, 0)
    assert keys_in_log(log) == [3, 2]
    assert offsets_in_log(log) == [3, 6, 7, 8, 9]
    # the transaction index still holds the aborted transaction
    assert log.aborted_transactions(log.log_start_offset, log.log_end_offset) == aborted


def test_clean_with_transactions_spanning_segments(make_log, time):
    log = make_log(segment_bytes=1024)
    producer1, producer2, producer3 = (idempotent_appender(log, pid, 0, time,
                                                           transactional=True)
                                       for pid in (1, 2, 3))
    producer1([1, 2])
    producer3([2, 3])
    producer2([3, 4])
    log.roll()
    producer2([5, 6])
    producer3([6, 7])
    producer1([7, 8])
    marker(log, 2, "abort", time)
    producer3([8, 9])
    marker(log, 3, "commit", time)
    producer1([9, 10])
    marker(log, 1, "abort", time)
    # only the records of the first segment are cleaned
    dirty, _ = clean(log, 0)
    assert keys_in_log(log) == [2, 3, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10]
    log.roll()
    # a couple more in the new segment, so that sequence numbers are there
    producer2([11])
    producer1([12])
    # in the end only the keys of producer 3 are left (and the new ones)
    clean(log, dirty)
    assert keys_in_log(log) == [2, 3, 6, 7, 8, 9, 11, 12]


def two_transactions(make_log, time, first_end, second_key):
    """Producer 1's transaction of [1], [2, 3] ended by ``first_end``, then one of
    [``second_key``] committed; rolled. Returns (the log, the producer's appender)."""
    log = make_log(segment_bytes=256)
    producer = idempotent_appender(log, 1, 0, time, transactional=True)
    producer([1])
    producer([2, 3])
    marker(log, 1, first_end, time)
    producer([second_key])
    marker(log, 1, "commit", time)
    log.roll()
    return log, producer


def test_commit_marker_removal(make_log, time):
    log, producer = two_transactions(make_log, time, "commit", 2)
    # the marker stays in this pass: the transaction still has records
    dirty, _ = clean(log, 0, LARGE_TIMESTAMP)
    assert keys_in_log(log) == [1, 3, 2]
    assert offsets_in_log(log) == [0, 2, 3, 4, 5]
    producer([1, 3])
    marker(log, 1, "commit", time)
    log.roll()
    # the commit marker at 3 stays: its transaction still had records at the first clean
    dirty, _ = clean(log, dirty, LARGE_TIMESTAMP)
    assert keys_in_log(log) == [2, 1, 3]
    assert offsets_in_log(log) == [3, 4, 5, 6, 7, 8]
    # again at the same time: not removed early
    dirty, _ = clean(log, dirty, LARGE_TIMESTAMP)
    assert keys_in_log(log) == [2, 1, 3]
    assert offsets_in_log(log) == [3, 4, 5, 6, 7, 8]
    # at the largest time: removed
    clean(log, dirty, LONG_MAX)
    assert keys_in_log(log) == [2, 1, 3]
    assert offsets_in_log(log) == [4, 5, 6, 7, 8]


def test_deleted_batches_with_no_messages_read(make_log, time):
    log = make_log(max_message_bytes=100, segment_bytes=1000)
    producer = idempotent_appender(log, 1, 0, time, transactional=True)
    producer([1])
    marker(log, 1, "abort", time)
    producer([2])
    producer([2])
    marker(log, 1, "commit", time)
    log.roll()
    clean(log, 0, LARGE_TIMESTAMP)
    assert keys_in_log(log) == [2]
    assert offsets_in_log(log) == [1, 3, 4]
    # the first pass dates the commit marker, the second removes it
    two_pass_clean(log, 0, LARGE_TIMESTAMP)
    assert keys_in_log(log) == [2]
    assert offsets_in_log(log) == [3, 4]


def test_commit_marker_retention_with_empty_batch(make_log, time):
    log = make_log(segment_bytes=256)
    producer1 = idempotent_appender(log, 1, 0, time, transactional=True)
    producer2 = idempotent_appender(log, 2, 0, time, transactional=True)
    producer1([2, 3])                       # 0, 1
    log.roll()
    producer2([2, 3])                       # 2, 3
    marker(log, 2, "commit", time)          # 4
    log.roll()
    append_record(log, 2, 2)                # 5
    append_record(log, 3, 3)                # 6
    marker(log, 1, "commit", time)          # 7
    log.roll()
    # the records go; both producers keep an empty batch
    dirty, _ = clean(log, 0, LARGE_TIMESTAMP)
    assert (keys_in_log(log), offsets_in_log(log), last_offsets_per_batch(log)) == \
        ([2, 3], [4, 5, 6, 7], [1, 3, 4, 5, 6, 7])
    # cleaned again: the empty batches stay, they hold the last sequences
    dirty, _ = clean(log, dirty, LARGE_TIMESTAMP)
    assert (keys_in_log(log), offsets_in_log(log), last_offsets_per_batch(log)) == \
        ([2, 3], [4, 5, 6, 7], [1, 3, 4, 5, 6, 7])
    # a new record of producer 2 lets its empty batch go
    producer2([1])                          # 8
    marker(log, 2, "commit", time)          # 9
    log.roll()
    dirty, _ = clean(log, dirty, LARGE_TIMESTAMP)
    assert (keys_in_log(log), offsets_in_log(log), last_offsets_per_batch(log)) == \
        ([2, 3, 1], [4, 5, 6, 7, 8, 9], [1, 4, 5, 6, 7, 8, 9])
    # two passes: the commit marker at 4 is dated, then removed
    two_pass_clean(log, dirty, LARGE_TIMESTAMP)
    assert (keys_in_log(log), offsets_in_log(log), last_offsets_per_batch(log)) == \
        ([2, 3, 1], [5, 6, 7, 8, 9], [1, 5, 6, 7, 8, 9])


def test_clean_empty_control_batch(make_log, time):
    log = make_log(segment_bytes=256)
    marker(log, 1, "commit", time)          # 0
    append_record(log, 2, 2)                # 1
    append_record(log, 3, 3)                # 2
    log.roll()
    # the marker goes after two passes; an empty batch keeps the producer's epoch
    dirty = two_pass_clean(log, 0, LARGE_TIMESTAMP)
    assert (keys_in_log(log), offsets_in_log(log), last_offsets_per_batch(log)) == \
        ([2, 3], [1, 2], [0, 1, 2])
    # cleaning the empty control batch again raises nothing
    clean(log, dirty, LONG_MAX)
    assert (keys_in_log(log), offsets_in_log(log), last_offsets_per_batch(log)) == \
        ([2, 3], [1, 2], [0, 1, 2])


def transaction_spanning_segments(make_log, time, end):
    """A transaction of one record, rolled, its marker ``end`` in the next segment, rolled."""
    log = make_log(segment_bytes=128)
    idempotent_appender(log, 1, 0, time, transactional=True)([1])
    log.roll()
    marker(log, 1, end, time)
    log.roll()
    return log


def test_committed_transaction_spanning_segments(make_log, time):
    log = transaction_spanning_segments(make_log, time, "commit")
    # the record and the marker both stay
    two_pass_clean(log, 0, LARGE_TIMESTAMP)
    assert offsets_in_log(log) == [0, 1]
    assert last_offsets_per_batch(log) == [0, 1]


def test_aborted_transaction_spanning_segments(make_log, time):
    log = transaction_spanning_segments(make_log, time, "abort")
    # the batch stays (empty: the producer's last), and so does the marker (its
    # transaction still has a batch)
    clean(log, 0, LARGE_TIMESTAMP)
    assert offsets_in_log(log) == [1]
    assert last_offsets_per_batch(log) == [0, 1]
    clean(log, 0, LONG_MAX)
    assert offsets_in_log(log) == [1]
    assert last_offsets_per_batch(log) == [0, 1]


def test_abort_marker_removal(make_log, time):
    log, _ = two_transactions(make_log, time, "abort", 3)
    # the aborted records go, the abort marker stays
    dirty, _ = clean(log, 0, LARGE_TIMESTAMP)
    assert keys_in_log(log) == [3]
    assert offsets_in_log(log) == [3, 4, 5]
    # the first pass dates the abort marker, the second removes it
    two_pass_clean(log, dirty, LARGE_TIMESTAMP)
    assert keys_in_log(log) == [3]
    assert offsets_in_log(log) == [4, 5]


def test_empty_batch_removal_with_sequence_reuse(make_log, time):
    # the group coordinator begins every batch at sequence 0: old empty batches and markers
    # still go. Upstream appends the transactions with the replication origin (no sequence
    # check); a follower's append is kafkalog's way to write them at the log end.
    log = make_log(segment_bytes=2048)
    for key in (1, 2):
        log.append_as_follower(build_batch(
            keyed_records([key], time.ms), base_offset=log.log_end_offset, producer_id=1,
            producer_epoch=0, base_sequence=0, transactional=True))
        marker(log, 1, "commit", time)
    append_record(log, 1, 1)
    append_record(log, 2, 1)
    log.roll()
    # both transactional batches are cleaned; the last stays empty (sequence and epoch)
    clean(log, 0, LARGE_TIMESTAMP)
    assert offsets_in_log(log) == [1, 3, 4, 5]
    assert last_offsets_per_batch(log) == [1, 2, 3, 4, 5]
    # the first pass dates the first marker, the second removes it
    two_pass_clean(log, 0, LARGE_TIMESTAMP)
    assert offsets_in_log(log) == [3, 4, 5]
    assert last_offsets_per_batch(log) == [2, 3, 4, 5]


def test_abort_marker_retention_with_empty_batch(make_log, time):
    log = make_log(segment_bytes=256)
    producer = idempotent_appender(log, 1, 0, time, transactional=True)
    producer([2, 3])                        # last offset 1
    marker(log, 1, "abort", time)
    log.roll()

    def aborted_indexed():
        (txn,) = log.aborted_transactions(0, 100)
        return (txn.producer_id, txn.first_offset, txn.last_offset) == (1, 0, 2)

    assert aborted_indexed()
    # the records go, the abort marker and the empty batch stay
    dirty, _ = clean(log, 0, LARGE_TIMESTAMP)
    assert aborted_indexed()
    assert (keys_in_log(log), offsets_in_log(log), last_offsets_per_batch(log)) == \
        ([], [2], [1, 2])
    # the empty batch stays: it holds the last sequence
    dirty = two_pass_clean(log, dirty, LARGE_TIMESTAMP)
    assert aborted_indexed()
    assert (keys_in_log(log), offsets_in_log(log), last_offsets_per_batch(log)) == \
        ([], [2], [1, 2])
    # a new last sequence lets the empty batch go
    producer([1])
    log.roll()
    dirty, _ = clean(log, dirty, LARGE_TIMESTAMP)
    assert aborted_indexed()
    assert (keys_in_log(log), offsets_in_log(log), last_offsets_per_batch(log)) == \
        ([1], [2, 3], [2, 3])
    # two passes remove the abort marker
    two_pass_clean(log, dirty, LARGE_TIMESTAMP)
    assert (keys_in_log(log), offsets_in_log(log), last_offsets_per_batch(log)) == \
        ([1], [3], [3])
    # upstream drops the index entry of the transaction with nothing left; kafkalog keeps it
    # (see the module's docstring)
    assert aborted_indexed()


def test_large_message(make_log, time):
    # upstream's cleaner grows its 1 KiB read buffer for a 1 MiB record; kafkalog's reads
    # whole segments, so what is left to check is that such records are cleaned
    large = 1024 * 1024
    log = make_log(max_message_bytes=large + 1000, segment_bytes=large * 16,
                   segment_index_bytes=1024)
    value = b"x" * large
    for key in range(3):
        log.append([dict(key=str(key).encode(), value=value, timestamp=-1)])
    log.append([dict(key=b"1", value=value, timestamp=-1)])
    log.roll()
    clean(log, 0)
    assert keys_in_log(log) == [0, 2, 1]


no_api_cases(
    globals(), NO_READ_BUFFER,
    "test_message_larger_than_max_message_size",
    "test_message_larger_than_max_message_size_with_corrupt_header",
    "test_corrupt_message_size_larger_than_bytes_available")


def test_cleaning_with_deletes(make_log, time):
    log = make_log(segment_bytes=1024)
    append_until_segments(log, 2)
    leo = log.log_end_offset
    for key in range(0, leo, 2):            # delete every even key
        append_record(log, key, None)
    append_until_segments(log, 4)
    clean(log, 0)
    assert not set(range(0, leo, 2)) & set(keys_in_log(log))


def test_log_cleaner_stats(make_log, time):
    # upstream's map of 4 slots holds 3 keys (load factor 0.75); kafkalog's budget of 4
    # entries holds 3 too (load factor 0.9)
    log = make_log(segment_bytes=1024)
    for key in (0, 1, 0, 1, 0):
        append_record(log, key, key)
    log.roll()
    initial_size = log.size
    log.first_dirty_offset = 2
    stats = log.compact(memory_budget=4 * 24)
    assert log.first_dirty_offset == 5
    assert stats.records_read == 5
    assert stats.bytes_read == initial_size
    assert stats.records_retained == 2
    assert stats.bytes_written == log.size
    assert stats.elapsed_s >= 0


def test_log_cleaner_retains_producer_last_sequence(make_log, time):
    log = make_log(segment_bytes=1024)
    append_record(log, 0, 0)                                        # 0
    append_record(log, 0, 1, producer_id=1, epoch=0, sequence=0)    # 1
    append_record(log, 0, 2, producer_id=2, epoch=0, sequence=0)    # 2
    append_record(log, 0, 3, producer_id=3, epoch=0, sequence=0)    # 3
    append_record(log, 1, 1, producer_id=2, epoch=0, sequence=1)    # 4
    log.roll()
    clean(log, 0)
    assert last_offsets_per_batch(log) == [1, 3, 4]
    assert last_sequences(log) == {1: 0, 2: 1, 3: 0}
    assert keys_in_log(log) == [0, 1]
    assert offsets_in_log(log) == [3, 4]


def test_log_cleaner_retains_last_sequence_even_if_transaction_aborted(make_log, time):
    log = make_log(segment_bytes=1024)
    producer = idempotent_appender(log, 1, 0, time, transactional=True)
    producer([1])
    producer([2, 3])
    marker(log, 1, "abort", time)
    log.roll()
    clean(log, 0)
    assert last_offsets_per_batch(log) == [2, 3]
    assert last_sequences(log) == {1: 2}
    assert keys_in_log(log) == []
    assert offsets_in_log(log) == [3]
    # a new batch of the producer lets the empty batch go
    producer([1, 5])
    log.roll()
    clean(log, 0)
    assert last_offsets_per_batch(log) == [3, 5]
    assert last_sequences(log) == {1: 4}
    assert keys_in_log(log) == [1, 5]
    assert offsets_in_log(log) == [3, 4, 5]


def test_cleaning_with_keys_conflicting_with_txn_marker_keys(make_log, time):
    log = make_log(segment_bytes=1024)
    leader_epoch = 5
    idempotent_appender(log, 1, 0, time, transactional=True)([1])
    append_end_txn_marker(log, 1, 0, "commit", time.ms, leader_epoch=leader_epoch)
    # a transaction whose record key is the bytes of a COMMIT marker's key
    commit_key = bytes([0, 0, 0, 1])
    log.append([dict(key=commit_key, value=b"foo", timestamp=time.ms)], producer_id=2,
               producer_epoch=0, base_sequence=0, transactional=True,
               partition_leader_epoch=leader_epoch)
    append_end_txn_marker(log, 2, 0, "commit", time.ms, leader_epoch=leader_epoch)
    log.roll()
    assert offsets_in_log(log) == [0, 1, 2, 3]
    # the markers are not taken for records of that key
    clean(log, 0)
    assert last_offsets_per_batch(log) == [0, 1, 2, 3]
    assert offsets_in_log(log) == [0, 1, 2, 3]


test_partial_segment_clean = no_api(NO_MAP_SLOTS)
test_cleaning_with_uncleanable_section = no_api(
    "kafkalog's pass ends at the first uncleanable offset it computes (the active segment, "
    "the first unstable offset, min.compaction.lag.ms); it takes no upper bound from outside")
test_log_to_clean = no_api(
    "kafkalog has no LogToClean with clean and dirty byte counts (cleaner.dirty_ratio is the "
    "ratio only)")
test_log_to_clean_with_uncleanable_section = no_api(
    "kafkalog has no LogToClean with clean and dirty byte counts")


def test_cleaning_with_unkeyed_messages(make_log, time):
    # appended under cleanup.policy=delete, so that unkeyed records can be written
    log = make_log(segment_bytes=1024, cleanup_policy="delete")
    while len(log.segments) < 2:
        append_record(log, None, log.log_end_offset)
    num_unkeyed = unkeyed_count(log)
    size_with_unkeyed = log.size
    append_until_segments(log, 3)
    expected_size = log.size - size_with_unkeyed
    log.config = log.config.with_overrides({"cleanup.policy": "compact"})
    _, stats = clean(log, 0)
    assert unkeyed_count(log) == 0
    assert log.size == expected_size
    # upstream counts them as invalid; kafkalog reads them and keeps none
    assert stats.records_read - stats.records_retained >= num_unkeyed


test_clean_segments_with_abort = no_api(
    "kafkalog's cleaner takes no checkDone callback; an abort comes from the log "
    "(truncation, deletion, close), see test_cleaner_coordination")
test_clean_segments_retaining_last_empty_batch = no_api(NO_MAP_SLOTS)
no_api_cases(
    globals(), NO_GROUPING,
    "test_segment_grouping",
    "test_segment_grouping_with_sparse_offsets_and_empty_segments",
    "test_segment_grouping_with_sparse_offsets",
    "test_segment_grouping_following_load_of_zero_index")
test_build_offset_map = no_api(NO_MAP_SLOTS)
test_segment_with_offset_overflow = no_api(
    "kafkalog splits a segment whose offsets overflow when loading it; the cleaner has no "
    "splitOverflowedSegment step")
test_recovery_after_crash = no_api(
    "upstream drives cleanSegments and renames its .cleaned/.swap files by hand to simulate "
    "a crash at each step; kafkalog's crash-safe replacement is exercised by tests/test_crash.py")
test_build_offset_map_fake_large = no_api(NO_MAP_SLOTS)
test_build_partial_offset_map = no_api(NO_MAP_SLOTS)
test_clean_corrupt_message_set = no_api(
    "kafkalog appends only v2 batches; the invalid magic 0 in magic 1 compressed sets of old "
    "cleaners cannot be written to its log")
test_client_handling_of_corrupt_message_set = no_api(
    "kafkalog appends only v2 batches; the invalid message sets of old cleaners cannot be "
    "written to its log")


def test_clean_tombstone(make_log, time):
    delete_retention_ms = LogConfig()["delete.retention.ms"]
    log = make_log(segment_bytes=LogConfig()["segment.bytes"])
    # a record with a large timestamp
    log.append([dict(key=b"0", value=b"0", timestamp=time.ms + delete_retention_ms + 10000)])
    log.roll()
    clean(log, 0)
    # a tombstone with a small timestamp, in a segment of its own
    log.append([dict(key=b"0", value=None, timestamp=time.ms - delete_retention_ms - 10000)])
    log.roll()
    clean(log, 1)
    assert next(batches_in_log(log)).last_offset == 1        # the tombstone stays
    log.append([dict(key=b"1", value=b"1", timestamp=time.ms)])
    log.roll()
    clean(log, 2)
    assert next(batches_in_log(log)).last_offset == 1


def write_to_log(log, offsets):
    for offset in offsets:
        log.append_as_follower(build_batch(keyed_records([offset], -1), base_offset=offset,
                                           partition_leader_epoch=0))


def test_cleaning_beyond_missing_offsets(make_log, time):
    # one segment of offsets 0..9, then a segment at 11: the hole [10, 11) is passed
    log = make_log(name="gap-0", segment_bytes=1024 * 1024)
    write_to_log(log, range(10))
    log.truncate_fully_and_start_at  # (kafkalog rolls at the log end: a follower append
    log.append_as_follower(build_batch(keyed_records([1015], -1), base_offset=11,
                                       partition_leader_epoch=0))   # past a gap rolls there)
    log.roll()
    next_dirty, _ = clean(log, 0)
    assert next_dirty == log.active_segment.base_offset
    # holes in two segments
    log = make_log(name="gaps-0", segment_bytes=1024 * 1024)
    write_to_log(log, range(10))
    write_to_log(log, range(15, 25))
    log.append_as_follower(build_batch(keyed_records([1015], -1), base_offset=30,
                                       partition_leader_epoch=0))
    log.roll()
    next_dirty, _ = clean(log, 0)
    assert next_dirty == log.active_segment.base_offset


test_max_clean_time_secs = no_api(NO_CLEANER_THREADS)
test_reconfigure_log_cleaner_io_max_bytes_per_second = no_api(NO_CLEANER_THREADS)
