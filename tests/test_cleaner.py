"""The scenarios of Kafka's LogCleanerTest: cleaning, tombstones and their delete horizon,
transaction-aware cleaning and marker removal, unkeyed records, partial cleans, segment
grouping, recovery after a crash, and compacted logs read everywhere."""
import os

import pytest

from kafkalog import Record, build_control_batch
from kafkalog.dump import dump_partition
from kafkalog.errors import KafkaLogError, LogDirFailureError
from kafkalog.log import Log
from kafkalog.manager import LogManager

from conftest import process_dies

DAY = 86_400_000
NOW = 1_800_000_000_000
CONFIG = {"segment.bytes": 1024, "cleanup.policy": "compact", "file.delete.delay.ms": 0}


def compacted_log(tmp_path, **config):
    return Log.open(tmp_path / "c-0", dict(CONFIG, **config))


def kv(log, key, value, **kw):
    return log.append([Record(key=key, value=value, timestamp=NOW)], **kw)


def contents(log):
    return [(r.offset, r.key, r.value) for r in log.records()]


def test_clean_keeps_the_latest_value_of_each_key(tmp_path):
    log = compacted_log(tmp_path)
    for i in range(300):
        kv(log, b"k%d" % (i % 7), b"v%d" % i)
    before = contents(log)
    active = log.active_segment.base_offset
    stats = log.compact(NOW)
    assert stats.first_uncleanable_offset == active and stats.records_retained <= 7
    after = contents(log)
    latest = {}
    for off, k, v in before:
        if off < active:
            latest[k] = off
    want = [r for r in before if r[0] >= active or latest[r[1]] == r[0]]
    assert after == want
    assert log.first_dirty_offset == active
    assert log.compact(NOW).segments_cleaned == 0          # nothing is dirty any more
    log.close()


def test_tombstones_stay_until_the_delete_horizon(tmp_path):
    log = compacted_log(tmp_path, **{"delete.retention.ms": DAY})
    kv(log, b"a", b"1")
    kv(log, b"b", b"2")
    kv(log, b"a", None)
    log.roll()
    log.compact(NOW)
    assert contents(log) == [(1, b"b", b"2"), (2, b"a", None)]    # the tombstone stays
    batch = [b for s in dump_partition(log.path, "none")["segments"] for b in s["batches"]
             if b["base_offset"] == 2][0]
    assert batch["delete_horizon_ms"] == NOW + DAY
    log.compact(NOW + DAY - 1)
    assert (2, b"a", None) in contents(log)
    log.first_dirty_offset = 0                       # clean the same range again
    log.compact(NOW + DAY)
    assert contents(log) == [(1, b"b", b"2")]
    log.close()


def test_unkeyed_records_are_removed(tmp_path):
    log = compacted_log(tmp_path)
    kv(log, None, b"no key")
    kv(log, b"k", b"keyed")
    log.roll()
    log.compact(NOW)
    assert contents(log) == [(1, b"k", b"keyed")]
    log.close()


def test_aborted_transactions_are_dropped_and_markers_removed_after_the_horizon(tmp_path):
    log = compacted_log(tmp_path, **{"delete.retention.ms": 1000})
    kv(log, b"x", b"aborted", producer_id=5, producer_epoch=0, base_sequence=0,
       transactional=True)
    log.append(build_control_batch("abort", producer_id=5, producer_epoch=0, timestamp=NOW))
    kv(log, b"y", b"committed", producer_id=6, producer_epoch=0, base_sequence=0,
       transactional=True)
    log.append(build_control_batch("commit", producer_id=6, producer_epoch=0, timestamp=NOW))
    kv(log, b"z", b"plain")
    log.roll()
    log.compact(NOW)
    assert [(o, k) for o, k, _ in contents(log)] == [(2, b"y"), (4, b"z")]
    assert [r.offset for r in log.records(isolation="committed")] == [2, 4]
    doc = dump_partition(log.path, "none")
    kept = [b for s in doc["segments"] for b in s["batches"]]
    assert any(b["is_control"] for b in kept)           # markers kept until the horizon
    # the aborted producer's last batch stays, empty, so its producer state survives
    assert any(b["producer_id"] == 5 and not b["is_control"] and b["record_count_header"] == 0
               for b in kept)
    log.first_dirty_offset = 0
    log.compact(NOW + 1000)
    kept = [b for s in dump_partition(log.path, "none")["segments"] for b in s["batches"]]
    # past the horizon the markers still stay: a marker goes only once no batch of its
    # transaction is left (Kafka's rule, tests/kafka/test_log_cleaner.py), and the committed
    # record and the aborted producer's empty batch are still there
    assert [b["base_offset"] for b in kept if b["is_control"]] == [1, 3]
    log.close()


def test_partial_clean_when_the_map_is_full(tmp_path):
    log = compacted_log(tmp_path)
    for i in range(400):
        kv(log, b"key-%04d" % i, b"v")
    stats = log.compact(NOW, memory_budget=100 * 24)       # room for 90 keys (24 B, 0.9 full)
    assert stats.partial and stats.first_uncleanable_offset < log.active_segment.base_offset
    assert log.first_dirty_offset == stats.first_uncleanable_offset
    second = log.compact(NOW, memory_budget=10 ** 7)
    assert second.first_dirty_offset == stats.first_uncleanable_offset and not second.partial
    assert len(contents(log)) == 400                       # every key is unique: all kept
    log.close()


def test_segments_are_grouped_up_to_segment_bytes(tmp_path):
    log = compacted_log(tmp_path, **{"segment.bytes": 4096})
    for i in range(400):
        kv(log, b"k%d" % (i % 5), b"v" * 20)
    n = len(log.segments)
    log.compact(NOW)
    assert len(log.segments) == n                 # sizes of the originals decide the groups
    log.close()
    log = Log.open(tmp_path / "g-0", dict(CONFIG, **{"segment.bytes": 4096}))
    for i in range(100):
        kv(log, b"k%d" % (i % 5), b"v" * 20)
    log.roll()
    log.compact(NOW)
    log.close()
    log = Log.open(tmp_path / "g-0", dict(CONFIG, **{"segment.bytes": 10 ** 6}),
                   clean_shutdown=True)
    log.first_dirty_offset = 0
    before = len(log.segments)
    log.compact(NOW)
    assert len(log.segments) < before            # small cleaned segments merge into one
    log.close()


@pytest.mark.parametrize("crash_at", ["cleaned", "swap", "final"])
def test_a_crash_at_each_step_of_the_swap_recovers(tmp_path, monkeypatch, crash_at):
    import kafkalog.log as log_module
    log = compacted_log(tmp_path)
    for i in range(200):
        kv(log, b"k%d" % (i % 4), b"v%d" % i)
    log.flush()
    before = contents(log)
    real_replace = os.replace

    def crash(src, dst):
        src, dst = str(src), str(dst)
        if crash_at == "cleaned" and src.endswith(".cleaned"):
            raise OSError("crash before the cleaned segment is complete")
        if crash_at == "swap" and dst.endswith(".deleted"):
            raise OSError("crash with the swap files written, old segments untouched")
        if crash_at == "final" and src.endswith(".swap"):
            raise OSError("crash with the old segments renamed, before the swap is renamed")
        return real_replace(src, dst)
    monkeypatch.setattr(log_module.os, "replace", crash)
    with pytest.raises(LogDirFailureError):
        log.compact(NOW)
    with pytest.raises(KafkaLogError):
        kv(log, b"k0", b"refused")          # offline until reopened
    monkeypatch.setattr(log_module.os, "replace", real_replace)
    process_dies(log)
    reopened = Log.open(tmp_path / "c-0", CONFIG, clean_shutdown=False)
    after = contents(reopened)
    latest = {}
    for off, k, v in before:
        latest[k] = off
    # either the old data whole, or a correct compaction of some groups: the latest value of
    # every key is there, offsets increase, and every record read is one that was written
    assert all(latest[k] == max(o for o, kk, _ in after if kk == k) for k in latest)
    assert [o for o, _, _ in after] == sorted({o for o, _, _ in after})
    assert set(after) <= set(before)
    assert not any(n.endswith((".cleaned", ".swap")) for n in os.listdir(tmp_path / "c-0"))
    reopened.close()


def test_compacted_logs_read_everywhere(tmp_path):
    log = compacted_log(tmp_path)
    for i in range(100):
        kv(log, b"k%d" % (i % 3), b"v%d" % i)
    log.roll()
    log.compact(NOW)
    want = contents(log)
    log.close()
    doc = dump_partition(tmp_path / "c-0", "full")
    dumped = [(r["offset"]) for s in doc["segments"] for b in s["batches"] for r in b["records"]]
    assert dumped == [o for o, _, _ in want]
    reopened = Log.open(tmp_path / "c-0", CONFIG, clean_shutdown=False)
    assert contents(reopened) == want
    info = reopened.read(50)                      # an offset compacted away: the next batch
    assert info.records
    reopened.close()
    import kafkalog.spark as ks
    tasks = ks.plan([str(tmp_path)])
    rows = [rb for t in tasks for rb in ks.read_task(t)]
    assert sum(r.num_rows for r in rows) == len(want)


def test_compact_refuses_delete_only_logs(tmp_path):
    log = Log.open(tmp_path / "d-0")
    with pytest.raises(KafkaLogError):
        log.compact()
    log.close()


def test_log_manager_cleans_dirty_logs_and_checkpoints(tmp_path):
    with LogManager([tmp_path], dict(CONFIG, **{"min.cleanable.dirty.ratio": 0.1}),
                    background=False) as mgr:
        log = mgr.get_or_create_log("changelog", 0)
        for i in range(200):
            kv(log, b"k%d" % (i % 4), b"v%d" % i)
        mgr.get_or_create_log("other", 0, {"cleanup.policy": "delete"}).append(
            [Record(value=b"x")])
        done = mgr.compact_logs(NOW)
        assert list(done) == [("changelog", 0)]
        assert mgr.compact_logs(NOW) == {}                # nothing dirty any more
        mgr.checkpoint()
        from kafkalog.checkpoint import read_offset_checkpoint
        assert read_offset_checkpoint(tmp_path / "cleaner-offset-checkpoint") == \
            {("changelog", 0): log.first_dirty_offset}
    with LogManager([tmp_path], CONFIG, background=False) as mgr:
        assert mgr.get_log("changelog", 0).first_dirty_offset == log.first_dirty_offset


def test_a_read_only_view_of_segments_the_cleaner_merged_says_reopen(tmp_path):
    # The view listed small segments; the cleaner then merged a group into the first one's
    # file and deleted the others. The view's read of that file found offsets past the next
    # segment it listed (OffsetsOutOfOrderError: damage, which there is none of); it says
    # reopen (SegmentDeletedError, an OffsetOutOfRangeError as Kafka's fetch would give)
    from kafkalog.errors import SegmentDeletedError
    log = compacted_log(tmp_path)
    for i in range(300):
        kv(log, b"k%d" % (i % 7), b"v%d" % i)
    log.close()
    # segments written small, cleaned with a larger segment.bytes: groups merge
    log = Log.open(tmp_path / "c-0", dict(CONFIG, **{"segment.bytes": 10 ** 6}))
    view = Log.open(log.path, read_only=True)
    listed = len(view.segments)
    log.compact(NOW)
    assert len(log.segments) < listed                  # merged
    with pytest.raises(SegmentDeletedError, match="reopen"):
        list(view.records())
    view.close()
    view = Log.open(log.path, read_only=True)
    assert contents(view) == contents(log)
    view.close()
    log.close()
