# Port of apache/kafka core/src/test/scala/unit/kafka/log/UnifiedLogTest.scala (commit 1eb7644349cb07139d6a3c1ad1986979647cac99)
"""The transaction, last-stable-offset and high-watermark cases of Kafka's UnifiedLogTest, run
against ``kafkalog.log.Log``: one test per upstream test, with its inputs and expected values
and its producer cases of duplicates and epochs (the other UnifiedLogTest cases are not
ported here). They run once, with the kernels of the
run (``KAFKALOG_NO_EXTENSIONS=1`` runs them with the pure-Python twins).

Upstream's log is a replica's: its high watermark moves only when told, so the logs here are
opened with ``replicated=True``. ``firstUnstableOffset`` is the producer state's first
unstable offset bounded below by the log start offset, as ``UnifiedLog`` bounds it
(``first_unstable_offset`` below); ``maybeIncrementHighWatermark`` and ``updateHighWatermark``
are both ``update_high_watermark``.

Deliberate differences: kafkalog's offsets are plain offsets (no ``LogOffsetMetadata`` with a
segment position cached for the high watermark or the first unstable offset), so upstream's
checks of those cached positions have no counterpart; ``update_high_watermark`` answers the
(clamped) high watermark whether it moved or not, where upstream's
``maybeUpdateHighWatermark`` answers None when it did not move; ``close()`` of a log taken
offline by an I/O error releases its files without raising (upstream's raises
KafkaStorageException)."""
import os
import threading

import pytest

from kafkalog import build_batch, build_control_batch, iter_batches
from kafkalog.errors import (
    InvalidProducerEpochError, KafkaLogError, LogDirFailureError, OffsetOutOfRangeError,
    OutOfOrderSequenceError, TransactionCoordinatorFencedError,
)
from kafkalog.transaction_index import AbortedTxn

from ported import (
    all_aborted_transactions, append_end_txn_marker, append_non_transactional,
    idempotent_appender, log_config, no_api_cases, open_log, value_records,
)
from ported import _no_fsync_fixture, _time_fixture, _closing_fixture  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("no_fsync")

NO_VERIFICATION = ("kafkalog has no transaction verification (the VerificationGuard of "
                   "AddPartitionsToTxn): its appends are not verified")


@pytest.fixture
def make_log(tmp_path, time, closing):
    """Upstream's ``createLog``: a replica's log (``replicated=True``), settings as
    ``ported.log_config`` takes them."""
    def make(clean_shutdown=True, **settings):
        return closing(open_log(str(tmp_path / "topic-0"), log_config(**settings), time,
                                replicated=True, clean_shutdown=clean_shutdown))
    return make


def first_unstable_offset(log):
    first = log._producer_state.first_unstable_offset()
    return None if first is None else max(first, log.log_start_offset)


def offsets_of(data):
    return [r.offset for b in iter_batches(data) for r in b]


def abc_records(time):
    return [dict(key=k, value=b"value", timestamp=time.ms) for k in (b"a", b"b", b"c")]


def test_high_watermark_metadata_updated_after_segment_roll(make_log, time):
    log = make_log(segment_bytes=1024 * 1024)

    def fetch(offset):
        data = log.read(offset, 2048, isolation="high_watermark", min_one_message=False).records
        return len(data), offsets_of(data)

    size = len(build_batch(abc_records(time)))
    log.append(abc_records(time))
    assert fetch(0) == (0, [])
    log.update_high_watermark(log.log_end_offset)
    assert fetch(0) == (size, [0, 1, 2])
    log.roll()
    assert fetch(0) == (size, [0, 1, 2])
    log.append(abc_records(time))
    assert fetch(3) == (0, [])


def plain_then_transaction(log):
    log.append(value_records(["0", "1", "2"]))
    log.append(value_records(["3", "4"]), producer_id=17, producer_epoch=10, base_sequence=0,
               transactional=True)


def reopened_with_an_open_transaction(make_log):
    """Three plain records and a transaction of two, the log closed and reopened: the first
    unstable offset (3) has no segment position then."""
    log = make_log(segment_bytes=1024 * 1024)
    plain_then_transaction(log)
    assert first_unstable_offset(log) == 3
    log.close()
    reopened = make_log(segment_bytes=1024 * 1024)
    assert reopened._producer_state.first_unstable_offset() == 3
    return reopened


@pytest.mark.parametrize("truncate", [
    pytest.param(lambda log, offset: log.truncate_to(offset),
                 id="test_truncate_below_first_unstable_offset"),
    pytest.param(lambda log, offset: log.truncate_fully_and_start_at(offset),
                 id="test_truncate_fully_and_start_below_first_unstable_offset")])
def test_truncate_below_first_unstable_offset(make_log, truncate):
    # upstream: one test for each truncation (the ids); truncating below the first unstable
    # offset resets the producer state
    reopened = reopened_with_an_open_transaction(make_log)
    truncate(reopened, 0)
    assert first_unstable_offset(reopened) is None
    assert reopened._producer_state.producers == {}


def test_truncate_fully_and_start(make_log):
    reopened = reopened_with_an_open_transaction(make_log)
    # upstream starts the log at 2 with its log start offset at 1; kafkalog's
    # truncate_fully_and_start_at takes one offset for both
    reopened.truncate_fully_and_start_at(2)
    assert first_unstable_offset(reopened) is None
    assert reopened._producer_state.producers == {}
    assert (reopened.log_start_offset, reopened.log_end_offset) == (2, 2)


def test_high_watermark_maintenance(make_log, time):
    log = make_log(segment_bytes=1024 * 1024)

    def records(offset):
        return build_batch(abc_records(time), base_offset=offset, partition_leader_epoch=0)

    assert log.high_watermark == 0          # initialised to 0
    log.append(records(0))
    assert log.high_watermark == 0          # not moved by an append
    log.update_high_watermark(1)
    assert log.high_watermark == 1
    log.update_high_watermark(5)            # not past the log end offset
    assert log.high_watermark == 3
    log.append_as_follower(records(3))
    log.update_high_watermark(6)
    assert log.high_watermark == 6
    log.truncate_to(3)                      # truncation moves it back
    assert log.high_watermark == 3
    log.append(records(0))
    assert log.high_watermark == 3
    assert (log.log_end_offset, log.log_start_offset) == (6, 0)
    log.truncate_fully_and_start_at(4)      # and so does a full truncation
    assert (log.log_end_offset, log.log_start_offset, log.high_watermark) == (4, 4, 4)


def assert_non_empty_fetch(log, offset, isolation):
    read = log.read(offset, 2**31 - 1, isolation=isolation, min_one_message=True)
    assert not read.first_entry_incomplete
    assert len(read.records) > 0
    bound = {"log_end": log.log_end_offset, "high_watermark": log.high_watermark,
             "committed": log.last_stable_offset}[isolation]
    assert all(o < bound for o in offsets_of(read.records))
    assert read.fetch_offset_metadata.message_offset == offset


def assert_empty_fetch(log, offset, isolation):
    read = log.read(offset, 2**31 - 1, isolation=isolation, min_one_message=True)
    assert not read.first_entry_incomplete
    assert len(read.records) == 0
    assert read.fetch_offset_metadata.message_offset == offset


def assert_bounded_fetches(log, isolation, bound):
    for offset in range(log.log_start_offset, bound):
        assert_non_empty_fetch(log, offset, isolation)
    for offset in range(bound, log.log_end_offset + 1):
        assert_empty_fetch(log, offset, isolation)


def test_fetch_up_to_log_end_offset(make_log):
    log = make_log(segment_bytes=1024 * 1024)
    log.append(value_records(["0", "1", "2"]))
    log.append(value_records(["3", "4"]))
    for offset in range(log.log_start_offset, log.log_end_offset):
        assert_non_empty_fetch(log, offset, "log_end")


def test_fetch_up_to_high_watermark(make_log):
    log = make_log(segment_bytes=1024 * 1024)
    log.append(value_records(["0", "1", "2"]))
    log.append(value_records(["3", "4"]))
    for high_watermark in (None, 3, 5):
        if high_watermark is not None:
            log.update_high_watermark(high_watermark)
        assert_bounded_fetches(log, "high_watermark", log.high_watermark)


def producer_view(log, producer_id):
    entry = log._producer_state.last_entry(producer_id)
    first = entry.current_txn_first_offset
    return (entry.producer_epoch, entry.last_seq, -1 if first is None else first,
            entry.coordinator_epoch)


def test_active_producers(make_log, time):
    log = make_log(segment_bytes=1024 * 1024)
    # an open transaction
    idempotent_appender(log, 1, 5, time, transactional=True)(5)
    assert producer_view(log, 1) == (5, 4, 0, -1)
    # a closed one
    append_end_txn_marker(log, 1, 5, "commit", time.ms, coordinator_epoch=15)
    assert producer_view(log, 1) == (5, 4, -1, 15)
    # an idempotent producer
    idempotent_appender(log, 2, 5, time)(3)
    assert producer_view(log, 2) == (5, 2, -1, -1)


def test_fetch_up_to_last_stable_offset(make_log, time):
    log = make_log(segment_bytes=1024 * 1024)
    producer1 = idempotent_appender(log, 1, 0, time, transactional=True)
    producer2 = idempotent_appender(log, 2, 0, time, transactional=True)
    producer1(5)
    append_non_transactional(log, 3)
    producer2(2)
    producer1(4)
    append_non_transactional(log, 2)
    producer1(10)
    assert_bounded_fetches(log, "committed", log.last_stable_offset)
    log.update_high_watermark(log.log_end_offset)
    assert_bounded_fetches(log, "committed", log.last_stable_offset)
    append_end_txn_marker(log, 1, 0, "commit", time.ms)
    assert log.last_stable_offset == 0
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 8
    assert_bounded_fetches(log, "committed", log.last_stable_offset)
    append_end_txn_marker(log, 2, 0, "abort", time.ms)
    assert log.last_stable_offset == 8
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset
    assert_bounded_fetches(log, "committed", log.last_stable_offset)


def foo_bar_baz(log, pid, epoch, sequence=0):
    return log.append(value_records(["foo", "bar", "baz"]), producer_id=pid,
                      producer_epoch=epoch, base_sequence=sequence, transactional=True)


def test_rebuild_transactional_state(make_log, time):
    log = make_log(segment_bytes=1024 * 1024 * 5)
    foo_bar_baz(log, 137, 5)
    abort = append_end_txn_marker(log, 137, 5, "abort", time.ms)
    log.update_high_watermark(abort.last_offset + 1)
    assert first_unstable_offset(log) is None
    log.close()
    reopened = make_log(clean_shutdown=False, segment_bytes=1024 * 1024 * 5)
    reopened.update_high_watermark(abort.last_offset + 1)
    assert first_unstable_offset(reopened) is None


def test_first_unstable_offset_no_transactional_data(make_log):
    log = make_log(segment_bytes=1024 * 1024 * 5)
    log.append(value_records(["foo", "bar", "baz"]))
    assert first_unstable_offset(log) is None


def test_first_unstable_offset_with_transactional_data(make_log, time):
    log = make_log(segment_bytes=1024 * 1024 * 5)
    first = foo_bar_baz(log, 137, 5)
    assert first_unstable_offset(log) == first.first_offset
    log.append(value_records(["blah"]), producer_id=137, producer_epoch=5, base_sequence=3,
               transactional=True)
    assert first_unstable_offset(log) == first.first_offset       # unchanged
    commit = append_end_txn_marker(log, 137, 5, "commit", time.ms)
    # not until the high watermark passes the marker
    assert first_unstable_offset(log) == first.first_offset
    log.update_high_watermark(commit.last_offset + 1)
    assert first_unstable_offset(log) is None


def test_read_committed_with_concurrent_high_watermark_updates(make_log, time):
    log = make_log(segment_bytes=1024 * 1024 * 5)
    last_offset = 50
    append = idempotent_appender(log, 15, 0, time, transactional=True)
    done = threading.Event()

    def move_high_watermark():
        # (waits 0.1 ms between updates: a pure busy loop starves the appending thread of the
        # GIL on a loaded machine)
        while not done.wait(0.0001) and log.log_end_offset < last_offset:
            log.update_high_watermark(log.log_end_offset)

    mover = threading.Thread(target=move_high_watermark)
    mover.start()
    non_empty_reads = 0
    try:
        # one-record transactions, each read before its abort
        while log.log_end_offset < last_offset:
            current_end = log.log_end_offset
            append(1)
            read = log.read(current_end, 2**31 - 1, isolation="committed",
                            min_one_message=False)
            non_empty_reads += len(read.records) > 0
            append_end_txn_marker(log, 15, 0, "abort", time.ms)
    finally:
        done.set()
        mover.join()
    assert non_empty_reads == 0


EXPECTED_ABORTED = [AbortedTxn(1, 0, 29, 8), AbortedTxn(2, 8, 74, 36)]
# the upstream mix of four producers' transactions and plain records:
# (producer or None, records or marker); the log end after all of it is 90
TRANSACTION_MIX = [(1, 5), (None, 3), (2, 2), (1, 4), (3, 3), (None, 2), (1, 10), (1, "abort"),
                   (2, 6), (4, 3), (None, 10), (3, 9), (3, "commit"), (4, 8), (2, 7),
                   (2, "abort"), (None, 10), (4, 4), (4, "commit")]


def check_first_unstable_offsets_as_the_high_watermark_moves(log):
    log.update_high_watermark(30)
    assert first_unstable_offset(log) == 8
    log.update_high_watermark(75)
    assert first_unstable_offset(log) == 36
    log.update_high_watermark(log.log_end_offset)
    assert first_unstable_offset(log) is None


def test_transaction_index_updated(make_log, time):
    log = make_log(segment_bytes=1024 * 1024 * 5)
    appenders = {pid: idempotent_appender(log, pid, 0, time, transactional=True)
                 for pid in (1, 2, 3, 4)}
    for who, what in TRANSACTION_MIX:
        if who is None:
            append_non_transactional(log, what)
        elif isinstance(what, str):
            append_end_txn_marker(log, who, 0, what, time.ms)
        else:
            appenders[who](what)
    assert all_aborted_transactions(log) == EXPECTED_ABORTED
    check_first_unstable_offsets_as_the_high_watermark_moves(log)


def test_transaction_index_updated_through_replication(make_log, time):
    log = make_log(segment_bytes=1024 * 1024 * 5)
    batches, offset, sequences = [], 0, {}
    for who, what in TRANSACTION_MIX:
        if isinstance(what, str):
            batches.append(build_control_batch(what, producer_id=who, producer_epoch=0,
                                               base_offset=offset, timestamp=time.ms))
            offset += 1
            continue
        producer = {} if who is None else dict(
            producer_id=who, producer_epoch=0, base_sequence=sequences.get(who, 0),
            transactional=True)
        batches.append(build_batch(value_records([str(i) for i in range(what)], time.ms),
                                   base_offset=offset, **producer))
        if who is not None:
            sequences[who] = sequences.get(who, 0) + what
        offset += what
    log.append_as_follower(b"".join(batches))
    assert all_aborted_transactions(log) == EXPECTED_ABORTED
    check_first_unstable_offsets_as_the_high_watermark_moves(log)


def test_zombie_coordinator_fenced(make_log, time):
    log = make_log(segment_bytes=1024 * 1024 * 5)
    append = idempotent_appender(log, 1, 0, time, transactional=True)
    append(10)
    append_end_txn_marker(log, 1, 0, "abort", time.ms, coordinator_epoch=1)
    append(5)
    append_end_txn_marker(log, 1, 0, "commit", time.ms, coordinator_epoch=2)
    with pytest.raises(TransactionCoordinatorFencedError):
        append_end_txn_marker(log, 1, 0, "abort", time.ms, coordinator_epoch=1)


def test_zombie_coordinator_fenced_empty_transaction(make_log, time):
    log = make_log(segment_bytes=1024 * 1024 * 5)
    log.append_as_follower(
        build_batch(value_records([str(i) for i in range(10)], time.ms), base_offset=0,
                    producer_id=1, producer_epoch=0, base_sequence=0, transactional=True,
                    partition_leader_epoch=1)
        + build_control_batch("commit", producer_id=1, producer_epoch=0, base_offset=10,
                              partition_leader_epoch=1))
    append_end_txn_marker(log, 1, 0, "abort", time.ms, coordinator_epoch=2, leader_epoch=1)
    append_end_txn_marker(log, 1, 0, "abort", time.ms, coordinator_epoch=2, leader_epoch=1)
    with pytest.raises(TransactionCoordinatorFencedError):
        append_end_txn_marker(log, 1, 0, "abort", time.ms, coordinator_epoch=1, leader_epoch=1)


def test_end_txn_with_fenced_producer_epoch(make_log, time):
    log = make_log(segment_bytes=1024 * 1024 * 5)
    append_end_txn_marker(log, 1, 5, "abort", time.ms, coordinator_epoch=1)
    with pytest.raises(InvalidProducerEpochError):
        append_end_txn_marker(log, 1, 4, "abort", time.ms, coordinator_epoch=1)


def transaction_across_a_roll(make_log, time):
    """Producer 1's transaction of 5 records, 3 plain ones, a roll, 5 more of the producer."""
    log = make_log(segment_bytes=1024 * 1024 * 5)
    append = idempotent_appender(log, 1, 0, time, transactional=True)
    append(5)
    append_non_transactional(log, 3)
    assert log.log_end_offset == 8
    log.roll()
    assert len(log.segments) == 2
    append(5)
    assert first_unstable_offset(log) == 0
    log.update_high_watermark(log.log_end_offset)
    return log


def test_last_stable_offset_does_not_exceed_log_start_offset_mid_segment(make_log, time):
    log = transaction_across_a_roll(make_log, time)
    log.delete_records(5)
    assert first_unstable_offset(log) == 5      # bounded below by the log start offset


def test_last_stable_offset_does_not_exceed_log_start_offset_after_segment_deletion(
        make_log, time):
    log = transaction_across_a_roll(make_log, time)
    log.delete_records(8)
    log.update_high_watermark(log.log_end_offset)
    log.delete_old_segments()
    assert len(log.segments) == 1
    assert first_unstable_offset(log) == 8


def test_append_to_transaction_index_failure(make_log, time):
    log = make_log(segment_bytes=1024 * 1024 * 5)
    append = idempotent_appender(log, 1, 0, time, transactional=True)
    append(10)
    # the transaction index's path made a directory: the marker is written to the log, its
    # index entry fails
    os.mkdir(log.active_segment.txn_index.path)
    with pytest.raises(LogDirFailureError):
        append_end_txn_marker(log, 1, 0, "abort", time.ms, coordinator_epoch=1)
    assert log.log_end_offset == 11
    assert log.last_stable_offset == 0
    # again: the log is offline, nothing is written
    with pytest.raises(KafkaLogError):
        append_end_txn_marker(log, 1, 0, "abort", time.ms, coordinator_epoch=1)
    assert log.log_end_offset == 11
    assert log.last_stable_offset == 0
    # a high watermark update does not move the first unstable offset either
    log.update_high_watermark(12)
    assert log.last_stable_offset == 0
    log.close()     # (upstream's close raises on the offline log; kafkalog's releases it)
    os.rmdir(log.active_segment.txn_index.path)
    reopened = make_log(clean_shutdown=False, segment_bytes=1024 * 1024 * 5)
    assert reopened.log_end_offset == 11
    assert len(reopened.active_segment.txn_index.all_aborted_txns()) == 1
    reopened.update_high_watermark(12)
    assert first_unstable_offset(reopened) is None


def test_offset_snapshot(make_log):
    log = make_log(segment_bytes=1024 * 1024 * 5)
    log.append_as_follower(build_batch(value_records(["a", "b", "c"]), base_offset=5,
                                       partition_leader_epoch=0))
    log.update_high_watermark(2)
    # (upstream's log starts at 0 and its follower append at 5 leaves the log start at 0)
    assert log.offsets().high_watermark == max(2, log.log_start_offset)
    assert log.offsets().high_watermark == log.high_watermark


def test_last_stable_offset_with_mixed_producer_data(make_log, time):
    log = make_log(segment_bytes=1024 * 1024 * 5)
    epoch, pid1, pid2 = 5, 137, 983
    first = log.append(value_records(["a", "b", "c"]), producer_id=pid1, producer_epoch=epoch,
                       base_sequence=0, transactional=True)
    assert first_unstable_offset(log) == first.first_offset
    log.append(value_records(["g", "h", "i"]))
    second = log.append(value_records(["d", "e", "f"]), producer_id=pid2,
                        producer_epoch=epoch, base_sequence=0, transactional=True)
    assert first_unstable_offset(log) == first.first_offset
    abort = append_end_txn_marker(log, pid1, epoch, "abort", time.ms)
    log.update_high_watermark(abort.last_offset + 1)
    # the second transaction is now the first unstable one
    assert first_unstable_offset(log) == second.first_offset
    commit = append_end_txn_marker(log, pid2, epoch, "commit", time.ms)
    log.update_high_watermark(commit.last_offset + 1)
    assert first_unstable_offset(log) is None


def test_aborted_transaction_spanning_multiple_segments(make_log, time):
    pid, epoch = 137, 5
    first_batch = build_batch(value_records(["a", "b", "c"]), producer_id=pid,
                              producer_epoch=epoch, base_sequence=0, transactional=True)
    log = make_log(segment_bytes=len(first_batch))
    first = log.append(value_records(["a", "b", "c"]), producer_id=pid, producer_epoch=epoch,
                       base_sequence=0, transactional=True)
    assert first_unstable_offset(log) == first.first_offset
    # this one goes to a second segment
    log.append(value_records(["d", "e", "f"]), producer_id=pid, producer_epoch=epoch,
               base_sequence=3, transactional=True)
    assert first_unstable_offset(log) == first.first_offset
    assert log.active_segment.base_offset == 3
    abort = append_end_txn_marker(log, pid, epoch, "abort", time.ms)
    log.update_high_watermark(abort.last_offset + 1)
    assert first_unstable_offset(log) is None
    # a read_committed fetch from 0 carries the aborted transaction
    read = log.read(0, 2048, isolation="committed", min_one_message=True)
    assert [(t.producer_id, t.first_offset) for t in read.aborted_transactions] == [(pid, 0)]


def expired_log(make_log, time, timestamp):
    """Upstream's 100 single-record batches "test<i>" in segments of 512 bytes."""
    log = make_log(segment_bytes=512, segment_index_bytes=1000, retention_ms=999)
    for i in range(100):
        log.append(value_records([f"test{i}"], timestamp))
    return log


def test_segment_deletion_with_high_watermark_initialization(make_log, time):
    log = expired_log(make_log, time, time.ms - 1000)
    assert log.update_high_watermark(25) == 25
    initial_segments = len(log.segments)
    log.delete_old_segments(time.ms)
    assert len(log.segments) < initial_segments
    assert log.log_start_offset <= 25


def test_cannot_delete_segments_at_or_above_high_watermark(make_log, time):
    log = expired_log(make_log, time, time.ms - 1000)
    assert len(log.segments) > 5
    assert (log.high_watermark, log.log_start_offset, log.log_end_offset) == (0, 0, 100)
    for hw in range(101):
        log.update_high_watermark(hw)
        assert log.high_watermark == hw
        log.delete_old_segments(time.ms)
        assert log.log_start_offset <= hw
        segments = list(log.segments)
        # every segment below the high watermark is gone
        assert log.log_start_offset <= segments[0].base_offset <= hw
        assert all(s.base_offset > hw and s.base_offset >= log.log_start_offset
                   for s in segments[1:])
    assert (log.log_start_offset, len(log.segments), log.active_segment.size) == (100, 1, 0)


def test_cannot_increment_log_start_offset_past_high_watermark(make_log, time):
    log = expired_log(make_log, time, None)
    log.update_high_watermark(25)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(26)


def test_maybe_update_high_watermark_as_follower(make_log):
    log = make_log()
    for i in range(100):
        log.append(value_records([f"test{i}"]))
    # upstream answers None when the high watermark does not move; kafkalog answers it
    assert [log.update_high_watermark(o) for o in (99, 99, 100, 100, 101)] == \
        [99, 99, 100, 100, 100]


no_api_cases(
    globals(), NO_VERIFICATION,
    "test_transaction_is_ongoing_and_verification_guard",
    "test_empty_transaction_still_clears_verification_guard",
    "test_disabled_verification_clears_verification_guard",
    "test_enabling_verification_when_request_is_at_log_layer")


# ---- the producer (idempotence) cases next to them: duplicates and epochs


def append_kv(log, key, value, time, pid, epoch, sequence, n=1):
    """``n`` records of ``key`` and ``value`` as one batch of the producer."""
    return log.append([dict(key=key, value=value, timestamp=time.ms)] * n, producer_id=pid,
                      producer_epoch=epoch, base_sequence=sequence)


def test_duplicate_appends(make_log, time):
    log = make_log()
    pid, epoch, seq = 1, 0, 0
    for _ in range(6):                                 # pad the log
        append_kv(log, b"key", b"value", time, pid, epoch, seq)
        seq += 1

    def three(seq):
        return append_kv(log, f"key-{seq}".encode(), f"value-{seq}".encode(), time, pid,
                         epoch, seq, n=3)

    multi = three(seq)
    assert multi.last_offset - multi.first_offset + 1 == 3
    # a duplicate of the tail batch (of several records) answers with its offsets
    duplicate = three(seq)
    assert (duplicate.first_offset, duplicate.last_offset) == (multi.first_offset,
                                                              multi.last_offset)
    seq += 3
    # a partial duplicate of the tail is out of order
    with pytest.raises(OutOfOrderSequenceError):
        append_kv(log, f"key-{seq}".encode(), f"value-{seq}".encode(), time, pid, epoch,
                  seq - 2, n=2)
    # a duplicate of the 4th batch from the tail: the last 5 batches are known, no error
    append_kv(log, b"key", b"value", time, pid, epoch, 2)
    # an older one is out of order
    with pytest.raises(OutOfOrderSequenceError):
        append_kv(log, b"key-1", b"value-1", time, pid, epoch, 1)
    # a duplicate of a single-record tail batch answers with the original's offsets
    original = append_kv(log, b"key", b"value", time, pid, epoch, seq)
    again = append_kv(log, b"key", b"value", time, pid, epoch, seq)
    assert (again.first_offset, again.last_offset) == (original.first_offset,
                                                      original.last_offset)


def producer_batches(time, specs, timestamp_type="log_append_time"):
    """Follower bytes: one single-record batch per (offset, producer id, sequence)."""
    return b"".join(build_batch([dict(key=b"key", value=b"value", timestamp=time.ms)],
                                base_offset=offset, producer_id=pid, producer_epoch=0,
                                base_sequence=sequence, timestamp_type=timestamp_type,
                                log_append_time=time.ms, partition_leader_epoch=0)
                    for offset, pid, sequence in specs)


def test_multiple_producer_ids_per_memory_record(make_log, time):
    log = make_log()
    data = producer_batches(time, [(0, 1, 0), (1, 2, 0), (2, 3, 0), (3, 4, 0)])
    log.append_as_follower(data)
    log.flush()
    fetched = log.read(0, 2**31 - 1).records
    assert [(b.producer_id, b.base_offset, b.base_sequence) for b in iter_batches(fetched)] == \
        [(b.producer_id, b.base_offset, b.base_sequence) for b in iter_batches(data)]


def test_duplicate_append_to_follower(make_log, time):
    log = make_log(segment_bytes=1024 * 1024 * 5)
    assert log.log_end_offset == 0
    # the same sequences at increasing offsets: a follower does not validate them
    for offset in (0, 2):
        log.append_as_follower(build_batch(value_records(["a", "b"]), base_offset=offset,
                                           producer_id=1, producer_epoch=0, base_sequence=0,
                                           partition_leader_epoch=0))
    assert log.log_end_offset == 4


def test_multiple_producers_with_duplicates_in_single_append(make_log, time):
    log = make_log(segment_bytes=1024 * 1024 * 5)
    assert log.log_end_offset == 0
    # pid 1 seq 0, pid 2 seq 0, pid 1 seq 1, pid 2 seq 1, pid 1 seq 1 again
    log.append_as_follower(producer_batches(
        time, [(0, 1, 0), (1, 2, 0), (2, 1, 1), (3, 2, 1), (4, 1, 1)],
        timestamp_type="log_append_time"))
    assert log.log_end_offset == 5


def test_old_producer_epoch(make_log, time):
    log = make_log()
    append_kv(log, b"key", b"value", time, 1, 1, 0)
    with pytest.raises(InvalidProducerEpochError):
        append_kv(log, b"key", b"value", time, 1, 0, 0)
