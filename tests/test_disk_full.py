"""A real full disk and a read-only remount (#16): a small tmpfs (and an ext4 loop mount) is
filled for real, so the kernel, not a patched system call, says ENOSPC / EROFS.

Mounting needs root; without it (or without mount support) the tests skip with a message.
Each scenario runs in a subprocess: index files are sparse, and before real blocks were
allocated ahead of the next entry the first store into an unbacked index page killed the
interpreter with SIGBUS (exit 135), which must show as a failed test here, not as a dead
test run.
"""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="mounting a small tmpfs / loop device needs root")


def _mount(args, target):
    done = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount ({' '.join(args)}): {done.stderr.strip()}")


def _umount(target):
    subprocess.run(["umount", "-l", str(target)], capture_output=True)


@pytest.fixture
def small_tmpfs(tmp_path):
    target = tmp_path / "tmpfs"
    target.mkdir()
    _mount(["-t", "tmpfs", "-o", "size=8m", "tmpfs"], target)
    yield target
    _umount(target)


@pytest.fixture
def small_ext4(tmp_path):
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("mkfs.ext4 is not installed")
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(16 << 20)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed: {made.stderr.strip()}")
    target = tmp_path / "ext4"
    target.mkdir()
    _mount(["-o", "loop,errors=remount-ro", str(image)], target)
    yield target
    _umount(target)


def _trigger_ext4_error(mount_point):
    """Make ext4 record an error, so ``errors=remount-ro`` turns the mount read-only (the
    state a broker's disk is in after an I/O error); skips where the kernel lacks the knob."""
    device = subprocess.run(["findmnt", "-n", "-o", "SOURCE", str(mount_point)],
                            capture_output=True, text=True).stdout.strip()
    knob = f"/sys/fs/ext4/{os.path.basename(device)}/trigger_fs_error"
    if not os.path.exists(knob):
        pytest.skip(f"{knob} is missing: cannot make ext4 remount read-only")
    return knob


def _run(script, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, (f"exit {done.returncode} (135 = SIGBUS)\n"
                                  f"{done.stdout}\n{done.stderr}")
    return done.stdout


# Prepended to the scripts below: a file "filler" takes every free block of the disk.
FILL_DISK = """
    import errno, os
    def fill_disk(root):
        \"\"\"Write root/filler until ENOSPC (large writes, then pages): (its fd, its size).\"\"\"
        fd = os.open(os.path.join(root, "filler"), os.O_WRONLY | os.O_CREAT)
        size = 0
        for chunk in (65536, 4096):
            try:
                while True:
                    size += os.write(fd, b"x" * chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
        return fd, size
"""


# Appends until the disk is full: first records with a small index interval, so that the
# index crosses into a fresh page right when the disk fills (the page a sparse index could
# not back), then a filler file takes the rest of the disk and appends go on. Every append
# acknowledged before the failure was flushed (flush.messages=1): all must be there after.
FILL_AND_APPEND = FILL_DISK + """
    import errno, os, sys
    from kafkalog import Record
    from kafkalog.errors import KafkaLogError, LogDirFailureError
    from kafkalog.log import Log
    root, first = sys.argv[1], int(sys.argv[2])
    config = {"segment.bytes": 1 << 20, "segment.index.bytes": 1 << 20,
              "index.interval.bytes": 1, "flush.messages": 1}
    log = Log.open(os.path.join(root, "t-0"), config)
    acked = 0
    for _ in range(first):
        log.append([Record(key=b"k", value=b"v" * 100)])
        acked += 1
    fd, _ = fill_disk(root)
    os.close(fd)
    try:
        while True:
            log.append([Record(key=b"k", value=b"v" * 100)])
            acked += 1
    except LogDirFailureError as e:
        assert e.errno == errno.ENOSPC, e
        assert log.failed is not None and not log.usable
    try:
        log.append([Record(key=b"k", value=b"v")])
        raise AssertionError("an offline log took an append")
    except KafkaLogError as e:
        assert "offline" in str(e)
    log.close()                       # a failed log still closes and frees its partition
    os.remove(os.path.join(root, "filler"))
    with Log.open(os.path.join(root, "t-0"), config) as again:
        assert again.log_end_offset >= acked
        assert sum(1 for _ in again.records()) == again.log_end_offset
        again.append([Record(key=b"k", value=b"after")])   # writable again
    print("acked", acked)
"""


@pytest.mark.parametrize("first", [300, 341, 509, 511])
def test_full_tmpfs_raises_log_dir_failure_not_sigbus(small_tmpfs, first):
    assert "acked" in _run(FILL_AND_APPEND, small_tmpfs, first)


def test_full_ext4_loop_mount_raises_log_dir_failure(small_ext4):
    assert "acked" in _run(FILL_AND_APPEND, small_ext4, 509)


def test_indexes_are_sparse_and_fit_a_disk_smaller_than_them(small_tmpfs):
    """10 MiB indexes on an 8 MiB disk: sized like Kafka's (sparse), an idle partition holds
    no index blocks, and one that took entries holds them and a small window."""
    out = _run("""
        import os, sys
        from kafkalog import Record
        from kafkalog.index import ALLOCATION_WINDOW
        from kafkalog.log import Log
        path = os.path.join(sys.argv[1], "t-0")
        indexes = [os.path.join(path, "0" * 20 + s) for s in (".index", ".timeindex")]
        def blocks(p):
            return os.stat(p).st_blocks * 512
        with Log.open(path, {"index.interval.bytes": 1}) as log:
            assert all(os.path.getsize(p) > 8 << 20 for p in indexes)   # > the disk
            assert [blocks(p) for p in indexes] == [0, 0]
            for i in range(50):
                log.append([Record(key=b"k", value=b"v" * 100, timestamp=1000 + i)])
            assert all(0 < blocks(p) <= ALLOCATION_WINDOW + 4096 for p in indexes)
        with Log.open(path) as log:
            assert sum(1 for _ in log.records()) == 50
        print("ok")
    """, small_tmpfs)
    assert "ok" in out


# The disk fills up exactly when the offset index needs its next window of blocks: the .log
# write of the append still fits (one page is left), the index entry's allocation does not.
# That append fails typed (no SIGBUS), and every acknowledged one is there after a restart.
INDEX_ENTRY_ON_A_FULL_DISK = FILL_DISK + """
    import errno, os, sys
    from kafkalog import Record
    from kafkalog.errors import LogDirFailureError
    from kafkalog.log import Log
    root = sys.argv[1]
    path = os.path.join(root, "t-0")
    config = {"index.interval.bytes": 1, "flush.messages": 1}
    log = Log.open(path, config)
    index = os.path.join(path, "0" * 20 + ".index")
    acked = 0
    while True:       # one timestamp: only the offset index takes entries
        log.append([Record(key=b"k", value=b"v" * 30, timestamp=1000)])
        acked += 1
        entries = log.segments.active.offset_index.entries
        if entries > 1 and entries * 8 == os.stat(index).st_blocks * 512:
            break     # the index's allocated window is full
    fd, size = fill_disk(root)
    os.ftruncate(fd, size - 4096)            # room for the .log write, not for the index's
    os.close(fd)
    log_file = os.path.join(path, "0" * 20 + ".log")
    before = os.path.getsize(log_file)
    try:
        log.append([Record(key=b"k", value=b"v" * 30, timestamp=1000)])
        raise AssertionError("the append took an index entry on a full disk")
    except LogDirFailureError as e:
        assert e.errno == errno.ENOSPC, e
    assert os.path.getsize(log_file) > before, "the failure was not the index entry's"
    log.close()
    os.remove(os.path.join(root, "filler"))
    with Log.open(path, config) as again:
        assert again.log_end_offset >= acked
        assert sum(1 for _ in again.records()) == again.log_end_offset
        again.append([Record(key=b"k", value=b"after")])
    print("acked", acked)
"""


def test_index_entry_on_a_full_disk_raises_log_dir_failure_not_sigbus(small_tmpfs):
    assert "acked" in _run(INDEX_ENTRY_ON_A_FULL_DISK, small_tmpfs)


# The manager on a full disk and after a read-only remount: checkpoint() and shutdown()
# raise LogDirFailureError with the errno, shutdown still releases .lock and the partition
# locks, so the same process opens the dir again once it is writable.
MANAGER = FILL_DISK + """
    import errno, os, subprocess, sys
    from kafkalog import Record
    from kafkalog.errors import LogDirFailureError
    from kafkalog.manager import LogManager
    root, how = sys.argv[1], sys.argv[2]
    config = {"segment.index.bytes": 1 << 16}
    mgr = LogManager([root], config, background=False)
    log = mgr.get_or_create_log("t", 0)
    for i in range(100):
        log.append([Record(key=b"k%d" % i, value=b"v" * 100)])
    log.flush()
    mgr.checkpoint()
    if how == "full":
        fd, _ = fill_disk(root)
        os.close(fd)
        expected = errno.ENOSPC
    else:
        with open(sys.argv[3], "w") as knob:     # ext4 errors=remount-ro: EROFS from now on
            knob.write("1")
        expected = errno.EROFS
    try:
        mgr.checkpoint()
        raise AssertionError("checkpoint on a failed dir did not fail")
    except LogDirFailureError as e:
        assert e.errno == expected, e
    try:
        mgr.shutdown()
        raise AssertionError("shutdown on a failed dir did not fail")
    except LogDirFailureError as e:
        assert e.errno == expected, e
    import fcntl                      # the failed shutdown released the dir and partition
    for path in (os.path.join(root, ".lock"), os.path.join(root, "t-0")):
        fd = os.open(path, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    if how == "full":
        os.remove(os.path.join(root, "filler"))
        with LogManager([root], config, background=False) as again:   # same process
            assert sum(1 for _ in again.get_log("t", 0).records()) == 100
    else:
        with LogManager([root], config, background=False, read_only=True) as again:
            assert sum(1 for _ in again.get_log("t", 0).records()) == 100
    print("ok")
"""


def test_manager_checkpoint_and_shutdown_on_a_full_disk(small_tmpfs):
    assert "ok" in _run(MANAGER, small_tmpfs, "full")


def test_manager_checkpoint_and_shutdown_after_an_ext4_error_remount(small_ext4):
    assert "ok" in _run(MANAGER, small_ext4, "readonly", _trigger_ext4_error(small_ext4))


# A broker's restart after its disk filled (#31): the partitions' indexes are sparse, so a
# reload allocates nothing for them; a load that fails on the full disk leaves nothing
# allocated behind, and 2 MiB freed are enough to load and write every partition again.
RESTART_ON_A_FULL_DISK = FILL_DISK + """
    import errno, os, sys
    from kafkalog import Record
    from kafkalog.errors import LogDirFailureError
    from kafkalog.manager import LogManager
    root, n = sys.argv[1], int(sys.argv[2])
    def free():
        st = os.statvfs(root)
        return st.f_bfree * st.f_frsize
    with LogManager(root, background=False) as mgr:
        for p in range(n):
            mgr.get_or_create_log("t", p).append([Record(value=b"v" * 100)])
    fd, size = fill_disk(root)
    before = free()
    try:                          # nothing free: the load may fail, typed, and then it
        LogManager(root, background=False).shutdown()     # must leave nothing allocated
    except LogDirFailureError as e:
        assert e.errno == errno.ENOSPC, e
        assert free() == before, (free(), before)
    os.ftruncate(fd, size - (2 << 20))
    os.close(fd)
    with LogManager(root, background=False) as mgr:
        for p in range(n):
            log = mgr.get_log("t", p)
            log.append([Record(value=b"w" * 100)])
            assert [r.value[:1] for r in log.records()] == [b"v", b"w"], p
    print("ok")
"""


def test_restart_after_a_full_disk_needs_little_free_whatever_the_partitions(small_tmpfs):
    assert "ok" in _run(RESTART_ON_A_FULL_DISK, small_tmpfs, 20)
