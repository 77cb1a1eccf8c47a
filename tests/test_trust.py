"""Trust on data at rest: read-only writes nothing, CRCs are checked by every reader, empty
batches read everywhere, a broker's high watermark and a standalone log's log start offset are
kept. Damage is done to copies of the Kafka-written fixtures."""
import hashlib
import logging
import os
import shutil
import struct

import pytest
from crc32c import crc32c

from kafkalog import Log, LogManager, Record, build_batch, iter_batches
from kafkalog.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from kafkalog.errors import CorruptRecordError, KafkaLogError, LogNotFoundError

from conftest import fixture_names


def tree_state(root):
    """Every file and directory under ``root``: name -> (size, mtime, sha256)."""
    state = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs:
            state[os.path.relpath(os.path.join(directory, name), root)] = "dir"
        for name in files:
            path = os.path.join(directory, name)
            st = os.stat(path)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            state[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns, digest)
    return state


def read_everything(log):
    """Every record, offsets and facts a reader asks for (CRC failures tolerated)."""
    try:
        n = sum(1 for _ in log.records(include_control=True))
    except CorruptRecordError:
        n = sum(1 for _ in log.records(include_control=True, validate_crc=False))
    log.offsets()
    log.offset_for_timestamp(0)
    log.aborted_transactions(log.log_start_offset, log.log_end_offset)
    return n


@pytest.mark.parametrize("name", fixture_names())
def test_read_only_open_writes_nothing(fixture_copy, name):
    d = fixture_copy(name)
    before = tree_state(d.parent)
    with Log.open(d, read_only=True) as log:
        read_everything(log)
    assert tree_state(d.parent) == before


def test_read_only_open_of_a_damaged_copy_writes_nothing(fixture_copy):
    d = fixture_copy("multiseg-0")
    logs = sorted(p.name[:20] for p in d.glob("*.log"))
    (d / f"{logs[3]}.index").unlink()                   # a missing index
    (d / f"{logs[4]}.timeindex").write_bytes(b"\0" * 120)   # an all-zero time index
    (d / f"{logs[5]}.index").write_bytes(b"\1" * 13)    # not whole entries: corrupt
    snapshots = sorted(d.glob("*.snapshot"))
    snapshots[-1].write_bytes(b"garbage")               # a corrupt producer snapshot
    with open(d / f"{logs[-1]}.log", "ab") as f:        # a torn tail
        f.write(b"\0\0\0\0\0\0\0\1\0\0\1\0")
    before = tree_state(d.parent)
    with Log.open(d, read_only=True) as log:
        assert read_everything(log) == 30000
        assert log.log_end_offset == 30000
        assert log.offset_for_timestamp(0)[0] == 0
    assert tree_state(d.parent) == before


def test_read_only_open_of_a_missing_directory_is_a_typed_error(tmp_path):
    with pytest.raises(LogNotFoundError):
        Log.open(tmp_path / "typo-0", read_only=True)
    with pytest.raises(FileNotFoundError):                  # it is both
        Log.open(tmp_path / "typo-0", read_only=True)
    assert not (tmp_path / "typo-0").exists()
    with pytest.raises(LogNotFoundError):
        LogManager([tmp_path / "no-such-log-dir"], read_only=True)
    assert not (tmp_path / "no-such-log-dir").exists()


def _broker_log_dir(tmp_path, fixture_copy):
    """A broker's log dir: two partitions, its checkpoints, a clean-shutdown marker, an
    unfinished deletion and an unmarked future directory."""
    root = tmp_path / "broker"
    root.mkdir()
    for name in ("plain-0", "crashed-0"):
        shutil.move(str(fixture_copy(name)), root / name)
    write_offset_checkpoint(root / "recovery-point-offset-checkpoint",
                            {("plain", 0): 3000, ("crashed", 0): 0})
    write_offset_checkpoint(root / "replication-offset-checkpoint",
                            {("plain", 0): 2990, ("crashed", 0): 600})
    write_offset_checkpoint(root / "log-start-offset-checkpoint",
                            {("plain", 0): 0, ("crashed", 0): 0})
    (root / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":7}')
    (root / "gone-0.abc-delete").mkdir()
    (root / "moving-0.abc-future").mkdir()
    return root


def test_read_only_log_manager_writes_nothing(tmp_path, fixture_copy, caplog):
    root = _broker_log_dir(tmp_path, fixture_copy)
    (root / ".kafka_cleanshutdown").unlink()      # crashed-0 must not be recovered either
    before = tree_state(root)
    with caplog.at_level(logging.WARNING, logger="kafkalog.loader"):
        mgr = LogManager([root], read_only=True)
    # the damage recovery would cut is told, not repaired; the intact partition is quiet
    [damaged] = [r.getMessage() for r in caplog.records]
    assert damaged.startswith(f"{root / 'crashed-0'}: not recovered")
    assert "00000000000000000612.log at position 3936" in damaged
    assert "kafkalog recover --dry-run" in damaged
    # a reader's read-only open (no clean_shutdown given) reads no segment for that
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kafkalog.loader"):
        Log.open(root / "crashed-0", read_only=True).close()
    assert not caplog.records
    try:
        assert set(mgr.logs()) == {("plain", 0), ("crashed", 0)}
        plain = mgr.get_log("plain", 0)
        assert plain.read_only and read_everything(plain) == 3000
        assert plain.high_watermark == 2990       # the broker's high watermark, kept
        assert read_everything(mgr.get_log("crashed", 0)) == 639
        assert mgr.cleanup_logs() == 0
        mgr.checkpoint()
        with pytest.raises(KafkaLogError):
            mgr.get_or_create_log("new", 0)
        with pytest.raises(KafkaLogError):
            mgr.delete_log("plain", 0)
    finally:
        mgr.shutdown()
    assert tree_state(root) == before
    assert not (root / ".lock").exists()


def test_broker_high_watermark_is_never_raised_by_load_or_shutdown(tmp_path, fixture_copy):
    root = _broker_log_dir(tmp_path, fixture_copy)
    with LogManager([root], background=False) as mgr:
        log = mgr.get_log("plain", 0)
        assert (log.high_watermark, log.log_end_offset) == (2990, 3000)
        assert log.offsets().last_stable_offset == 2990
        assert [r.offset for r in log.records(2985, isolation="high_watermark")] == \
            list(range(2985, 2990))
    saved = read_offset_checkpoint(root / "replication-offset-checkpoint")
    assert saved[("plain", 0)] == 2990                    # not rewritten to the log end
    with Log.open(root / "plain-0") as log:              # a standalone open keeps it too
        assert log.high_watermark == 2990
        log.append([Record(value=b"x")])                 # a standalone log's next append
        assert log.high_watermark == log.log_end_offset == 3001


def test_delete_records_on_a_standalone_log_survives_reopening(tmp_path):
    path = tmp_path / "orders-0"
    with Log.open(path, {"segment.bytes": 1024}) as log:
        for i in range(100):
            log.append([Record(value=b"v%d" % i)])
        log.delete_records(57)
        assert log.log_start_offset == 57
    with Log.open(path) as log:
        assert log.log_start_offset == 57
        assert next(log.records()).offset == 57
    assert read_offset_checkpoint(tmp_path / "log-start-offset-checkpoint") == \
        {("orders", 0): 57}


def test_crc_failures_raise_in_every_reader(fixture_copy):
    d = fixture_copy("corrupt_flip-0")
    with Log.open(d, read_only=True) as log:
        got = []
        with pytest.raises(CorruptRecordError) as e:
            got.extend(r.offset for r in log.records())
        assert (e.value.base_offset, e.value.position) == (1890, 38490)
        assert e.value.path.endswith("00000000000000001470.log")
        assert got == list(range(1890))            # nothing of the bad batch
        with pytest.raises(CorruptRecordError):
            list(log.record_tables(1895))      # a start inside the bad batch
    with pytest.raises(CorruptRecordError):
        [r for b in iter_batches(d / "00000000000000001470.log") for r in b]


def empty_batch(base_offset, producer_id, base_sequence):
    """A batch as Kafka's cleaner keeps it for a producer: transactional, no records, base
    timestamp -1, the base sequence kept."""
    b = bytearray(build_batch([Record(key=b"k", value=b"v", timestamp=1)],
                              base_offset=base_offset, producer_id=producer_id,
                              producer_epoch=0, base_sequence=base_sequence,
                              transactional=True))[:61]
    struct.pack_into(">i", b, 8, 61 - 12)
    struct.pack_into(">q", b, 27, -1)
    struct.pack_into(">i", b, 57, 0)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


def test_empty_batches_read_on_every_path(tmp_path, monkeypatch):
    from kafkalog.dump import dump_partition
    from kafkalog.verify import verify_partition
    path = tmp_path / "c-0"
    data = (build_batch([Record(key=b"a", value=b"1", timestamp=1)], base_offset=0)
            + empty_batch(1, producer_id=9, base_sequence=4)
            + build_batch([Record(key=b"b", value=b"2", timestamp=2)], base_offset=2))
    with Log.open(path, {"cleanup.policy": "compact"}) as log:
        log.append_as_follower(data)
        assert [r.offset for r in log.records()] == [0, 2]
        assert [r.offset for r in log.records(isolation="committed")] == [0]   # pid 9 open
        assert [len(list(b)) for b in iter_batches(log.read(0).records)] == [1, 0, 1]
        log.roll()
        log.compact(now_ms=10**13)
        assert [r.offset for r in log.records()] == [0, 2]
    with Log.open(path, read_only=True) as log:
        assert [r.offset for r in log.records()] == [0, 2]
    doc = dump_partition(path)
    assert [len(b.get("records", [])) for s in doc["segments"] for b in s["batches"]][:3] == \
        [1, 0, 1]
    assert verify_partition(str(path))["ok"]
    import kafkalog.spark as ks
    tasks = ks.plan([str(tmp_path)])
    rows = sum(rb.num_rows for t in tasks for rb in ks.read_task(t))
    assert rows == 2


def test_a_segment_walk_with_crcs_checked_returns_no_crc_failure(fixture_copy):
    """``LogSegment.batches(validate_crc=True)`` stops at a batch failing its CRC (it returned
    it among the intact ones, ``crc_valid`` 0, with an end status)."""
    from kafkalog._layout import WALK_INVALID
    d = fixture_copy("corrupt_flip-0")
    with Log.open(d, read_only=True) as log:
        segment = log.active_segment
        batches, status, stop, _ = segment.batches(validate_crc=True)
        assert (status, stop, len(batches)) == (WALK_INVALID, 38490, 32)
        assert (batches["crc_valid"] == 1).all()
        assert len(segment.batches()[0]) == 33          # unchecked: every whole batch
