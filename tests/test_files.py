"""File names (kafkalog.files), the segment list (LogSegments) and the one checkpoint policy."""
import logging

import pytest

from kafkalog.checkpoint import LogDirCheckpoints, write_offset_checkpoint
from kafkalog.errors import InvalidPartitionError, InvalidTopicError, KafkaLogError
from kafkalog.files import (
    LOG_SUFFIX, SWAP_SUFFIX, TopicPartitionDir, file_name, log07_topic_partition,
    offset_from_file_name, offsets_of, parse_file_name, parse_partition_dir_name,
    parse_topic_partition, partition_dir_name, topic_partition_or_none, validate_partition,
    validate_topic,
)
from kafkalog.log_segments import LogSegments


def test_file_names_round_trip():
    assert file_name(42, LOG_SUFFIX) == "00000000000000000042.log"
    assert parse_file_name("00000000000000000042.log") == (42, ".log", "")
    assert parse_file_name("00000000000000000042.index.swap") == (42, ".index", ".swap")
    assert parse_file_name("00000000000000000042.snapshot") == (42, ".snapshot", "")
    for name in ("42.log", "0000000000000000004x.log", "00000000000000000042", "leader-epoch-"
                 "checkpoint", "00000000000000000042.log.swap.deleted"):
        assert parse_file_name(name) is None
    assert offset_from_file_name("00000000000000000007.timeindex.deleted") == 7
    names = ["00000000000000000010.log", "00000000000000000000.log", "00000000000000000005.index",
             "00000000000000000020.log.swap", "x.log"]
    assert offsets_of(names, LOG_SUFFIX) == [0, 10]
    assert offsets_of(names, LOG_SUFFIX, SWAP_SUFFIX) == [20]


def test_partition_directory_names():
    assert parse_topic_partition("orders-3") == ("orders", 3)
    assert parse_topic_partition("my-topic-10") == ("my-topic", 10)
    assert parse_partition_dir_name("orders-3.0123abc-delete") == \
        TopicPartitionDir("orders", 3, "delete", "0123abc")
    assert parse_partition_dir_name("orders-3.ab-future").state == "future"
    assert parse_partition_dir_name("orders-3.ab-stray").state == "stray"
    assert partition_dir_name("orders", 3, "future", "ab") == "orders-3.ab-future"
    for bad in ("orders", "orders-", "-3", "orders-x", "orders-3-delete", "a b-1"):
        assert topic_partition_or_none(bad) is None, bad
    with pytest.raises(KafkaLogError):
        parse_topic_partition("orders-3.ab-delete")      # not a live log
    with pytest.raises(InvalidTopicError):
        validate_topic("..")
    with pytest.raises(InvalidTopicError):
        validate_topic("x" * 250)


def test_partition_numbers_outside_kafkas_range_are_refused():
    assert validate_partition(0) == 0 and validate_partition(2**31 - 1) == 2**31 - 1
    for bad in (-1, 2**31, True, 1.0, "1"):
        with pytest.raises(InvalidPartitionError):
            validate_partition(bad)
        with pytest.raises(InvalidPartitionError):
            partition_dir_name("t", bad)
    assert parse_topic_partition("t-2147483647") == ("t", 2**31 - 1)
    for name in ("t-2147483648", "t-99999999999999999999", "t-2147483648.ab-delete"):
        with pytest.raises(InvalidPartitionError):
            parse_partition_dir_name(name)
    for name in ("t-2147483648", "t-\u0661", "t-\u00b2"):      # Unicode digits are no number
        assert topic_partition_or_none(name) is None, name
    assert log07_topic_partition("t_2147483648") is None


@pytest.mark.parametrize("state", ["delete", "future", "stray"])
@pytest.mark.parametrize("topic, partition", [("orders", 3), ("t" * 249, 0),
                                              ("t" * 249, 2**31 - 1), ("t" * 200, 12345)])
def test_state_directory_names_fit_255_bytes(topic, partition, state):
    """Kafka's logDirNameWithSuffixCappedLength: the topic is cut, the rest kept whole."""
    unique = "0123456789abcdef0123456789abcdef"
    name = partition_dir_name(topic, partition, state, unique)
    assert len(name.encode()) <= 255
    parsed = parse_partition_dir_name(name)
    assert (parsed.partition, parsed.state, parsed.unique_id) == (partition, state, unique)
    assert topic.startswith(parsed.topic)
    if len(f"{topic}-{partition}.{unique}-{state}") <= 255:
        assert name == f"{topic}-{partition}.{unique}-{state}"
    else:
        assert len(name.encode()) == 255


def test_a_live_directory_name_over_255_bytes_is_refused():
    assert partition_dir_name("t" * 249, 99999) == "t" * 249 + "-99999"
    with pytest.raises(InvalidTopicError):
        partition_dir_name("t" * 249, 100000)


class _Seg:
    def __init__(self, base, size=10):
        self.base_offset = base
        self.size = size

    def __repr__(self):
        return f"_Seg({self.base_offset})"


def test_log_segments_queries():
    a, b, c = _Seg(0), _Seg(100), _Seg(250)
    segs = LogSegments([c, a, b])
    assert list(segs) == [a, b, c] and segs.active is c and segs.first is a
    assert segs.floor(-1) is None and segs.floor(0) is a and segs.floor(99) is a
    assert segs.floor(100) is b and segs.floor(10**9) is c
    assert segs.higher(0) is b and segs.higher(250) is None
    assert segs.next_base(b, 300) == 250 and segs.next_base(c, 300) == 300
    assert segs.with_bounds(300) == [(a, 100), (b, 250), (c, 300)]
    assert list(segs.range(150)) == [b, c]
    assert list(segs.range(0, 100)) == [a]
    assert list(segs.range(120, 260)) == [b, c]
    assert list(segs.range(300, 300)) == []
    assert b in segs and _Seg(100) not in segs
    smaller = segs.replace(remove=[a])
    assert list(smaller) == [b, c] and list(segs) == [a, b, c]      # immutable
    assert segs.size == 30


def test_damaged_checkpoints_are_logged_and_read_as_missing(tmp_path, caplog):
    write_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint", {("t", 0): 42})
    (tmp_path / "log-start-offset-checkpoint").write_bytes(b"0\n7\nnot a checkpoint\n")
    with caplog.at_level(logging.WARNING, logger="kafkalog.checkpoint"):
        saved = LogDirCheckpoints(tmp_path)
    assert any("log-start-offset-checkpoint" in r.getMessage() for r in caplog.records)
    assert len(saved.problems) == 1
    p = saved.for_partition(("t", 0))
    assert (p.recovery_point, p.log_start_offset, p.high_watermark, p.clean_shutdown) == \
        (42, None, None, False)
    assert saved.for_partition(None).recovery_point is None


def test_partition_dirs_of_a_path(tmp_path):
    from kafkalog.log_dirs import partition_dirs
    (tmp_path / "a-0").mkdir()
    (tmp_path / "a-0" / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "b-1").mkdir()                       # named like a partition, no segment
    (tmp_path / "b-1" / "leader-epoch-checkpoint").write_text("0\n0\n")
    (tmp_path / "c-2").mkdir()                       # named so, holding nothing of one
    (tmp_path / "notes").mkdir()
    assert partition_dirs(tmp_path / "a-0") == [str(tmp_path / "a-0")]
    assert partition_dirs(tmp_path) == [str(tmp_path / "a-0")]
    assert partition_dirs(tmp_path, named=True) == [str(tmp_path / "a-0"), str(tmp_path / "b-1")]
    assert partition_dirs(tmp_path / "b-1", named=True) == [str(tmp_path / "b-1")]
    assert partition_dirs(tmp_path / "c-2", named=True) == []
    assert partition_dirs(tmp_path / "notes") == []
