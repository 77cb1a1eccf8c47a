"""Producer state: Kafka's idempotence checks, transactions and snapshots, and the txn-0
reproduction (a kafkalog log fed txn-0's batches writes Kafka's txn indexes and snapshots)."""
import os

import pytest

from kafkalog import Record, build_batch, build_control_batch
from kafkalog._kernels import walk_batches
from kafkalog.dump import dump_snapshot
from kafkalog.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from kafkalog.log import Log
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
    assert (entry.coordinator_epoch, entry.timestamp, entry.current_txn_first_offset) == \
        (4, 777, -1)
    log.close()
