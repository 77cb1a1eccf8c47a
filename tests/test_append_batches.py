"""``Log.append_batches``: several batches in one call, as ``append`` of their concatenation
(one validation, one write, all or nothing), indexed batch by batch as Kafka's
LogSegment.append indexes a multi-batch append."""
import os

import numpy as np
import pytest

from kafkalog import Record, build_batch
from kafkalog.errors import CorruptRecordError
from kafkalog.log import Log

CONFIG = {"segment.bytes": 1 << 30, "index.interval.bytes": 300}


def _batches(n, per=3, start_ts=1_000, epoch=0, **kw):
    out = []
    for i in range(n):
        # timestamps that go back within and between batches (the time index only grows)
        out.append(build_batch([Record(key=b"k%d" % i, value=b"v" * (40 + 7 * (i % 5)),
                                       timestamp=start_ts + 10 * i + (j * 7) % 5)
                                for j in range(per)], partition_leader_epoch=epoch, **kw))
    return out


def _indexes(log):
    out = []
    for seg in log.segments:
        offsets, positions = seg.offset_index.entries_array()
        stamps, stamp_offsets = seg.time_index.entries_array()
        out.append((seg.base_offset, offsets.tolist(), positions.tolist(), stamps.tolist(),
                    stamp_offsets.tolist(), seg.max_timestamp_so_far,
                    seg.offset_of_max_timestamp_so_far, seg.bytes_since_last_index_entry))
    return out


def _records(log):
    return [(r.offset, r.timestamp, r.key, r.value) for r in log.records()]


def test_same_as_appending_one_by_one(tmp_path):
    buffers = _batches(40)
    with Log.open(tmp_path / "one-0", CONFIG) as one, \
            Log.open(tmp_path / "many-0", CONFIG) as many:
        one.append(buffers[0])
        many.append(buffers[0])
        infos = [one.append(b) for b in buffers[1:]]
        info = many.append_batches(buffers[1:])
        assert info.first_offset == infos[0].first_offset == 3
        assert info.last_offset == infos[-1].last_offset == many.log_end_offset - 1
        assert info.max_timestamp == max(i.max_timestamp for i in infos)
        assert info.offset_of_max_timestamp == max(
            infos, key=lambda i: i.max_timestamp).offset_of_max_timestamp
        assert info.valid_bytes == sum(i.valid_bytes for i in infos)
        assert info.records_count == sum(i.records_count for i in infos) == 39 * 3
        assert many.log_end_offset == one.log_end_offset
        assert _records(many) == _records(one)
        # index entries batch by batch, as Kafka makes them for a multi-batch append
        assert _indexes(many) == _indexes(one)
        assert len(_indexes(many)[0][1]) > 5
        assert many.high_watermark == many.log_end_offset


def test_indexes_match_recovery(tmp_path):
    path = tmp_path / "t-0"
    with Log.open(path, CONFIG) as log:
        for i in range(0, 60, 12):
            log.append_batches(_batches(12, start_ts=1_000 + 1_000 * i))
    with Log.open(path, CONFIG, clean_shutdown=True) as log:   # as closed (final entry)
        before = _indexes(log)
    # recovery rebuilds the indexes from the .log: the appended ones are what it writes
    with Log.open(path, CONFIG, clean_shutdown=False, recovery_point=0) as log:
        assert all(not s.rebuilt_indexes for s in log.segments)
        after = _indexes(log)
    assert [a[:5] for a in after] == [b[:5] for b in before]


def test_all_or_nothing(tmp_path):
    buffers = _batches(5)
    bad = bytearray(buffers[3])
    bad[-1] ^= 0xFF                                  # CRC no longer matches
    with Log.open(tmp_path / "t-0", CONFIG) as log:
        log.append(buffers[0])
        size, end = log.size, log.log_end_offset
        with pytest.raises(CorruptRecordError):
            log.append_batches(buffers[:3] + [bytes(bad)] + buffers[4:])
        assert (log.size, log.log_end_offset) == (size, end)
        with pytest.raises(ValueError):
            log.append_batches([])
        log.append_batches(iter(buffers[1:]))        # any iterable of bytes-like objects
        assert log.log_end_offset == 15


def test_buffers_are_not_changed(tmp_path):
    buffers = [bytearray(b) for b in _batches(3)]
    copies = [bytes(b) for b in buffers]
    with Log.open(tmp_path / "t-0", CONFIG) as log:
        log.append(buffers[0])
        log.append_batches(buffers + [memoryview(copies[0])])
        assert [bytes(b) for b in buffers] == copies   # offsets were assigned in a copy
        assert log.log_end_offset == 15


def test_producer_state_and_leader_epochs(tmp_path):
    buffers = [build_batch([Record(value=b"x%d" % i, timestamp=5)], producer_id=7,
                           producer_epoch=0, base_sequence=i, partition_leader_epoch=e)
               for i, e in enumerate([1, 1, 2, 2, 3])]
    with Log.open(tmp_path / "t-0", CONFIG) as log:
        log.append_batches(buffers)
        assert log.leader_epoch_cache.latest_epoch() == 3
        assert log.end_offset_for_epoch(1) == (1, 2)
        assert log.end_offset_for_epoch(2) == (2, 4)
        # a retry of the last batch is a duplicate: answered with its offsets, not written
        dup = log.append(buffers[-1])
        assert (dup.first_offset, dup.last_offset, dup.valid_bytes) == (4, 4, 0)
        assert log.log_end_offset == 5


def test_rolls_before_a_call_that_does_not_fit(tmp_path):
    buffers = _batches(10)
    size = sum(len(b) for b in buffers)
    with Log.open(tmp_path / "t-0", {**CONFIG, "segment.bytes": size + 100}) as log:
        log.append_batches(buffers)
        log.append_batches(buffers)
        assert [s.base_offset for s in log.segments] == [0, 30]
        assert len(_records(log)) == 60
        assert os.path.getsize(log.segments[0].log_path) == size
        assert np.array_equal(log.segments[1].offset_index.entries_array()[1],
                              log.segments[0].offset_index.entries_array()[1])


@pytest.mark.parametrize("epochs", [[2, 1, 2], [2, 4, 3, 5], [-1, -1], [-1, 3, 0]])
def test_leader_epochs_as_one_by_one(tmp_path, epochs):
    """The kernel's largest epoch lets an append skip the cache unless an epoch is newer;
    the cache ends as appending the batches one by one leaves it."""
    buffers = [_batches(1, epoch=e)[0] for e in epochs]
    with Log.open(tmp_path / "a-0", CONFIG) as one, Log.open(tmp_path / "b-0", CONFIG) as all_:
        for b in buffers:
            one.append(b)
        all_.append(buffers[0])
        all_.append_batches(buffers[1:])
        assert list(one.leader_epoch_cache._entries) == list(all_.leader_epoch_cache._entries)


def test_rolls_when_an_index_fills(tmp_path):
    """Room in the indexes is remembered between appends only until an entry is added."""
    config = {**CONFIG, "index.interval.bytes": 1, "segment.index.bytes": 64}
    buffers = _batches(40, per=1)
    with Log.open(tmp_path / "t-0", config) as log:
        for b in buffers:
            log.append(b)
        assert len(log.segments) > 3
        for seg in log.segments:
            assert len(seg.offset_index.entries_array()[0]) <= 8
        expected = _records(log)
    assert [r[0] for r in expected] == list(range(40))
    with Log.open(tmp_path / "t-0", config, clean_shutdown=False, recovery_point=0) as log:
        assert _records(log) == expected


def test_active_segment_is_pinned_while_active(tmp_path):
    with Log.open(tmp_path / "t-0", {**CONFIG, "segment.bytes": 400}) as log:
        for b in _batches(20, per=1):
            log.append(b)
        *old, active = log.segments
        assert len(old) > 2
        assert active.pins == 1 and all(s.pins == 0 for s in old)
    with Log.open(tmp_path / "t-0", read_only=True) as log:
        assert all(s.pins == 0 for s in log.segments)
