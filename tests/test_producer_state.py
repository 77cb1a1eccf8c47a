"""Producer state: Kafka's idempotence checks, transactions and snapshots, and the txn-0
reproduction (a kafkalog log fed txn-0's batches writes Kafka's txn indexes and snapshots)."""
import os

import pytest

from kafkalog import Record, build_batch, build_control_batch
from kafkalog._kernels import walk_batches
from kafkalog.dump import dump_snapshot
from kafkalog.errors import (
    InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from kafkalog.log import Log
from kafkalog.producer_state import list_snapshots
from kafkalog.records import open_buffer

from conftest import FIXTURES


def test_txn0_reproduced_byte_for_byte(tmp_path):
    src = FIXTURES / "txn-0"
    log = Log.open(tmp_path / "txn-0", {"segment.bytes": 8192}, replicated=True)
    for path in sorted(src.glob("*.log")):
        buf = open_buffer(path)
        for row in walk_batches(buf)[0]:
            p, n = int(row["position"]), int(row["size"])
            log.append_as_follower(buf[p:p + n])
    log.close()
    ours = sorted(os.listdir(tmp_path / "txn-0"))
    assert ours == sorted(os.listdir(src))
    for name in ours:
        if name.endswith((".log", ".index", ".timeindex", ".txnindex", ".snapshot")):
            assert (tmp_path / "txn-0" / name).read_bytes() == (src / name).read_bytes(), name
    assert dump_snapshot(str(tmp_path / "txn-0" / "00000000000000000645.snapshot"))[0][
        "current_txn_first_offset"] == 637


def idem(n, seq, epoch=0, pid=9):
    return build_batch([Record(value=b"v%d" % i) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)


def test_duplicates_return_the_original_offsets(tmp_path):
    log = Log.open(tmp_path / "t-0")
    first = log.append(idem(3, 0))
    log.append(idem(2, 3))
    again = log.append(idem(3, 0))          # a producer retry of the first batch
    assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 5
    log.close()


def test_out_of_order_and_fencing(tmp_path):
    log = Log.open(tmp_path / "t-0")
    log.append(idem(3, 0, epoch=1))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem(1, 7, epoch=1))
    with pytest.raises(InvalidProducerEpochError):
        log.append(idem(1, 3, epoch=0))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem(1, 5, epoch=2))      # a new epoch starts at sequence 0
    log.append(idem(1, 0, epoch=2))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem(2, 1, epoch=2) + idem(1, 9, epoch=2))
    assert log.log_end_offset == 4
    log.close()


def test_state_survives_reopen_and_a_corrupt_snapshot(tmp_path):
    log = Log.open(tmp_path / "t-0", {"segment.bytes": 2048})
    for i in range(20):
        log.append(idem(5, 5 * i))
    log.append(build_batch([Record(value=b"t")], producer_id=12, producer_epoch=0,
                           base_sequence=0, transactional=True))
    lso = log.last_stable_offset
    log.close()
    snapshots = sorted((tmp_path / "t-0").glob("*.snapshot"))
    snapshots[-1].write_bytes(b"\0\1garbage")           # the close snapshot is damaged
    log = Log.open(tmp_path / "t-0", {"segment.bytes": 2048}, clean_shutdown=True)
    assert log.last_stable_offset == lso == 100          # the open transaction is known again
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem(1, 3))
    log.append(idem(1, 100))
    log.close()


def test_expired_producers_are_forgotten(tmp_path):
    log = Log.open(tmp_path / "t-0")
    log.append(build_batch([Record(value=b"v", timestamp=1000)], producer_id=9,
                           producer_epoch=0, base_sequence=0))
    log.remove_expired_producers(expiration_ms=10_000, now_ms=5000)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem(1, 5))
    log.remove_expired_producers(expiration_ms=10_000, now_ms=20_000)
    log.append(idem(1, 5))                    # unknown again: any sequence is accepted
    log.close()


def test_aborted_transaction_markers_update_state(tmp_path):
    log = Log.open(tmp_path / "t-0")
    log.append(build_batch([Record(value=b"a")], producer_id=3, producer_epoch=1,
                           base_sequence=0, transactional=True))
    assert log.last_stable_offset == 0
    log.append(build_control_batch("abort", producer_id=3, producer_epoch=1,
                                   coordinator_epoch=4, timestamp=777))
    assert log.last_stable_offset == 2
    entry = log._producer_state.producers[3]
    assert (entry.coordinator_epoch, entry.last_timestamp, entry.current_txn_first_offset) == \
        (4, 777, None)
    log.close()


def marker(kind, pid, epoch, coordinator_epoch=0):
    return build_control_batch(kind, producer_id=pid, producer_epoch=epoch,
                               coordinator_epoch=coordinator_epoch)


def txn(pid, seq=0, epoch=0, n=1):
    return build_batch([Record(value=b"t%d" % i) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, transactional=True)


def filler(log, up_to):
    """Plain records until the log end offset is ``up_to``."""
    while log.log_end_offset < up_to:
        log.append([Record(value=b"f")])


def test_a_marker_bumping_the_epoch_starts_the_sequences_anew(tmp_path):
    # The first batch of the new epoch is not the old epoch's batch retried.
    log = Log.open(tmp_path / "t-0")
    log.append(idem(1, 0, epoch=0, pid=1))
    log.append(marker("abort", 1, epoch=1))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem(1, 2, epoch=1, pid=1))
    written = log.append(idem(1, 0, epoch=1, pid=1))
    assert (written.first_offset, written.last_offset) == (2, 2)
    assert log.log_end_offset == 3
    assert [r.value for r in log.records()] == [b"v0", b"v0"]
    log.close()


@pytest.mark.parametrize("reopen", [False, True])
def test_a_producer_known_only_by_a_marker_starts_at_sequence_zero(tmp_path, reopen):
    log = Log.open(tmp_path / "t-0")
    log.append(marker("commit", 1, epoch=2))
    if reopen:
        log.close()
        log = Log.open(tmp_path / "t-0")
    with pytest.raises(InvalidProducerEpochError):
        log.append(idem(1, 0, epoch=0, pid=1))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(idem(1, 17, epoch=2, pid=1))
    log.append(idem(1, 0, epoch=2, pid=1))
    assert log.log_end_offset == 2
    log.close()


def test_the_last_stable_offset_waits_for_a_marker_below_the_high_watermark(tmp_path):
    # Kafka's ProducerStateManagerTest.testFirstUnstableOffset, through a replicated log.
    log = Log.open(tmp_path / "t-0", replicated=True)
    filler(log, 99)
    log.append(txn(1))                                         # offset 99
    filler(log, 105)
    log.append(txn(2))                                         # offset 105
    filler(log, 109)
    log.append(marker("commit", 1, epoch=0))                   # offset 109
    log.update_high_watermark(100)
    assert log.last_stable_offset == 99
    assert log.offsets().last_stable_offset == 99
    assert [r.offset for r in log.records(isolation="committed")] == list(range(99))
    log.update_high_watermark(110)
    assert log.last_stable_offset == 105
    filler(log, 112)
    log.append(marker("abort", 2, epoch=0))                    # offset 112
    log.update_high_watermark(112)
    assert log.last_stable_offset == 105
    log.update_high_watermark(113)
    assert log.last_stable_offset == 113
    log.close()


def test_a_standalone_log_moves_its_last_stable_offset_with_the_marker(tmp_path):
    log = Log.open(tmp_path / "t-0")
    log.append(txn(1))
    log.append(marker("commit", 1, epoch=0))
    assert log.last_stable_offset == log.high_watermark == 2
    log.close()


def test_a_non_transactional_batch_during_a_transaction_is_refused(tmp_path):
    log = Log.open(tmp_path / "t-0")
    log.append(txn(1))
    with pytest.raises(InvalidTxnStateError):
        log.append(idem(1, 1, pid=1))
    assert log.log_end_offset == 1
    log.append(txn(1, seq=1))
    log.close()


@pytest.mark.parametrize("reopen", [False, True])
def test_a_marker_from_an_older_coordinator_epoch_is_fenced(tmp_path, reopen):
    log = Log.open(tmp_path / "t-0")
    log.append(txn(1))
    log.append(marker("commit", 1, epoch=0, coordinator_epoch=1))
    if reopen:
        log.close()
        log = Log.open(tmp_path / "t-0")
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append(marker("commit", 1, epoch=0, coordinator_epoch=0))
    log.append(marker("commit", 1, epoch=0, coordinator_epoch=1))    # the current one
    log.append(marker("commit", 1, epoch=0, coordinator_epoch=2))    # a newer one
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append(marker("commit", 1, epoch=0, coordinator_epoch=1))
    assert log.log_end_offset == 4
    log.close()


def test_compaction_deletes_the_snapshots_of_the_segments_it_merges(tmp_path):
    config = {"segment.bytes": 1024, "cleanup.policy": "compact", "file.delete.delay.ms": 0}
    log = Log.open(tmp_path / "c-0", config)
    for i in range(60):
        log.append([Record(key=b"k%d" % (i % 3), value=b"v" * 40, timestamp=1000)])
    log.roll()
    log.close()
    # Segments up to 1 MB: the cleaner merges every segment into the first.
    log = Log.open(tmp_path / "c-0", dict(config, **{"segment.bytes": 10**6}))
    bases = [s.base_offset for s in log.segments]
    snapshots = {o for o, _ in list_snapshots(log.path)}
    assert set(bases[1:]) <= snapshots
    assert not log.compact(now_ms=1000).aborted
    kept = {s.base_offset for s in log.segments}
    assert len(kept) == 2                 # the merged segment and the empty active one
    assert {o for o, _ in list_snapshots(log.path)} == {o for o in snapshots if o in kept}
    log.close()


@pytest.mark.parametrize("start, segments_left", [(5, 2), (8, 1)])
def test_the_last_stable_offset_is_not_below_the_log_start_offset(tmp_path, start,
                                                                  segments_left):
    # Kafka's UnifiedLogTest.testLastStableOffsetDoesNotExceedLogStartOffsetMidSegment and
    # ...AfterSegmentDeletion: an open transaction from offset 0, the log start moved past it.
    log = Log.open(tmp_path / "t-0")
    log.append(txn(1, n=5))
    log.append([Record(value=b"n%d" % i) for i in range(3)])
    assert log.log_end_offset == 8
    log.roll()
    log.append(txn(1, seq=5, n=5))
    assert log.last_stable_offset == 0
    log.delete_records(start)
    assert len(log.segments) == segments_left
    assert log.last_stable_offset == start
    log.close()


def test_a_replicated_append_of_interleaved_transactions(tmp_path):
    # Kafka's UnifiedLogTest.testTransactionIndexUpdatedThroughReplication: one follower
    # append of four producers' transactions, interleaved with plain records.
    sequences = {}

    def txn_at(pid, offset, n):
        seq = sequences.get(pid, 0)
        sequences[pid] = seq + n
        return build_batch([Record(value=b"%d" % (seq + i)) for i in range(n)],
                           base_offset=offset, producer_id=pid, producer_epoch=0,
                           base_sequence=seq, transactional=True)

    def plain_at(offset, n):
        return build_batch([Record(value=b"p%d" % i) for i in range(n)], base_offset=offset)

    def marker_at(pid, offset, kind):
        return build_control_batch(kind, producer_id=pid, producer_epoch=0, base_offset=offset)

    data = b"".join([
        txn_at(1, 0, 5), plain_at(5, 3), txn_at(2, 8, 2), txn_at(1, 10, 4), txn_at(3, 14, 3),
        plain_at(17, 2), txn_at(1, 19, 10), marker_at(1, 29, "abort"), txn_at(2, 30, 6),
        txn_at(4, 36, 3), plain_at(39, 10), txn_at(3, 49, 9), marker_at(3, 58, "commit"),
        txn_at(4, 59, 8), txn_at(2, 67, 7), marker_at(2, 74, "abort"), plain_at(75, 10),
        txn_at(4, 85, 4), marker_at(4, 89, "commit")])
    log = Log.open(tmp_path / "t-0", {"segment.bytes": 5 * 1024 * 1024}, replicated=True)
    log.append_as_follower(data)
    aborted = [t for s in log.segments for t in s.txn_index.all_aborted_txns()]
    assert [tuple(t) for t in aborted] == [(1, 0, 29, 8), (2, 8, 74, 36)]
    log.update_high_watermark(30)
    assert log.last_stable_offset == 8
    log.update_high_watermark(75)
    assert log.last_stable_offset == 36
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset == 90
    log.close()


def test_a_zombie_coordinator_is_fenced_after_empty_transactions(tmp_path):
    # Kafka's UnifiedLogTest.testZombieCoordinatorFencedEmptyTransaction: replicated data and
    # a marker of coordinator epoch 1, then empty transactions ended by epoch 2.
    log = Log.open(tmp_path / "t-0")
    data = build_batch([Record(value=b"%d" % i) for i in range(10)], producer_id=1,
                       producer_epoch=0, base_sequence=0, transactional=True,
                       partition_leader_epoch=1)
    commit = build_control_batch("commit", producer_id=1, producer_epoch=0, coordinator_epoch=1,
                                 base_offset=10, partition_leader_epoch=1)
    log.append_as_follower(data + commit)
    log.append(marker("abort", 1, epoch=0, coordinator_epoch=2))
    log.append(marker("abort", 1, epoch=0, coordinator_epoch=2))
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append(marker("abort", 1, epoch=0, coordinator_epoch=1))
    assert log.log_end_offset == 13
    log.close()


def test_a_marker_of_an_older_producer_epoch_is_refused(tmp_path):
    # Kafka's UnifiedLogTest.testEndTxnWithFencedProducerEpoch (transaction version 1)
    log = Log.open(tmp_path / "t-0")
    log.append(txn(1, epoch=5))
    with pytest.raises(InvalidProducerEpochError):
        log.append(marker("abort", 1, epoch=4, coordinator_epoch=1))
    log.append(marker("abort", 1, epoch=5, coordinator_epoch=1))
    log.close()


def test_the_last_stable_offset_with_mixed_producer_data(tmp_path):
    # Kafka's UnifiedLogTest.testLastStableOffsetWithMixedProducerData
    log = Log.open(tmp_path / "t-0")
    first = log.append(txn(137, epoch=5, n=3))
    assert log.last_stable_offset == first.first_offset
    log.append([Record(value=v) for v in (b"g", b"h", b"i")])
    second = log.append(txn(983, epoch=5, n=3))
    assert log.last_stable_offset == first.first_offset
    log.append(marker("abort", 137, epoch=5))
    assert log.last_stable_offset == second.first_offset
    commit = log.append(marker("commit", 983, epoch=5))
    assert log.last_stable_offset == commit.last_offset + 1 == log.high_watermark
    log.close()


def test_an_aborted_transaction_spanning_segments_is_fetched(tmp_path):
    # Kafka's UnifiedLogTest.testAbortedTransactionSpanningMultipleSegments
    first_batch = txn(137, epoch=5, n=3)
    log = Log.open(tmp_path / "t-0", {"segment.bytes": len(first_batch)})
    first = log.append(first_batch)
    assert log.last_stable_offset == first.first_offset
    log.append(txn(137, seq=3, epoch=5, n=3))
    assert log.last_stable_offset == first.first_offset
    assert log.segments.active.base_offset == 3
    log.append(marker("abort", 137, epoch=5))
    assert log.last_stable_offset == log.log_end_offset
    info = log.read(0, 2048, isolation="committed")
    assert [(t.producer_id, t.first_offset) for t in info.aborted_transactions] == [(137, 0)]
    log.close()



class _CompletedWhileChecked(dict):
    """Transactions that the writer's thread completes just after a reader found some."""

    def __len__(self):
        n = dict.__len__(self)
        self.clear()
        return n


def test_the_first_unstable_offset_survives_a_completion_while_it_is_read():
    # A reader's thread found an open (or unreplicated) transaction and the writer's thread
    # completed it before the reader took the earliest: min() of nothing was a ValueError.
    from kafkalog.producer_state import ProducerStateManager
    state = ProducerStateManager("unused")
    state.ongoing = _CompletedWhileChecked({7: 10})
    state.unreplicated = _CompletedWhileChecked({12: (8, 20)})
    assert state.first_unstable_offset() in (None, 10)
