"""Record formats: Kafka-written fixtures read exactly as Kafka reads them; batches built here
decode identically in kafka-python and aiokafka (independent implementations)."""
import itertools
import struct
import zlib

import numpy as np
import pytest
from crc32c import crc32c

import kafkalog
from kafkalog import Record, build_batch, build_control_batch, iter_batches, decode_batches
from kafkalog.dump import dump_partition
from kafkalog.errors import CorruptRecordError
from kafkalog.records import ControlType, TimestampType, parse_control_record

from conftest import FIXTURES, LARGE_FIXTURES, expected, fixture_names

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def diff(exp, act, where="$"):
    """First difference between an expected document and ours (extra fields allowed)."""
    if isinstance(exp, dict):
        for k, v in exp.items():
            if k not in act:
                return f"{where}.{k} missing"
            if k == "batch_iteration_error":
                if (v is None) != (act[k] is None):
                    return f"{where}.{k}: {act[k]!r} vs {v!r}"
                continue
            d = diff(v, act[k], f"{where}.{k}")
            if d:
                return d
    elif isinstance(exp, list):
        if len(exp) != len(act):
            return f"{where}: {len(act)} items, expected {len(exp)}"
        for i, (e, a) in enumerate(zip(exp, act)):
            d = diff(e, a, f"{where}[{i}]")
            if d:
                return d
    elif exp != act:
        return f"{where}: {act!r:.80} != {exp!r:.80}"
    return None


@pytest.mark.parametrize("name", fixture_names())
def test_fixture_dump_equals_kafka(name):
    exp = expected(FIXTURES / name)
    doc = dump_partition(FIXTURES / name, exp["records_mode"])
    assert diff(exp, doc) is None


@pytest.mark.parametrize("name", fixture_names(LARGE_FIXTURES))
def test_large_fixture_dump_equals_kafka(name):
    exp = expected(LARGE_FIXTURES / name)
    doc = dump_partition(LARGE_FIXTURES / name, "digest")
    assert diff(exp, doc) is None


def test_corrupt_flip_batch_is_reported_invalid():
    log = FIXTURES / "corrupt_flip-0" / "00000000000000001470.log"
    # By default the walk raises at the bad batch, before any of its records.
    seen = []
    with pytest.raises(CorruptRecordError) as e:
        for b in iter_batches(log):
            seen.append(b.base_offset)
    assert (e.value.position, e.value.base_offset, e.value.path) == (38490, 1890, log)
    assert seen and seen[-1] < 1890
    batches = list(iter_batches(log, validate_crc=False))          # the opt-out
    bad = [b for b in batches if not b.is_valid()]
    assert [(b.base_offset, b.position, b.size_in_bytes) for b in bad] == [(1890, 38490, 1314)]
    with pytest.raises(CorruptRecordError) as e:
        bad[0].ensure_valid()
    assert e.value.position == 38490


def test_record_batch_view_properties():
    batches = list(iter_batches(FIXTURES / "txn-0" / "00000000000000000000.log",
                                validate_crc=True))
    control = [b for b in batches if b.is_control]
    assert control and all(b.is_transactional for b in control)
    marker = list(control[0])[0]
    kind, epoch = parse_control_record(marker.key, marker.value)
    assert kind == ControlType.ABORT and epoch == 10
    data = [b for b in batches if b.producer_id == 100][0]
    assert data.base_sequence >= 0 and data.last_sequence == \
        data.base_sequence + data.last_offset - data.base_offset
    assert data.compression == "none" and data.timestamp_type == TimestampType.CREATE_TIME
    assert data.record_count == len(list(data)) and data.is_valid()


def test_log_append_time_records_report_the_batch_max_timestamp():
    batch = next(iter_batches(FIXTURES / "append_time-0" / "00000000000000000000.log"))
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert {r.timestamp for r in batch} == {batch.max_timestamp}


def test_legacy_compressed_wrapper_base_offset():
    batches = list(iter_batches(FIXTURES / "legacy_v1_codecs-0" / "00000000000000000000.log"))
    wrapper = batches[0]
    assert wrapper.magic == 1 and wrapper.compression == "snappy"
    assert (wrapper.base_offset, wrapper.last_offset) == (0, 9)
    assert [r.offset for r in wrapper] == list(range(10))


# ---------------------------------------------------------------------------------------------
# Building batches

def sample_records(n=20, headers=True):
    out = []
    for i in range(n):
        out.append(Record(
            key=None if i % 7 == 3 else f"key-{i}".encode(),
            value=None if i % 5 == 4 else (b"" if i % 6 == 1 else bytes([i % 256]) * (i * 13)),
            timestamp=1_700_000_000_000 + (i * 37) % 11 - 5,
            headers=[("tr\u00e4ce", b"abc"), ("nil", None)] if headers and i % 3 else ()))
    return out


@pytest.mark.parametrize("compression", CODECS)
def test_build_batch_round_trip(compression):
    records = sample_records()
    data = build_batch(records, base_offset=1000, compression=compression, producer_id=77,
                       producer_epoch=3, base_sequence=2**31 - 5, transactional=True,
                       partition_leader_epoch=9)
    (batch,) = list(iter_batches(data, validate_crc=True))
    assert batch.is_valid() and batch.compression == compression
    assert (batch.base_offset, batch.last_offset, batch.record_count) == (1000, 1019, 20)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, 2**31 - 5)
    assert batch.last_sequence == 14   # sequences wrap at Int.MAX_VALUE
    assert batch.is_transactional and not batch.is_control
    assert batch.partition_leader_epoch == 9
    assert batch.max_timestamp == max(r.timestamp for r in records)
    got = list(batch)
    for i, (want, have) in enumerate(zip(records, got)):
        assert (have.offset, have.key, have.value, have.timestamp, have.headers) == \
            (1000 + i, want.key, want.value, want.timestamp, want.headers)


def _their_records(module, data):
    records = module.MemoryRecords(data)
    out = []
    while True:
        batch = records.next_batch()
        if batch is None:
            return out
        assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value,
                        tuple((k, v) for k, v in r.headers)))


@pytest.mark.parametrize("compression", CODECS)
@pytest.mark.parametrize("library", ["kafka-python", "aiokafka"])
def test_other_implementations_decode_our_batches(compression, library):
    if library == "kafka-python":
        from kafka.record import memory_records as module
    else:
        from aiokafka.record import memory_records as module
    records = sample_records()
    data = build_batch(records[:10], base_offset=5, compression=compression) + \
        build_batch(records[10:], base_offset=15, compression=compression)
    ours = [(r.offset, r.timestamp, r.key, r.value, r.headers)
            for b in iter_batches(data) for r in b]
    theirs = _their_records(module, data)
    assert theirs == ours and len(ours) == 20


@pytest.mark.parametrize("compression", CODECS)
def test_we_decode_kafka_python_batches(compression):
    from kafka.record.default_records import DefaultRecordBatchBuilder
    codec = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[compression]
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    records = sample_records()
    for i, r in enumerate(records):
        builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
    data = bytes(builder.build())
    (batch,) = list(iter_batches(data, validate_crc=True))
    assert batch.is_valid()
    assert [(r.key, r.value, r.timestamp, r.headers) for r in batch] == \
        [(r.key, r.value, r.timestamp, r.headers) for r in records]


def test_control_batch():
    data = build_control_batch("commit", producer_id=5, producer_epoch=2, coordinator_epoch=17,
                               base_offset=40, timestamp=123)
    (batch,) = list(iter_batches(data, validate_crc=True))
    assert batch.is_control and batch.is_transactional and batch.is_valid()
    (r,) = list(batch)
    assert r.offset == 40 and r.timestamp == 123
    assert parse_control_record(r.key, r.value) == (ControlType.COMMIT, 17)
    # the same bytes as Kafka writes for a marker: compare with a fixture's marker layout
    marker = [b for b in iter_batches(FIXTURES / "txn-0" / "00000000000000000000.log")
              if b.is_control][0]
    assert marker.size_in_bytes == batch.size_in_bytes == 78


def test_log_append_time_batch():
    data = build_batch(sample_records(3), timestamp_type="log_append_time",
                       log_append_time=1_800_000_000_000)
    (batch,) = list(iter_batches(data))
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == 1_800_000_000_000
    assert {r.timestamp for r in batch} == {1_800_000_000_000}


def test_zero_record_batch():
    data = build_batch([], base_offset=9)
    (batch,) = list(iter_batches(data, validate_crc=True))
    assert batch.is_valid() and batch.record_count == 0 and list(batch) == []
    assert batch.size_in_bytes == 61


@pytest.mark.parametrize("magic,compression", list(itertools.product([0, 1], CODECS)))
def test_legacy_round_trip(magic, compression):
    records = [Record(key=None if i == 1 else b"k%d" % i, value=b"v" * i, timestamp=100 + i)
               for i in range(5)]
    data = build_batch(records, base_offset=20, magic=magic, compression=compression)
    table = decode_batches(data, list(iter_batches(data))[0]._row.reshape(1)) \
        if compression != "none" else None
    got = [r for b in iter_batches(data, validate_crc=True) for r in b]
    assert [r.offset for r in got] == list(range(20, 25))
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in records]
    assert [r.timestamp for r in got] == ([-1] * 5 if magic == 0 else [100 + i for i in range(5)])
    assert all(b.is_valid() for b in iter_batches(data))
    if table is not None:
        assert len(table) == 5


def test_legacy_v1_batches_decode_in_kafka_python():
    from kafka.record import memory_records
    records = [Record(key=b"k%d" % i, value=b"v" * i, timestamp=100 + i) for i in range(5)]
    for compression in ["none", "gzip"]:
        data = build_batch(records, base_offset=20, magic=1, compression=compression)
        theirs = _their_records(memory_records, data)
        assert [(o, t, k, v) for o, t, k, v, _ in theirs] == \
            [(20 + i, 100 + i, r.key, r.value) for i, r in enumerate(records)]


def test_record_table_is_columnar_and_zero_copy():
    log = FIXTURES / "plain-0" / "00000000000000000000.log"
    from kafkalog.records import open_buffer
    from kafkalog._kernels import walk_batches
    buf = open_buffer(log)
    batches = walk_batches(buf)[0]
    table = decode_batches(buf, batches)
    assert table.data is buf and len(table) == 3000
    assert table.records["offset"].tolist() == list(range(3000))
    assert table.record(5) == table.to_records()[5]


def test_record_equality_and_construction():
    r = Record(key=b"k", value=b"v")
    assert r.timestamp is None and r.headers == () and r.offset is None
    assert r == Record(key=b"k", value=b"v") and r != Record(key=b"k", value=b"w")
    assert Record(b"k", b"v", 5, [("a", b"b")]).headers == (("a", b"b"),)
    with pytest.raises(TypeError):
        build_batch([42])


def test_batch_crc_is_over_attributes_to_end():
    data = build_batch(sample_records(2))
    stored = struct.unpack_from(">I", data, 17)[0]
    assert stored == crc32c(data[21:])
    legacy = build_batch(sample_records(1, headers=False), magic=1)
    assert struct.unpack_from(">I", legacy, 12)[0] == zlib.crc32(legacy[16:])


def test_columns_of_compressed_batches_match_records():
    data = b"".join(build_batch(sample_records(10), base_offset=i * 10, compression=c)
                    for i, c in enumerate(CODECS))
    batches = [b._row for b in iter_batches(data)]
    table = decode_batches(data, np.array(batches))
    assert len(table) == 50 and table.records["offset"].tolist() == list(range(50))
    assert table.batch.tolist() == [i for i in range(5) for _ in range(10)]


def test_package_exports_contract_names():
    """The public names of ../shared/docs/CONTRACT.md."""
    for name in ["Record", "RecordBatch", "build_batch", "build_control_batch", "iter_batches",
                 "OffsetIndex", "TimeIndex", "TransactionIndex", "LogConfig", "LogSegment",
                 "Log", "LogManager"]:
        assert hasattr(kafkalog, name), name
    from kafkalog import errors
    for name in ["KafkaLogError", "CorruptRecordError", "CorruptIndexError",
                 "InvalidOffsetError", "OffsetOutOfRangeError", "RecordTooLargeError",
                 "UnsupportedCompressionError", "LogDirLockedError", "InvalidTopicError"]:
        assert issubclass(getattr(errors, name), errors.KafkaLogError), name
    for method in ["append", "append_as_follower", "read", "records", "offset_for_timestamp",
                   "roll", "flush", "truncate_to", "delete_old_segments", "delete_records",
                   "compact", "close"]:
        assert callable(getattr(kafkalog.Log, method)), method
    assert callable(kafkalog.Log.open)
    for method in ["get_log", "get_or_create_log", "delete_log", "logs", "cleanup_logs",
                   "checkpoint", "shutdown", "__enter__", "__exit__"]:
        assert callable(getattr(kafkalog.LogManager, method)), method


def test_records_made_by_both_kernels_agree_and_pickle():
    import pickle
    from conftest import KERNELS
    data = build_batch(sample_records(), base_offset=3, compression="lz4")
    table = decode_batches(data, np.array([b._row for b in iter_batches(data)]))
    made = {impl: m.make_records(table.data, table.records, table.headers,
                                 table.timestamp_type, (-1, 0, 1))
            for impl, m in KERNELS.items()}
    flat = {impl: [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
                   for r in recs] for impl, recs in made.items()}
    first = next(iter(flat.values()))
    assert all(v == first for v in flat.values()) and len(first) == 20
    for recs in made.values():
        copy = pickle.loads(pickle.dumps(recs[4]))
        assert copy == recs[4] and copy.headers == recs[4].headers
        recs[0].value = b"changed"
        assert recs[0].value == b"changed"
