"""Hostile files and lying indexes at load (issue #16): only regular files are opened, and
an index that lies after a clean shutdown is rebuilt instead of hiding records."""
import os
import signal
import socket
import stat
import struct

import numpy as np
import pytest

from kafkalog import Record
from kafkalog.errors import KafkaLogError, LogClosedError, NotARegularFileError
from kafkalog.files import LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA, RECOVERY_POINT_CHECKPOINT
from kafkalog.index import offset_entries_problem, time_entries_problem
from kafkalog.log import Log
from kafkalog.manager import LogManager


@pytest.fixture(autouse=True)
def no_hang():
    """A test that blocks (opening a FIFO) fails instead of hanging the suite."""
    def timeout(*_):
        raise TimeoutError("blocked: a FIFO was opened")
    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def make_log(path, n=300, per=10, **config):
    with Log.open(path, {"index.interval.bytes": 100, **config}) as log_:
        for i in range(n):
            log_.append([Record(key=b"k", value=b"v%d" % (i * per + j),
                                timestamp=1_700_000_000_000 + i) for j in range(per)])
    return n * per


def fifo(path):
    os.mkfifo(path)


def unix_socket(path):
    # bound by a name relative to its directory: a socket's path may not exceed 107 bytes
    s, cwd = socket.socket(socket.AF_UNIX), os.getcwd()
    try:
        os.chdir(path.parent)
        s.bind(path.name)
    finally:
        os.chdir(cwd)
        s.close()


def directory(path):
    os.mkdir(path)


def char_device(path):
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs root")


KINDS = {"fifo": fifo, "socket": unix_socket, "directory": directory, "device": char_device}


def offsets(log_):
    return [r.offset for r in log_.records()]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("name", ["00000000000000005000.log",
                                  "00000000000000005000.log.swap",
                                  "00000000000000005000.log.deleted",
                                  "00000000000000005000.index.cleaned"])
def test_a_segment_file_that_is_not_regular_is_skipped_and_reported(tmp_path, kind, name):
    path = tmp_path / "t-0"
    n = make_log(path, n=30)
    KINDS[kind](path / name)
    with Log.open(path, clean_shutdown=True) as log_:
        assert offsets(log_) == list(range(n))
        skipped = [a for a in log_.recovery_report if a["action"] == "skipped_file"]
        assert [a["file"] for a in skipped] == [name]
        assert "not a regular file" in skipped[0]["reason"]
    for read_only in (True, False):    # unclean and read-only loads skip it too
        with Log.open(path, clean_shutdown=False, recovery_point=0,
                      read_only=read_only) as log_:
            assert offsets(log_) == list(range(n))
    assert os.path.lexists(path / name)     # reported, never removed


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("suffix", [".index", ".timeindex", ".txnindex"])
def test_an_index_that_is_not_regular_is_an_error(tmp_path, kind, suffix):
    path = tmp_path / "t-0"
    make_log(path, n=30)
    target = path / f"00000000000000000000{suffix}"
    if target.exists():
        target.unlink()
    KINDS[kind](target)
    for read_only in (False, True):
        with pytest.raises(NotARegularFileError):
            Log.open(path, clean_shutdown=True, read_only=read_only)


def test_a_fifo_as_the_only_segment_is_an_error(tmp_path):
    path = tmp_path / "t-0"
    path.mkdir()
    fifo(path / "00000000000000000000.log")
    with pytest.raises(NotARegularFileError):
        Log.open(path)
    with pytest.raises(KafkaLogError):
        Log.open(path, read_only=True)


def _rewrite_entry(index_path, slot, position):
    data = bytearray(index_path.read_bytes())
    if slot < 0:
        slot += len(data) // 8
    rel, _ = struct.unpack_from(">ii", data, slot * 8)
    struct.pack_into(">ii", data, slot * 8, rel, position)
    index_path.write_bytes(bytes(data))
    return rel


@pytest.mark.parametrize("where", ["at_the_end", "past_the_end", "mid_batch", "negative"])
def test_last_offset_index_entry_that_lies_after_a_clean_shutdown(tmp_path, where):
    """Used to give a log end offset of 0: records() returned 0 of 3,000 records and read(50)
    raised OffsetOutOfRangeError."""
    path = tmp_path / "t-0"
    n = make_log(path)
    size = (path / "00000000000000000000.log").stat().st_size
    position = {"at_the_end": size, "past_the_end": size * 10, "mid_batch": size - 100,
                "negative": -5}[where]
    _rewrite_entry(path / "00000000000000000000.index", -1, position)
    with Log.open(path, clean_shutdown=True) as log_:
        assert log_.log_end_offset == n
        assert offsets(log_) == list(range(n))
        assert len(log_.read(50).records) > 0
        assert any(a["action"] == "rebuilt_index" for a in log_.recovery_report)
    # rebuilt on disk: the next load finds nothing to repair
    with Log.open(path, clean_shutdown=True) as log_:
        assert not log_.recovery_report
        assert offsets(log_) == list(range(n))


def test_offset_index_entry_mid_batch_after_a_clean_shutdown(tmp_path):
    """Used to make read(50) fail or return nothing for an offset in range."""
    path = tmp_path / "t-0"
    n = make_log(path)
    index = path / "00000000000000000000.index"
    entries = np.frombuffer(index.read_bytes(), dtype=">i4").reshape(-1, 2)
    slot = int(np.searchsorted(entries[:, 0], 50, side="right")) - 1
    _rewrite_entry(index, slot, int(entries[slot, 1]) + 7)
    with Log.open(path, clean_shutdown=True) as log_:
        info = log_.read(50)
        assert len(info.records) > 0
        first = [r.offset for r in log_.records(50, 51)]
        assert first == [50]
        assert offsets(log_) == list(range(n))
        assert any(a["action"] == "rebuilt_index" for a in log_.recovery_report)
    with Log.open(path, clean_shutdown=True) as log_:
        assert [r.offset for r in log_.records(50, 51)] == [50]
        assert not log_.recovery_report


def test_offset_index_entries_that_lie_in_an_inactive_segment(tmp_path):
    path = tmp_path / "t-0"
    n = make_log(path, **{"segment.bytes": 4000})
    first = path / "00000000000000000000.index"
    rel = _rewrite_entry(first, 0, 10**6)            # past the end of the .log
    with Log.open(path, clean_shutdown=True) as log_:
        assert len(log_.segments) > 3
        assert offsets(log_) == list(range(n))
        assert [r.offset for r in log_.records(rel, rel + 1)] == [rel]
        assert any(a["action"] == "rebuilt_index" and a["file"] == first.name
                   for a in log_.recovery_report)


def test_time_index_entry_outside_its_segment(tmp_path):
    path = tmp_path / "t-0"
    n = make_log(path, **{"segment.bytes": 4000})
    tindex = path / "00000000000000000000.timeindex"
    data = bytearray(tindex.read_bytes())
    struct.pack_into(">i", data, len(data) - 4, 10**6)
    tindex.write_bytes(bytes(data))
    with Log.open(path, clean_shutdown=True) as log_:
        # checked when first opened (by a timestamp lookup), rebuilt then
        assert log_.offset_for_timestamp(1_700_000_000_005)[0] == 50
        assert any(a["action"] == "rebuilt_index" and a["file"] == tindex.name
                   for a in log_.recovery_report)
        assert offsets(log_) == list(range(n))


def test_vectorized_index_checks():
    rel = np.array([10, 20, 30], dtype=np.int64)
    pos = np.array([100, 200, 300], dtype=np.int64)
    assert offset_entries_problem(rel, pos, 400) is None
    assert offset_entries_problem(rel[:0], pos[:0], 0) is None
    assert "past the end" in offset_entries_problem(rel, pos, 310)
    assert "offsets do not increase" in offset_entries_problem(
        np.array([10, 10, 30]), pos, 400)
    assert "positions do not increase" in offset_entries_problem(
        rel, np.array([100, 90, 300]), 400)
    assert "below the base offset" in offset_entries_problem(np.array([-1, 20, 30]), pos, 400)
    ts = np.array([1, 2, 2], dtype=np.int64)
    assert time_entries_problem(ts, rel) is None
    assert time_entries_problem(ts, rel, 30) is None
    assert "past the segment" in time_entries_problem(ts, rel, 29)
    assert "do not increase" in time_entries_problem(np.array([1, 3, 2]), rel)
    assert "below the base offset" in time_entries_problem(ts, np.array([-1, 0, 1]))


# --- log dir files, names and closed logs (the lead's part of the table) ---------------------

def test_a_fifo_named_like_a_checkpoint_does_not_hang_the_manager(tmp_path, caplog):
    with LogManager([tmp_path], background=False) as mgr:
        mgr.get_or_create_log("t", 0).append([Record(key=b"k", value=b"v")])
    os.remove(tmp_path / RECOVERY_POINT_CHECKPOINT)
    os.mkfifo(tmp_path / RECOVERY_POINT_CHECKPOINT)
    with LogManager([tmp_path], background=False) as mgr:   # read as missing, with a warning
        assert [r.value for r in mgr.get_log("t", 0).records()] == [b"v"]
        assert "is a FIFO, not a regular file" in caplog.text
    # the next checkpoint write replaced the FIFO with a regular file
    assert os.path.isfile(tmp_path / RECOVERY_POINT_CHECKPOINT)


@pytest.mark.parametrize("name", [LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA,
                                  "00000000000000000001.snapshot"])
def test_a_fifo_named_like_a_partition_file_does_not_hang_open(tmp_path, name):
    path = tmp_path / "t-0"
    with Log.open(path) as log:
        log.append([Record(key=b"k", value=b"v")])
    target = path / name
    if target.exists():
        os.remove(target)
    os.mkfifo(target)
    try:
        with Log.open(path, read_only=True) as log:
            assert [r.value for r in log.records()] == [b"v"]
    except KafkaLogError as e:               # refused with a typed error is fine too
        assert "FIFO" in str(e)


@pytest.mark.parametrize("name", ["99999999999999999999.log", "99999999999999999999.index",
                                  "abc.log.swap", "0000000000000000000x.log",
                                  "00000000000000000000.log.junk"])
def test_names_that_are_not_kafka_files_are_ignored_not_fatal(tmp_path, name):
    path = tmp_path / "t-0"
    with Log.open(path) as log:
        log.append([Record(key=b"k", value=b"v")])
    (path / name).write_bytes(b"x" * 64)
    for read_only in (True, False):
        with Log.open(path, read_only=read_only) as log:
            assert [r.value for r in log.records()] == [b"v"]
            ignored = [a for a in log.recovery_report if a["action"] == "ignored_file"]
            assert [a["file"] for a in ignored] == ([name] if name.endswith(
                (".log", ".index", ".swap")) else [])
    assert (path / name).exists()            # someone else's file: left alone


def test_reading_a_closed_log_is_a_typed_error(tmp_path):
    log = Log.open(tmp_path / "t-0", {"segment.bytes": 1024})
    for i in range(200):
        log.append([Record(key=b"k", value=b"v%d" % i)])
    running = log.records()
    next(running)
    log.close()
    with pytest.raises(LogClosedError):
        list(log.records())
    with pytest.raises(LogClosedError):
        log.read(0)
    with pytest.raises(LogClosedError):
        log.offset_for_timestamp(0)
    with pytest.raises(LogClosedError):
        log.append([Record(key=b"k", value=b"v")])
    with pytest.raises(LogClosedError):
        list(running)                        # a generator still running at close()
