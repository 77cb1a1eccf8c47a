"""The scenarios of Kafka's OffsetIndexTest, TimeIndexTest and TransactionIndexTest."""
import os
import random

import numpy as np
import pytest

from kafkalog import AbortedTxn, OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset, \
    TransactionIndex
from kafkalog.errors import (
    CorruptIndexError, IndexFullError, IndexOffsetOverflowError, InvalidOffsetError,
    InvalidTimestampError,
)
from kafkalog.index import ALLOCATION_WINDOW

from conftest import FIXTURES, expected

BASE = 45


@pytest.fixture
def idx(tmp_path):
    index = OffsetIndex(tmp_path / "00000000000000000045.index", BASE, max_index_size=30 * 8)
    yield index
    index.close_handler()


def random_entries(n, seed=1):
    rng = random.Random(seed)
    offsets = sorted(rng.sample(range(BASE + 1, BASE + 100 * n), n))
    positions = sorted(rng.sample(range(1, 1000 * n), n))
    return list(zip(offsets, positions))


# --- OffsetIndexTest --------------------------------------------------------------------------

def test_random_lookup_test(idx):
    assert idx.lookup(92) == OffsetPosition(BASE, 0)    # empty index
    entries = random_entries(idx.max_entries)
    for o, p in entries:
        idx.append(o, p)
    rng = random.Random(2)
    for _ in range(200):
        target = rng.randint(0, BASE + 100 * len(entries))
        below = [e for e in entries if e[0] <= target]
        assert idx.lookup(target) == (OffsetPosition(*below[-1]) if below
                                      else OffsetPosition(BASE, 0))


def test_lookup_extreme_cases(idx):
    assert idx.lookup(idx.base_offset) == OffsetPosition(BASE, 0)
    for i in range(idx.max_entries):
        idx.append(BASE + 1 + i, i * 10)
    assert idx.lookup(BASE + 1) == OffsetPosition(BASE + 1, 0)
    last = idx.entry(idx.entries - 1)
    assert idx.lookup(last.offset) == last and idx.lookup(last.offset + 1000) == last


def test_entry_and_entry_overflow(idx):
    idx.append(BASE + 10, 100)
    assert idx.entry(0) == OffsetPosition(BASE + 10, 100)
    with pytest.raises(IndexError):
        idx.entry(1)


def test_append_too_many(idx):
    for i in range(idx.max_entries):
        idx.append(BASE + 1 + i, i)
    assert idx.is_full()
    with pytest.raises(IndexFullError):
        idx.append(BASE + 1000, 1000)


def test_append_out_of_order(idx):
    idx.append(BASE + 51, 0)
    with pytest.raises(InvalidOffsetError):
        idx.append(BASE + 50, 1)
    with pytest.raises(InvalidOffsetError):
        idx.append(BASE + 51, 1)


def test_offset_overflow(idx):
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(BASE + 2**31, 1)


def test_fetch_upper_bound_offset(idx):
    first, second, third = OffsetPosition(BASE, 0), OffsetPosition(BASE + 1, 1000), \
        OffsetPosition(BASE + 3, 2000)
    fourth = OffsetPosition(BASE + 5, 3000)
    for e in (first, second, third, fourth):
        idx.append(*e)
    assert idx.fetch_upper_bound_offset(first, 200) == second
    assert idx.fetch_upper_bound_offset(first, 2000) == third
    assert idx.fetch_upper_bound_offset(second, 1000) == third
    assert idx.fetch_upper_bound_offset(second, 2000) == fourth
    assert idx.fetch_upper_bound_offset(third, 1000) == fourth
    assert idx.fetch_upper_bound_offset(third, 1100) is None
    assert idx.fetch_upper_bound_offset(fourth, 0) == fourth
    assert idx.fetch_upper_bound_offset(fourth, 1) is None


def test_reopen(tmp_path):
    path = tmp_path / "00000000000000000045.index"
    first = OffsetIndex(path, BASE, max_index_size=30 * 8)
    entries = random_entries(10)
    for o, p in entries:
        first.append(o, p)
    first.close()
    assert os.path.getsize(path) == 80            # trimmed at close
    second = OffsetIndex(path, BASE, max_index_size=30 * 8)
    assert second.entries == 10 and second.last_offset == entries[-1][0]
    assert second.lookup(entries[3][0]) == OffsetPosition(*entries[3])
    assert second.is_full()               # a trimmed index reopens full, as in Kafka
    second.resize(30 * 8)
    with pytest.raises(InvalidOffsetError):
        second.append(entries[-1][0], 1)
    second.append(entries[-1][0] + 1, entries[-1][1] + 1)
    second.close_handler()


def test_truncate(tmp_path):
    idx = OffsetIndex(tmp_path / "00000000000000000000.index", 0, max_index_size=10 * 8)
    for i in range(1, 10):
        idx.append(i, i)
    idx.truncate_to(12)
    assert idx.lookup(10) == OffsetPosition(9, 9)
    idx.truncate_to(10)
    assert idx.lookup(10) == OffsetPosition(9, 9)
    idx.truncate_to(9)
    assert idx.lookup(10) == OffsetPosition(8, 8) and idx.last_offset == 8
    idx.truncate_to(5)
    assert idx.lookup(10) == OffsetPosition(4, 4) and idx.entries == 4
    idx.truncate_to(0)
    assert idx.lookup(10) == OffsetPosition(0, 0) and idx.entries == 0
    idx.append(0, 0)         # appends work again after a full truncation
    idx.close_handler()


def test_force_unmap_and_resize(idx):
    idx.append(BASE + 1, 10)
    assert idx.resize(100 * 8) and idx.max_entries == 100 and idx.entries == 1
    assert idx.lookup(BASE + 1) == OffsetPosition(BASE + 1, 10)
    assert not idx.resize(100 * 8 + 3)         # rounds down to whole entries
    idx.trim_to_valid_size()
    assert idx.length == 8 and idx.is_full()
    idx.reset()
    assert idx.entries == 0 and idx.length == 30 * 8


def test_a_search_during_a_resize_sees_the_old_or_the_new_mapping(idx, monkeypatch):
    # A reader's thread searches while the writer's roll trims the index: between dropping
    # the old mapping and making the new one it found no bytes for its entries (ValueError).
    import kafkalog.abstract_index as abstract_index
    for e in ((BASE + 1, 10), (BASE + 3, 20), (BASE + 5, 30)):
        idx.append(*e)
    found = []
    real = abstract_index.FileMapping

    def search_then_map(*args):
        found.append(idx.fetch_upper_bound_offset(10, 5))
        return real(*args)
    monkeypatch.setattr(abstract_index, "FileMapping", search_then_map)
    idx.trim_to_valid_size()
    assert found == [OffsetPosition(BASE + 3, 20)] and idx.length == 3 * 8


def test_sanity_check(tmp_path, idx):
    import struct
    idx.append(BASE + 10, 10)
    idx.sanity_check()
    idx.close()
    # a last entry whose offset is below the base offset (a negative relative offset)
    negative = tmp_path / "00000000000000000100.index"
    negative.write_bytes(struct.pack(">ii", 3, 10) + struct.pack(">ii", -5, 20))
    broken = OffsetIndex(negative, 100)
    with pytest.raises(CorruptIndexError):
        broken.sanity_check()
    broken.close_handler()
    odd = tmp_path / "00000000000000000000.index"
    odd.write_bytes(b"\0" * 13)
    broken = OffsetIndex(odd, 0)
    with pytest.raises(CorruptIndexError):
        broken.sanity_check()
    broken.close_handler()


def test_last_offset_equal_to_base_is_legal(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(b"\0" * 16)     # two all-zero entries: last offset == base offset
    idx = OffsetIndex(path, 0)
    idx.sanity_check()
    assert idx.entries == 2 and idx.valid_entries() == 0
    idx.close_handler()


def test_read_only_open_does_not_change_file():
    src = FIXTURES / "crashed-0" / "00000000000000000612.index"
    before = os.path.getsize(src)
    idx = OffsetIndex(src, 612, writable=False)
    assert idx.entries == before // 8 and idx.valid_entries() == 0
    exp = expected(FIXTURES / "crashed-0")["segments"][-1]["offset_index"]
    assert idx.entries == exp["entries_count"]
    assert idx.entries - idx.valid_entries() == exp["zero_tail_entries"]
    with pytest.raises(PermissionError):
        idx.append(700, 1) if not idx.is_full() else idx.resize(8)
    idx.close()
    assert os.path.getsize(src) == before


def test_new_index_is_sized_sparse_and_allocated_ahead_of_its_entries(tmp_path):
    """Sized like Kafka's (``setLength``: sparse); blocks only under the entries and a window
    beyond (the full disk guarantee: allocated before an entry is stored)."""
    idx = OffsetIndex(tmp_path / "00000000000000000000.index", 0)
    assert os.path.getsize(idx.path) == 10 * 1024 * 1024 and idx.entries == 0
    assert os.stat(idx.path).st_blocks == 0
    idx.append(3, 4096)
    assert 0 < os.stat(idx.path).st_blocks * 512 <= ALLOCATION_WINDOW + 4096
    idx.append_many(np.arange(4, 20_004), np.arange(4, 20_004) * 100)
    assert idx.entries * 8 <= os.stat(idx.path).st_blocks * 512 <= \
        idx.entries * 8 + ALLOCATION_WINDOW + 4096
    idx.close()
    assert os.path.getsize(idx.path) == idx.entries * 8
    again = OffsetIndex(idx.path, 0)            # reopened: the entries, and not past them
    assert again.entries == 20_001 and again.valid_entries() == 20_001
    again.resize(10 * 1024 * 1024)              # grown sparse: the same blocks
    assert os.stat(idx.path).st_blocks * 512 <= 20_001 * 8 + 4096
    assert again.drop_zero_tail() == 0 and again.entries == 20_001
    again.close()


def test_lookup_many_matches_lookup(idx):
    for o, p in random_entries(idx.max_entries, seed=5):
        idx.append(o, p)
    targets = np.arange(0, BASE + 100 * idx.max_entries, 7)
    offsets, positions = idx.lookup_many(targets)
    assert [(int(o), int(p)) for o, p in zip(offsets, positions)] == \
        [tuple(idx.lookup(int(t))) for t in targets]


def test_fixture_offset_indexes_match_kafka():
    for seg in expected(FIXTURES / "multiseg-0")["segments"]:
        path = FIXTURES / "multiseg-0" / seg["offset_index"]["file"]
        idx = OffsetIndex(path, seg["base_offset"], writable=False)
        idx.sanity_check()
        offsets, positions = idx.entries_array()
        assert [[int(o), int(p)] for o, p in zip(offsets, positions)] == \
            seg["offset_index"]["entries"]
        idx.close()


# --- TimeIndexTest ----------------------------------------------------------------------------

@pytest.fixture
def tidx(tmp_path):
    index = TimeIndex(tmp_path / "00000000000000000045.timeindex", BASE, max_index_size=30 * 12)
    yield index
    index.close_handler()


def test_time_lookup(tidx):
    assert tidx.lookup(100) == TimestampOffset(-1, BASE)
    for i in range(1, tidx.max_entries):
        tidx.maybe_append(i * 10, i * 10 + BASE)
    assert tidx.lookup(100) == TimestampOffset(100, 100 + BASE)
    assert tidx.lookup(105) == TimestampOffset(100, 100 + BASE)
    assert tidx.lookup(9) == TimestampOffset(-1, BASE)
    assert tidx.lookup(10**9) == tidx.last_entry


def test_time_entry_overflow_and_full(tidx):
    for i in range(1, tidx.max_entries):
        tidx.maybe_append(i, i + BASE)
    assert tidx.is_full() and tidx.entries == tidx.max_entries - 1
    with pytest.raises(IndexFullError):
        tidx.maybe_append(10**6, 10**6)
    tidx.maybe_append(10**6, 10**6, skip_full_check=True)   # the slot kept for the roll
    assert tidx.entries == tidx.max_entries


def test_time_append_rules(tidx):
    tidx.maybe_append(10000, 1 + BASE)
    with pytest.raises(InvalidOffsetError):
        tidx.maybe_append(10001, BASE)
    with pytest.raises(InvalidTimestampError):
        tidx.maybe_append(9999, 2 + BASE)
    tidx.maybe_append(10000, 2 + BASE)          # same timestamp: nothing is written
    assert tidx.entries == 1
    tidx.maybe_append(10001, 2 + BASE)
    assert tidx.entries == 2


def test_time_truncate(tidx):
    for i in range(1, 10):
        tidx.maybe_append(i * 10, i + BASE)
    tidx.truncate_to(5 + BASE)
    assert tidx.entries == 4 and tidx.last_entry == TimestampOffset(40, 4 + BASE)
    tidx.truncate_to(BASE)
    assert tidx.entries == 0 and tidx.last_entry == TimestampOffset(-1, BASE)


def test_time_sanity_check(tmp_path):
    import struct
    path = tmp_path / "00000000000000000000.timeindex"
    path.write_bytes(struct.pack(">qi", 100, 1) + struct.pack(">qi", 50, 2))
    bad = TimeIndex(path, 0)
    with pytest.raises(CorruptIndexError):
        bad.sanity_check()
    bad.close_handler()
    path.write_bytes(struct.pack(">qi", 100, -1))
    bad = TimeIndex(path, 0)
    with pytest.raises(CorruptIndexError):
        bad.sanity_check()
    bad.close_handler()
    path.write_bytes(b"\0" * 13)
    bad = TimeIndex(path, 0)
    with pytest.raises(CorruptIndexError):
        bad.sanity_check()
    bad.close_handler()


def test_time_index_preallocated_size(tmp_path):
    t = TimeIndex(tmp_path / "00000000000000000000.timeindex", 0)
    assert t.length == 10485756
    t.close()
    assert os.path.getsize(t.path) == 0


def test_time_lookup_many_matches_lookup(tidx):
    for i in range(1, 20):
        tidx.maybe_append(i * 10, i * 2 + BASE)
    targets = np.arange(-5, 250, 3)
    ts, offs = tidx.lookup_many(targets)
    assert [(int(a), int(b)) for a, b in zip(ts, offs)] == \
        [tuple(tidx.lookup(int(t))) for t in targets]


def test_fixture_time_indexes_match_kafka():
    for seg in expected(FIXTURES / "gzip-0")["segments"]:
        path = FIXTURES / "gzip-0" / seg["time_index"]["file"]
        t = TimeIndex(path, seg["base_offset"], writable=False)
        t.sanity_check()
        assert list(t.last_entry) == seg["time_index"]["last_entry"]
        ts, offs = t.entries_array()
        assert [[int(a), int(b)] for a, b in zip(ts, offs)] == seg["time_index"]["entries"]
        t.close()


# --- TransactionIndexTest ---------------------------------------------------------------------

@pytest.fixture
def txn(tmp_path):
    return TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)


def test_positional_write_and_read(txn):
    txns = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(0, 18, 35, 25),
            AbortedTxn(1, 30, 60, 40)]
    for t in txns:
        txn.append(t)
    assert txn.all_aborted_txns() == txns
    assert txn.collect_aborted_txns(0, 100).aborted_transactions == txns
    assert txn.collect_aborted_txns(0, 32).aborted_transactions == txns


def test_sanity_check_txn(tmp_path):
    t = TransactionIndex(tmp_path / "00000000000000000040.txnindex", 40)
    t.append(AbortedTxn(0, 0, 10, 11))
    with pytest.raises(CorruptIndexError):
        t.sanity_check()


def test_last_offset_must_increase(txn):
    txn.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(InvalidOffsetError):
        txn.append(AbortedTxn(0, 0, 15, 11))
    with pytest.raises(InvalidOffsetError):
        txn.append(AbortedTxn(0, 0, 14, 11))


def test_collect_aborted_transactions(txn):
    txns = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(0, 18, 35, 25),
            AbortedTxn(1, 30, 60, 40)]
    for t in txns:
        txn.append(t)
    r = txn.collect_aborted_txns(0, 11)      # the first entry's LSO already reaches 11
    assert r.aborted_transactions == txns[:1] and r.is_complete
    r = txn.collect_aborted_txns(0, 15)
    assert r.aborted_transactions == txns[:2] and r.is_complete
    r = txn.collect_aborted_txns(16, 30)
    assert r.aborted_transactions == [txns[2]] and r.is_complete
    r = txn.collect_aborted_txns(36, 100)
    assert r.aborted_transactions == [txns[3]] and not r.is_complete


def test_truncate_txn(txn):
    txns = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(0, 18, 35, 25)]
    for t in txns:
        txn.append(t)
    txn.truncate_to(50)
    assert txn.all_aborted_txns() == txns
    txn.truncate_to(35)
    assert txn.all_aborted_txns() == txns[:2]
    txn.truncate_to(10)
    assert txn.all_aborted_txns() == []
    txn.append(AbortedTxn(0, 0, 5, 2))     # last offset restarts after truncation
    assert os.path.getsize(txn.path) == 34


def test_corrupt_txn_index_length_and_version(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(b"\0" * 35)
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, 0).all_aborted_txns()
    path.write_bytes(b"\0\1" + b"\0" * 32)
    with pytest.raises(CorruptIndexError):
        TransactionIndex(path, 0).sanity_check()


def test_fixture_txn_indexes_match_kafka(tmp_path):
    exp = expected(FIXTURES / "txn-0")
    for seg in exp["segments"]:
        if seg["txn_index"] is None:
            continue
        src = FIXTURES / "txn-0" / seg["txn_index"]["file"]
        t = TransactionIndex(src, seg["base_offset"])
        t.sanity_check()
        assert [dict(version=0, producer_id=a.producer_id, first_offset=a.first_offset,
                     last_offset=a.last_offset, last_stable_offset=a.last_stable_offset)
                for a in t.all_aborted_txns()] == seg["txn_index"]["entries"]
        # rewriting the same entries reproduces the file byte for byte
        copy = TransactionIndex(tmp_path / src.name, seg["base_offset"])
        for a in t.all_aborted_txns():
            copy.append(a)
        assert (tmp_path / src.name).read_bytes() == src.read_bytes()
