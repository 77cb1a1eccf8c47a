# Port of apache/kafka core/src/test/scala/unit/kafka/log/LogLoaderTest.scala (commit 1eb7644349cb07139d6a3c1ad1986979647cac99)
"""Kafka's LogLoaderTest cases, run against ``kafkalog.log.Log.open`` (which loads with
``kafkalog.loader.LogLoader``): one test per upstream test, with its inputs and expected
values. The cases write and reload whole closing, so they run once, with the kernels of the
run (``KAFKALOG_NO_EXTENSIONS=1`` runs them with the pure-Python twins), and without fsync
(``ported.no_fsync``).

Upstream's ``createLog`` is ``ported.open_log`` (recovery point and log start offset 0, last
shutdown clean unless told); ``maybeIncrementLogStartOffset`` is ``delete_records``;
``activeProducersWithLastSequence`` is read from the log's producer state. Many upstream cases
drive the loader with a mocked ``ProducerStateManager`` or spy on the segments it reads;
kafkalog's loader takes no state manager from outside, so those are skipped as no API.
Deliberate differences:

- kafkalog appends only v2 batches (there is no ``message.format.version``), so the cases of
  older message formats are skipped.
- ``delete_records`` deletes the segments below the new log start offset at once (Kafka's
  ``maybeIncrementLogStartOffset`` leaves them to the next retention pass), so the cases that
  corrupt a segment below the log start offset write the log, corrupt it and reopen it with
  the log start offset given, which is the state upstream reopens too.
- Recovery loads a segment's producer state from the snapshot at its base offset also when
  that is the log start offset (Kafka's ``truncateAndReload`` deletes snapshots at or below
  the log start offset first). Producers whose records were all deleted are so still known
  after an unclean reload, as they are after a clean one (in Kafka too) and as they were
  before it ("deleting records should not remove producer state").
- A rolled segment's index files exist at once (the roll sizes them), so upstream's
  assertions that the new active segment's offset index is missing until the log is flushed
  have no counterpart; ``sanity_check()`` is called without ``time_index_newly_created``,
  which shrinks a time index to nothing (as Kafka's does) and is the loader's to pass."""
import os
import random
import shutil

import pytest

from kafkalog import build_batch
from kafkalog.files import DELETED_SUFFIX
from kafkalog.offset_index import OffsetIndex
from kafkalog.producer_state import list_snapshots, snapshot_path
from kafkalog.transaction_index import AbortedTxn

from ported import (
    MockTime, all_aborted_transactions, append_end_txn_marker, append_non_transactional,
    idempotent_appender, log_config, no_api, no_api_cases, open_log, value_records,
)
from ported import _no_fsync_fixture, _time_fixture, _closing_fixture  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("no_fsync")

INT_MAX = 2**31 - 1
NO_MOCKED_STATE = ("kafkalog's loader builds its own producer state; upstream drives it with "
                   "a mocked ProducerStateManager and verifies the calls")
NO_OLD_FORMAT = ("kafkalog appends only v2 batches and has no message.format.version to "
                 "load an older format with")
NO_SPLIT = ("kafkalog splits a segment whose offsets overflow inside loading only; there is "
            "no splitOverflowedSegment to run (or interrupt) from outside")


@pytest.fixture
def log_dir(tmp_path):
    return str(tmp_path / "topic-0")


def producers_last_sequence(log):
    return {pid: entry.last_seq for pid, entry in log._producer_state.producers.items()}


def snapshot_offsets(log_dir):
    return [offset for offset, _ in list_snapshots(log_dir)]


test_log_recovery_is_called_upon_broker_crash = no_api(
    "kafkalog's LogManager takes no loadLog override to inject errors into and intercept the "
    "clean-shutdown flag of its loading")
test_producer_snapshots_recovery_after_unclean_shutdown_v1 = no_api(NO_OLD_FORMAT)
test_producer_snapshots_recovery_after_unclean_shutdown_current_message_format = no_api(
    "upstream counts the segments loading reads and recovers with Mockito spies on "
    "LogSegments.add; kafkalog's loader takes no segment list from outside")
test_skip_loading_if_empty_producer_state_before_truncation = no_api(NO_MOCKED_STATE)


def test_recover_after_non_monotonic_coordinator_epoch_write(log_dir, time):
    # KAFKA-9144: a coordinator epoch may go backwards; recovery takes the latest write
    producer_id, coordinator_epoch, epoch = 1, 5, 0
    cfg = log_config(segment_bytes=1024 * 1024 * 5)
    log = open_log(log_dir, cfg, time)
    first_timestamp = time.ms
    append_end_txn_marker(log, producer_id, epoch, "abort", first_timestamp,
                          coordinator_epoch=coordinator_epoch)
    assert log._producer_state.last_entry(producer_id).last_timestamp == first_timestamp
    expiration_ms = 86_400_000
    time.sleep(expiration_ms)
    log.remove_expired_producers(expiration_ms)
    assert log._producer_state.last_entry(producer_id) is None
    second_timestamp = time.ms
    append_end_txn_marker(log, producer_id, epoch, "abort", second_timestamp,
                          coordinator_epoch=coordinator_epoch - 1)
    log.close()
    log = open_log(log_dir, cfg, time, recovery_point=0, clean_shutdown=False)
    assert log._producer_state.last_entry(producer_id).last_timestamp == second_timestamp
    log.close()


test_skip_truncate_and_reload_if_old_message_format_and_no_clean_shutdown = no_api(
    NO_MOCKED_STATE)
test_skip_truncate_and_reload_if_old_message_format_and_clean_shutdown = no_api(
    NO_MOCKED_STATE)
test_skip_truncate_and_reload_if_new_message_format_and_clean_shutdown = no_api(
    NO_MOCKED_STATE)


def producer_record(log, pid, sequence, value, time):
    log.append(value_records([value], time.ms), producer_id=pid, producer_epoch=0,
               base_sequence=sequence)


def test_load_producers_after_delete_records_mid_segment(log_dir, time, closing):
    cfg = log_config(segment_bytes=2048 * 5)
    log = open_log(log_dir, cfg, time)
    producer_record(log, 1, 0, "a", time)
    producer_record(log, 2, 0, "b", time)
    assert len(producers_last_sequence(log)) == 2
    log.update_high_watermark(log.log_end_offset)
    log.delete_records(1)
    # deleting records does not remove producer state
    retained = producers_last_sequence(log)
    assert len(retained) == 2 and retained[2] == 0
    log.close()
    # the log start did not pass a segment: the snapshots stay and the state is rebuilt
    reloaded = open_log(log_dir, cfg, time, log_start_offset=1, clean_shutdown=False)
    closing(reloaded)
    assert producers_last_sequence(reloaded) == retained


def test_loading_log_keeps_largest_stray_producer_state_snapshot(log_dir, time, closing):
    cfg = log_config(segment_bytes=2048 * 5, retention_bytes=0, retention_ms=1000 * 60,
                     file_delete_delay_ms=0)
    log = open_log(log_dir, cfg, time)
    producer_record(log, 1, 0, "a", time)
    log.roll()
    producer_record(log, 1, 1, "b", time)
    log.roll()
    producer_record(log, 1, 2, "c", time)
    producer_record(log, 1, 3, "d", time)
    log.close()
    assert len(log.segments) == 3
    # two snapshots for the first two segments, the last one written at close
    assert snapshot_offsets(log_dir) == [1, 2, 4]
    open(snapshot_path(log_dir, 3), "wb").close()   # a stray snapshot inside the log
    assert snapshot_offsets(log_dir) == [1, 2, 3, 4]
    closing(open_log(log_dir, cfg, time, clean_shutdown=False))
    # the stray one goes, the largest (4) stays
    assert snapshot_offsets(log_dir) == [1, 2, 4]


def test_load_producers_after_delete_records_on_segment(log_dir, time, closing):
    cfg = log_config(segment_bytes=2048 * 5)
    log = open_log(log_dir, cfg, time)
    producer_record(log, 1, 0, "a", time)
    log.roll()
    producer_record(log, 2, 0, "b", time)
    assert len(log.segments) == 2
    assert len(producers_last_sequence(log)) == 2
    log.update_high_watermark(log.log_end_offset)
    log.delete_records(1)
    log.delete_old_segments()
    assert len(log.segments) == 1
    retained = producers_last_sequence(log)
    assert len(retained) == 2 and retained[2] == 0
    log.close()
    # reloaded: upstream knows only producer 2 (its recovery drops the snapshot at the log
    # start offset); kafkalog recovers from that snapshot and keeps producer 1 too (see the
    # module's docstring)
    reloaded = open_log(log_dir, cfg, time, log_start_offset=1, clean_shutdown=False)
    closing(reloaded)
    assert producers_last_sequence(reloaded) == {1: 0, 2: 0}


def append_random_values(log, n, size, time, rng, step_ms=10):
    for i in range(n):
        log.append(value_records([rng.randbytes(size)], time.ms + i * step_ms))


def test_log_recovers_to_correct_offset(log_dir, time):
    num_messages, message_size = 100, 100
    cfg = log_config(segment_bytes=7 * message_size, index_interval_bytes=3 * message_size,
                 segment_index_bytes=4096)
    log = open_log(log_dir, cfg, time)
    append_random_values(log, num_messages, message_size, time, random.Random(1))
    assert log.log_end_offset == num_messages
    active = log.active_segment
    last_index_offset = active.offset_index.last_offset
    num_index_entries = active.offset_index.entries
    last_offset = log.log_end_offset
    # at close the time index's last entry becomes (largest timestamp, last offset)
    last_time_index_offset = log.log_end_offset - 1
    last_time_index_timestamp = active.largest_timestamp
    num_time_index_entries = active.time_index.entries + (
        0 if active.time_index.last_entry.offset == log.log_end_offset - 1 else 1)
    log.close()

    def verify(log, expected_recovery_point):
        active = log.active_segment
        assert log.recovery_point == expected_recovery_point
        assert log.log_end_offset == num_messages
        assert active.offset_index.last_offset == last_index_offset
        assert active.offset_index.entries == num_index_entries
        assert active.time_index.last_entry == (last_time_index_timestamp,
                                                last_time_index_offset)
        assert active.time_index.entries == num_time_index_entries

    log = open_log(log_dir, cfg, time, recovery_point=last_offset, clean_shutdown=False)
    verify(log, last_offset)
    log.close()
    # recovery: the recovery point stays until the log is flushed
    log = open_log(log_dir, cfg, time, recovery_point=10, clean_shutdown=False)
    verify(log, 10)
    log.flush()
    verify(log, last_offset)
    log.close()


def check_reads_and_timestamps(log, num_messages, time):
    first_base = log.segments.first.base_offset
    for i in range(num_messages):
        read = log.read(i, 100)
        assert log_batches_last_offsets(read.records)[0] == i
        want = first_base if i == 0 else i
        assert log.offset_for_timestamp(time.ms + i * 10)[0] == want


def log_batches_last_offsets(data):
    from kafkalog import iter_batches
    return [b.last_offset for b in iter_batches(data)]


#: (indexes of 4 KiB, not the default 10 MiB: each of the 100 rolls allocates two)
TWO_A_SEGMENT = log_config(segment_bytes=200, index_interval_bytes=1, segment_index_bytes=4096)


@pytest.fixture(scope="module")
def two_a_segment(tmp_path_factory):
    """Upstream's 200 records of 10 random bytes, two a segment (100 segments), written once
    for the module: the cases copy the directory."""
    path = str(tmp_path_factory.mktemp("two-a-segment") / "topic-0")
    time = MockTime()
    with pytest.MonkeyPatch.context() as patch:         # (no_fsync, for the module)
        patch.setattr(os, "fsync", lambda fd: None)
        log = open_log(path, TWO_A_SEGMENT, time)
        append_random_values(log, 200, 10, time, random.Random(2))
        log.close()
    return path


def reopen_after_damaging_indexes(two_a_segment, log_dir, time, damage):
    """``two_a_segment``'s log with every offset and time index file put through
    ``damage(path)``, reopened (recovery point 0)."""
    shutil.copytree(two_a_segment, log_dir)
    for name in os.listdir(log_dir):
        if name.endswith((".index", ".timeindex")):
            damage(os.path.join(log_dir, name))
    log = open_log(log_dir, TWO_A_SEGMENT, time, clean_shutdown=False)
    assert log.log_end_offset == 200
    return log


def test_index_rebuild(two_a_segment, log_dir, time, closing):
    log = reopen_after_damaging_indexes(two_a_segment, log_dir, time, os.remove)
    closing(log)
    assert log.segments.first.offset_index.entries > 0
    assert log.segments.first.time_index.entries > 0
    check_reads_and_timestamps(log, 200, time)


test_rebuild_time_index_for_old_messages = no_api(NO_OLD_FORMAT)


def write_two_spaces(path):
    with open(path, "w") as f:
        f.write("  ")


def test_corrupt_index_rebuild(two_a_segment, log_dir, time, closing):
    log = reopen_after_damaging_indexes(two_a_segment, log_dir, time, write_two_spaces)
    closing(log)
    check_reads_and_timestamps(log, 200, time)


def test_bogus_index_segments_are_removed(log_dir, time):
    from kafkalog.files import file_path
    os.makedirs(log_dir)
    bogus_index1 = file_path(log_dir, 0, ".index")
    bogus_time_index1 = file_path(log_dir, 0, ".timeindex")
    bogus_index2 = file_path(log_dir, 5, ".index")
    bogus_time_index2 = file_path(log_dir, 5, ".timeindex")
    for path in (bogus_index2, bogus_time_index2):
        open(path, "wb").close()
    one = build_batch(value_records(["test"], time.ms))
    log = open_log(log_dir, log_config(segment_bytes=len(one) * 5, segment_index_bytes=1000,
                                   index_interval_bytes=1), time)
    log.segments.first.offset_index, log.segments.first.time_index    # (opened lazily)
    assert os.path.getsize(bogus_index1) > 0
    assert os.path.getsize(bogus_time_index1) > 0
    assert not os.path.exists(bogus_index2)
    assert not os.path.exists(bogus_time_index2)
    for _ in range(10):                 # the log takes appends
        log.append(value_records(["test"], time.ms))
    log.close()


def test_reopen_then_truncate(log_dir, time, closing):
    one = build_batch(value_records(["test"], time.ms))
    cfg = log_config(segment_bytes=len(one) * 5, segment_index_bytes=1000,
                 index_interval_bytes=10000)
    log = open_log(log_dir, cfg, time)
    for _ in range(100):
        log.append(value_records(["test"], time.ms))
    log.close()
    log = open_log(log_dir, cfg, time, clean_shutdown=False)
    closing(log)
    log.truncate_to(3)
    assert len(log.segments) == 1
    assert log.log_end_offset == 3


def test_open_deletes_obsolete_files(log_dir, time, closing):
    one = build_batch(value_records(["test"], time.ms - 1000))
    cfg = log_config(segment_bytes=len(one) * 5, segment_index_bytes=1000, retention_ms=999)
    log = open_log(log_dir, cfg, time)
    for _ in range(100):
        log.append(value_records(["test"], time.ms - 1000))
    log.update_high_watermark(log.log_end_offset)
    log.delete_old_segments(time.ms)                  # every segment expired
    log.close()
    log = open_log(log_dir, cfg, time, clean_shutdown=False)
    closing(log)
    assert len(log.segments) == 1


def all_records(log):
    return [(r.key, r.value, r.timestamp) for r in log.records()]


def test_corrupt_log(tmp_path, time):
    cfg = log_config(segment_bytes=1000, index_interval_bytes=1, max_message_bytes=64 * 1024,
                     segment_index_bytes=4096)     # (as in reopen_after_damaging_indexes)
    rng = random.Random(4)
    for attempt in range(10):
        log_dir = str(tmp_path / f"topic-{attempt}")
        log = open_log(log_dir, cfg, time)
        num_messages = 50 + rng.randrange(50)
        for _ in range(num_messages):
            log.append(value_records(["test"], time.ms))
        records = all_records(log)
        active = log.active_segment
        log.close()
        # nonsense appended to the active segment's index and log
        for path in (active.index_path, active.log_path):
            with open(path, "ab") as f:
                f.write(rng.randbytes(rng.randrange(1024) + 1))
        log = open_log(log_dir, cfg, time, recovery_point=50, clean_shutdown=False)
        assert log.log_end_offset == num_messages
        assert all_records(log) == records
        log.close()


def follower_batch(base_offset, *key_values, compression="none"):
    return build_batch([dict(key=k.encode(), value=v.encode(), timestamp=0)
                        for v, k in key_values], base_offset=base_offset,
                       compression=compression, partition_leader_epoch=0)


def check_index_files_have_entries(log_dir, count):
    names = [n for n in os.listdir(log_dir) if n.endswith(".index")]
    assert len(names) == count
    for name in names:
        with OffsetIndex(os.path.join(log_dir, name), int(name[:-len(".index")])) as index:
            assert index.last_offset >= 0


def test_over_compacted_log_recovery(log_dir, time):
    log = open_log(log_dir, log_config(segment_bytes=1000, index_interval_bytes=1,
                                   max_message_bytes=64 * 1024), time)
    log.append_as_follower(follower_batch(0, ("v1", "k1")))
    assert log.active_segment.base_offset == 0
    # rolls: the new segment starts at max(1, INT_MAX + 2)
    log.append_as_follower(follower_batch(INT_MAX + 2, ("v3", "k3")))
    assert log.active_segment.base_offset == INT_MAX + 2
    assert os.path.exists(snapshot_path(log_dir, INT_MAX + 2))
    log.append_as_follower(follower_batch(INT_MAX + 3, ("v4", "k4")))
    assert log.active_segment.base_offset == INT_MAX + 2
    log.append_as_follower(follower_batch(INT_MAX + 4, ("v5", "k5")))
    assert log.active_segment.base_offset == INT_MAX + 2
    log.close()
    check_index_files_have_entries(log_dir, 2)


test_leader_epoch_cache_cleared_after_static_message_format_downgrade = no_api(NO_OLD_FORMAT)


def test_over_compacted_log_recovery_multi_record(log_dir, time):
    log = open_log(log_dir, log_config(segment_bytes=1000, index_interval_bytes=1,
                                   max_message_bytes=64 * 1024), time)
    log.append_as_follower(follower_batch(0, ("v1", "k1")))
    assert log.active_segment.base_offset == 0
    log.append_as_follower(follower_batch(INT_MAX + 2, ("v3", "k3"), ("v4", "k4"),
                                          compression="gzip"))
    assert log.active_segment.base_offset == INT_MAX + 2
    assert os.path.exists(snapshot_path(log_dir, INT_MAX + 2))
    log.append_as_follower(follower_batch(INT_MAX + 4, ("v5", "k5"), ("v6", "k6"),
                                          compression="gzip"))
    assert log.active_segment.base_offset == INT_MAX + 2
    log.append_as_follower(follower_batch(INT_MAX + 6, ("v7", "k7"), ("v8", "k8"),
                                          compression="gzip"))
    assert log.active_segment.base_offset == INT_MAX + 2
    log.close()
    check_index_files_have_entries(log_dir, 2)


test_over_compacted_log_recovery_multi_record_v1 = no_api(NO_OLD_FORMAT)
no_api_cases(
    globals(), NO_SPLIT,
    "test_recovery_of_segment_with_offset_overflow",
    "test_recovery_after_crash_during_split_phase1",
    "test_recovery_after_crash_during_split_phase2",
    "test_recovery_after_crash_during_split_phase3",
    "test_recovery_after_crash_during_split_phase4",
    "test_recovery_after_crash_during_split_phase5")


def test_clean_shutdown_file(log_dir, time, closing):
    cfg = log_config(segment_bytes=1000, index_interval_bytes=1, max_message_bytes=64 * 1024)
    log = open_log(log_dir, cfg, time)
    for _ in range(100):
        log.append(value_records(["test"], time.ms))
    log.close()
    # a clean shutdown: no recovery, although the recovery point is 0
    log = open_log(log_dir, cfg, time)
    closing(log)
    assert log.log_end_offset == 100
    assert log.recovery_point == 100


def test_log_recovers_for_leader_epoch(log_dir, time, closing):
    log = open_log(log_dir, None, time)
    cache = log.leader_epoch_cache
    for offset, leader_epoch in ((0, 1), (1, 2), (2, 2), (3, 3)):
        log.append_as_follower(build_batch(value_records(["random"], -1), base_offset=offset,
                                           partition_leader_epoch=leader_epoch))
    assert [tuple(e) for e in cache.entries] == [(1, 0), (2, 1), (3, 3)]
    cache.truncate_from_end(2)               # some entries taken out on purpose
    assert [tuple(e) for e in cache.entries] != [(1, 0), (2, 1), (3, 3)]
    log.close()
    recovered = open_log(log_dir, None, time, clean_shutdown=False)
    closing(recovered)
    assert [tuple(e) for e in recovered.leader_epoch_cache.entries] == [(1, 0), (2, 1), (3, 3)]


def write_transactions(log, time):
    """The upstream mix of four producers' transactions and plain records (offsets in the
    comments are the log end after each step)."""
    pid1, pid2, pid3, pid4 = (idempotent_appender(log, pid, 0, time, transactional=True)
                              for pid in (1, 2, 3, 4))
    steps = [(pid1, 5), (None, 3), (pid2, 2), (pid1, 4), (pid3, 3), (None, 2), (pid1, 10),
             (1, "abort"), (pid2, 6), (pid4, 3), (None, 10), (pid3, 9), (3, "commit"),
             (pid4, 8), (pid2, 7), (2, "abort"), (None, 10), (pid4, 4), (4, "commit")]
    for who, what in steps:
        if isinstance(what, str):
            append_end_txn_marker(log, who, 0, what, time.ms)
        elif who is None:
            append_non_transactional(log, what)
        else:
            who(what)
    assert log.log_end_offset == 90


EXPECTED_ABORTED = [AbortedTxn(1, 0, 29, 8), AbortedTxn(2, 8, 74, 36)]


def delete_offset_and_txn_indexes(segments):
    for segment in segments:
        for path in (segment.index_path, segment.txn_index.path):
            if os.path.exists(path):
                os.remove(path)


def reload_and_check_aborted(log_dir, time, closing, **kwargs):
    reloaded = open_log(log_dir, log_config(segment_bytes=1024 * 5), time, clean_shutdown=False,
                        **kwargs)
    closing(reloaded)
    assert all_aborted_transactions(reloaded) == EXPECTED_ABORTED


def test_full_transaction_index_recovery(log_dir, time, closing):
    log = open_log(log_dir, log_config(segment_bytes=128 * 5), time)
    write_transactions(log, time)
    segments = list(log.segments)
    log.close()
    delete_offset_and_txn_indexes(segments)      # recovery is forced
    reload_and_check_aborted(log_dir, time, closing)


def test_recover_only_last_segment(log_dir, time, closing):
    log = open_log(log_dir, log_config(segment_bytes=128 * 5), time)
    write_transactions(log, time)
    last = list(log.segments)[-1]
    log.close()
    delete_offset_and_txn_indexes([last])
    reload_and_check_aborted(log_dir, time, closing, recovery_point=last.base_offset)


def test_recover_last_segment_with_no_snapshots(log_dir, time, closing):
    log = open_log(log_dir, log_config(segment_bytes=128 * 5), time)
    write_transactions(log, time)
    last = list(log.segments)[-1]
    log.close()
    for _, path in list_snapshots(log_dir):
        os.remove(path)
    # the producer state is rebuilt from the start of the log
    delete_offset_and_txn_indexes([last])
    reload_and_check_aborted(log_dir, time, closing, recovery_point=last.base_offset)


def roll_one_record_segments(log, n, time):
    for i in range(n):
        log.append(value_records([str(i)], time.ms))
        log.roll()


def test_log_end_less_than_start_after_reopen(log_dir, time, closing):
    cfg = log_config()
    log = open_log(log_dir, cfg, time)
    roll_one_record_segments(log, 5, time)
    assert len(log.segments) == 6
    start_offset = 4
    # garbage in a segment below the log start offset the log is reopened with
    with open(list(log.segments)[1].log_path, "w") as f:
        f.write("corruptRecord")
    log.close()
    # reopened: that segment is truncated and every later one deleted; what is left is below
    # the log start offset, so one empty active segment starts at the log start offset
    log = open_log(log_dir, cfg, time, log_start_offset=start_offset, clean_shutdown=False)
    closing(log)
    assert len(log.segments) == 1
    assert (log.log_start_offset, log.log_end_offset) == (start_offset, start_offset)
    only = log.segments.first
    assert only.base_offset == start_offset
    assert all(os.path.exists(p) for p in (only.log_path, only.index_path,
                                           only.time_index_path))


def test_corrupted_log_recovery_does_not_delete_producer_state_snapshots_post_recovery(
        log_dir, time, closing):
    cfg = log_config()
    log = open_log(log_dir, cfg, time)
    roll_one_record_segments(log, 9, time)      # [0] [1] ... [8] [9-] (empty active)
    assert len(log.segments) == 10
    assert (log.log_start_offset, log.active_segment.base_offset, log.log_end_offset) == \
        (0, 9, 9)
    assert all(os.path.exists(snapshot_path(log_dir, o)) for o in range(1, 10))
    new_log_start = 4
    corrupted = list(log.segments)[1]
    assert corrupted.base_offset == 1
    with open(corrupted.log_path, "w") as f:
        f.write("corruptRecord")
    log.close()
    # reopened at log start 4: one empty active segment at 4, no snapshot at or below it
    log = open_log(log_dir, cfg, time, log_start_offset=new_log_start, clean_shutdown=False)
    closing(log)
    assert len(log.segments) == 1
    assert (log.log_start_offset, log.active_segment.base_offset, log.log_end_offset) == \
        (4, 4, 4)
    assert [o for o in range(1, 5) if os.path.exists(snapshot_path(log_dir, o))] == []
    # appends and rolls make snapshots 5..9, and nothing deleted later takes them
    roll_one_record_segments(log, 5, time)
    assert (log.active_segment.base_offset, log.log_end_offset) == (9, 9)
    time.sleep(cfg["file.delete.delay.ms"])
    assert log.log_start_offset == new_log_start
    assert [o for o in range(5, 10) if not os.path.exists(snapshot_path(log_dir, o))] == []
    assert not any(n.endswith(DELETED_SUFFIX) for n in os.listdir(log_dir))


def test_recover_with_empty_active_segment(log_dir, time):
    num_messages, message_size = 100, 100
    cfg = log_config(segment_bytes=7 * message_size, index_interval_bytes=3 * message_size,
                 segment_index_bytes=4096)
    rng = random.Random(5)
    log = open_log(log_dir, cfg, time)
    append_random_values(log, num_messages, message_size, time, rng)
    assert log.log_end_offset == num_messages
    log.roll()
    log.flush()
    last_offset = log.log_end_offset
    log.close()
    log = open_log(log_dir, cfg, time, recovery_point=last_offset, clean_shutdown=False)
    assert log.recovery_point == last_offset
    assert log.log_end_offset == num_messages
    assert log.active_segment.time_index.entries == 0
    log.active_segment.sanity_check()   # loading made the empty active segment's index
    append_random_values(log, num_messages, message_size, time, rng)
    log.roll()
    log.flush()
    log.active_segment.sanity_check()
    last_offset = log.log_end_offset
    log.close()
    log = open_log(log_dir, cfg, time, recovery_point=last_offset, clean_shutdown=False)
    assert log.recovery_point == last_offset
    assert log.log_end_offset == 2 * num_messages
    assert log.active_segment.time_index.entries == 0
    log.active_segment.sanity_check()
    log.close()


test_log_start_offset_when_remote_storage_is_enabled = no_api(
    "kafkalog's loader has no remote-storage mode (remote.storage.enable) in which the log "
    "start offset comes from the remote log instead of the first local segment")
