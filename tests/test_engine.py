"""Leader epochs, partition.metadata and the offsets snapshot (Kafka's
LeaderEpochFileCacheTest scenarios and the fixtures' checkpoint files)."""
import os

import pytest

from kafkalog import Record, build_batch, iter_batches
from kafkalog._kernels import walk_batches
from kafkalog.errors import KafkaLogError, LogDirFailureError
from kafkalog.leader_epoch import LeaderEpochCache
from kafkalog.log import Log
from kafkalog.records import open_buffer

from conftest import FIXTURES

V2_FIXTURES = ["plain-0", "gzip-0", "snappy-0", "lz4-0", "zstd-0", "headers-0", "txn-0",
               "multiseg-0", "append_time-0"]


@pytest.mark.parametrize("name", V2_FIXTURES)
def test_follower_appends_reproduce_the_leader_epoch_checkpoint(tmp_path, name):
    log = Log.open(tmp_path / name, {"segment.bytes": 1 << 30}, replicated=True)
    for path in sorted((FIXTURES / name).glob("*.log")):
        buf = open_buffer(path)
        for row in walk_batches(buf)[0]:
            p, size = int(row["position"]), int(row["size"])
            log.append_as_follower(buf[p:p + size])
    log.close()
    ours = (tmp_path / name / "leader-epoch-checkpoint").read_bytes()
    assert ours == (FIXTURES / name / "leader-epoch-checkpoint").read_bytes()


def test_multiseg_epochs_and_end_offsets(fixture_copy):
    log = Log.open(fixture_copy("multiseg-0"), clean_shutdown=True)
    cache = log.leader_epoch_cache
    assert cache.entries == [(0, 0), (1, 10000), (4, 20000)]
    assert log.end_offset_for_epoch(4) == (4, 30000)
    assert log.end_offset_for_epoch(1) == (1, 20000)
    assert log.end_offset_for_epoch(2) == (1, 20000)     # unknown epoch: the floor's end
    assert log.end_offset_for_epoch(0) == (0, 10000)
    assert log.end_offset_for_epoch(5) == (-1, -1)
    assert log.end_offset_for_epoch(-1) == (-1, -1)
    log.truncate_to(15000)
    assert cache.entries == [(0, 0), (1, 10000)]
    log.delete_records(12000)
    assert cache.entries[0] == (1, 12000)
    log.close()
    with open(os.path.join(log.path, "leader-epoch-checkpoint")) as f:
        assert f.read() == "0\n1\n1 12000\n"


def test_epoch_cache_rules(tmp_path):
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    assert cache.end_offset_for(0, 100) == (-1, -1)
    assert cache.assign(2, 6)
    assert not cache.assign(2, 7)                   # same epoch, later offset: no change
    assert cache.assign(2, 5)                       # same epoch, earlier offset: replaces
    assert cache.assign(4, 10) and cache.assign(6, 20)
    assert cache.end_offset_for(1, 30) == (1, 5)    # below the first epoch: its start offset
    assert cache.end_offset_for(3, 30) == (2, 10)
    assert cache.end_offset_for(6, 30) == (6, 30)
    cache.assign(5, 15)                             # a lower epoch truncates the newer ones
    assert cache.entries == [(2, 5), (4, 10), (5, 15)]
    cache.truncate_from_end(12)
    assert cache.entries == [(2, 5), (4, 10)]
    cache.truncate_from_start(11)
    assert cache.entries == [(4, 11)]
    cache.truncate_from_start(3)
    assert cache.entries == [(4, 11)]
    reloaded = LeaderEpochCache.load(tmp_path)
    assert reloaded.entries == [(4, 11)]
    with pytest.raises(ValueError):
        cache.assign(-1, 3)


def test_leader_appends_assign_epochs(tmp_path):
    log = Log.open(tmp_path / "t-0")
    log.append([Record(value=b"a")], partition_leader_epoch=3)
    log.append([Record(value=b"b")], partition_leader_epoch=3)
    log.append(build_batch([Record(value=b"c")] * 2, partition_leader_epoch=5) +
               build_batch([Record(value=b"d")], partition_leader_epoch=7))
    assert log.leader_epoch_cache.entries == [(3, 0), (5, 2), (7, 4)]
    log.truncate_fully_and_start_at(50)
    assert log.leader_epoch_cache.entries == []
    log.close()


def test_appends_after_the_epoch_cache_changed_outside_the_log_assign_again(tmp_path):
    log = Log.open(tmp_path / "t-0")
    for _ in range(3):        # the later appends take the one-call path (an armed appender)
        log.append([Record(value=b"a")], partition_leader_epoch=3)
    log.leader_epoch_cache.clear()                  # as a controller's truncation may
    log.append([Record(value=b"b")], partition_leader_epoch=3)
    log.append([Record(value=b"c")], partition_leader_epoch=3)
    assert log.leader_epoch_cache.entries == [(3, 3)]
    log.close()


def test_legacy_logs_get_no_epoch_checkpoint(fixture_copy):
    d = fixture_copy("legacy_v0-0")
    Log.open(d, clean_shutdown=True).close()
    assert not (d / "leader-epoch-checkpoint").exists()


def test_partition_metadata(tmp_path, fixture_copy):
    fixture = fixture_copy("plain-0")
    log = Log.open(fixture, clean_shutdown=True)
    assert log.topic_id == "q2QdmlvNTs6Jf0ZTKs1kIA"
    log.assign_topic_id("q2QdmlvNTs6Jf0ZTKs1kIA")
    with pytest.raises(KafkaLogError):
        log.assign_topic_id("AAAAAAAAAAAAAAAAAAAAAA")
    log.close()
    new = Log.open(tmp_path / "orders-0", topic_id="q2QdmlvNTs6Jf0ZTKs1kIA")
    assert new.topic_id == "q2QdmlvNTs6Jf0ZTKs1kIA"
    new.close()
    assert (tmp_path / "orders-0" / "partition.metadata").read_bytes() == \
        (FIXTURES / "plain-0" / "partition.metadata").read_bytes()


def test_offsets_snapshot(tmp_path):
    log = Log.open(tmp_path / "t-0", replicated=True)
    log.append([Record(value=b"x")] * 5)
    log.update_high_watermark(3)
    snap = log.offsets()
    assert (snap.log_start_offset, snap.log_end_offset, snap.high_watermark,
            snap.last_stable_offset, snap.recovery_point) == (0, 5, 3, 3, 0)
    log.close()


def _filled(tmp_path, **config):
    settings = {"segment.bytes": 1024, "file.delete.delay.ms": 0}
    settings.update(config)
    log = Log.open(tmp_path / "t-0", settings)
    for i in range(20):
        log.append([Record(key=b"k", value=b"v" * 20)] * 5)          # stamped now
    return log


def test_custom_retention_policies(tmp_path):
    from kafkalog.retention import RetentionPolicy, SegmentCountRetention
    log = _filled(tmp_path)
    assert log.delete_old_segments() == 0           # Kafka's defaults keep everything here
    log.add_retention_policy(SegmentCountRetention(3))
    assert log.delete_old_segments() > 0 and len(log.segments) == 3
    assert log.log_start_offset == log.segments[0].base_offset

    class KeepFromOffset(RetentionPolicy):
        def __init__(self, offset):
            self.offset = offset

        def predicate(self, log, now_ms):
            return lambda segment, nxt: nxt is not None and nxt.base_offset <= self.offset
    log.add_retention_policy(KeepFromOffset(log.segments[2].base_offset))
    assert log.delete_old_segments() == 2
    log.add_retention_policy(lambda log, now_ms: None)    # a plain function releasing nothing
    assert log.delete_old_segments() == 0
    log.close()


def test_custom_policies_respect_the_cleanup_policy_and_high_watermark(tmp_path):
    from kafkalog.retention import SegmentCountRetention
    log = _filled(tmp_path, **{"cleanup.policy": "compact"})
    log.add_retention_policy(SegmentCountRetention(1))
    assert log.delete_old_segments() == 0
    log.close()
    log = Log.open(tmp_path / "r-0", {"segment.bytes": 1024, "file.delete.delay.ms": 0},
                   replicated=True)
    for _ in range(20):
        log.append([Record(value=b"v" * 20)] * 5)
    log.add_retention_policy(SegmentCountRetention(1))
    assert log.delete_old_segments() == 0             # nothing is below the high watermark
    log.update_high_watermark(log.segments[2].base_offset)
    assert log.delete_old_segments() == 2
    log.close()


def _overflowed_legacy_segment(directory):
    """A magic-1 segment named 0 whose offsets run past 2^31 (an old broker could write it)."""
    os.makedirs(directory)
    high = 2**31 + 10
    parts = [build_batch([Record(key=b"a%d" % i, value=b"x", timestamp=5)], magic=1,
                         base_offset=i) for i in range(3)]
    parts.append(build_batch([Record(key=b"b", value=b"y", timestamp=6, offset=high + i)
                              for i in range(4)], magic=1, compression="gzip",
                             base_offset=high))
    parts.append(build_batch([Record(key=b"c", value=b"z", timestamp=7)], magic=1,
                             base_offset=high + 4))
    (directory / "00000000000000000000.log").write_bytes(b"".join(parts))
    return [0, 1, 2] + [high + i for i in range(5)]


def test_offset_overflow_is_split_at_load(tmp_path):
    d = tmp_path / "old-0"
    offsets = _overflowed_legacy_segment(d)
    log = Log.open(d, clean_shutdown=False)
    assert [s.base_offset for s in log.segments] == [0, 2**31 + 10]
    assert [r.offset for r in log.records()] == offsets
    assert not any(n.endswith((".swap", ".cleaned", ".deleted")) for n in os.listdir(d))
    log.close()


@pytest.mark.parametrize("crash_at", ["cleaned", "swap"])
def test_offset_overflow_split_survives_a_crash(tmp_path, crash_at, monkeypatch):
    import kafkalog.log as log_module
    d = tmp_path / "old-0"
    offsets = _overflowed_legacy_segment(d)
    real_replace = os.replace
    calls = []

    def crash(src, dst):
        calls.append((src, dst))
        if crash_at == "cleaned" and src.endswith(".cleaned"):
            raise OSError("simulated crash before the pieces are complete")
        if crash_at == "swap" and str(dst).endswith(".log") and src.endswith(".swap"):
            raise OSError("simulated crash before the swap files are renamed")
        return real_replace(src, dst)
    monkeypatch.setattr(log_module.os, "replace", crash)
    with pytest.raises(LogDirFailureError):
        Log.open(d, clean_shutdown=False)
    monkeypatch.setattr(log_module.os, "replace", real_replace)
    log = Log.open(d, clean_shutdown=False)         # the next load finishes or redoes it
    assert [r.offset for r in log.records()] == offsets
    assert [s.base_offset for s in log.segments] == [0, 2**31 + 10]
    log.close()


def test_a_leader_writes_its_epoch_into_appended_bytes(tmp_path):
    log = Log.open(tmp_path / "t-0")
    log.append(build_batch([Record(value=b"c")] * 2, partition_leader_epoch=5) +
               build_batch([Record(value=b"d")], partition_leader_epoch=-1),
               partition_leader_epoch=9)
    log.append(build_batch([Record(value=b"e")], partition_leader_epoch=11))   # kept
    batches = list(iter_batches(log.read(0).records))      # CRCs checked
    assert [b.partition_leader_epoch for b in batches] == [9, 9, 11]
    assert log.leader_epoch_cache.entries == [(9, 0), (11, 3)]
    with pytest.raises(OverflowError):
        log.append(build_batch([Record(value=b"f")]), partition_leader_epoch=2**31)
    log.close()
