# Port of apache/kafka core/src/test/scala/unit/kafka/server/epoch/LeaderEpochFileCacheTest.scala (commit 1eb7644349cb07139d6a3c1ad1986979647cac99)
"""Kafka's LeaderEpochFileCacheTest cases, run against ``kafkalog.leader_epoch``'s
``LeaderEpochCache``: one test per upstream test, with its inputs and expected values. No
kernels are involved (the cache is plain Python), so each runs once.

Deliberate differences: the cache writes its checkpoint on every change (kafkalog has no
scheduler to flush it asynchronously), so upstream's ``truncateFrom{Start,End}AsyncFlush`` is
``truncate_from_{start,end}`` and ``clearAndFlush`` is ``clear``; an empty ``latestEpoch`` is
None."""
import pytest

from kafkalog.checkpoint import read_leader_epoch_checkpoint
from kafkalog.leader_epoch import (
    UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEntry, LeaderEpochCache,
)

from ported import no_api

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def checkpoint(tmp_path):
    return str(tmp_path / "leader-epoch-checkpoint")


@pytest.fixture
def cache(checkpoint):
    return LeaderEpochCache(checkpoint)


@pytest.fixture
def cache3(cache):
    """The cache most upstream cases start from: epochs 2, 3, 4 at offsets 6, 8, 11."""
    for epoch, offset in ((2, 6), (3, 8), (4, 11)):
        cache.assign(epoch, offset)
    return cache


def entries(cache):
    return [tuple(e) for e in cache.entries]


NO_PREVIOUS_EPOCH = ("kafkalog's LeaderEpochCache has no previousEpoch/previousEntry (only "
                     "the latest entry is asked for)")
test_previous_epoch = no_api(NO_PREVIOUS_EPOCH)


def test_should_add_epoch_and_message_offset_to_cache(cache):
    cache.assign(2, 10)
    log_end_offset = 11
    assert cache.latest_epoch() == 2
    assert cache.entries[0] == EpochEntry(2, 10)
    assert cache.end_offset_for(2, log_end_offset) == (2, log_end_offset)


def test_should_return_log_end_offset_if_latest_epoch_requested(cache):
    cache.assign(2, 11)
    cache.assign(2, 12)
    assert cache.end_offset_for(2, 14) == (2, 14)


def test_should_return_undefined_offset_if_undefined_epoch_requested(cache):
    cache.assign(2, 11)
    cache.assign(3, 12)
    # a bootstrapping follower asks for the undefined epoch
    assert cache.end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED


def test_should_not_overwrite_log_end_offset_for_a_leader_epoch_once_it_has_been_assigned(cache):
    cache.assign(2, 9)
    cache.assign(2, 10)
    assert cache.entries[0].start_offset == 9
    assert entries(cache) == [(2, 9)]


def test_should_enforce_monotonically_increasing_start_offsets(cache):
    cache.assign(2, 9)
    cache.assign(3, 9)            # a new epoch at the same offset replaces it
    assert entries(cache) == [(3, 9)]


def test_should_not_overwrite_offset_for_a_leader_epoch_once_it_has_been_assigned(cache):
    cache.assign(2, 6)
    cache.assign(2, 10)
    assert cache.entries[0].start_offset == 6


def test_should_return_unsupported_if_no_epoch_recorded(cache):
    assert cache.end_offset_for(0, 0) == UNDEFINED


def test_should_return_unsupported_if_no_epoch_recorded_and_undefined_epoch_requested(cache):
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED


def test_should_return_first_epoch_if_requested_epoch_less_than_first_epoch(cache):
    for epoch, offset in ((5, 11), (6, 12), (7, 13)):
        cache.assign(epoch, offset)
    assert cache.end_offset_for(4, 0) == (4, 11)


def test_should_truncate_if_matching_epoch_but_earlier_starting_offset(cache):
    for epoch, offset in ((5, 11), (6, 12), (7, 13)):
        cache.assign(epoch, offset)
    cache.assign(7, 12)           # epoch 7 starts earlier
    assert cache.end_offset_for(5, 0) == (5, 12)
    assert cache.end_offset_for(6, 0) == (5, 12)


def test_should_get_first_offset_of_subsequent_epoch_when_offset_requested_for_previous_epoch(
        cache):
    for epoch, offset in ((1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16)):
        cache.assign(epoch, offset)
    assert cache.end_offset_for(2, 17) == (2, 15)


def test_should_return_next_available_epoch_if_there_is_no_exact_epoch_for_the_one_requested(
        cache):
    for epoch, offset in ((0, 10), (2, 13), (4, 17)):
        cache.assign(epoch, offset)
    assert [cache.end_offset_for(epoch, 0) for epoch in (1, 2, 3)] == [(0, 13), (2, 17),
                                                                        (2, 17)]


def test_should_not_update_epoch_and_start_offset_if_it_did_not_change(cache):
    cache.assign(2, 6)
    cache.assign(2, 7)
    assert entries(cache) == [(2, 6)]


def test_should_return_invalid_offset_if_epoch_is_requested_which_is_not_currently_tracked(
        cache):
    cache.assign(2, 100)
    assert cache.end_offset_for(3, 100) == UNDEFINED


def test_should_support_epochs_that_do_not_start_from_zero(cache):
    cache.assign(2, 6)
    assert cache.end_offset_for(2, 7) == (2, 7)
    assert entries(cache) == [(2, 6)]


def test_should_persist_epochs_between_instances(checkpoint):
    LeaderEpochCache(checkpoint).assign(2, 6)
    again = LeaderEpochCache(checkpoint, read_leader_epoch_checkpoint(checkpoint))
    assert entries(again) == [(2, 6)]


def test_should_enforce_monotonically_increasing_epochs(cache):
    cache.assign(1, 5)
    cache.assign(2, 6)
    # an epoch of the past at a later offset: the later epochs go, so that both epochs and
    # offsets keep increasing
    cache.assign(1, 7)
    log_end_offset = 8
    assert cache.latest_epoch() == 1
    assert cache.end_offset_for(1, log_end_offset) == (1, 8)
    assert cache.end_offset_for(2, log_end_offset) == UNDEFINED
    assert cache.entries[0] == EpochEntry(1, 7)


def test_should_enforce_offsets_increase_monotonically(cache):
    cache.assign(2, 6)
    cache.assign(3, 5)            # the epoch goes up, the offset down: the last one wins
    assert cache.entries[0] == EpochEntry(3, 5)


def test_should_increase_and_track_epochs_as_leaders_change_many_times(cache):
    cache.assign(0, 0)
    cache.assign(1, 0)
    assert cache.latest_epoch() == 1
    assert [cache.end_offset_for(e, 0) for e in (1, 0)] == [(1, 0), (0, 0)]
    # five records written in epoch 1
    assert [cache.end_offset_for(e, 5) for e in (1, 0)] == [(1, 5), (0, 0)]
    cache.assign(2, 5)
    # five more in epoch 2
    assert [cache.end_offset_for(e, 10) for e in (2, 1, 0)] == [(2, 10), (1, 5), (0, 0)]


def test_should_increase_and_track_epochs_as_follower_receives_many_messages(cache):
    for epoch in (0, 1, 2):
        for offset in range(3 * epoch, 3 * epoch + 3):
            cache.assign(epoch, offset)
        log_end_offset = 3 * epoch + 3
        assert cache.latest_epoch() == epoch
        assert cache.end_offset_for(epoch, log_end_offset) == (epoch, log_end_offset)
    # an older epoch ends where the next one starts
    assert cache.end_offset_for(0, 9) == (0, 3)
    assert cache.end_offset_for(1, 9) == (1, 6)


def test_should_drop_entries_on_epoch_boundary_when_removing_latest_entries(cache3):
    cache3.truncate_from_end(8)   # inclusive: the two latest go
    assert entries(cache3) == [(2, 6)]


@pytest.mark.parametrize("start_offset, remaining", [
    pytest.param(8, [(3, 8), (4, 11)], id="should_preserve_reset_offset_on_clear_earliest_if_one_exists"),
    pytest.param(9, [(3, 9), (4, 11)], id="should_update_saved_offset_when_offset_to_clear_to_is_between_epochs"),
    pytest.param(1, [(2, 6), (3, 8), (4, 11)], id="should_not_clear_anything_if_offset_to_early"),
    pytest.param(6, [(2, 6), (3, 8), (4, 11)], id="should_not_clear_anything_if_offset_to_first_offset"),
    pytest.param(11, [(4, 11)], id="should_retain_latest_epoch_on_clear_all_earliest"),
    pytest.param(9, [(3, 9), (4, 11)], id="should_update_offset_between_epoch_boundaries_on_clear_earliest"),
    pytest.param(15, [(4, 15)], id="should_retain_latest_epoch_on_clear_all_earliest_and_update_its_offset"),
    pytest.param(UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)], id="should_not_reset_epoch_history_head_if_undefined_passed"),
])
def test_truncate_from_start(cache3, start_offset, remaining):
    # upstream: one test each, named as the ids, all from epochs 2, 3, 4 at 6, 8, 11
    cache3.truncate_from_start(start_offset)
    assert entries(cache3) == remaining


def test_should_update_offset_between_epoch_boundaries_on_clear_earliest2(cache):
    for epoch, offset in ((0, 0), (1, 7), (2, 10)):
        cache.assign(epoch, offset)
    cache.truncate_from_start(5)  # between 0 and 7: epoch 0 stays, from 5
    assert entries(cache) == [(0, 5), (1, 7), (2, 10)]


def test_should_drop_entries_between_epoch_boundary_when_removing_newest(cache3):
    cache3.truncate_from_end(9)
    assert cache3.latest_epoch() == 3
    assert entries(cache3) == [(2, 6), (3, 8)]


def test_should_clear_all_entries(cache3):
    cache3.clear()
    assert entries(cache3) == []


def test_should_not_reset_epoch_history_tail_if_undefined_passed(cache3):
    cache3.truncate_from_end(UNDEFINED_EPOCH_OFFSET)
    assert len(cache3.entries) == 3


def test_should_fetch_latest_epoch_of_empty_cache(cache):
    assert cache.latest_epoch() is None


def test_should_fetch_end_offset_of_empty_cache(cache):
    assert cache.end_offset_for(7, 0) == UNDEFINED


def test_should_clear_earliest_on_empty_cache(cache):
    cache.truncate_from_start(7)
    assert entries(cache) == []


def test_should_clear_latest_on_empty_cache(cache):
    cache.truncate_from_end(7)
    assert entries(cache) == []


test_find_previous_epoch = no_api(NO_PREVIOUS_EPOCH)
test_find_previous_entry = no_api(NO_PREVIOUS_EPOCH)
test_find_next_epoch = no_api("kafkalog's LeaderEpochCache has no nextEpoch")
test_get_epoch_entry = no_api("kafkalog's LeaderEpochCache has no epochEntry(epoch) lookup")
test_should_fetch_epoch_for_given_offset = no_api(
    "kafkalog's LeaderEpochCache has no epochForOffset")


def test_should_write_checkpoint_on_truncation(cache3, checkpoint):
    cache3.truncate_from_end(11)
    cache3.truncate_from_start(8)
    assert [tuple(e) for e in read_leader_epoch_checkpoint(checkpoint)] == [(3, 8)]
