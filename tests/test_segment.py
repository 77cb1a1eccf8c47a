"""The scenarios of Kafka's LogSegmentTest, and Kafka-identical index building and recovery on
every fixture."""
import os
import random

import pytest

from kafkalog import Record, build_batch
from kafkalog._kernels import walk_batches
from kafkalog.config import LogConfig
from kafkalog.errors import IndexOffsetOverflowError
from kafkalog.producer_state import ProducerStateManager
from kafkalog.records import open_buffer
from kafkalog.files import DELETED_SUFFIX
from kafkalog.segment import LogSegment

from conftest import FIXTURES, fixture_names, verify

SUFFIXES = [".log", ".index", ".timeindex", ".txnindex"]


def make_segment(tmp_path, base=40, **config):
    settings = {"index.interval.bytes": 10, "segment.index.bytes": 1000}
    settings.update(config)
    return LogSegment(tmp_path, base, LogConfig(settings))


def batch(offset, n=1, ts=None, payload=b"hello"):
    return build_batch([Record(value=payload + b"%d" % i, timestamp=(ts if ts is not None else
                                                                      offset + i))
                        for i in range(n)], base_offset=offset)


def append(seg, offset, n=1, ts=None, payload=b"hello"):
    data = batch(offset, n, ts, payload)
    b = walk_batches(data)[0][0]
    seg.append(int(b["last_offset"]), int(b["max_timestamp"]), int(b["last_offset"]), data)
    return data


def offsets_of(data):
    return list(walk_batches(data)[0]["base_offset"]) if data else []


def test_read_on_empty_segment(tmp_path):
    seg = make_segment(tmp_path)
    assert seg.read(40, 300) is None


def test_read_before_first_offset(tmp_path):
    seg = make_segment(tmp_path)
    data = append(seg, 50, 3)
    info = seg.read(41, 300)
    assert info.records == data


def test_read_after_last(tmp_path):
    seg = make_segment(tmp_path)
    append(seg, 50, 2)
    assert seg.read(52, 200) is None


def test_read_from_gap(tmp_path):
    seg = make_segment(tmp_path)
    append(seg, 50, 2)
    second = append(seg, 60, 2)
    assert seg.read(55, 200).records == second


def test_read_max_size_and_position(tmp_path):
    seg = make_segment(tmp_path)
    first = append(seg, 50)
    second = append(seg, 51)
    assert seg.read(50, len(first)).records == first
    assert seg.read(50, 10 ** 6, max_position=len(first)).records == first
    assert seg.read(50, 0).records == b""
    info = seg.read(50, 5, min_one_message=True)
    assert info.records == first and not info.first_entry_incomplete
    info = seg.read(50, 5)
    assert info.records == first[:5] and info.first_entry_incomplete
    assert seg.read(51, 10 ** 6).records == second
    with pytest.raises(ValueError):
        seg.read(50, -1)


def test_a_read_takes_the_new_index_view_when_a_roll_swaps_it_under_the_read(tmp_path,
                                                                            monkeypatch):
    # A writer's roll trims the index (a new view, the old one released) between a reader's
    # thread taking the view and the kernel searching it: the read runs again with the new one.
    seg = make_segment(tmp_path)
    for offset in range(40, 60, 2):
        append(seg, offset, 2)
    lazy = seg._lazy_offset_index
    real = type(lazy)._view
    taken = []

    def view_then_roll(self):
        view = real(self)
        if not taken:
            taken.append(view)
            seg.offset_index.trim_to_valid_size()
        return view
    monkeypatch.setattr(type(lazy), "_view", view_then_roll)
    info = seg.read(50, 10_000)
    assert taken[0] is not seg.offset_index.view       # swapped under the read
    assert offsets_of(info.records) == list(range(50, 60, 2))
    assert seg.translate_offset(56) == (info.fetch_offset_metadata.relative_position_in_segment
                                        + 3 * len(batch(0, 2)), len(batch(0, 2)))


def test_a_read_of_a_closed_index_is_refused_not_retried(tmp_path):
    seg = make_segment(tmp_path)
    append(seg, 40, 2)
    seg.offset_index.close_handler()
    with pytest.raises(ValueError, match="released"):
        seg.read(40, 10_000)


def test_truncate(tmp_path):
    seg = make_segment(tmp_path)
    offset = 40
    for i in range(30):
        append(seg, offset, 2)
        offset += 2
        cut = random.Random(i).randrange(40, offset)
        seg.truncate_to(cut)
        # the batch holding the cut goes whole
        offset = seg.read_next_offset()
        assert offset <= cut + 1
        assert seg.offset_index.entries == 0 or seg.offset_index.last_offset < offset


def test_truncate_empty_segment_and_reappend(tmp_path):
    seg = make_segment(tmp_path)
    append(seg, 40, 10)
    seg.truncate_to(0)
    assert seg.size == 0 and seg.read_next_offset() == 40
    assert seg.rolling_based_timestamp is None
    append(seg, 40, 3)
    assert seg.read_next_offset() == 43


def test_truncate_full_resets_indexes(tmp_path):
    seg = make_segment(tmp_path)
    for i in range(10):
        append(seg, 40 + i)
    assert seg.offset_index.entries > 0 and seg.time_index.entries > 0
    seg.truncate_to(40)
    assert seg.offset_index.entries == 0 and seg.time_index.entries == 0
    assert seg.offset_index.length == 1000 - 1000 % 8


def test_truncate_reloads_the_largest_timestamp_with_no_time_index_entry_left(tmp_path):
    # Kafka's LogSegmentTest.testReloadLargestTimestampAndNextOffsetAfterTruncation: a time
    # index entry every other batch; the cut leaves one batch and no entry. The largest
    # timestamp is that batch's, not the file's modification time.
    one = len(batch(0, ts=0))
    seg = make_segment(tmp_path, **{"index.interval.bytes": 2 * one - 1})
    for offset in range(40, 70):
        append(seg, offset, ts=offset * 10)
    assert seg.read_next_offset() == 70
    assert seg.time_index.entries == 30 // 2 - 1
    seg.truncate_to(41)
    assert seg.time_index.entries == 0
    assert seg.largest_timestamp == 400
    assert seg.read_next_offset() == 41


def test_find_offset_by_timestamp(tmp_path):
    seg = make_segment(tmp_path)
    for i in range(10):
        append(seg, 40 + 2 * i, 2, ts=1000 + 10 * i)
    assert seg.find_offset_by_timestamp(1000) == (1000, 40)
    assert seg.find_offset_by_timestamp(1031) == (1040, 48)
    assert seg.find_offset_by_timestamp(1090) == (1090, 58)
    assert seg.find_offset_by_timestamp(1091) is None
    assert seg.find_offset_by_timestamp(0, starting_offset=45) == (1020, 45)


def test_should_roll(tmp_path):
    seg = make_segment(tmp_path, **{"segment.jitter.ms": 0})
    assert not seg.should_roll(10 ** 9, 10 ** 6, 0, 40, 100, 0)
    append(seg, 40, ts=1000)
    assert seg.should_roll(10 ** 9, seg.size + 50, 1000, 41, 100, 0)           # size
    assert seg.should_roll(100, 10 ** 6, 1101, 41, 1, 0)                       # time
    assert not seg.should_roll(100, 10 ** 6, 1099, 41, 1, 0)
    assert seg.should_roll(10 ** 9, 10 ** 6, 1000, 40 + 2 ** 31, 1, 0)        # overflow


def test_should_roll_with_jitter(tmp_path):
    seg = make_segment(tmp_path, **{"segment.jitter.ms": 50, "segment.ms": 100})
    seg.roll_jitter_ms = 30
    append(seg, 40, ts=1000)
    assert seg.should_roll(100, 10 ** 6, 1071, 41, 1, 0)
    assert not seg.should_roll(100, 10 ** 6, 1069, 41, 1, 0)


def test_should_roll_when_index_is_full(tmp_path):
    seg = make_segment(tmp_path, **{"segment.index.bytes": 24})
    assert not seg.should_roll(10 ** 9, 10 ** 9, 0, 50, 1, 0)
    for i in range(2):
        append(seg, 40 + i, payload=b"x" * 20)
    # the time index keeps its last slot for the roll: one entry fills two slots
    assert seg.time_index.is_full() and not seg.offset_index.is_full()
    assert seg.should_roll(10 ** 9, 10 ** 9, 0, 50, 1, 0)


def test_offset_overflow_is_refused(tmp_path):
    seg = make_segment(tmp_path)
    with pytest.raises(IndexOffsetOverflowError):
        append(seg, 40 + 2 ** 31)


def test_recovery_fixes_corrupt_tail(tmp_path):
    seg = make_segment(tmp_path)
    for i in range(10):
        append(seg, 40 + i)
    good = seg.size
    with open(seg.log_path, "ab") as f:
        f.write(b"\x00" * 7 + b"garbage!" * 5)
    seg.close()
    seg = make_segment(tmp_path)
    truncated = seg.recover()
    assert truncated == seg.size - good + truncated and seg.size == good
    assert seg.read_next_offset() == 50


def test_recovery_stops_at_bad_crc(tmp_path):
    seg = make_segment(tmp_path)
    positions = [seg.size]
    for i in range(10):
        append(seg, 40 + i)
        positions.append(seg.size)
    seg.close()
    with open(seg.log_path, "r+b") as f:
        f.seek(positions[6] + 70)
        f.write(b"\xff")
    seg = make_segment(tmp_path)
    assert seg.recover() == positions[10] - positions[6]
    assert seg.read_next_offset() == 46


def test_lazy_indexes_and_close_trims(tmp_path):
    seg = make_segment(tmp_path)
    for i in range(10):
        append(seg, 40 + i)
    seg.close()
    assert os.path.getsize(tmp_path / "00000000000000000040.index") % 8 == 0
    reopened = make_segment(tmp_path)
    assert not reopened.indexes_opened()
    assert reopened.read(45, 1000) is not None and reopened.indexes_opened()
    reopened.close()


def test_delete_via_deleted_suffix(tmp_path):
    seg = make_segment(tmp_path)
    append(seg, 40)
    seg.offset_index  # open it
    seg.change_file_suffixes("", DELETED_SUFFIX)
    names = sorted(os.listdir(tmp_path))
    assert names == ["00000000000000000040.index.deleted", "00000000000000000040.log.deleted",
                     "00000000000000000040.timeindex.deleted"]
    seg.delete_files()
    assert os.listdir(tmp_path) == []


def _v2_fixture_segments():
    out = []
    for name in fixture_names():
        d = FIXTURES / name
        for log in sorted(d.glob("*.log")):
            batches, status, _, _ = walk_batches(open_buffer(log))
            if len(batches) and (batches["magic"] == 2).all() and (batches["crc_valid"] == 1).all() \
                    and status == 0 and name != "crashed-0":
                out.append((name, log.name))
    return out


def reappend_batches(src, seg):
    """Append the batches of segment file ``src`` to ``seg`` one by one, as Kafka's leader
    appends them (so ``seg`` gets the indexes Kafka writes for its config), and close it."""
    buf = open_buffer(src)
    for b in walk_batches(buf)[0]:
        p, size = int(b["position"]), int(b["size"])
        seg.append(int(b["last_offset"]), int(b["max_timestamp"]), int(b["last_offset"]),
                   buf[p:p + size])
    seg.close()


@pytest.mark.parametrize("name,log_name", _v2_fixture_segments())
def test_reappending_fixture_batches_reproduces_kafkas_indexes(tmp_path, name, log_name):
    src = FIXTURES / name / log_name
    base = int(log_name[:20])
    reappend_batches(src, LogSegment(tmp_path, base, LogConfig()))
    for suffix in (".log", ".index", ".timeindex"):
        ours = (tmp_path / (log_name[:20] + suffix)).read_bytes()
        assert ours == (FIXTURES / name / (log_name[:20] + suffix)).read_bytes(), suffix


@pytest.mark.parametrize("name", fixture_names())
def test_recover_every_fixture_segment_like_kafka(fixture_copy, name):
    d = fixture_copy(name)
    for expected in verify(FIXTURES / name)["recover"]:
        base = expected["base_offset"]
        original = {s: (FIXTURES / name / f"{base:020d}{s}") for s in SUFFIXES}
        original = {s: p.read_bytes() if p.exists() else b"" for s, p in original.items()}
        seg = LogSegment(d, base, LogConfig())
        state = ProducerStateManager(str(d))
        state.load_latest_snapshot(base)
        truncated = seg.recover(state)
        assert truncated == expected["truncated_bytes"]
        assert seg.size == expected["valid_size"]
        assert seg.read_next_offset() == expected["next_offset"]
        seg.close()
        for s in SUFFIXES:
            path = d / f"{base:020d}{s}"
            ours = path.read_bytes() if path.exists() else b""
            key = s[1:]
            assert (ours == original[s]) == expected["rebuilt_identical"][key], (base, s)
            if f"{key}_diff" in expected["rebuilt_identical"]:
                assert len(ours) == expected["rebuilt_identical"][f"{key}_diff"]["rebuilt_size"]
