"""Kafka 0.7 logs (``Log07``): hand-built ``.kafka`` files (magic 0 and 1, gzip and snappy
wrappers, torn tails, a full-length entry with a bad CRC followed by zeros, several files, short
file names), 0.7's recovery of the newest file, reads by byte offset, and writing (roll, flush,
retention). Runs with either kernels (``KAFKALOG_NO_EXTENSIONS=1`` for the twins)."""
import errno
import gzip
import itertools
import logging
import os
import struct
import zlib

import cramjam
import pytest

from kafkalog import Log, Log07
from kafkalog.errors import (
    CorruptRecordError, KafkaLogError, LogClosedError, LogDirFailureError, LogNotFoundError,
    NotAPartitionDirectoryError, OffsetOutOfRangeError, PartitionNotFoundError,
    RecordTooLargeError, TooManyOpenFilesError, UnsupportedCompressionError,
)
from kafkalog.files import (
    log07_file_name, log07_files, log07_topic_partition, parse_log07_file_name,
)
from kafkalog.log07.format import message_table, walk_all
from kafkalog.retention import SegmentCountRetention


# --- hand-built bytes (independent of kafkalog's encoder) --------------------------------------

def entry(payload, magic=1, attributes=0, crc=None):
    """length, magic, [attributes], CRC32 of the payload, payload."""
    crc = zlib.crc32(payload) if crc is None else crc
    body = bytes([magic]) + (bytes([attributes]) if magic == 1 else b"") + \
        struct.pack(">I", crc) + payload
    return struct.pack(">i", len(body)) + body


def xerial_snappy(data):
    block = bytes(cramjam.snappy.compress_raw(data))
    return b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(block)) + block


def gzip_wrapper(*payloads):
    return entry(gzip.compress(b"".join(entry(p) for p in payloads)), attributes=1)


def snappy_wrapper(*payloads):
    return entry(xerial_snappy(b"".join(entry(p) for p in payloads)), attributes=2)


def write_dir(tmp_path, files, name="my_topic-0"):
    d = tmp_path / name
    d.mkdir()
    for fname, data in files.items():
        (d / fname).write_bytes(data)
    return d


def listing(log, start=None):
    return [(m.offset, m.next_offset, m.payload, m.codec) for m in log.messages(start)]


# --- file and directory names -----------------------------------------------------------------

def test_file_names():
    assert log07_file_name(42) == "00000000000000000042.kafka"
    assert parse_log07_file_name("00000000000000000042.kafka") == 42
    assert parse_log07_file_name("42.kafka") == 42          # shorter names some tools wrote
    for other in ("42.log", "x.kafka", ".kafka", "42.kafka.deleted", "1" * 21 + ".kafka",
                  "99999999999999999999.kafka"):
        assert parse_log07_file_name(other) is None
    assert log07_files(["7.kafka", "00000000000000000000.kafka", "a.log"]) == \
        [(0, "00000000000000000000.kafka"), (7, "7.kafka")]
    assert log07_topic_partition("my_topic-0") == ("my_topic", 0)
    assert log07_topic_partition("my_topic_3") == ("my_topic", 3)
    assert log07_topic_partition("topic") is None


# --- reading ------------------------------------------------------------------------------------

def test_magic_0_and_1(tmp_path):
    a, b = entry(b"old", magic=0), entry(b"new")
    d = write_dir(tmp_path, {log07_file_name(0): a + b})
    with Log07.open(d, read_only=True) as log:
        assert listing(log) == [(0, len(a), b"old", "none"),
                                (len(a), len(a) + len(b), b"new", "none")]
        first, second = log.messages()
        assert (first.magic, first.size, first.crc) == (0, len(a), zlib.crc32(b"old"))
        assert (second.magic, second.size) == (1, len(b))
        assert (log.log_start_offset, log.log_end_offset) == (0, len(a + b))
        assert [s.base_offset for s in log.segments] == [0]


def test_compressed_wrappers(tmp_path):
    plain, gz, sn = entry(b"p"), gzip_wrapper(b"g1", b"g2"), snappy_wrapper(b"s1", b"s2", b"s3")
    d = write_dir(tmp_path, {log07_file_name(0): plain + gz + sn})
    g, s = len(plain), len(plain) + len(gz)
    end = s + len(sn)
    with Log07.open(d, read_only=True) as log:
        assert listing(log) == [(0, g, b"p", "none"), (g, s, b"g1", "gzip"), (g, s, b"g2", "gzip"),
                                (s, end, b"s1", "snappy"), (s, end, b"s2", "snappy"),
                                (s, end, b"s3", "snappy")]
        assert listing(log, s) == listing(log)[3:]
        assert log.read(g, len(gz)) == gz
        with pytest.raises(OffsetOutOfRangeError):
            log.read(g + 4, 100)


def test_nested_and_corrupt_message_sets(tmp_path):
    nested = entry(gzip.compress(entry(b"p") + snappy_wrapper(b"n1", b"n2")), attributes=1)
    torn = entry(gzip.compress(entry(b"x") + b"\0\0"), attributes=1)   # a torn inner entry
    d = write_dir(tmp_path, {log07_file_name(0): entry(b"a") + nested + torn})
    a, n = len(entry(b"a")), len(entry(b"a") + nested)
    with Log07.open(d, read_only=True) as log:
        it = log.messages()
        assert [(m.offset, m.next_offset, m.payload, m.codec) for m in itertools.islice(it, 4)] \
            == [(0, a, b"a", "none"), (a, n, b"p", "gzip"), (a, n, b"n1", "gzip"),
                (a, n, b"n2", "gzip")]
        with pytest.raises(CorruptRecordError, match="gzip message set") as e:
            next(it)
        assert e.value.position == n


def test_several_files_and_short_names(tmp_path):
    f0 = entry(b"a") + entry(b"bb")
    f1 = entry(b"c") + gzip_wrapper(b"d", b"e")
    f2 = entry(b"f")
    b1, b2 = len(f0), len(f0) + len(f1)
    d = write_dir(tmp_path, {log07_file_name(0): f0, f"{b1}.kafka": f1,
                             log07_file_name(b2): f2})
    with Log07.open(d) as log:
        assert [s.base_offset for s in log.segments] == [0, b1, b2]
        assert log.log_end_offset == b2 + len(f2)
        assert [m.payload for m in log.messages()] == [b"a", b"bb", b"c", b"d", b"e", b"f"]
        assert [m.payload for m in log.messages(b1)] == [b"c", b"d", b"e", b"f"]
        assert log.read(b1, 10_000) == f1              # a read stays in one file
        assert log.read(b2, 10_000) == f2
        assert log.read(log.log_end_offset, 100) == b""
        assert list(log.messages(log.log_end_offset)) == []
        assert not log.recovery_report


def test_offsets_out_of_range(tmp_path):
    data = entry(b"a") + entry(b"bb")
    d = write_dir(tmp_path, {log07_file_name(100): data})
    with Log07.open(d, read_only=True) as log:
        assert (log.log_start_offset, log.log_end_offset) == (100, 100 + len(data))
        for bad in (0, 99, 101, 100 + len(data) + 1, 100 + len(entry(b"a")) + 2):
            with pytest.raises(OffsetOutOfRangeError):
                log.read(bad, 100)
            with pytest.raises(OffsetOutOfRangeError):
                next(log.messages(bad))


def test_read_returns_whole_entries(tmp_path):
    a, b, c = entry(b"a"), entry(b"b" * 30), entry(b"c")
    d = write_dir(tmp_path, {log07_file_name(0): a + b + c})
    with Log07.open(d, read_only=True) as log:
        assert log.read(0, len(a) + len(b) - 1) == a
        assert log.read(0, len(a) + len(b)) == a + b
        assert log.read(len(a), len(b) - 1) == b""    # the first entry does not fit
        assert log.read(0, 0) == b""


# --- recovery of the newest file -------------------------------------------------------------

def test_torn_tail(tmp_path, caplog):
    older, good = entry(b"old"), entry(b"kept")
    torn = entry(b"lost in the crash")[:-5]
    d = write_dir(tmp_path, {log07_file_name(0): older,
                             log07_file_name(len(older)): good + torn})
    newest = d / log07_file_name(len(older))
    with Log07.open(d, read_only=True) as log:
        assert log.log_end_offset == len(older) + len(good)
        assert [m.payload for m in log.messages()] == [b"old", b"kept"]
    assert newest.stat().st_size == len(good + torn)            # read-only changed nothing
    with caplog.at_level(logging.WARNING), Log07.open(d) as log:
        assert log.log_end_offset == len(older) + len(good)
        assert list(log.recovery_report) == [{
            "action": "truncated", "file": newest.name, "offset": len(older) + len(good),
            "bytes": len(torn), "reason": "the last message is truncated"}]
    assert newest.stat().st_size == len(good)
    assert f"truncated {newest.name} at offset {len(older) + len(good)} ({len(torn)} bytes)" \
        in caplog.text


def test_bad_crc_followed_by_zeros(tmp_path, caplog):
    good = entry(b"good")
    bad = entry(b"garbage after the inode grew", crc=12345)
    tail = good + bad + b"\0" * 64 + entry(b"never reached")
    d = write_dir(tmp_path, {log07_file_name(0): tail})
    with Log07.open(d, read_only=True) as log:
        assert log.log_end_offset == len(good)
        assert [m.payload for m in log.messages()] == [b"good"]
        assert log.read(len(good), 100) == b""                  # the log end
        with pytest.raises(OffsetOutOfRangeError):
            log.read(len(good + bad), 100)
    assert (d / log07_file_name(0)).stat().st_size == len(tail)
    with caplog.at_level(logging.WARNING), Log07.open(d) as log:
        (action,) = log.recovery_report
        assert (action["offset"], action["bytes"]) == (len(good), len(tail) - len(good))
        assert "CRC32" in action["reason"]
        log.append([b"after"])
        assert [m.payload for m in log.messages()] == [b"good", b"after"]
    assert (d / log07_file_name(0)).stat().st_size == len(good) + len(entry(b"after"))


def test_recovery_counts_the_intact_messages_it_cuts(tmp_path):
    good, bad, after = entry(b"good"), entry(b"bad", crc=1), entry(b"intact") + entry(b"too")
    d = write_dir(tmp_path, {log07_file_name(0): good + bad + after + b"\0\0"})
    with Log07.open(d) as log:
        assert log.recovery_report.dropped == {
            "records": 2, "first_offset": len(good + bad),
            "last_offset": len(good + bad + entry(b"intact")), "segments": 0,
            "bytes": len(bad + after) + 2}


def test_older_file_corruption_is_an_error(tmp_path):
    f0 = entry(b"a") + entry(b"b", crc=1)
    d = write_dir(tmp_path, {log07_file_name(0): f0, log07_file_name(len(f0)): entry(b"c")})
    with Log07.open(d, read_only=True) as log:
        it = log.messages()
        assert next(it).payload == b"a"
        with pytest.raises(CorruptRecordError, match="CRC32"):
            next(it)
        assert [m.payload for m in log.messages(validate_crc=False)] == [b"a", b"b", b"c"]


# --- writing -----------------------------------------------------------------------------------

def test_append_codecs_round_trip(tmp_path):
    d = tmp_path / "t_0"
    d.mkdir()
    with Log07.open(d) as log:
        assert os.listdir(d) == [log07_file_name(0)]
        assert log.append([b"a", b"b"]) == (0, 2 * len(entry(b"a")))
        start, end = log.append([b"g1", b"g2"], codec="gzip")
        s2, _ = log.append([b"s1"], codec="snappy")
        with pytest.raises(UnsupportedCompressionError):
            log.append([b"x"], codec="lz4")
        assert log.append([]) == (log.log_end_offset, log.log_end_offset)
    with Log07.open(d, read_only=True) as log:
        assert listing(log)[2:] == [(start, end, b"g1", "gzip"), (start, end, b"g2", "gzip"),
                                    (s2, log.log_end_offset, b"s1", "snappy")]
        with pytest.raises(KafkaLogError, match="read-only"):
            log.append([b"x"])
    data = (d / log07_file_name(0)).read_bytes()
    assert data[:2 * len(entry(b"a"))] == entry(b"a") + entry(b"b")     # the bytes 0.7 wrote
    assert data[start + 4:start + 6] == b"\x01\x01"                      # magic 1, gzip


def test_flush_every_m_messages_or_s_seconds(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    now = [1000.0]
    d = tmp_path / "t-0"
    d.mkdir()
    with Log07.open(d, config={"flush.messages": 3, "flush.ms": 5000},
                    time_fn=lambda: now[0]) as log:
        for i in range(6):
            log.append([b"m%d" % i])
        assert len(synced) == 2                           # every 3 messages
        log.append([b"late"])
        assert not log.maybe_flush()
        now[0] += 5.0                                     # flush.ms passed
        assert log.maybe_flush() and len(synced) == 3
        log.append([b"a", b"b", b"c"], codec="gzip")      # one wrapper: one message to 0.7
        assert len(synced) == 3


def test_roll_and_limits(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    with Log07.open(d, config={"segment.bytes": 40, "max.message.bytes": 100}) as log:
        for i in range(7):
            log.append([b"m%d" % i])
        # rolled once the newest file held more than segment.bytes
        sizes = [s.size for s in log.segments]
        assert len(sizes) >= 2 and all(s > 40 for s in sizes[:-1])
        assert sorted(os.listdir(d)) == [log07_file_name(s.base_offset) for s in log.segments]
        with pytest.raises(RecordTooLargeError):
            log.append([b"x" * 200])
        assert [m.payload for m in log.messages()] == [b"m%d" % i for i in range(7)]
    with pytest.raises(LogClosedError):
        log.read(0, 10)


def test_retention_deletes_whole_files(tmp_path, caplog):
    d = tmp_path / "t-0"
    d.mkdir()
    with Log07.open(d, config={"segment.bytes": 20, "retention.bytes": 60}) as log:
        for i in range(8):
            log.append([b"payload %d" % i])
        before = [s.base_offset for s in log.segments]
        with caplog.at_level(logging.WARNING):
            deleted = log.delete_old_segments()
        assert deleted > 0 and log.size < 60 + log.segments[0].size
        assert [s.base_offset for s in log.segments] == before[deleted:]
        assert log.log_start_offset == before[deleted]
        assert "retention size breach" in caplog.text
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0, 100)
        n = len(log.segments)
        assert log.delete_old_segments(policies=[SegmentCountRetention(1)]) == n - 1
        assert len(log.segments) == 1
    with Log07.open(d, config={"retention.ms": 10}) as log:   # every file aged out: rolled first
        end = log.log_end_offset
        assert log.delete_old_segments(now_ms=10**15) == 1
        assert (log.log_start_offset, log.log_end_offset, log.size) == (end, end, 0)
        assert os.listdir(d) == [log07_file_name(end)]


def test_open_errors(tmp_path):
    with pytest.raises(LogNotFoundError):
        Log07.open(tmp_path / "missing")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(NotAPartitionDirectoryError):
        Log07.open(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PartitionNotFoundError, match="an empty directory"):
        Log07.open(tmp_path / "empty", read_only=True)    # nothing to read (issue 41)
    assert os.listdir(tmp_path / "empty") == []
    d = write_dir(tmp_path, {"0.kafka": entry(b"a")})
    with pytest.raises(PartitionNotFoundError, match="Log07"):
        Log.open(d)                                       # no .log is created beside it
    assert os.listdir(d) == ["0.kafka"]


def test_python_paths_agree_with_the_twins(tmp_path):
    """Recovery, messages, reads and the scan reader's tables through the compiled kernels
    and through their twins, in one process (``twins.both_ways``)."""
    from twins import PURE, both_ways
    if PURE:
        pytest.skip("the twins are the kernels in this process")
    runs = iter(range(2))

    def scenario():
        good = entry(b"a", magic=0) + gzip_wrapper(b"g1", b"g2") + snappy_wrapper(b"s")
        d = write_dir(tmp_path, {log07_file_name(0): good + entry(b"bad", crc=3) + b"\0" * 9},
                      name=f"t-{next(runs)}")
        with Log07.open(d) as log:
            rows = next(walk_all(memoryview(good), 0, len(good), True))[0]
            table = message_table(good, rows, 0)
            return (list(log.recovery_report), listing(log), log.read(0, 1000),
                    table.records.tolist(), bytes(table.data))
    both_ways(scenario)


@pytest.mark.parametrize("code,error,match", [
    (errno.ENOSPC, LogDirFailureError, "No space left"),
    # out of descriptors is its own error naming the knob, not a disk fault, as for Log
    (errno.EMFILE, TooManyOpenFilesError, "KAFKALOG_MAX_OPEN_SEGMENTS"),
])
def test_a_failed_write_takes_the_log_offline(tmp_path, monkeypatch, code, error, match):
    d = tmp_path / "t-0"
    d.mkdir()
    log = Log07.open(d, config={"flush.messages": 1})
    log.append([b"a"])

    def failing(fd):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(error, match=match) as e:
        log.append([b"b"])
    assert e.value.errno == code
    with pytest.raises(KafkaLogError, match="offline"):
        log.append([b"c"])
    log.close()                                     # no flush of an offline log, no error
    monkeypatch.undo()
    with Log07.open(d) as log:
        assert [m.payload for m in log.messages()] == [b"a", b"b"]
