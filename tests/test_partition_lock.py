"""One writer per partition (#16): a writable ``Log`` holds an advisory lock on its partition
directory (and, shared, its log dir's ``.lock``); a second writer in this or another process
gets ``LogDirLockedError``; read-only opens take no lock and work beside a live writer."""
import os
import subprocess
import sys
import textwrap

import pytest

from kafkalog import Record
from kafkalog.errors import LogDirLockedError
from kafkalog.log import Log
from kafkalog.manager import LogManager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _records(n, start=0):
    return [Record(key=b"k%d" % i, value=b"v%d" % i) for i in range(start, start + n)]


def test_second_writer_in_the_same_process_is_refused(tmp_path):
    path = tmp_path / "t-0"
    with Log.open(path) as log:
        log.append(_records(3))
        with pytest.raises(LogDirLockedError, match="t-0"):
            Log.open(path)
        assert log.log_end_offset == 3 and log.usable     # the holder is unaffected
        with Log.open(path, read_only=True) as reader:      # readers take no lock
            assert [r.value for r in reader.records()] == [b"v0", b"v1", b"v2"]
    with Log.open(path) as again:                           # free after close
        assert again.log_end_offset == 3


def test_the_lock_creates_no_file(tmp_path):
    path = tmp_path / "t-0"
    with Log.open(path) as log:
        log.append(_records(1))
        names = set(os.listdir(path))
    assert not any("lock" in n for n in names)
    assert not any("lock" in n for n in os.listdir(tmp_path))


def test_a_failed_open_leaves_the_partition_free(tmp_path):
    path = tmp_path / "t-0"
    with Log.open(path) as log:
        log.append(_records(1))
    with pytest.raises(Exception):
        Log.open(path, {"segment.bytes": -1})
    with Log.open(path) as log:
        assert log.log_end_offset == 1


def test_a_partition_of_a_running_manager_is_refused(tmp_path):
    with LogManager([tmp_path], background=False) as mgr:
        log = mgr.get_or_create_log("t", 0)
        log.append(_records(5))
        with pytest.raises(LogDirLockedError):
            Log.open(tmp_path / "t-0")
        with pytest.raises(LogDirLockedError):              # a new partition of its dir too
            Log.open(tmp_path / "u-0")
        assert not os.path.exists(tmp_path / "u-0") or not os.listdir(tmp_path / "u-0")
        with Log.open(tmp_path / "t-0", read_only=True) as reader:
            assert reader.log_end_offset == 5
        log.append(_records(5, 5))
    with LogManager([tmp_path], background=False) as mgr:
        assert sum(1 for _ in mgr.get_log("t", 0).records()) == 10


def test_a_manager_is_refused_while_a_standalone_writer_holds_a_partition(tmp_path):
    LogManager([tmp_path], background=False).shutdown()      # a log dir with its .lock
    with Log.open(tmp_path / "t-0") as log:
        log.append(_records(2))
        with pytest.raises(LogDirLockedError):
            LogManager([tmp_path], background=False)
        with Log.open(tmp_path / "t-1") as other:           # writers of other partitions
            other.append(_records(1))                        # share the dir's lock
    with LogManager([tmp_path], background=False) as mgr:
        assert mgr.get_log("t", 0).log_end_offset == 2


# Two processes race to own one partition, each appending and flushing 2,000 records: one is
# refused with LogDirLockedError, every record the other acknowledged survives (before the
# lock, both succeeded and 1,461 of 4,000 survived).
WRITER = """
    import sys, time
    from kafkalog import Record
    from kafkalog.errors import LogDirLockedError
    from kafkalog.log import Log
    path, tag, go = sys.argv[1], sys.argv[2].encode(), float(sys.argv[3])
    while time.time() < go:
        time.sleep(0.001)
    try:
        log = Log.open(path, {"flush.messages": 1, "segment.bytes": 65536})
    except LogDirLockedError:
        print("locked")
        sys.exit(0)
    acked = 0
    for i in range(2000):
        log.append([Record(key=tag, value=b"%d" % i)])
        acked += 1
    log.close()
    print("wrote", acked)
"""


def test_two_processes_cannot_share_a_partition(tmp_path):
    import time
    path = tmp_path / "t-0"
    env = dict(os.environ, PYTHONPATH=ROOT)
    go = time.time() + 2.0
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(path),
                               tag, str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for tag in ("a", "b")]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    results = sorted(o.strip() for o, _ in outs)
    # Normally one is refused; if one finished before the other started, both wrote in turn.
    assert results in (["locked", "wrote 2000"], ["wrote 2000", "wrote 2000"]), outs
    with Log.open(path, read_only=True) as log:
        got = [(r.key, r.value) for r in log.records()]
    written = 2000 * sum(r.startswith("wrote") for r in results)
    assert len(got) == written
    for tag in (b"a", b"b"):
        values = [v for k, v in got if k == tag]
        assert values in ([], [b"%d" % i for i in range(2000)])


HOLDER = """
    import sys
    from kafkalog import Record
    from kafkalog.log import Log
    log = Log.open(sys.argv[1])
    log.append([Record(key=b"k", value=b"v")])
    log.flush()
    print("holding", flush=True)
    sys.stdin.read()                  # holds the partition until the test closes stdin
    log.close()
"""


def test_a_writer_in_another_process_is_refused_and_readers_are_not(tmp_path):
    path = tmp_path / "t-0"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(HOLDER), str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(LogDirLockedError):
            Log.open(path)
        with Log.open(path, read_only=True) as reader:
            assert [r.value for r in reader.records()] == [b"v"]
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    with Log.open(path) as log:                  # the holder's exit freed it
        assert log.log_end_offset == 1


def test_a_killed_writer_leaves_no_stale_lock(tmp_path):
    path = tmp_path / "t-0"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(HOLDER), str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=ROOT))
    assert holder.stdout.readline().strip() == "holding"
    holder.kill()
    holder.wait(timeout=60)
    with Log.open(path) as log:
        assert log.log_end_offset == 1


# A writer rolls and closes (trimming its indexes) while readers open the same partition
# read-only over and over: the readers copy index entries instead of mapping them, so a file
# shrinking under them cannot SIGBUS them (before, a reader of a live log could die).
LIVE_WRITER = """
    import sys, time
    from kafkalog import Record
    from kafkalog.log import Log
    path, until = sys.argv[1], time.time() + float(sys.argv[2])
    n = 0
    while time.time() < until:
        with Log.open(path, {"segment.bytes": 4096, "index.interval.bytes": 64}) as log:
            for _ in range(50):
                log.append([Record(key=b"k", value=b"v%d" % n)])
                n += 1
    print("wrote", n)
"""

LIVE_READER = """
    import sys, time
    from kafkalog.errors import KafkaLogError
    from kafkalog.log import Log
    path, until = sys.argv[1], time.time() + float(sys.argv[2])
    reads = 0
    while time.time() < until:
        try:
            with Log.open(path, read_only=True) as log:
                end = log.log_end_offset
                for r in log.records(max(0, end - 200)):
                    pass
                log.offset_for_timestamp(0)
                reads += 1
        except KafkaLogError:
            pass                  # a segment deleted or rolled under the open: typed is fine
    print("reads", reads)
"""


def test_readers_of_a_live_log_survive_its_writer(tmp_path):
    path = tmp_path / "t-0"
    with Log.open(path) as log:
        log.append(_records(1))
    env = dict(os.environ, PYTHONPATH=ROOT)
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(LIVE_WRITER), str(path),
                               "4"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    reader = subprocess.Popen([sys.executable, "-c", textwrap.dedent(LIVE_READER), str(path),
                               "4"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    _, w_err = writer.communicate(timeout=120)
    r_out, r_err = reader.communicate(timeout=120)
    assert writer.returncode == 0, w_err
    assert reader.returncode == 0, f"reader exit {reader.returncode} (-7 = SIGBUS)\n{r_err}"
    assert r_out.startswith("reads") and int(r_out.split()[1]) > 0
