# Port of apache/kafka storage/src/test/java/org/apache/kafka/storage/internals/log/LogSegmentTest.java (commit 1eb7644349cb07139d6a3c1ad1986979647cac99)
"""Kafka's LogSegmentTest cases, run against ``kafkalog.segment.LogSegment``: one test per
upstream test, with its inputs and expected values, in both kernel modes.

Upstream's ``records(offset, ...)`` is a magic-1 message set with one timestamp, offset * 10,
for every record; ``records_of`` builds the same with ``build_batch``. Records are given to
``build_batch`` as dicts: a ``Record`` imported here would be the compiled kernels' class
while the twins are swapped in. A read returns the
batches' bytes, so "the records read equal the records appended" compares bytes.

Deliberate differences: an offset a segment cannot hold raises ``IndexOffsetOverflowError``
(Kafka: ``LogSegmentOffsetOverflowException``); ``read``'s ``max_position=None`` means the end
of the file, where upstream's empty ``maxPosition`` reads nothing, so the no-max-position case
passes the read's own start as the limit (nothing can be read, the position is still found);
one ``segment.index.bytes`` sizes both indexes, so they get the time index's 1500 bytes
(upstream: 1000 for the offset index); kafkalog's state manager has no ``mapEndOffset`` (the log passes offsets in), so those
assertions are left out."""
import os
import random

import pytest

from kafkalog import _kernels, build_batch, build_control_batch
from kafkalog.config import LogConfig
from kafkalog.errors import IndexOffsetOverflowError
from kafkalog.fetch_data_info import LogOffsetMetadata
from kafkalog.leader_epoch import LeaderEpochCache
from kafkalog.producer_state import BatchMetadata, ProducerStateEntry, ProducerStateManager
from kafkalog.segment import LogSegment

from ported import MockTime, no_api
from ported import _kernel_mode_fixture  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("kernel_mode")

NO_TIMESTAMP = -1
INT_MAX = 2**31 - 1


@pytest.fixture
def segments(tmp_path):
    """``create(base_offset, index_interval_bytes=10, time=None)``; every segment is closed
    after the test."""
    made = []

    def create(base_offset, index_interval_bytes=10, time=None, directory=tmp_path, **config):
        settings = {"index.interval.bytes": index_interval_bytes,
                    "segment.index.bytes": 1500, **config}
        extra = {} if time is None else {"time_fn": time}
        seg = LogSegment(directory, base_offset, LogConfig(settings), **extra)
        made.append(seg)
        return seg
    yield create
    for seg in made:
        seg.close()


def records_of(offset, *values, magic=1, timestamp=None):
    ts = offset * 10 if timestamp is None else timestamp
    return build_batch([dict(value=v.encode(), timestamp=ts) for v in values],
                       base_offset=offset, magic=magic)


def record_offsets(data):
    batches = _kernels.walk_batches(data)[0]
    return [(int(b["base_offset"]), int(b["last_offset"])) for b in batches]


@pytest.mark.parametrize("base_offset, largest_offset", [
    (0, -2147483648), (0, 2147483648), (1, 0), (100, 10), (2147483648, 0), (-2147483648, 0),
    (2147483648, 4294967296)])
def test_append_for_log_segment_offset_overflow_exception(segments, base_offset,
                                                          largest_offset):
    seg = segments(base_offset)
    with pytest.raises(IndexOffsetOverflowError):
        seg.append(largest_offset, 1_700_000_000_000, largest_offset, records_of(0, "hello"))


def test_read_on_empty_segment(segments):
    assert segments(40).read(40, 300) is None


def test_read_before_first_offset(segments):
    seg = segments(40)
    ms = records_of(50, "hello", "there", "little", "bee")
    seg.append(53, NO_TIMESTAMP, -1, ms)
    assert seg.read(41, 300).records == ms


def test_read_after_last(segments):
    seg = segments(40)
    seg.append(51, NO_TIMESTAMP, -1, records_of(50, "hello", "there"))
    assert seg.read(52, 200) is None


def test_read_from_gap(segments):
    seg = segments(40)
    seg.append(51, NO_TIMESTAMP, -1, records_of(50, "hello", "there"))
    ms2 = records_of(60, "alpha", "beta")
    seg.append(61, NO_TIMESTAMP, -1, ms2)
    assert seg.read(55, 200).records == ms2


@pytest.mark.parametrize("min_one_message", [True, False])
def test_read_when_no_max_position(segments, min_one_message):
    seg = segments(40)
    seg.append(51, NO_TIMESTAMP, -1, records_of(50, "hello", "there"))
    # (offset read, the position it is at): before the first offset, at it, at the last one
    for offset, position in ((48, 0), (50, 0), (51, 39)):
        read = seg.read(offset, 1, max_position=position, min_one_message=min_one_message)
        assert read.fetch_offset_metadata == LogOffsetMetadata(offset, 40, position)
        assert read.records == b""
    assert seg.read(52, 1, max_position=0, min_one_message=min_one_message) is None  # log end
    assert seg.read(53, 1, max_position=0, min_one_message=min_one_message) is None  # past it


def test_truncate(segments):
    seg = segments(40)
    offset = 40
    for _ in range(30):
        ms1 = records_of(offset, "hello")
        seg.append(offset, NO_TIMESTAMP, -1, ms1)
        ms2 = records_of(offset + 1, "hello")
        seg.append(offset + 1, NO_TIMESTAMP, -1, ms2)
        assert seg.read(offset, 10000).records == ms1 + ms2
        seg.truncate_to(offset + 1)               # off goes the second one
        assert seg.read(offset, 10000).records == ms1
        offset += 1


def test_truncate_empty_segment(segments):
    # a follower truncating to an empty segment: the indexes are resized, so a full index
    # does not roll it
    max_segment_ms = 300000
    time = MockTime()
    seg = segments(0, time=time)
    seg.time_index, seg.offset_index          # open the indexes before closing
    seg.close()
    reopened = segments(0, time=time)
    assert seg.time_index.length == 0
    assert seg.offset_index.length == 0
    time.sleep(500)
    reopened.truncate_to(57)
    assert reopened.time_waited_for_roll(time.ms, NO_TIMESTAMP) == 0
    assert not reopened.time_index.is_full()
    assert not reopened.offset_index.is_full()
    assert not reopened.should_roll(max_segment_ms, INT_MAX, NO_TIMESTAMP, 100, 1024, time.ms)
    # not even past max_segment_ms ...
    time.sleep(max_segment_ms + 1)
    assert reopened.time_waited_for_roll(time.ms, NO_TIMESTAMP) == max_segment_ms + 1
    assert not reopened.should_roll(max_segment_ms, INT_MAX, NO_TIMESTAMP, 100, 1024, time.ms)
    # ... but when the next offset does not fit
    assert reopened.should_roll(max_segment_ms, INT_MAX, NO_TIMESTAMP, INT_MAX + 200, 1024,
                                time.ms)


def test_reload_largest_timestamp_and_next_offset_after_truncation(segments):
    num_messages = 30
    seg = segments(40, index_interval_bytes=2 * len(records_of(0, "hello")) - 1)
    offset = 40
    for _ in range(num_messages):
        seg.append(offset, offset, offset, records_of(offset, "hello"))
        offset += 1
    assert seg.read_next_offset() == offset
    assert seg.time_index.entries == num_messages // 2 - 1
    seg.truncate_to(41)
    assert seg.time_index.entries == 0
    assert seg.largest_timestamp == 400
    assert seg.read_next_offset() == 41


def test_truncate_full(segments):
    time = MockTime()
    seg = segments(40, time=time)
    seg.append(41, NO_TIMESTAMP, -1, records_of(40, "hello", "there"))
    time.sleep(500)
    assert seg.time_waited_for_roll(time.ms, NO_TIMESTAMP) == 500
    seg.truncate_to(0)
    # emptied, the segment's create time is reset
    assert seg.time_waited_for_roll(time.ms, NO_TIMESTAMP) == 0
    assert not seg.time_index.is_full()
    assert not seg.offset_index.is_full()
    assert seg.read(0, 1024) is None
    seg.append(41, NO_TIMESTAMP, -1, records_of(40, "hello", "there"))


def test_find_offset_by_timestamp(segments):
    message_size = len(records_of(0, "msg00"))
    seg = segments(40, index_interval_bytes=message_size * 2 - 1)
    for i in range(40, 50):
        seg.append(i, i * 10, i, records_of(i, f"msg{i}"))
    assert seg.largest_timestamp == 490
    cases = [(420, 42), (421, 43),            # an indexed timestamp
             (430, 43), (431, 44),            # one not indexed
             (491, None),                     # past the last timestamp
             (401, 41),                       # before the first indexed one
             (399, 40)]                       # before the first one
    found = [seg.find_offset_by_timestamp(ts, 0) for ts, _ in cases]
    assert [None if f is None else f.offset for f in found] == [want for _, want in cases]


def test_next_offset_calculation(segments):
    seg = segments(40)
    assert seg.read_next_offset() == 40
    seg.append(52, NO_TIMESTAMP, -1, records_of(50, "hello", "there", "you"))
    assert seg.read_next_offset() == 53


def test_change_file_suffixes(segments):
    seg = segments(40)
    log_file, index_file, time_index_file = seg.log_path, seg.index_path, seg.time_index_path
    # the index files are not created eagerly ...
    assert not os.path.exists(index_file) and not os.path.exists(time_index_file)
    seg.change_file_suffixes("", ".deleted")
    # ... nor by renaming them
    assert not os.path.exists(seg.index_path) and not os.path.exists(seg.time_index_path)
    assert seg.log_path == log_file + ".deleted"
    assert seg.index_path == index_file + ".deleted"
    assert seg.time_index_path == time_index_file + ".deleted"
    assert os.path.exists(seg.log_path)
    seg.offset_index                          # created when first used
    assert os.path.exists(seg.index_path)
    seg.time_index
    assert os.path.exists(seg.time_index_path)


def write_nonsense(path, position, size, rng):
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(rng.randbytes(size))


def test_recovery_fixes_corrupt_index(segments):
    seg = segments(0)
    for i in range(100):
        seg.append(i, NO_TIMESTAMP, -1, records_of(i, str(i)))
    write_nonsense(seg.index_path, 5, os.path.getsize(seg.index_path), random.Random(1))
    seg.recover(ProducerStateManager(seg.directory))
    for i in range(100):
        read = seg.read(i, 1, max_position=seg.size, min_one_message=True)
        assert record_offsets(read.records)[0][0] == i


def transactional(offset, producer_id, epoch, sequence, leader_epoch):
    return build_batch([dict(value=b"a", timestamp=0), dict(value=b"b", timestamp=0)],
                       base_offset=offset, producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=sequence, transactional=True,
                       partition_leader_epoch=leader_epoch)


def end_txn(control, producer_id, epoch, offset):
    return build_control_batch(control, producer_id=producer_id, producer_epoch=epoch,
                               coordinator_epoch=0, base_offset=offset, timestamp=NO_TIMESTAMP)


def test_recover_transaction_index(segments):
    seg = segments(100)
    epoch, leader_epoch, sequence, pid1, pid2 = 0, 15, 100, 5, 10
    seg.append(101, NO_TIMESTAMP, 100, transactional(100, pid1, epoch, sequence, leader_epoch))
    seg.append(103, NO_TIMESTAMP, 102, transactional(102, pid2, epoch, sequence, leader_epoch))
    seg.append(105, NO_TIMESTAMP, 104, build_batch(
        [dict(value=b"a", timestamp=0), dict(value=b"b", timestamp=0)], base_offset=104,
        partition_leader_epoch=leader_epoch))
    seg.append(106, NO_TIMESTAMP, 106, end_txn("abort", pid2, epoch, 106))
    seg.append(107, NO_TIMESTAMP, 107, end_txn("commit", pid1, epoch, 107))
    seg.recover(ProducerStateManager(seg.directory))
    (aborted,) = seg.txn_index.all_aborted_txns()
    assert (aborted.producer_id, aborted.first_offset, aborted.last_offset,
            aborted.last_stable_offset) == (pid2, 102, 106, 100)
    # again, the transaction of pid2 begun in an earlier segment
    state = ProducerStateManager(seg.directory)
    state.producers[pid2] = ProducerStateEntry(pid2, epoch, 0, NO_TIMESTAMP, 75,
                                               [BatchMetadata(10, 10, 5, NO_TIMESTAMP)])
    state.ongoing[pid2] = 75
    seg.recover(state)
    (aborted,) = seg.txn_index.all_aborted_txns()
    assert (aborted.producer_id, aborted.first_offset, aborted.last_offset,
            aborted.last_stable_offset) == (pid2, 75, 106, 100)


def test_recovery_rebuilds_epoch_cache(segments, tmp_path):
    seg = segments(0)
    cache = LeaderEpochCache(str(tmp_path / "leader-epoch-checkpoint"))
    for offset, leader_epoch in ((104, 0), (106, 1), (108, 1), (110, 2)):
        seg.append(offset + 1, NO_TIMESTAMP, offset, build_batch(
            [dict(value=b"a", timestamp=0), dict(value=b"b", timestamp=0)],
            base_offset=offset, partition_leader_epoch=leader_epoch))
    seg.recover(ProducerStateManager(seg.directory), cache)
    assert [(e.epoch, e.start_offset) for e in cache.entries] == [(0, 104), (1, 106),
                                                                    (2, 110)]


def test_recovery_fixes_corrupt_time_index(segments):
    seg = segments(0)
    for i in range(100):
        seg.append(i, i * 10, i, records_of(i, str(i)))
    write_nonsense(seg.time_index_path, 5, os.path.getsize(seg.time_index_path),
                   random.Random(2))
    seg.recover(ProducerStateManager(seg.directory))
    for i in range(100):
        assert seg.find_offset_by_timestamp(i * 10, 0).offset == i
        if i < 99:
            assert seg.find_offset_by_timestamp(i * 10 + 1, 0).offset == i + 1


def test_recovery_with_corrupt_message(segments, tmp_path):
    rng = random.Random(3)
    messages_appended = 20
    for attempt in range(10):
        (tmp_path / str(attempt)).mkdir()
        seg = segments(0, directory=tmp_path / str(attempt))
        for i in range(messages_appended):
            seg.append(i, NO_TIMESTAMP, -1, records_of(i, str(i)))
        corrupt_from = rng.randrange(messages_appended)
        # from somewhere in that record to the end of the file
        position = seg.translate_offset(corrupt_from)[0] + rng.randrange(15)
        write_nonsense(seg.log_path, position, os.path.getsize(seg.log_path) - position, rng)
        seg.recover(ProducerStateManager(seg.directory))
        batches = seg.batches()[0]
        assert [int(o) for o in batches["last_offset"]] == list(range(corrupt_from))


test_create_with_init_file_size_append_message = no_api(
    "kafkalog has no file preallocation (log.preallocate, LogSegment.open's initFileSize): "
    "a segment's .log is exactly its batches")
test_create_with_init_file_size_clear_shutdown = no_api(
    "kafkalog has no file preallocation (log.preallocate), so no trim of a preallocated .log "
    "at close")


def test_should_truncate_even_if_offset_points_to_a_gap_in_the_log(segments):
    seg = segments(40)
    offset = 40
    # two batches with a gap between them (an offset compacted away)
    seg.append(offset, NO_TIMESTAMP, -1,
               records_of(offset, "first message", magic=2, timestamp=offset * 1000))
    seg.append(offset + 3, NO_TIMESTAMP, -1,
               records_of(offset + 3, "message after gap", magic=2,
                          timestamp=(offset + 3) * 1000))
    seg.truncate_to(offset + 1)     # an offset no batch holds: the one after it goes
    assert [base for base, _ in record_offsets(seg.read(offset, 10000).records)] == [offset]


test_append_from_file = no_api(
    "kafkalog's LogSegment has no appendFromFile (copying a FileRecords' batches into a "
    "segment up to an offset overflow: the split of an overflowed segment)")


def test_get_first_batch_timestamp(segments, tmp_path):
    # upstream's getFirstBatchTimestamp (the first batch's max timestamp, what time-based
    # rolling measures from) is kafkalog's rolling_based_timestamp: None on an empty segment
    seg = segments(1)
    assert seg.rolling_based_timestamp is None
    seg.append(1, 1000, 1, build_batch([dict(value=b"one", timestamp=1000)], base_offset=1))
    assert seg.rolling_based_timestamp == 1000
    seg.close()
    reopened = segments(1)                       # read back from the first batch
    assert reopened.time_waited_for_roll(0, 5000) == 4000
    assert reopened.rolling_based_timestamp == 1000


test_delete_if_exists_with_get_parent_is_null = no_api(
    "upstream mocks the segment's files (Mockito) to return a parentless path from a "
    "transaction index that does not exist; kafkalog's delete_files takes real paths")
