# Port of apache/kafka storage/src/test/java/org/apache/kafka/storage/internals/log/TransactionIndexTest.java (commit 175db0add24872199be6a50f988c863d841e4175)
"""Kafka's TransactionIndexTest cases, run against ``kafkalog.transaction_index``: one test per
upstream test, with its inputs and expected values. kafkalog opens the file for each append
or read (nothing to close, no channel to interrupt), so the upstream tests of a closed or
interrupted channel check that appends and reads go on working after ``close()``."""
import os

import pytest

from kafkalog.errors import CorruptIndexError, InvalidOffsetError
from kafkalog.transaction_index import AbortedTxn, TransactionIndex

from ported import no_api

FOUR = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25),
        AbortedTxn(3, 32, 50, 40)]


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "00000000000000000000.txnindex"
    p.touch()                 # upstream's index is over a temp file that exists
    return str(p)


@pytest.fixture
def index(path):
    idx = TransactionIndex(path, 0)
    yield idx
    idx.close()


def test_position_set_correctly_when_opened(index, path):
    txns = list(FOUR)
    for txn in txns:
        index.append(txn)
    index.close()
    reopened = TransactionIndex(path, 0)
    another = AbortedTxn(3, 50, 60, 55)
    reopened.append(another)
    txns.append(another)
    assert reopened.all_aborted_txns() == txns


def test_sanity_check(index, path):
    for txn in FOUR:
        index.append(txn)
    index.close()
    # another base offset fakes invalid data
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, 100).sanity_check()


def test_last_offset_must_increase(index):
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(InvalidOffsetError):
        index.append(AbortedTxn(0, 0, 15, 11))


def test_last_offset_cannot_decrease(index):
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(InvalidOffsetError):
        index.append(AbortedTxn(0, 0, 10, 11))


def test_collect_aborted_transactions(index):
    for txn in FOUR:
        index.append(txn)
    result = index.collect_aborted_txns(0, 100)
    assert result.aborted_transactions == FOUR
    assert not result.is_complete
    result = index.collect_aborted_txns(0, 32)
    assert result.aborted_transactions == FOUR[:3]
    assert result.is_complete
    result = index.collect_aborted_txns(0, 35)
    assert result.aborted_transactions == FOUR
    assert result.is_complete
    result = index.collect_aborted_txns(10, 35)
    assert result.aborted_transactions == FOUR
    assert result.is_complete
    result = index.collect_aborted_txns(11, 35)
    assert result.aborted_transactions == FOUR[1:4]
    assert result.is_complete
    result = index.collect_aborted_txns(20, 41)
    assert result.aborted_transactions == FOUR[2:4]
    assert not result.is_complete


def test_truncate(index):
    txns = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25),
            AbortedTxn(3, 32, 50, 40)]
    for txn in txns:
        index.append(txn)
    index.truncate_to(51)
    assert index.collect_aborted_txns(0, 100).aborted_transactions == txns
    index.truncate_to(50)
    assert index.collect_aborted_txns(0, 100).aborted_transactions == txns[:3]
    index.reset()
    assert index.collect_aborted_txns(0, 100).aborted_transactions == []


def test_aborted_txn_serde(index):
    pid, first, last, lso = 983493, 137, 299, 200
    txn = AbortedTxn(pid, first, last, lso)
    assert (txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset) == \
        (pid, first, last, lso)
    # the entry's bytes: version 0 (AbortedTxn.CURRENT_VERSION), then the four fields
    index.append(txn)
    entry = index.entries_array()[0]
    assert int(entry["version"]) == 0
    assert index.all_aborted_txns() == [txn]


def test_rename_index(index, tmp_path):
    renamed = str(tmp_path / "renamed")
    index.append(AbortedTxn(0, 0, 10, 2))
    index.rename_to(renamed)
    index.append(AbortedTxn(1, 5, 15, 16))
    txns = index.collect_aborted_txns(0, 100).aborted_transactions
    assert len(txns) == 2
    assert txns[0].first_offset == 0
    assert txns[1].first_offset == 5
    assert os.path.getsize(renamed) == 2 * 34


test_update_parent_dir = no_api(
    "kafkalog's TransactionIndex has no updateParentDir: a moved log is "
    "reopened (LogManager.move_log)")


def test_flush(tmp_path):
    path = str(tmp_path / "absent.txnindex")
    index = TransactionIndex(path, 0)
    index.flush()
    index.append(AbortedTxn(0, 0, 10, 2))
    index.flush()
    assert os.path.getsize(path) != 0


test_delete_if_exists = no_api(
    "kafkalog's TransactionIndex has no deleteIfExists: LogSegment "
    "deletes a segment's files together")


def test_is_empty_when_file_does_not_exist(tmp_path):
    assert TransactionIndex(str(tmp_path / "absent.txnindex"), 0).all_aborted_txns() == []


def test_is_empty_when_file_is_empty(index):
    assert index.all_aborted_txns() == []


def test_is_empty_when_file_is_not_empty(index):
    index.append(AbortedTxn(0, 0, 10, 2))
    assert index.all_aborted_txns() != []


def test_do_not_create_file_until_needed(path):
    os.remove(path)
    index = TransactionIndex(path, 0)
    assert not os.path.exists(path)
    index.reset()
    assert not os.path.exists(path)
    index.flush()
    assert not os.path.exists(path)
    index.append(AbortedTxn(0, 0, 10, 2))
    assert os.path.exists(path)


def test_append_and_collect_after_close(index):
    index.close()
    index.append(AbortedTxn(0, 0, 10, 2))
    index.append(AbortedTxn(1, 5, 15, 16))
    index.close()
    txns = index.collect_aborted_txns(0, 100).aborted_transactions
    assert len(txns) == 2
    assert (txns[0].first_offset, txns[1].first_offset) == (0, 5)


test_append_and_collect_after_interrupted = no_api(
    "kafkalog holds no open channel a thread interrupt could close "
    "(each append and read opens the file)")
