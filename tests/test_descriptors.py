"""Descriptors bounded independently of segment count (issue #16): inactive segments hold
no descriptor until read, the least recently used give theirs back past a process-wide
limit, recovery releases what it opened, and readers racing eviction read correctly."""
import gc
import os
import random
import struct
import subprocess
import sys
import textwrap
import threading

import pytest

from kafkalog import Record, build_batch
from kafkalog.log import Log
from kafkalog.descriptor_cache import open_segment_count, set_max_open_segments

RECORDS_PER_SEGMENT = 3


def write_small_segments(directory, n, per=RECORDS_PER_SEGMENT):
    """``n`` one-batch segments of ``per`` records, with trimmed indexes (as a clean close
    leaves them)."""
    os.makedirs(directory, exist_ok=True)
    for i in range(n):
        base = i * per
        data = build_batch([Record(key=b"k%d" % (base + j), value=b"v%d" % (base + j),
                                   timestamp=1_700_000_000_000 + base + j) for j in range(per)],
                           base_offset=base)
        stem = os.path.join(directory, f"{base:020d}")
        with open(stem + ".log", "wb") as f:
            f.write(data)
        open(stem + ".index", "wb").close()
        with open(stem + ".timeindex", "wb") as f:
            f.write(struct.pack(">qi", 1_700_000_000_000 + base + per - 1, per - 1))


def fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def limit():
    old = set_max_open_segments(32)
    yield 32
    set_max_open_segments(old)


def _check_all(log_, n):
    offsets = [r.offset for r in log_.records()]
    assert offsets == list(range(n * RECORDS_PER_SEGMENT))


@pytest.mark.parametrize("clean", [True, False])
def test_many_segments_hold_bounded_descriptors(tmp_path, limit, clean):
    n = 3000
    path = tmp_path / "t-0"
    write_small_segments(path, n)
    before = fds()
    # (the process's other segments: logs earlier tests in this process left open)
    others = open_segment_count()
    log_ = Log.open(path, clean_shutdown=clean, recovery_point=0, log_start_offset=0)
    try:
        assert len(log_.segments) == n
        # After loading (and after recovering every segment) only the active one is open.
        assert fds() - before <= 8
        _check_all(log_, n)
        # Reading every segment opened each one, but at most ``limit`` stay open, each
        # holding at most its .log mapping and two index mappings.
        assert open_segment_count() - others <= limit + 1
        assert fds() - before <= 3 * (limit + 1) + 8
        # random reads: still bounded, still right
        rng = random.Random(16)
        for offset in rng.sample(range(n * RECORDS_PER_SEGMENT), 300):
            info = log_.read(offset, 1)
            assert info.fetch_offset_metadata.segment_base_offset == \
                offset - offset % RECORDS_PER_SEGMENT
        assert fds() - before <= 3 * (limit + 1) + 8
    finally:
        log_.close()
    assert fds() <= before


def test_unclean_recovery_reports_nothing_for_sound_segments(tmp_path, limit):
    path = tmp_path / "t-0"
    write_small_segments(path, 200)
    with Log.open(path, clean_shutdown=False, recovery_point=0, log_start_offset=0) as log_:
        assert [a["action"] for a in log_.recovery_report] == []
        _check_all(log_, 200)


def test_appends_and_rolls_with_a_tiny_limit(tmp_path):
    old = set_max_open_segments(2)
    try:
        path = tmp_path / "t-0"
        before = fds()
        with Log.open(path, {"segment.bytes": 300, "index.interval.bytes": 1}) as log_:
            for i in range(200):
                log_.append([Record(key=b"k", value=b"v%d" % i, timestamp=1000 + i)])
                if i % 7 == 0:
                    assert [r.value for r in log_.records(max(0, i - 5), i + 1)] == \
                        [b"v%d" % j for j in range(max(0, i - 5), i + 1)]
            assert len(log_.segments) > 20
            assert fds() - before <= 3 * 3 + 8
            assert [r.offset for r in log_.records()] == list(range(200))
            assert log_.offset_for_timestamp(1100)[0] == 100
        with Log.open(path, clean_shutdown=False, recovery_point=0) as log_:
            assert [r.value for r in log_.records()] == [b"v%d" % i for i in range(200)]
    finally:
        set_max_open_segments(old)


def test_readers_race_eviction_and_retention(tmp_path):
    """Threads read random offsets while the limit forces constant eviction and retention
    deletes the oldest segments: every read that succeeds returns the right batch."""
    old = set_max_open_segments(3)
    errors = []
    try:
        path = tmp_path / "t-0"
        n = 300
        write_small_segments(path, n)
        with Log.open(path, {"file.delete.delay.ms": 0, "retention.ms": -1},
                      clean_shutdown=True) as log_:
            stop = threading.Event()

            def reader(seed):
                rng = random.Random(seed)
                try:
                    while not stop.is_set():
                        start = log_.log_start_offset
                        offset = rng.randrange(start, n * RECORDS_PER_SEGMENT)
                        try:
                            recs = list(log_.records(offset, offset + 1))
                        except Exception as e:   # noqa: BLE001 - reported below
                            if log_.log_start_offset > offset:
                                continue          # deleted by retention meanwhile
                            raise AssertionError(f"offset {offset}: {e!r}") from e
                        if recs:
                            assert recs[0].offset == offset
                            assert recs[0].value == b"v%d" % offset
                except BaseException as e:      # noqa: BLE001
                    errors.append(e)

            threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for cut in range(0, 150 * RECORDS_PER_SEGMENT, 30):
                log_.delete_records(cut)
                log_.delete_old_segments()
            stop.set()
            for t in threads:
                t.join()
    finally:
        set_max_open_segments(old)
    assert not errors, errors[:3]


def test_limit_is_validated():
    with pytest.raises(ValueError):
        set_max_open_segments(0)


def test_twenty_thousand_segments_open_under_a_low_file_limit(tmp_path):
    """At 20,000 segments Log.open used to fail with "Too many open files" (2 descriptors a
    segment, 3 during recovery); now it opens, recovers and reads under a limit of 1,024."""
    path = tmp_path / "t-0"
    write_small_segments(path, 20_000, per=1)
    script = textwrap.dedent(f"""
        import os, resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
        from kafkalog.log import Log
        for clean in (True, False):
            with Log.open({str(path)!r}, clean_shutdown=clean, recovery_point=0,
                          log_start_offset=0) as log_:
                if not clean:
                    n = 0
                    for table in log_.record_tables():
                        n += len(table)
                    assert n == 20_000, n
                assert len(os.listdir("/proc/self/fd")) < 1024
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")


def test_a_new_segment_is_not_evicted_while_it_is_built(tmp_path):
    """With every listed segment pinned (the active segments of logs left open), creating a
    segment's file touches the cache: the half-built segment must not be the one evicted."""
    old = set_max_open_segments(1)
    try:
        with Log.open(tmp_path / "a-0") as a, Log.open(tmp_path / "b-0") as b:
            a.append([Record(value=b"a")])
            b.append([Record(value=b"b")])
            assert [r.value for r in b.records()] == [b"b"]
    finally:
        set_max_open_segments(old)


def _index_files(root):
    return [os.path.join(d, n) for d, _, names in os.walk(root) for n in names
            if n.endswith((".index", ".timeindex"))]


def test_every_index_is_trimmed_at_a_clean_shutdown_past_the_open_segment_limit(tmp_path):
    """More partitions than the descriptor cache holds: the active segments whose indexes it
    dropped untrimmed (idle since the load, or written then evicted) are trimmed at shutdown
    all the same, so the dir verifies clean and a reload finds exactly the entries."""
    from kafkalog.cli import main
    from kafkalog.manager import LogManager
    old = set_max_open_segments(4)
    try:
        config = {"index.interval.bytes": 1}
        for rounds in range(2):        # created, then loaded from a clean shutdown
            with LogManager(tmp_path, config, background=False) as mgr:
                for p in range(12):
                    log_ = mgr.get_or_create_log("t", p)
                    if p % 3 == rounds:
                        for i in range(3):
                            log_.append([Record(value=b"v%d" % i, timestamp=1000 + i)])
            sizes = {p: os.path.getsize(p) for p in _index_files(tmp_path)}
            assert len(sizes) == 24 and max(sizes.values()) <= 8 * 12, sizes
        assert main(["verify", str(tmp_path)]) == 0
        with LogManager(tmp_path, config, background=False) as mgr:
            for p in range(12):
                log_ = mgr.get_log("t", p)
                expected = 3 if p % 3 in (0, 1) else 0
                assert [r.offset for r in log_.records()] == list(range(expected))
                assert log_.segments.active.offset_index.entries == max(0, expected - 1)
    finally:
        set_max_open_segments(old)


def _maps_keep_no_descriptor():
    import kafkalog
    return kafkalog.compiled() or sys.version_info >= (3, 13)


@pytest.mark.skipif(not _maps_keep_no_descriptor(),
                    reason="the pure-Python FileMapping (mmap.mmap) keeps a descriptor "
                           "before Python 3.13")
def test_a_written_partition_holds_two_descriptors(tmp_path):
    """As in Kafka: the mapped indexes (and the .log's read mapping) keep no descriptor; a
    written partition holds its .log and its directory lock."""
    from kafkalog.manager import LogManager
    before = fds()
    with LogManager(tmp_path, {"index.interval.bytes": 1}, background=False) as mgr:
        for p in range(30):
            log_ = mgr.get_or_create_log("t", p)
            for i in range(3):
                log_.append([Record(value=b"v%d" % i, timestamp=1000 + i)])
            assert [r.value for r in log_.records()] == [b"v0", b"v1", b"v2"]
            assert log_.offset_for_timestamp(1001)[0] == 1
        assert fds() - before <= 2 * 30 + 1          # (+ the log dir's .lock)
    assert fds() <= before


@pytest.mark.parametrize("read_only", [False, True])
def test_a_log_collected_unclosed_lets_go_of_its_files_and_lock(tmp_path, read_only):
    """As a file object: a Log dropped without close() releases its descriptors, mappings and
    directory lock when collected (with a ResourceWarning), so the process can open the
    partition again, and finds every record appended."""
    path = tmp_path / "t-0"
    with Log.open(path) as log_:
        log_.append([Record(value=b"a")])
    gc.collect()                       # (logs earlier tests left unclosed)
    before, segments = fds(), open_segment_count()
    log_ = Log.open(path, read_only=read_only)
    if not read_only:
        log_.append([Record(value=b"b")])
    assert [r.offset for r in log_.records()]
    assert open_segment_count() > segments       # (its mappings; a writer also holds files)
    with pytest.warns(ResourceWarning, match="unclosed Log"):
        del log_
        gc.collect()
    assert fds() == before and open_segment_count() == segments
    with Log.open(path) as log_:
        assert [r.value for r in log_.records()] == [b"a"] + ([] if read_only else [b"b"])


def test_reaching_the_descriptor_limit_is_its_own_typed_error(tmp_path):
    """EMFILE is TooManyOpenFilesError naming the limit and KAFKALOG_MAX_OPEN_SEGMENTS, not
    a LogDirFailureError (which reads like a disk fault)."""
    script = textwrap.dedent(f"""
        import resource
        from kafkalog import Record
        from kafkalog.errors import LogDirFailureError, TooManyOpenFilesError
        from kafkalog.manager import LogManager
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        mgr = LogManager({str(tmp_path)!r}, background=False)
        try:
            for p in range(64):
                mgr.get_or_create_log("t", p).append([Record(value=b"v")])
            raise AssertionError("64 partitions opened under a limit of 64 files")
        except TooManyOpenFilesError as e:
            assert not isinstance(e, LogDirFailureError)
            assert e.limit == 64 and "64 open files" in str(e), e
            assert "KAFKALOG_MAX_OPEN_SEGMENTS" in str(e) and "ulimit -n" in str(e), e
            print(p, e)
        mgr.shutdown()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")
