"""kafkalog.scan.reader: a task's columns, only those asked for, in the order asked, with the
compiled and the pure-Python kernels on the same inputs (no Spark)."""
import struct

import pytest

pa = pytest.importorskip("pyarrow")

import kafkalog._kernels as selected  # noqa: E402
from kafkalog import records  # noqa: E402
from kafkalog.errors import CorruptRecordError, InvalidConfigError  # noqa: E402
from kafkalog.scan import reader  # noqa: E402
from kafkalog.scan.reader import read_task  # noqa: E402
from kafkalog.scan.schema import COLUMNS, arrow_schema  # noqa: E402
from kafkalog.spark import plan  # noqa: E402

from conftest import FIXTURES, KERNELS, fixtures_present  # noqa: E402

NAMES = ["multiseg-0", "gzip-0", "headers-0", "legacy_v1_codecs-0", "legacy_v0-0", "txn-0"]
NARROW = ["partition", "offset", "timestamp"]


@pytest.fixture(params=sorted(KERNELS))
def kernels(request, monkeypatch):
    """The reader and the record decoder on one kernel set: the names they took from
    ``kafkalog._kernels`` pointed at that set."""
    module = KERNELS[request.param]
    for user in (reader, records):
        for name in selected.KERNEL_NAMES:
            if getattr(user, name, None) is getattr(selected, name):
                monkeypatch.setattr(user, name, getattr(module, name))
    return module


def tasks_of(name, **options):
    if not fixtures_present(FIXTURES):
        pytest.skip("no shared fixtures")
    return plan([FIXTURES / name], dict({"includeHeaders": "true"}, **options))


def read(tasks, columns=None):
    batches = [b for t in tasks for b in read_task(t, columns)]
    schema = arrow_schema(True, columns)
    return pa.Table.from_batches(batches, schema=schema)


@pytest.mark.parametrize("name", NAMES)
def test_the_columns_asked_for_in_their_order(kernels, name):
    tasks = tasks_of(name, maxBytesPerTask="4096")
    whole = read(tasks)
    assert whole.num_rows > 0
    for columns in (NARROW, ["timestamp", "offset", "partition"], ["value"],
                    ["headers", "key", "topic"], ["timestampType"], list(reversed(COLUMNS))):
        got = read(tasks, columns)
        assert got.schema.names == columns
        assert got.equals(whole.select(columns)), columns


def test_the_task_may_carry_its_columns(kernels):
    (task, *rest) = tasks_of("multiseg-0")
    got = pa.Table.from_batches(list(read_task(dict(task, columns=["offset", "key"]))))
    assert got.schema.names == ["offset", "key"]
    assert got.equals(read([task]).select(["offset", "key"]))


def test_without_key_value_or_headers_no_byte_of_them_is_copied(kernels, monkeypatch):
    def refuse(*args):
        raise AssertionError("gather_spans called for a projection without key/value/headers")
    monkeypatch.setattr(reader, "gather_spans", refuse)
    for name in ("multiseg-0", "headers-0", "txn-0"):
        got = read(tasks_of(name), NARROW)
        assert got.num_rows > 0
        assert got.column("partition").to_pylist() == [0] * got.num_rows
    with pytest.raises(AssertionError, match="gather_spans"):
        read(tasks_of("multiseg-0"), ["offset", "value"])


def test_a_projection_of_record_heads_decodes_no_more_and_checks_them(kernels, monkeypatch,
                                                                      fixture_copy):
    """topic, partition, offset and timestamp of plain data batches come from the records'
    heads (``decode_v2_offsets``), whose lengths, offset and timestamp deltas are checked."""
    whole = read(tasks_of("multiseg-0"))
    monkeypatch.setattr(reader, "decode_batches", lambda *a: pytest.fail("decode_batches"))
    columns = ["topic", "timestamp", "offset", "partition"]
    assert read(tasks_of("multiseg-0"), columns).equals(whole.select(columns))
    path = fixture_copy("multiseg-0")
    log = path / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    assert data[65] == 0                     # the first record's offsetDelta
    data[65] = 0x7E                          # 63, past the batch's lastOffsetDelta (9)
    struct.pack_into(">I", data, 17, kernels.crc32c(bytes(data[21:1106])))
    log.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match="outside the batch's offsets") as e:
        read(plan([path], {}), NARROW)
    assert (e.value.path, e.value.position, e.value.base_offset) == (str(log), 61, 0)


def test_filters_and_ranges_apply_to_a_projection(kernels):
    tasks = tasks_of("multiseg-0", startingOffsets='{"multiseg": {"0": 100}}',
                     endingOffsets='{"multiseg": {"0": 250}}')
    got = read(tasks, ["offset"])
    assert got.column("offset").to_pylist() == list(range(100, 250))


def test_unknown_or_repeated_columns_are_named():
    with pytest.raises(InvalidConfigError, match="unknown column.*'valu'.*the Kafka source's "
                                                 "columns are key, value"):
        arrow_schema(False, ["offset", "valu"])
    with pytest.raises(InvalidConfigError, match="offset named more than once"):
        arrow_schema(False, ["offset", "offset"])
    task = tasks_of("multiseg-0")[0]
    with pytest.raises(InvalidConfigError, match="'nope'"):
        next(read_task(task, ["nope"]))


def test_kafkalog_arrow_takes_the_columns():
    import kafkalog
    if not fixtures_present(FIXTURES):
        pytest.skip("no shared fixtures")
    path = FIXTURES / "multiseg-0"
    got = kafkalog.read_arrow(path, columns=["offset", "partition"])
    assert got.schema.names == ["offset", "partition"]
    assert got.equals(kafkalog.read_arrow(path).select(["offset", "partition"]))
    assert list(kafkalog.read_pandas(path, columns=["timestamp"]).columns) == ["timestamp"]
    with pytest.raises(InvalidConfigError, match="'offsets'"):
        kafkalog.read_arrow(path, columns=["offsets"])
