# Port of apache/kafka storage/src/test/java/org/apache/kafka/storage/internals/log/TimeIndexTest.java (commit 1eb7644349cb07139d6a3c1ad1986979647cac99)
"""Kafka's TimeIndexTest cases, run against ``kafkalog.time_index``: one test per upstream
test, with its inputs and expected values, in both kernel modes (lookups are kernels).

Deliberate differences: an entry past the end raises ``IndexError`` and a full index
``IndexFullError`` (Kafka: ``IllegalArgumentException``). Upstream's sanity test overrides
``lastEntry``/``length`` in a subclass to fake corruption; here the file itself is corrupted
the same three ways and reopened, which is what ``sanity_check`` is for."""
import struct
from pathlib import Path

import pytest

from kafkalog.errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from kafkalog.time_index import TimeIndex, TimestampOffset

from ported import _kernel_mode_fixture  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("kernel_mode")

MAX_ENTRIES = 30
BASE_OFFSET = 45
NO_TIMESTAMP = -1


@pytest.fixture
def idx(tmp_path):
    index = TimeIndex(str(tmp_path / "absent.timeindex"), BASE_OFFSET, MAX_ENTRIES * 12)
    yield index
    index.close()


def append_entries(idx, n):
    for i in range(1, n + 1):
        idx.maybe_append(i * 10, i * 10 + BASE_OFFSET)


def test_look_up(idx):
    assert idx.lookup(100) == TimestampOffset(-1, BASE_OFFSET)    # an empty index
    append_entries(idx, MAX_ENTRIES - 1)
    assert idx.lookup(9) == TimestampOffset(-1, BASE_OFFSET)      # before the first entry
    assert idx.lookup(25) == TimestampOffset(20, 65)              # between two entries
    assert idx.lookup(30) == TimestampOffset(30, 75)              # on an entry


def test_entry(idx):
    append_entries(idx, MAX_ENTRIES - 1)
    assert idx.entry(0) == TimestampOffset(10, 55)
    assert idx.entry(1) == TimestampOffset(20, 65)
    assert idx.entry(2) == TimestampOffset(30, 75)
    assert idx.entry(3) == TimestampOffset(40, 85)


def test_entry_overflow(idx):
    with pytest.raises(IndexError):
        idx.entry(0)


def test_truncate(idx):
    append_entries(idx, MAX_ENTRIES - 1)
    idx.truncate()
    assert idx.entries == 0
    append_entries(idx, MAX_ENTRIES - 1)
    idx.truncate_to(10 + BASE_OFFSET)
    assert idx.entries == 0


def test_append(idx):
    append_entries(idx, MAX_ENTRIES - 1)
    with pytest.raises(IndexFullError):
        idx.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(10000, (MAX_ENTRIES - 2) * 10, skip_full_check=True)
    idx.maybe_append(10000, 1000, skip_full_check=True)


def _corrupted_copy(path, tmp_path, name, mutate):
    data = bytearray(Path(path).read_bytes())
    mutate(data)
    copy = tmp_path / name
    copy.write_bytes(bytes(data))
    return TimeIndex(str(copy), BASE_OFFSET, writable=False)


def test_sanity_check(idx, tmp_path):
    idx.sanity_check()
    append_entries(idx, 5)
    first = idx.entry(0)
    idx.sanity_check()
    idx.close()
    last = 4 * 12

    def offset_below_base(data):
        struct.pack_into(">i", data, last + 8, -1)

    def timestamp_below_first(data):
        struct.pack_into(">q", data, last, first.timestamp - 1)

    def length_not_whole_entries(data):
        del data[-1]

    for mutate in (offset_below_base, timestamp_below_first, length_not_whole_entries):
        with pytest.raises(CorruptIndexError):
            _corrupted_copy(idx.path, tmp_path, mutate.__name__, mutate).sanity_check()
    TimeIndex(idx.path, BASE_OFFSET, writable=False).sanity_check()


def test_is_full(idx):
    assert not idx.is_full()
    append_entries(idx, MAX_ENTRIES - 1)
    assert idx.is_full()


def test_last_entry(idx):
    assert idx.last_entry == TimestampOffset(NO_TIMESTAMP, BASE_OFFSET)
    idx.maybe_append(1, 1 + BASE_OFFSET)
    assert idx.last_entry == TimestampOffset(1, BASE_OFFSET + 1)


def test_resize(idx):
    assert not idx.resize(MAX_ENTRIES * idx.entry_size)
    assert idx.resize(MAX_ENTRIES // 2 * idx.entry_size)
    assert idx.resize(MAX_ENTRIES * 2 * idx.entry_size)


def test_entry_size(idx):
    assert idx.entry_size == 12


def test_parse_entry(idx):
    # upstream parses slot 0 of the mapped buffer; kafkalog's parse of a slot is entry(n)
    idx.maybe_append(1, 1 + BASE_OFFSET)
    assert idx.entry(0) == TimestampOffset(1, BASE_OFFSET + 1)
    assert idx.key_values()[0].tolist() == [1]
