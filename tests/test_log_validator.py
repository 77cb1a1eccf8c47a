"""``LogValidator``: what it refuses and what it assigns, apart from any log (Kafka's
``LogValidatorTest`` covers the same rules for its validator)."""
import struct

import pytest

from kafkalog import Record, build_batch
from kafkalog._kernels import walk_batches
from kafkalog.config import LogConfig
from kafkalog.errors import (
    CorruptRecordError, InvalidOffsetError, InvalidTimestampError, OutOfOrderSequenceError,
    RecordTooLargeError,
)
from kafkalog.log_validator import LogValidator
from kafkalog.producer_state import ProducerStateManager

NOW = 1_700_000_000_000


def records(n, ts=NOW):
    return [Record(key=b"k%d" % i, value=b"v" * 10, timestamp=ts + i) for i in range(n)]


def validate(data, log_end=0, assign_offsets=True, producer_state=None, **config):
    validator = LogValidator("/tmp/t-0", LogConfig(config))
    buf = bytearray(data)
    result = validator.validate(buf, log_end, assign_offsets, NOW,
                                producer_state or ProducerStateManager("/tmp/t-0"))
    return buf, result


def test_leader_offsets_are_assigned_in_place_from_the_log_end():
    buf, (n, first, last, max_ts, offset_of_max, count, flags, epoch, batches, prepared) = \
        validate(build_batch(records(3)) + build_batch(records(2)), log_end=40)
    assert (n, first, last, count, prepared) == (2, 40, 44, 5, None)
    assert max_ts == NOW + 2 and offset_of_max == 42
    assert list(walk_batches(bytes(buf))[0]["base_offset"]) == [40, 43]


def test_log_append_time_is_assigned_and_create_time_bounds_skipped():
    buf, result = validate(build_batch(records(2, ts=1)), **{
        "message.timestamp.type": "LogAppendTime", "message.timestamp.before.max.ms": 1})
    assert result[3] == NOW
    assert struct.unpack_from(">q", buf, 35)[0] == NOW       # the batch's max timestamp


def test_follower_offsets_are_kept_and_must_not_go_below_the_log_end():
    data = build_batch(records(2), base_offset=7)
    buf, result = validate(data, log_end=7, assign_offsets=False)
    assert result[1:3] == (7, 8) and bytes(buf) == data
    with pytest.raises(InvalidOffsetError):
        validate(data, log_end=8, assign_offsets=False)


@pytest.mark.parametrize("damage", ["crc", "torn", "magic1", "empty"])
def test_damaged_batches_are_refused(damage):
    good = build_batch(records(2))
    data = {"crc": good[:-1] + bytes([good[-1] ^ 1]), "torn": good[:-3],
            "magic1": build_batch(records(2), magic=1), "empty": b""}[damage]
    with pytest.raises(CorruptRecordError):
        validate(data)


def test_a_batch_over_max_message_bytes_is_refused():
    with pytest.raises(RecordTooLargeError):
        validate(build_batch(records(10)), **{"max.message.bytes": 100})


def test_create_time_bounds():
    bounds = {"message.timestamp.before.max.ms": 60_000, "message.timestamp.after.max.ms": 1_000}
    validate(build_batch(records(1, ts=NOW - 59_000)), **bounds)
    with pytest.raises(InvalidTimestampError):
        validate(build_batch(records(1, ts=NOW - 61_000)), **bounds)
    with pytest.raises(InvalidTimestampError):
        validate(build_batch(records(1, ts=NOW + 2_000)), **bounds)
    # a follower copies what its leader accepted
    validate(build_batch(records(1, ts=1)), assign_offsets=False, **bounds)


def test_producer_sequences_are_checked_against_the_producer_state():
    state = ProducerStateManager("/tmp/t-0")
    first = build_batch(records(2), producer_id=5, producer_epoch=0, base_sequence=0)
    _, result = validate(first, producer_state=state)
    state.commit(result[9])
    validate(build_batch(records(1), producer_id=5, producer_epoch=0, base_sequence=2),
             log_end=2, producer_state=state)
    with pytest.raises(OutOfOrderSequenceError):
        validate(build_batch(records(2), producer_id=5, producer_epoch=0, base_sequence=5),
                 log_end=2, producer_state=state)


def test_a_retried_batch_is_answered_with_the_original():
    state = ProducerStateManager("/tmp/t-0")
    batch = build_batch(records(3), producer_id=9, producer_epoch=0, base_sequence=0)
    _, result = validate(batch, log_end=10, producer_state=state)
    assert result[9].duplicate is None
    state.commit(result[9])                 # as the log does once the batch is written
    _, retried = validate(batch, log_end=13, producer_state=state)
    duplicate = retried[9].duplicate
    assert (duplicate.first_offset, duplicate.last_offset) == (10, 12)
