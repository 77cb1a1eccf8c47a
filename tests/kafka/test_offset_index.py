# Port of apache/kafka storage/src/test/java/org/apache/kafka/storage/internals/log/OffsetIndexTest.java (commit 1eb7644349cb07139d6a3c1ad1986979647cac99)
"""Kafka's OffsetIndexTest cases, run against ``kafkalog.offset_index``: one test per upstream
test, with its inputs and expected values, in both kernel modes (lookups are kernels).

Deliberate differences: kafkalog raises its own exception types where Kafka raises
``IllegalArgumentException`` (an entry past the end: ``IndexError``; a full index:
``IndexFullError``). The random lookup test draws its
offsets from a seeded generator, so a failure can be replayed."""
import bisect
import random

import pytest

from kafkalog.errors import IndexFullError, InvalidOffsetError
from kafkalog.offset_index import OffsetIndex, OffsetPosition

from ported import no_api
from ported import _kernel_mode_fixture  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("kernel_mode")

BASE_OFFSET = 45


@pytest.fixture
def index(tmp_path):
    idx = OffsetIndex(str(tmp_path / "absent.index"), BASE_OFFSET, 30 * 8)
    yield idx
    idx.close()


def monotonic_seq(rng, base, length):
    seq, last = [], base
    for _ in range(length):
        last += rng.randint(1, 15)
        seq.append(last)
    return seq


def test_random_lookup(index):
    rng = random.Random(29)
    assert index.lookup(92) == OffsetPosition(index.base_offset, 0)   # nothing there: position 0
    offsets = monotonic_seq(rng, index.base_offset + 1, index.max_entries)
    positions = monotonic_seq(rng, 0, index.max_entries)
    for offset, position in zip(offsets, positions):
        index.append(offset, position)
    for offset, position in zip(offsets, positions):
        assert index.lookup(offset) == OffsetPosition(offset, position)
    # an absent offset finds the largest entry at or below it
    for target in rng.sample(range(index.base_offset, offsets[-1]), 30):
        floor = bisect.bisect_right(offsets, target) - 1
        want = (OffsetPosition(index.base_offset, 0) if floor < 0
                else OffsetPosition(offsets[floor], positions[floor]))
        assert index.lookup(target) == want


def test_lookup_extreme_cases(index):
    base, n = index.base_offset, index.max_entries
    assert index.lookup(base) == OffsetPosition(base, 0)      # an empty index
    for i in range(n):
        index.append(base + i + 1, i)
    assert index.lookup(base) == OffsetPosition(base, 0)
    assert index.lookup(base + n) == OffsetPosition(base + n, n - 1)


def test_entry(index):
    for i in range(index.max_entries):
        index.append(index.base_offset + i, i)
    for i in range(index.max_entries):
        assert index.entry(i) == OffsetPosition(index.base_offset + i, i)


def test_entry_overflow(index):
    with pytest.raises(IndexError):
        index.entry(0)


def test_append_too_many(index):
    for i in range(index.max_entries):
        index.append(index.base_offset + i + 1, i)
    with pytest.raises(IndexFullError):
        index.append(index.max_entries + 1, 1)


def test_append_out_of_order(index):
    index.append(51, 0)
    with pytest.raises(InvalidOffsetError):
        index.append(50, 1)


def test_fetch_upper_bound_offset(index):
    first = OffsetPosition(BASE_OFFSET, 0)
    second = OffsetPosition(BASE_OFFSET + 1, 10)
    third = OffsetPosition(BASE_OFFSET + 2, 23)
    fourth = OffsetPosition(BASE_OFFSET + 3, 37)
    assert index.fetch_upper_bound_offset(first, 5) is None
    for entry in (first, second, third, fourth):
        index.append(entry.offset, entry.position)
    cases = [(first, 5, second), (first, 10, second), (first, 23, third), (first, 22, third),
             (second, 24, fourth), (fourth, 1, None), (first, 200, None), (second, 200, None)]
    assert [index.fetch_upper_bound_offset(start, size) for start, size, _ in cases] == \
        [want for _, _, want in cases]


def test_reopen(index):
    first, sec = OffsetPosition(51, 0), OffsetPosition(52, 1)
    index.append(*first)
    index.append(*sec)
    index.close()
    # reopened at its file's size (two entries, trimmed at close): full
    reopened = OffsetIndex(index.path, index.base_offset)
    assert reopened.lookup(first.offset) == first
    assert reopened.lookup(sec.offset) == sec
    assert reopened.last_offset == sec.offset
    assert reopened.entries == 2
    with pytest.raises(IndexFullError):
        reopened.append(53, 1)
    reopened.close()


def test_truncate(tmp_path):
    with OffsetIndex(str(tmp_path / "absent.index"), 0, 10 * 8) as idx:
        idx.truncate()
        for i in range(1, 10):
            idx.append(i, i)
        # the last offset after each truncation point, and appends go on working
        idx.truncate_to(12)                       # past the end: unchanged
        assert idx.lookup(10) == OffsetPosition(9, 9)
        assert idx.last_offset == 9
        idx.append(10, 10)
        idx.truncate_to(10)                       # at the end: back to 9
        assert idx.lookup(10) == OffsetPosition(9, 9)
        assert idx.last_offset == 9
        idx.append(10, 10)
        idx.truncate_to(9)
        assert idx.lookup(10) == OffsetPosition(8, 8)
        assert idx.last_offset == 8
        idx.append(9, 9)
        idx.truncate_to(5)
        assert idx.lookup(10) == OffsetPosition(4, 4)
        assert idx.last_offset == 4
        idx.append(5, 5)
        idx.truncate()
        assert idx.entries == 0


test_force_unmap = no_api(
    "kafkalog has no forceUnmap that leaves a null mapping behind; close_handler() releases "
    "the mapping, after which a lookup raises ValueError and close() is a no-op")


def test_sanity_last_offset_equal_to_base_offset(tmp_path):
    with OffsetIndex(str(tmp_path / "absent.index"), 20, 10 * 8) as idx:
        idx.append(20, 0)
        idx.sanity_check()
