"""Symbolic links among a log's files (issue 31): a writable open refuses a segment, index,
snapshot or checkpoint that is a link leading outside its partition directory (a log dir's
checkpoint: outside the log dir) before writing anything; a read-only open reads through it
and says so."""
import logging
import os
import shutil

import pytest

from kafkalog import Log, Record, checkpoint
from kafkalog.builder import build_control_batch
from kafkalog.errors import NotARegularFileError, SymlinkOutsideError
from kafkalog.manager import LogManager

PARTITION_FILES = ["00000000000000000000.log", "00000000000000000000.index",
                   "00000000000000000000.timeindex", "00000000000000000000.txnindex",
                   "00000000000000000003.snapshot", "leader-epoch-checkpoint",
                   "partition.metadata"]
LOG_DIR_FILES = ["recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                 "log-start-offset-checkpoint"]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A log dir after a clean shutdown holding every kind of file: t-0 with an aborted
    transaction (.txnindex), a producer snapshot, leader epochs and a topic id."""
    root = tmp_path_factory.mktemp("symlinks") / "logdir"
    with LogManager(root, background=False) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append([Record(key=b"k", value=b"v")], partition_leader_epoch=2)
        log.append([Record(key=b"a", value=b"b")], producer_id=7, producer_epoch=0,
                   base_sequence=0, transactional=True)
        log.append(build_control_batch("abort", producer_id=7, producer_epoch=0),
                   partition_leader_epoch=2)
        log.assign_topic_id("AAAAAAAAAAAAAAAAAAAAAA")
    assert sorted(os.listdir(root / "t-0")) == sorted(PARTITION_FILES)
    assert set(LOG_DIR_FILES) <= set(os.listdir(root))
    return root


def _linked(template, tmp_path, name, dangling=False):
    """A copy of the template whose file ``name`` (in t-0, or in the log dir) was moved out
    of the log dir and replaced by a symbolic link to it. Returns (log dir, target)."""
    root = tmp_path / "logdir"
    shutil.copytree(template, root)
    where = root / "t-0" if name in PARTITION_FILES else root
    target = tmp_path / "elsewhere" / name
    target.parent.mkdir()
    shutil.move(where / name, target)
    if dangling:
        target.unlink()
    (where / name).symlink_to(target)
    return root, target


def _state(tmp_path):
    """Every path under ``tmp_path``: a link's target, a file's bytes."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(tmp_path):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                found[path] = ("link", os.readlink(path))
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    found[path] = ("file", f.read())
            else:
                found[path] = ("dir", None)
    return found


def _open_writable(how, root):
    if how == "manager":
        return LogManager(root, background=False)
    return Log.open(root / "t-0", clean_shutdown=False if how == "unclean" else None)


@pytest.mark.parametrize("how", ["log", "unclean", "manager"])
@pytest.mark.parametrize("name", PARTITION_FILES + LOG_DIR_FILES)
def test_writable_open_refuses_a_link_outside_and_changes_nothing(template, tmp_path, name,
                                                                   how):
    root, target = _linked(template, tmp_path, name)
    before = _state(tmp_path)
    with pytest.raises(SymlinkOutsideError) as e:
        _open_writable(how, root)
    assert isinstance(e.value, NotARegularFileError)
    assert e.value.target == str(target) and e.value.path.endswith(name)
    assert str(target) in str(e.value)
    assert _state(tmp_path) == before


def test_a_dangling_link_outside_is_refused_and_its_target_not_created(template, tmp_path):
    root, target = _linked(template, tmp_path, "00000000000000000003.snapshot", dangling=True)
    with pytest.raises(SymlinkOutsideError):
        Log.open(root / "t-0")
    assert not target.exists()


@pytest.mark.parametrize("name", PARTITION_FILES + LOG_DIR_FILES)
def test_read_only_open_reads_through_a_link_and_reports_it(template, tmp_path, name, caplog):
    root, target = _linked(template, tmp_path, name)
    before = _state(tmp_path)
    with caplog.at_level(logging.WARNING, logger="kafkalog"):
        with Log.open(root / "t-0", read_only=True) as log:
            assert [r.key for r in log.records()] == [b"k", b"a"] and log.log_end_offset == 3
    assert any(str(target) in r.getMessage() and "symbolic link" in r.getMessage()
               for r in caplog.records)
    manager = LogManager(root, read_only=True)
    try:
        assert manager.get_log("t", 0).log_end_offset == 3
    finally:
        manager.shutdown()
    assert _state(tmp_path) == before


def test_a_link_inside_the_partition_directory_is_followed(template, tmp_path):
    root = tmp_path / "logdir"
    shutil.copytree(template, root)
    part = root / "t-0"
    os.replace(part / "00000000000000000000.log", part / "segment-data")
    (part / "00000000000000000000.log").symlink_to("segment-data")
    with Log.open(part, clean_shutdown=False) as log:
        log.append([Record(key=b"more", value=b"x")])
    assert os.path.islink(part / "00000000000000000000.log")
    with Log.open(part, read_only=True) as log:
        assert [r.key for r in log.records()] == [b"k", b"a", b"more"]


def test_a_checkpoint_write_replaces_a_linked_temporary_file(tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(b"untouched")
    path = tmp_path / "dir" / "leader-epoch-checkpoint"
    path.parent.mkdir()
    (path.parent / "leader-epoch-checkpoint.tmp").symlink_to(outside)
    checkpoint.write_leader_epoch_checkpoint(path, [(1, 0)])
    assert outside.read_bytes() == b"untouched"
    assert checkpoint.read_leader_epoch_checkpoint(path) == [(1, 0)]
    assert not os.path.lexists(path.parent / "leader-epoch-checkpoint.tmp")


def test_a_dangling_lock_link_creates_nothing(tmp_path):
    """The log dir's ``.lock`` is created when missing: a link in its place (dangling or not)
    is refused, and what it leads to is not created."""
    root = tmp_path / "logdir"
    root.mkdir()
    outside = tmp_path / "elsewhere.lock"
    os.symlink(outside, root / ".lock")
    with pytest.raises(SymlinkOutsideError, match=r"\.lock is a symbolic link"):
        LogManager(root, background=False)
    assert not outside.exists()
