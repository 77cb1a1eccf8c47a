# Port of apache/kafka storage/src/test/java/org/apache/kafka/storage/internals/log/ProducerStateManagerTest.java (commit 04d5bb9437032a8e0fb87af189b8b6db134c894b)
"""Kafka's ProducerStateManagerTest cases, run against ``kafkalog.producer_state``: one test per
upstream test, with its inputs and expected values. Upstream drives the state manager through
``prepareUpdate`` / ``ProducerAppendInfo`` / ``update``; kafkalog has the same three steps
(``prepare_update``, ``append_data_batch`` / ``append_end_txn_marker``, ``update``).

Where upstream reloads with ``truncateAndReload(logStart, logEnd, now)``, the test composes
what the log does on truncation (``truncate_and_reload`` below). kafkalog's state keeps no map
end offset (the log passes the offset of each snapshot), so upstream's ``mapEndOffset``
assertions have no counterpart and snapshots are taken at the offset upstream's would have.
"""
import os

import pytest

from kafkalog import build_batch
from kafkalog._kernels import walk_batches
from kafkalog.control_records import ControlType
from kafkalog.errors import (
    InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from kafkalog.producer_state import (
    CLIENT, COORDINATOR, REPLICATION, BatchMetadata, CompletedTxn, ProducerSnapshotEntry,
    ProducerStateEntry, ProducerStateManager, list_snapshots, read_snapshot, snapshot_path, write_snapshot,
)
from kafkalog.records import NO_SEQUENCE

from ported import no_api

PRODUCER_ID = 1
EPOCH = 0
DEFAULT_SEQUENCE = 0
INT_MAX = 2**31 - 1
NO_TIMESTAMP = -1
#: the upstream ProducerStateManagerConfig's producer id expiration (ms)
PRODUCER_ID_EXPIRATION_MS = 86_400_000
ABORT, COMMIT = ControlType.ABORT, ControlType.COMMIT

NO_VERIFICATION = ("kafkalog has no transaction verification (VerificationStateEntry, the "
                   "verification guard of AddPartitionsToTxn): its appends are not verified")
NO_LATE_TRANSACTIONS = ("kafkalog does not track late transactions "
                        "(ProducerStateManager.hasLateTransaction, transaction.max.timeout.ms)")


class MockTime:
    def __init__(self):
        self.now = 1_700_000_000_000

    def milliseconds(self):
        return self.now

    def sleep(self, ms):
        self.now += ms


@pytest.fixture
def log_dir(tmp_path):
    return str(tmp_path)


@pytest.fixture
def state(log_dir):
    return ProducerStateManager(log_dir)


@pytest.fixture
def time():
    return MockTime()


def append_entry(state, producer_id, epoch, seq, offset, timestamp, origin, transactional):
    info = state.prepare_update(producer_id, origin)
    info.append_data_batch(epoch, seq, seq, timestamp, offset, offset, transactional)
    state.update(info)


def append_client(state, producer_id, epoch, seq, offset, timestamp, transactional=False):
    append_entry(state, producer_id, epoch, seq, offset, timestamp, CLIENT, transactional)


def append_replication(state, epoch, seq, offset, timestamp):
    append_entry(state, PRODUCER_ID, epoch, seq, offset, timestamp, REPLICATION, False)


def append_end_txn_marker(state, producer_id, epoch, control_type, offset, timestamp,
                          coordinator_epoch=0):
    info = state.prepare_update(producer_id, COORDINATOR)
    completed = info.append_end_txn_marker(control_type, coordinator_epoch, epoch, offset,
                                           timestamp)
    state.update(info)
    if completed is not None:
        state.complete_txn(completed)


def last_entry(state, producer_id):
    entry = state.last_entry(producer_id)
    assert entry is not None, f"producer {producer_id} should have a last entry"
    return entry


def snapshot_offsets(log_dir):
    return {offset for offset, _ in list_snapshots(log_dir)}


def truncate_and_reload(log_dir, log_start_offset, log_end_offset):
    """Upstream's ``truncateAndReload``: the snapshots outside (log start, log end] go, the
    state is the newest one left (a new manager, as after reopening)."""
    state = ProducerStateManager(log_dir)
    state.delete_snapshots_above(log_end_offset)
    state.delete_snapshots_below(log_start_offset + 1)
    state.load_latest_snapshot(log_end_offset)
    return state


def test_basic_id_mapping(state, time):
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 0, 0)
    append_client(state, PRODUCER_ID, EPOCH, 1, 0, 1)
    # a duplicate is found before validation (by the log); appended, it is out of order
    with pytest.raises(OutOfOrderSequenceError):
        append_client(state, PRODUCER_ID, EPOCH, 1, 0, 1)
    with pytest.raises(OutOfOrderSequenceError):
        append_client(state, PRODUCER_ID, EPOCH, 5, 0, 2)
    append_client(state, PRODUCER_ID, EPOCH + 1, DEFAULT_SEQUENCE, 0, 3)
    with pytest.raises(InvalidProducerEpochError):
        append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 0, 4)


def test_append_txn_marker_with_no_producer_state(state, time):
    producer_epoch = 2
    append_end_txn_marker(state, PRODUCER_ID, producer_epoch, COMMIT, 27, time.milliseconds())
    first = last_entry(state, PRODUCER_ID)
    assert first.producer_epoch == producer_epoch
    assert first.producer_id == PRODUCER_ID
    assert first.last_seq == NO_SEQUENCE
    # fencing works with only the marker left
    with pytest.raises(InvalidProducerEpochError):
        append_client(state, PRODUCER_ID, 0, DEFAULT_SEQUENCE, 0, 4)
    # a known epoch without batches expects sequence 0
    with pytest.raises(OutOfOrderSequenceError):
        append_client(state, PRODUCER_ID, producer_epoch, 17, 0, 4)
    append_client(state, PRODUCER_ID, producer_epoch, DEFAULT_SEQUENCE, 39, 4)
    second = last_entry(state, PRODUCER_ID)
    assert second.producer_epoch == producer_epoch
    assert second.producer_id == PRODUCER_ID
    assert second.last_seq == 0


def test_producer_sequence_wrap_around(state, time):
    epoch, sequence, offset = 15, INT_MAX, 735
    append_replication(state, epoch, sequence, offset, time.milliseconds())
    append_client(state, PRODUCER_ID, epoch, 0, offset + 500, time.milliseconds())
    entry = last_entry(state, PRODUCER_ID)
    assert entry.producer_epoch == epoch
    assert entry.first_seq == sequence
    assert entry.last_seq == 0


def test_producer_sequence_with_wrap_around_batch_record(state, time):
    epoch, first_seq, last_seq, first_offset, last_offset = 15, INT_MAX - 10, 9, 2000, 2020
    info = state.prepare_update(PRODUCER_ID, REPLICATION)
    info.append_data_batch(epoch, first_seq, last_seq, time.milliseconds(), first_offset,
                           last_offset, False)
    assert state.last_entry(PRODUCER_ID) is None
    state.update(info)
    entry = last_entry(state, PRODUCER_ID)
    assert entry.first_seq == first_seq
    assert entry.last_seq == last_seq
    assert entry.first_data_offset == first_offset
    assert entry.last_data_offset == last_offset


def test_producer_sequence_invalid_wrap_around(state, time):
    epoch, sequence, offset = 15, INT_MAX, 735
    append_replication(state, epoch, sequence, offset, time.milliseconds())
    with pytest.raises(OutOfOrderSequenceError):
        append_client(state, PRODUCER_ID, epoch, 1, offset + 500, time.milliseconds())


def test_no_validation_on_first_entry_when_loading_log(state, time):
    epoch, sequence, offset = 5, 16, 735
    append_replication(state, epoch, sequence, offset, time.milliseconds())
    entry = last_entry(state, PRODUCER_ID)
    assert entry.producer_epoch == epoch
    assert entry.first_seq == sequence
    assert entry.last_seq == sequence
    assert entry.last_data_offset == offset
    assert entry.first_data_offset == offset


def test_control_record_bumps_producer_epoch(state, time):
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 0, time.milliseconds())
    bumped = 1
    append_end_txn_marker(state, PRODUCER_ID, bumped, ABORT, 1, time.milliseconds())
    entry = last_entry(state, PRODUCER_ID)
    assert entry.producer_epoch == bumped
    assert entry.current_txn_first_offset is None
    assert entry.first_seq == NO_SEQUENCE
    assert entry.last_seq == NO_SEQUENCE
    # the new epoch starts at sequence 0
    append_client(state, PRODUCER_ID, bumped, 0, 2, time.milliseconds())
    assert last_entry(state, PRODUCER_ID).first_seq == DEFAULT_SEQUENCE


test_txn_first_offset_metadata_cached = no_api(
    "kafkalog keeps the first unstable offset as an offset, without the "
    "segment and position of its LogOffsetMetadata")


test_has_late_transaction = no_api(NO_LATE_TRANSACTIONS)


test_has_late_transaction_initialized_after_reload = no_api(NO_LATE_TRANSACTIONS)


test_has_late_transaction_updated_after_partial_truncation = no_api(NO_LATE_TRANSACTIONS)


test_has_late_transaction_updated_after_full_truncation = no_api(NO_LATE_TRANSACTIONS)


def test_prepare_update_does_not_mutate(state, time):
    info = state.prepare_update(PRODUCER_ID, CLIENT)
    info.append_data_batch(EPOCH, 0, 5, time.milliseconds(), 15, 20, False)
    assert state.last_entry(PRODUCER_ID) is None
    state.update(info)
    last_entry(state, PRODUCER_ID)

    next_info = state.prepare_update(PRODUCER_ID, CLIENT)
    next_info.append_data_batch(EPOCH, 6, 10, time.milliseconds(), 26, 30, False)
    entry = last_entry(state, PRODUCER_ID)
    assert (entry.first_seq, entry.last_seq, entry.last_data_offset) == (0, 5, 20)

    state.update(next_info)
    entry = last_entry(state, PRODUCER_ID)
    assert (entry.first_seq, entry.last_seq, entry.last_data_offset) == (0, 10, 30)


def assert_txn_entry(entry, info, first_seq, last_seq, first_data_offset, last_data_offset,
                     current_txn_first_offset):
    assert entry.producer_epoch == EPOCH
    assert entry.first_seq == first_seq
    assert entry.last_seq == last_seq
    assert entry.first_data_offset == first_data_offset
    assert entry.last_data_offset == last_data_offset
    assert entry.current_txn_first_offset == current_txn_first_offset
    assert info.started_transactions == [16]


def test_update_producer_transaction_state(state, time):
    coordinator_epoch, offset = 15, 9
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, offset, time.milliseconds())

    info = state.prepare_update(PRODUCER_ID, CLIENT)
    info.append_data_batch(EPOCH, 1, 5, time.milliseconds(), 16, 20, True)
    assert_txn_entry(info.updated, info, 1, 5, 16, 20, 16)
    info.append_data_batch(EPOCH, 6, 10, time.milliseconds(), 26, 30, True)
    assert_txn_entry(info.updated, info, 1, 10, 16, 30, 16)

    completed = info.append_end_txn_marker(COMMIT, coordinator_epoch, EPOCH, 40,
                                           time.milliseconds())
    assert completed is not None
    assert completed.producer_id == PRODUCER_ID
    assert completed.first_offset == 16
    assert completed.last_offset == 40
    assert not completed.is_aborted
    # the marker leaves the batches of the transaction known
    assert_txn_entry(info.updated, info, 1, 10, 16, 30, None)


def test_out_of_sequence_after_control_record_epoch_bump(state, time):
    now = time.milliseconds()
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 0, now, True)
    append_client(state, PRODUCER_ID, EPOCH, 1, 1, now, True)
    bumped = 1
    append_end_txn_marker(state, PRODUCER_ID, bumped, ABORT, 1, now)
    # the sequence starts anew with the bumped epoch
    with pytest.raises(OutOfOrderSequenceError):
        append_client(state, PRODUCER_ID, bumped, 2, 2, now, True)
    with pytest.raises(OutOfOrderSequenceError):
        append_client(state, PRODUCER_ID, bumped + 1, 2, 2, now, True)
    append_client(state, PRODUCER_ID, bumped, DEFAULT_SEQUENCE, 0, now, True)
    entry = last_entry(state, PRODUCER_ID)
    assert entry.producer_epoch == bumped
    assert entry.last_seq == 0


def test_non_transactional_append_with_ongoing_transaction(state, time):
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 0, time.milliseconds(), True)
    with pytest.raises(InvalidTxnStateError):
        append_client(state, PRODUCER_ID, EPOCH, 1, 1, time.milliseconds(), False)


def test_truncate_and_reload_removes_out_of_range_snapshots(state, log_dir, time):
    for seq in range(5):
        append_client(state, PRODUCER_ID, EPOCH, seq, seq, time.milliseconds())
        state.take_snapshot(seq + 1)
    truncate_and_reload(log_dir, 1, 3)
    assert min(snapshot_offsets(log_dir)) == 2
    assert max(snapshot_offsets(log_dir)) == 3


def test_take_snapshot(state, log_dir):
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 0, 0)
    append_client(state, PRODUCER_ID, EPOCH, 1, 1, 1)
    state.take_snapshot(2)
    files = os.listdir(log_dir)
    assert len(files) == 1, "the directory holds one file"
    assert os.path.getsize(os.path.join(log_dir, files[0])) > 0


def test_fetch_snapshot_empty_snapshot(log_dir):
    assert dict(list_snapshots(log_dir)).get(1) is None


def test_recover_from_snapshot_unfinished_transaction(state, log_dir, time):
    append_client(state, PRODUCER_ID, EPOCH, 0, 0, time.milliseconds(), True)
    append_client(state, PRODUCER_ID, EPOCH, 1, 1, time.milliseconds(), True)
    state.take_snapshot(2)
    recovered = truncate_and_reload(log_dir, 0, 3)
    # a snapshot keeps only the last batch
    entry = last_entry(recovered, PRODUCER_ID)
    assert entry.first_data_offset == 1
    assert entry.first_seq == 1
    assert entry.last_data_offset == 1
    assert entry.last_seq == 1
    assert entry.current_txn_first_offset == 0
    append_client(recovered, PRODUCER_ID, EPOCH, 2, 2, time.milliseconds(), True)


def test_recover_from_snapshot_finished_transaction(state, log_dir, time):
    append_client(state, PRODUCER_ID, EPOCH, 0, 0, time.milliseconds(), True)
    append_client(state, PRODUCER_ID, EPOCH, 1, 1, time.milliseconds(), True)
    append_end_txn_marker(state, PRODUCER_ID, EPOCH, ABORT, 2, time.milliseconds())
    state.take_snapshot(3)
    recovered = truncate_and_reload(log_dir, 0, 3)
    entry = last_entry(recovered, PRODUCER_ID)
    assert entry.first_data_offset == 1
    assert entry.first_seq == 1
    assert entry.last_data_offset == 1
    assert entry.last_seq == 1
    assert entry.current_txn_first_offset is None


def test_recover_from_snapshot_empty_transaction(state, log_dir, time):
    append_timestamp = time.milliseconds()
    append_end_txn_marker(state, PRODUCER_ID, EPOCH, ABORT, 0, append_timestamp)
    state.take_snapshot(1)
    recovered = truncate_and_reload(log_dir, 0, 1)
    entry = last_entry(recovered, PRODUCER_ID)
    assert entry.last_timestamp == append_timestamp
    assert entry.current_txn_first_offset is None


def test_producer_state_after_fencing_abort_marker(state, time):
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 0, time.milliseconds(), True)
    append_end_txn_marker(state, PRODUCER_ID, EPOCH + 1, ABORT, 1, time.milliseconds())
    entry = last_entry(state, PRODUCER_ID)
    assert entry.current_txn_first_offset is None
    assert entry.last_data_offset == -1
    assert entry.first_data_offset == -1
    # not expired: the fencing epoch is kept
    state.remove_expired_producers(time.milliseconds(), PRODUCER_ID_EXPIRATION_MS)
    last_entry(state, PRODUCER_ID)


def test_remove_expired_pids_on_reload(state, log_dir):
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 0, 0)
    append_client(state, PRODUCER_ID, EPOCH, 1, 1, 1)
    state.take_snapshot(2)
    recovered = truncate_and_reload(log_dir, 0, 1)
    # the producer is unknown after the reload: the append is accepted and adds it again
    append_client(recovered, PRODUCER_ID, EPOCH, 2, 2, 70001)
    assert len(recovered.producers) == 1
    assert next(iter(recovered.producers.values())).last_seq == 2


def test_accept_append_without_producer_state_on_replica(state, log_dir):
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 0, 0)
    append_client(state, PRODUCER_ID, EPOCH, 1, 1, 1)
    state.take_snapshot(2)
    recovered = truncate_and_reload(log_dir, 0, 1)
    sequence = 2
    assert PRODUCER_ID not in recovered.producers
    append_replication(recovered, EPOCH, sequence, 2, 70001)
    entry = recovered.producers[PRODUCER_ID]
    assert entry.producer_epoch == EPOCH
    assert entry.first_seq == sequence
    assert entry.last_seq == sequence


def test_accept_append_with_sequence_gaps_on_replica(state):
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 0, 0)
    out_of_order = 3
    with pytest.raises(OutOfOrderSequenceError):
        append_client(state, PRODUCER_ID, EPOCH, out_of_order, 1, 1)
    assert state.producers[PRODUCER_ID].last_seq == 0
    append_replication(state, EPOCH, out_of_order, 1, 1)
    assert state.producers[PRODUCER_ID].last_seq == out_of_order


def test_delete_snapshots_before(state, log_dir, time):
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 0, time.milliseconds())
    append_client(state, PRODUCER_ID, EPOCH, 1, 1, time.milliseconds())
    state.take_snapshot(2)
    assert len(os.listdir(log_dir)) == 1
    assert snapshot_offsets(log_dir) == {2}
    append_client(state, PRODUCER_ID, EPOCH, 2, 2, time.milliseconds())
    state.take_snapshot(3)
    assert len(os.listdir(log_dir)) == 2
    assert snapshot_offsets(log_dir) == {2, 3}
    state.delete_snapshots_below(3)
    assert len(os.listdir(log_dir)) == 1
    assert snapshot_offsets(log_dir) == {3}
    state.delete_snapshots_below(4)
    assert os.listdir(log_dir) == []
    assert snapshot_offsets(log_dir) == set()


def test_truncate_fully_and_start_at(state, log_dir, time):
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 0, time.milliseconds())
    append_client(state, PRODUCER_ID, EPOCH, 1, 1, time.milliseconds())
    state.take_snapshot(2)
    assert snapshot_offsets(log_dir) == {2}
    append_client(state, PRODUCER_ID, EPOCH, 2, 2, time.milliseconds())
    state.take_snapshot(3)
    assert snapshot_offsets(log_dir) == {2, 3}
    # what Log.truncate_fully_and_start_at does to the state
    state.clear()
    state.delete_snapshots_above(-1)
    assert os.listdir(log_dir) == []
    append_client(state, PRODUCER_ID, EPOCH, 0, 0, time.milliseconds())
    state.take_snapshot(1)
    assert len(os.listdir(log_dir)) == 1
    assert snapshot_offsets(log_dir) == {1}


test_reload_snapshots = no_api(
    "kafkalog keeps no in-memory list of snapshot files to reload "
    "(truncateFullyAndReloadSnapshots): it lists the directory each time")


def test_first_unstable_offset_after_truncation(state, log_dir, time):
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 99, time.milliseconds(), True)
    assert state.first_unstable_offset() == 99
    state.take_snapshot(100)
    append_end_txn_marker(state, PRODUCER_ID, EPOCH, COMMIT, 105, time.milliseconds())
    state.on_high_watermark_updated(106)
    assert state.first_unstable_offset() is None
    state.take_snapshot(106)
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE + 1, 106, time.milliseconds())
    state = truncate_and_reload(log_dir, 0, 106)
    assert state.first_unstable_offset() is None
    state = truncate_and_reload(log_dir, 0, 100)
    assert state.first_unstable_offset() == 99


def test_load_from_snapshot_retains_non_expired_producers(state, log_dir, time):
    pid1, pid2 = 1, 2
    append_client(state, pid1, EPOCH, DEFAULT_SEQUENCE, 0, time.milliseconds())
    append_client(state, pid2, EPOCH, DEFAULT_SEQUENCE, 1, time.milliseconds())
    state.take_snapshot(2)
    assert len(state.producers) == 2
    state = truncate_and_reload(log_dir, 1, 2)
    assert len(state.producers) == 2
    entry1 = last_entry(state, pid1)
    assert (entry1.last_seq, entry1.last_data_offset) == (0, 0)
    entry2 = last_entry(state, pid2)
    assert (entry2.last_seq, entry2.last_data_offset) == (0, 1)


def test_skip_snapshot_if_offset_unchanged(state, log_dir):
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 0, 0)
    state.take_snapshot(1)
    assert len(os.listdir(log_dir)) == 1
    assert snapshot_offsets(log_dir) == {1}
    state.take_snapshot(1)
    assert len(os.listdir(log_dir)) == 1
    assert snapshot_offsets(log_dir) == {1}


def test_pid_expiration_timeout(state, time):
    epoch = 5
    append_client(state, PRODUCER_ID, epoch, DEFAULT_SEQUENCE, 1, time.milliseconds())
    time.sleep(PRODUCER_ID_EXPIRATION_MS + 1)
    state.remove_expired_producers(time.milliseconds(), PRODUCER_ID_EXPIRATION_MS)
    append_client(state, PRODUCER_ID, epoch, DEFAULT_SEQUENCE + 1, 2, time.milliseconds())
    assert len(state.producers) == 1
    assert next(iter(state.producers.values())).last_seq == DEFAULT_SEQUENCE + 1


def test_first_unstable_offset(state, time):
    epoch = 5
    assert state.first_undecided_offset() is None
    append_client(state, PRODUCER_ID, epoch, DEFAULT_SEQUENCE, 99, time.milliseconds(), True)
    assert state.first_undecided_offset() == 99
    assert state.first_unstable_offset() == 99

    another = 2
    append_client(state, another, epoch, DEFAULT_SEQUENCE, 105, time.milliseconds(), True)
    assert state.first_undecided_offset() == 99
    assert state.first_unstable_offset() == 99

    append_end_txn_marker(state, PRODUCER_ID, epoch, COMMIT, 109, time.milliseconds())
    assert state.first_undecided_offset() == 105
    assert state.first_unstable_offset() == 99

    state.on_high_watermark_updated(100)
    assert state.first_unstable_offset() == 99
    state.on_high_watermark_updated(110)
    assert state.first_unstable_offset() == 105

    append_end_txn_marker(state, another, epoch, ABORT, 112, time.milliseconds())
    assert state.first_undecided_offset() is None
    assert state.first_unstable_offset() == 105
    state.on_high_watermark_updated(113)
    assert state.first_unstable_offset() is None


def test_producers_with_ongoing_transactions_dont_expire(state, time):
    epoch = 5
    append_client(state, PRODUCER_ID, epoch, DEFAULT_SEQUENCE, 99, time.milliseconds(), True)
    assert state.first_undecided_offset() == 99
    time.sleep(PRODUCER_ID_EXPIRATION_MS + 1)
    state.remove_expired_producers(time.milliseconds(), PRODUCER_ID_EXPIRATION_MS)
    assert state.last_entry(PRODUCER_ID) is not None
    assert state.first_undecided_offset() == 99
    state.remove_expired_producers(time.milliseconds(), PRODUCER_ID_EXPIRATION_MS)
    assert state.last_entry(PRODUCER_ID) is not None


def test_sequence_not_validated_for_group_metadata_topic(state, time):
    # upstream's partition is __consumer_offsets-0; what skips the check is the origin
    append_entry(state, PRODUCER_ID, EPOCH, NO_SEQUENCE, 99, time.milliseconds(), COORDINATOR,
                 True)
    append_entry(state, PRODUCER_ID, EPOCH, NO_SEQUENCE, 100, time.milliseconds(), COORDINATOR,
                 True)


def test_old_epoch_for_control_record(state, time):
    epoch = 5
    assert state.first_undecided_offset() is None
    append_client(state, PRODUCER_ID, epoch, DEFAULT_SEQUENCE, 99, time.milliseconds(), True)
    with pytest.raises(InvalidProducerEpochError):
        append_end_txn_marker(state, PRODUCER_ID, 3, COMMIT, 100, time.milliseconds())


def test_coordinator_fencing(state, time):
    epoch = 5
    now = time.milliseconds()
    append_client(state, PRODUCER_ID, epoch, DEFAULT_SEQUENCE, 99, now, True)
    append_end_txn_marker(state, PRODUCER_ID, epoch, COMMIT, 100, now, coordinator_epoch=1)
    assert last_entry(state, PRODUCER_ID).coordinator_epoch == 1
    # the current coordinator epoch, then a newer one, are allowed
    append_end_txn_marker(state, PRODUCER_ID, epoch, COMMIT, 101, now, coordinator_epoch=1)
    append_end_txn_marker(state, PRODUCER_ID, epoch, COMMIT, 102, now, coordinator_epoch=2)
    with pytest.raises(TransactionCoordinatorFencedError):
        append_end_txn_marker(state, PRODUCER_ID, epoch, COMMIT, 103, now, coordinator_epoch=1)


def test_coordinator_fenced_after_reload(state, log_dir, time):
    now = time.milliseconds()
    append_client(state, PRODUCER_ID, EPOCH, DEFAULT_SEQUENCE, 99, now, True)
    append_end_txn_marker(state, PRODUCER_ID, EPOCH, COMMIT, 100, now, coordinator_epoch=1)
    state.take_snapshot(101)
    truncate_and_reload(log_dir, 0, 2)
    # As upstream, the marker goes to the first manager (the reload to offset 2 dropped the
    # snapshot at 101). tests/test_producer_state.py fences a reopened log.
    with pytest.raises(TransactionCoordinatorFencedError):
        append_end_txn_marker(state, PRODUCER_ID, EPOCH, COMMIT, 100, now)


def corrupt_latest_snapshot_and_reload(state, log_dir, corrupt):
    append_client(state, PRODUCER_ID, EPOCH, 0, 0, 0)
    state.take_snapshot(1)
    append_client(state, PRODUCER_ID, EPOCH, 1, 1, 0)
    state.take_snapshot(2)
    assert max(snapshot_offsets(log_dir)) == 2
    path = snapshot_path(log_dir, 2)
    with open(path, "r+b") as f:
        corrupt(f)
    # the damaged snapshot is deleted, the previous one loaded
    reloaded = truncate_and_reload(log_dir, 0, 20)
    assert not os.path.exists(path)
    assert reloaded.producers[PRODUCER_ID].last_data_offset == 0


def test_load_from_empty_snapshot_file(state, log_dir):
    corrupt_latest_snapshot_and_reload(state, log_dir, lambda f: f.truncate(0))


def test_load_from_truncated_snapshot_file(state, log_dir):
    def truncate_half(f):
        size = os.fstat(f.fileno()).st_size
        assert size > 2
        f.truncate(size // 2)
    corrupt_latest_snapshot_and_reload(state, log_dir, truncate_half)


def test_load_from_corrupt_snapshot_file(state, log_dir):
    def garbage(f):
        assert os.fstat(f.fileno()).st_size > 2
        f.write(bytes(37))
    corrupt_latest_snapshot_and_reload(state, log_dir, garbage)


def test_append_empty_control_batch(state):
    producer_id, base_offset = 23423, 15
    data = build_batch([], base_offset=base_offset, producer_id=producer_id, producer_epoch=0,
                       transactional=True, is_control=True)
    row = walk_batches(data)[0][0]
    info = state.prepare_update(producer_id, CLIENT)
    # an empty control batch (its transaction cleaned away) starts no transaction
    assert info.append(data, row) is None
    state.update(info)
    assert last_entry(state, producer_id).current_txn_first_offset is None


def remove_strays(state, log_dir, base_offsets):
    for offset in (5, 2, 42):
        open(snapshot_path(log_dir, offset), "wb").close()
    state.remove_stray_snapshots(base_offsets)
    return sorted(snapshot_offsets(log_dir))


def test_remove_stray_snapshots_keep_clean_shutdown_snapshot(state, log_dir):
    # one segment, at 5: 2 is a stray; 42 is one too, but the largest (a clean shutdown's)
    assert remove_strays(state, log_dir, [5]) == [5, 42]


def test_remove_all_stray_snapshots(state, log_dir):
    # one segment, at 42: 2 and 5 are strays below it
    assert remove_strays(state, log_dir, [42]) == [42]


def test_remove_and_mark_snapshot_for_deletion(state, log_dir):
    open(snapshot_path(log_dir, 5), "wb").close()
    assert snapshot_offsets(log_dir) == {5}
    # A deliberate difference: Kafka renames the file to .deleted for an asynchronous
    # delete; kafkalog removes it at once (no reader keeps a snapshot open).
    state.delete_snapshot(5)
    assert snapshot_offsets(log_dir) == set()
    assert os.listdir(log_dir) == []


def test_remove_and_mark_snapshot_for_deletion_already_deleted(state, log_dir):
    path = snapshot_path(log_dir, 5)
    open(path, "wb").close()
    assert snapshot_offsets(log_dir) == {5}
    os.remove(path)
    state.delete_snapshot(5)
    assert snapshot_offsets(log_dir) == set()


test_entry_for_verification = no_api(NO_VERIFICATION)


test_sequence_and_epoch_in_verification_entry = no_api(NO_VERIFICATION)


test_throw_out_of_order_sequence_with_verification_sequence_check = no_api(NO_VERIFICATION)


test_verification_state_entry_expiration = no_api(NO_VERIFICATION)


test_reject_non_zero_sequence_for_transactions_v2_with_empty_state = no_api(NO_VERIFICATION)


test_allow_non_zero_sequence_for_transactions_v1_with_empty_state = no_api(NO_VERIFICATION)


def test_reject_non_zero_sequence_for_direct_epoch_bump(state, time):
    for seq in range(3):
        append_client(state, PRODUCER_ID, EPOCH, seq, seq, time.milliseconds())
    entry = last_entry(state, PRODUCER_ID)
    assert entry.producer_epoch == 0
    assert entry.last_seq == 2
    assert not entry.is_empty

    info = state.prepare_update(PRODUCER_ID, CLIENT)
    with pytest.raises(OutOfOrderSequenceError) as e:
        info.append_data_batch(1, 5, 5, time.milliseconds(), 3, 3, False)
    message = str(e.value)
    assert "invalid sequence number for new epoch" in message.lower()
    assert "1 (request epoch)" in message
    assert "5 (seq. number)" in message
    assert "0 (current producer epoch)" in message

    info = state.prepare_update(PRODUCER_ID, CLIENT)
    info.append_data_batch(1, 0, 0, time.milliseconds(), 3, 3, False)


def begin_transaction(state, producer_id, start_offset, time):
    info = state.prepare_update(producer_id, CLIENT)
    info.append_data_batch(EPOCH, 0, 0, time.milliseconds(), start_offset, start_offset, True)
    state.update(info)


def test_last_stable_offset_completed_txn(state, time):
    pid1, start1 = PRODUCER_ID, 992342
    begin_transaction(state, pid1, start1, time)
    pid2, start2 = PRODUCER_ID + 1, start1 + 25
    begin_transaction(state, pid2, start2, time)
    pid3, start3 = PRODUCER_ID + 2, start1 + 57
    begin_transaction(state, pid3, start3, time)

    last1 = start3 + 15
    txn1 = CompletedTxn(pid1, start1, last1, False)
    assert state.last_stable_offset(txn1) == start2
    state.complete_txn(txn1)
    state.on_high_watermark_updated(last1 + 1)
    assert state.first_unstable_offset() == start2

    last3 = last1 + 20
    txn3 = CompletedTxn(pid3, start3, last3, False)
    assert state.last_stable_offset(txn3) == start2
    state.complete_txn(txn3)
    state.on_high_watermark_updated(last3 + 1)
    assert state.first_unstable_offset() == start2

    last2 = last3 + 78
    txn2 = CompletedTxn(pid2, start2, last2, False)
    assert state.last_stable_offset(txn2) == last2 + 1
    state.complete_txn(txn2)
    state.on_high_watermark_updated(last2 + 1)
    assert state.first_unstable_offset() is None


def test_skip_empty_transactions(state, time):
    seq = [DEFAULT_SEQUENCE]

    def append_data(start_offset, end_offset, info):
        first = seq[0]
        seq[0] += end_offset - start_offset
        info.append_data_batch(EPOCH, first, seq[0], time.milliseconds(), start_offset,
                               end_offset, True)
        seq[0] += 1

    def end_transaction(control_type, offset, info):
        return info.append_end_txn_marker(control_type, 27, EPOCH, offset, time.milliseconds())

    first_append = state.prepare_update(PRODUCER_ID, CLIENT)
    append_data(16, 20, first_append)
    assert first_append.started_transactions == [16]
    state.update(first_append)
    state.on_high_watermark_updated(21)
    assert state.first_unstable_offset() == 16

    # one append: the old transaction completes, empty transactions, one complete transaction
    # with data and one left open
    second_append = state.prepare_update(PRODUCER_ID, CLIENT)
    first_completed = end_transaction(COMMIT, 21, second_append)
    assert first_completed == CompletedTxn(PRODUCER_ID, 16, 21, False)
    assert end_transaction(COMMIT, 22, second_append) is None
    assert end_transaction(ABORT, 23, second_append) is None
    append_data(24, 27, second_append)
    second_completed = end_transaction(ABORT, 28, second_append)
    assert second_completed is not None
    assert end_transaction(ABORT, 29, second_append) is None
    append_data(30, 31, second_append)

    assert second_append.started_transactions == [24, 30]
    state.update(second_append)
    state.complete_txn(first_completed)
    state.complete_txn(second_completed)
    state.on_high_watermark_updated(32)
    assert state.first_unstable_offset() == 30


def test_read_write_snapshot(log_dir):
    expected = {
        1: ProducerStateEntry(1, 2, 3, NO_TIMESTAMP, 100,
                              [BatchMetadata(1, 2, 3, NO_TIMESTAMP)]),
        11: ProducerStateEntry(11, 12, 13, 123456, None, []),
    }
    path = os.path.join(log_dir, "testReadWriteSnapshot")
    write_snapshot(path, [e.to_snapshot() for e in expected.values()])
    entries = [ProducerStateEntry.from_snapshot(ProducerSnapshotEntry(*map(int, row)))
               for row in read_snapshot(path)]
    assert {e.producer_id: e for e in entries} == expected
