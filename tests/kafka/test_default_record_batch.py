# Port of apache/kafka clients/src/test/java/org/apache/kafka/common/record/DefaultRecordBatchTest.java (commit 1eb7644349cb07139d6a3c1ad1986979647cac99)
"""Kafka's DefaultRecordBatchTest cases, run against kafkalog's batch builder
(``build_batch``, ``build_control_batch``), its batch views (``iter_batches`` ->
``RecordBatch``), its record decoding and the append kernel that assigns offsets and
LogAppendTime in place (``prepare_append``, looked up in ``_kernels`` at each call so the
kernel mode in force is the one run): one test per upstream test, with its inputs and
expected values, in both kernel modes.

Deliberate differences: an empty batch (upstream's ``writeEmptyHeader``) is ``build_batch``
of no records with ``last_offset`` / ``max_timestamp``; a record has no sequence of its own,
kafkalog's columnar table carries it (``RecordTable.sequence``); upstream's
``skipKeyValueIterator`` (records without their key and value bytes) is the columnar
``RecordTable``, whose rows hold the sizes and positions, never the bytes, whatever the
codec; upstream's two record iterators (streaming and in-memory) are kafkalog's record
iteration of a batch and its decoded columnar table. Corruption is reported with kafkalog's
``CorruptRecordError`` (Kafka: ``CorruptRecordException`` / ``InvalidRecordException``)."""
import random
import struct
import time

import pytest

from kafkalog import _kernels, build_batch, build_control_batch
from kafkalog.control_records import ControlType, parse_control_record
from kafkalog.errors import CorruptRecordError
from kafkalog.producer_state import decrement_sequence
from kafkalog.records import NO_SEQUENCE, TimestampType, increment_sequence, iter_batches

from ported import no_api
from ported import _kernel_mode_fixture  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("kernel_mode")

RNG = random.Random(20231025)
INT_MAX = 2**31 - 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = NO_PRODUCER_EPOCH = -1
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# v2 header fields, by byte position
LENGTH_OFFSET, LAST_OFFSET_DELTA_OFFSET, RECORDS_COUNT_OFFSET = 8, 23, 57


def only_batch(data, validate_crc=False):
    (batch,) = list(iter_batches(data, validate_crc=validate_crc))
    return batch


def rec(timestamp, key, value, offset=None, headers=()):
    return dict(timestamp=timestamp, key=key, value=value, offset=offset, headers=headers)


def three_records(compression="none"):
    return build_batch([rec(1, b"a", b"1"), rec(2, b"b", b"2"), rec(3, b"c", b"3")],
                       compression=compression)


@pytest.mark.parametrize("timestamp_type", ["create_time", "log_append_time"])
@pytest.mark.parametrize("is_transactional", [True, False])
@pytest.mark.parametrize("is_control", [True, False])
def test_write_empty_header(timestamp_type, is_transactional, is_control):
    producer_id, producer_epoch, base_sequence = 23423, 145, 983
    base_offset, last_offset, leader_epoch = 15, 37, 15
    timestamp = int(time.time() * 1000)
    batch = only_batch(build_batch(
        [], base_offset=base_offset, last_offset=last_offset, max_timestamp=timestamp,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        partition_leader_epoch=leader_epoch, timestamp_type=timestamp_type,
        transactional=is_transactional, is_control=is_control), validate_crc=True)
    assert (batch.producer_id, batch.producer_epoch) == (producer_id, producer_epoch)
    assert batch.base_sequence == base_sequence
    assert batch.last_sequence == base_sequence + (last_offset - base_offset)
    assert (batch.base_offset, batch.last_offset) == (base_offset, last_offset)
    assert batch.partition_leader_epoch == leader_epoch
    assert batch.is_transactional == is_transactional
    assert batch.timestamp_type == TimestampType.of(timestamp_type)
    assert batch.max_timestamp == timestamp
    assert batch.base_timestamp == NO_TIMESTAMP
    assert batch.is_control == is_control


def two_records(**producer):
    return build_batch([rec(1, b"a", b"v", 1234567), rec(2, b"b", b"v", 1234568)],
                       base_offset=1234567, **producer)


def check_two_records(batch):
    assert batch.is_valid()
    assert (batch.base_offset, batch.last_offset, batch.max_timestamp) == (1234567, 1234568, 2)
    assert [(r.offset, r.key) for r in batch] == [(1234567, b"a"), (1234568, b"b")]


def test_build_default_record_batch():
    batch = only_batch(two_records())
    check_two_records(batch)
    assert (batch.producer_id, batch.producer_epoch) == (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    assert (batch.base_sequence, batch.last_sequence) == (NO_SEQUENCE, NO_SEQUENCE)


def test_build_default_record_batch_with_producer_id():
    pid, epoch, base_sequence = 23423, 145, 983
    batch = only_batch(two_records(producer_id=pid, producer_epoch=epoch,
                                   base_sequence=base_sequence))
    check_two_records(batch)
    assert (batch.producer_id, batch.producer_epoch) == (pid, epoch)
    assert (batch.base_sequence, batch.last_sequence) == (base_sequence, base_sequence + 1)


def test_build_default_record_batch_with_sequence_wrap_around():
    pid, epoch, base_sequence = 23423, 145, INT_MAX - 1
    data = build_batch([rec(1, b"a", b"v", 1234567), rec(2, b"b", b"v", 1234568),
                        rec(3, b"c", b"v", 1234569)], base_offset=1234567, producer_id=pid,
                       producer_epoch=epoch, base_sequence=base_sequence)
    batch = only_batch(data)
    assert (batch.producer_id, batch.producer_epoch) == (pid, epoch)
    assert (batch.base_sequence, batch.last_sequence) == (base_sequence, 0)
    table = batch.table()
    assert len(table) == 3
    assert table.sequence.tolist() == [INT_MAX - 1, INT_MAX, 0]


test_size_in_bytes = no_api(
    "kafkalog has no size estimate of unbuilt records (DefaultRecordBatch.sizeInBytes); the "
    "size of a batch is that of the bytes build_batch returns")


def test_invalid_record_size():
    data = bytearray(build_batch([rec(1, b"a", b"1"), rec(2, b"b", b"2"),
                                  rec(3, b"c", b"3")]))
    struct.pack_into(">i", data, LENGTH_OFFSET, 10)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(bytes(data), validate_crc=False))


def records_with_invalid_record_count(compression, invalid_count):
    now = int(time.time() * 1000)
    data = bytearray(build_batch([rec(now, None, b"hello"), rec(now, None, b"there"),
                                  rec(now, None, b"beautiful")], compression=compression))
    struct.pack_into(">i", data, RECORDS_COUNT_OFFSET, invalid_count)
    return bytes(data)


@pytest.mark.parametrize("compression, invalid_count", [
    pytest.param("none", 5, id="too_many_non_compressed_v2"),
    pytest.param("none", 2, id="too_little_non_compressed_v2"),
    pytest.param("gzip", 5, id="too_many_compressed_v2"),
    pytest.param("gzip", 2, id="too_little_compressed_v2")])
def test_invalid_record_count(compression, invalid_count):
    # upstream: four tests, testInvalidRecordCount{TooMany,TooLittle}{Non,}CompressedV2
    data = records_with_invalid_record_count(compression, invalid_count)
    with pytest.raises(CorruptRecordError):
        list(only_batch(data))


def test_invalid_crc():
    data = bytearray(three_records())
    struct.pack_into(">i", data, LAST_OFFSET_DELTA_OFFSET, 23)
    batch = only_batch(bytes(data))
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError):
        batch.ensure_valid()


def test_set_last_offset():
    # kafkalog sets offsets when the log appends as leader: prepare_append assigns them from
    # the log end offset, so a last offset of 500 is a first offset of 498
    data = bytearray(three_records())
    last_offset = 500
    first_offset = last_offset - 3 + 1
    _kernels.prepare_append(data, first_offset, 2**31 - 1, -1)
    batch = only_batch(bytes(data), validate_crc=True)
    assert (batch.last_offset, batch.base_offset) == (last_offset, first_offset)
    assert batch.is_valid()
    assert [r.offset for r in batch] == [498, 499, 500]


test_set_partition_leader_epoch = no_api(
    "kafkalog does not stamp a partition leader epoch into batches (a leader's append keeps "
    "the epoch the batch was built with)")


def test_set_log_append_time():
    data = bytearray(three_records())
    log_append_time = 15
    _kernels.prepare_append(data, 0, 2**31 - 1, log_append_time)
    batch = only_batch(bytes(data), validate_crc=True)
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == log_append_time
    assert batch.is_valid()
    assert [r.timestamp for r in batch] == [log_append_time] * 3


test_set_no_timestamp_type_not_allowed = no_api(
    "kafkalog's only in-place timestamp change is LogAppendTime at append "
    "(prepare_append); there is no setter a NO_TIMESTAMP_TYPE could be given to")


def test_read_and_write_control_batch():
    producer_id, producer_epoch, coordinator_epoch = 1, 0, 15
    data = build_control_batch(ControlType.COMMIT, producer_id=producer_id,
                               producer_epoch=producer_epoch,
                               coordinator_epoch=coordinator_epoch,
                               timestamp=int(time.time() * 1000))
    batch = only_batch(data, validate_crc=True)
    assert batch.is_control
    (record,) = list(batch)
    assert parse_control_record(record.key, record.value) == (ControlType.COMMIT,
                                                             coordinator_epoch)


def record_fields(records):
    return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in records]


@pytest.mark.parametrize("compression", CODECS)
def test_streaming_iterator_consistency(compression):
    data = three_records(compression)
    assert record_fields(only_batch(data)) == \
        record_fields(only_batch(data).table().to_records())


@pytest.mark.parametrize("compression", CODECS)
def test_skip_key_value_iterator_correctness(compression):
    large_value = RNG.randbytes(200 * 1024)
    headers = (("k1", b"v1"), ("k2", None))
    data = build_batch([rec(1, b"a", b"1"), rec(2, b"b", None), rec(3, None, b"3"),
                        rec(4, None, None), rec(1000, b"abc", large_value),
                        rec(9999, b"abc", b"0", headers=headers)], compression=compression)
    table = only_batch(data).table()
    rows = table.records
    # (size, attributes, offset, timestamp, sequence, key size, value size)
    got = list(zip(rows["size"].tolist(), rows["attributes"].tolist(), rows["offset"].tolist(),
                   rows["timestamp"].tolist(), table.sequence.tolist(),
                   rows["key_len"].tolist(), rows["value_len"].tolist()))
    assert got == [(9, 0, 0, 1, -1, 1, 1), (8, 0, 1, 2, -1, 1, -1), (8, 0, 2, 3, -1, -1, 1),
                   (7, 0, 3, 4, -1, -1, -1),
                   (15 + len(large_value), 0, 4, 1000, -1, 3, len(large_value)),
                   (23, 0, 5, 9999, -1, 3, 1)]


test_buffer_reuse_in_skip_key_value_iterator = no_api(
    "kafkalog has no BufferSupplier: decompression buffers are not pooled, so there are no "
    "allocations to count")
test_zstd_jni_for_skip_key_value_iterator = no_api(
    "kafkalog does not stream zstd through JNI in 16 KiB chunks (ChunkedBytesStream); a "
    "payload is decompressed in one call")


def test_increment_sequence():
    assert increment_sequence(5, 5) == 10
    assert increment_sequence(INT_MAX, 1) == 0
    assert increment_sequence(INT_MAX - 5, 10) == 4


def test_decrement_sequence():
    assert decrement_sequence(5, 5) == 0
    assert decrement_sequence(0, 1) == INT_MAX
