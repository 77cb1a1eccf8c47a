"""Kafka 0.7 partition directories through the scan core (``read_arrow``,
``record_batch_reader``, the planner's options): the Kafka source's schema with offset = byte
offset, value = payload, key and timestamp null, topic and partition from ``my_topic-0`` or
``my_topic_0``. Hand-built bytes from test_log07; both kernel modes."""
import datetime
import json

import pyarrow as pa
import pytest

import kafkalog
from kafkalog.errors import CorruptRecordError, InvalidConfigError, OffsetOutOfRangeError
from kafkalog.files import log07_file_name
from kafkalog.scan.pushdown import Pushdown
from kafkalog.scan.reader import read_task
from kafkalog.spark import plan

from test_log07 import entry, gzip_wrapper, snappy_wrapper, write_dir


@pytest.fixture
def root(tmp_path):
    """``my_topic_0``: two files (the second with a short name), magic 0 and 1, gzip and
    snappy wrappers; ``other-3``: two messages written by Log07."""
    f0 = entry(b"a", magic=0) + gzip_wrapper(b"g1", b"g2")
    write_dir(tmp_path, {log07_file_name(0): f0,
                         f"{len(f0)}.kafka": entry(b"b") + snappy_wrapper(b"s1")},
              name="my_topic_0")
    (tmp_path / "other-3").mkdir()
    with kafkalog.Log07.open(tmp_path / "other-3") as log:
        log.append([b"x", b"y"])
    return tmp_path


def rows(table):
    return sorted(zip(table["topic"].to_pylist(), table["partition"].to_pylist(),
                      table["offset"].to_pylist(), table["value"].to_pylist()))


def test_read_arrow(root):
    table = kafkalog.read_arrow(root)
    a, g = len(entry(b"a", magic=0)), len(entry(b"a", magic=0) + gzip_wrapper(b"g1", b"g2"))
    assert rows(table) == [("my_topic", 0, 0, b"a"), ("my_topic", 0, a, b"g1"),
                           ("my_topic", 0, a, b"g2"), ("my_topic", 0, g, b"b"),
                           ("my_topic", 0, g + len(entry(b"b")), b"s1"),
                           ("other", 3, 0, b"x"), ("other", 3, len(entry(b"x")), b"y")]
    assert table.schema == kafkalog.read_arrow(root, subscribe="nothing").schema
    assert table["key"].null_count == table["timestamp"].null_count == len(table)
    assert set(table["timestampType"].to_pylist()) == {-1}


def test_offsets_options_and_splits(root):
    a = len(entry(b"a", magic=0))
    later = kafkalog.read_arrow(root, subscribe="my_topic",
                                startingOffsets=json.dumps({"my_topic": {"0": a}}),
                                endingOffsets=json.dumps({"my_topic": {"0": a + 1}}))
    assert rows(later) == [("my_topic", 0, a, b"g1"), ("my_topic", 0, a, b"g2")]
    whole = rows(kafkalog.read_arrow(root))
    assert rows(kafkalog.read_arrow(root, minPartitions=5)) == whole
    batches = list(kafkalog.record_batch_reader(root, maxBytesPerTask=10))
    assert rows(pa.Table.from_batches(batches)) == whole
    with pytest.raises(InvalidConfigError, match="No offset matched"):
        kafkalog.read_arrow(root, startingTimestamp="0")        # 0.7 has no timestamps


def test_damage_is_data_loss(root):
    d = root / "other-3"
    newest = d / log07_file_name(0)
    data = bytearray(newest.read_bytes())
    data[-1] ^= 1                                   # the newest file: the log ends before it
    newest.write_bytes(bytes(data))
    assert [v for v in kafkalog.read_arrow(d)["value"].to_pylist()] == [b"x"]
    older = root / "my_topic_0" / log07_file_name(0)
    data = bytearray(older.read_bytes())
    data[-1] ^= 1                                   # an older file: inside the log
    older.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError):
        kafkalog.read_arrow(root / "my_topic_0")
    lenient = kafkalog.read_arrow(root / "my_topic_0", failOnDataLoss="false")
    assert lenient["value"].to_pylist() == [b"a", b"b", b"s1"]


def test_a_file_deleted_after_planning_is_data_loss(root, caplog):
    tasks = plan([root / "my_topic_0"])
    assert [(t["format"], t["file"]) for t in tasks] == \
        [("0.7", log07_file_name(0)), ("0.7", f"{tasks[1]['segment']}.kafka")]
    (root / "my_topic_0" / log07_file_name(0)).unlink()
    with pytest.raises(OffsetOutOfRangeError, match="deleted after planning"):
        list(read_task(tasks[0]))
    assert list(read_task(dict(tasks[0], fail_on_data_loss=False))) == []
    assert "deleted after planning" in caplog.text


class _Filter:
    """A PySpark data source filter, as ``Pushdown`` reads one (class name, attribute,
    value)."""

    def __init__(self, attribute, value=None):
        self.attribute, self.value = (attribute,), value


class GreaterThanOrEqual(_Filter):
    pass


class IsNotNull(_Filter):
    pass


def test_pushed_filters(root):
    a = len(entry(b"a", magic=0))
    pushdown, rest = Pushdown.from_filters([GreaterThanOrEqual("offset", a)])
    assert not rest
    tasks = plan([root / "my_topic_0"], None, pushdown)
    assert values(tasks) == [b"g1", b"g2", b"b", b"s1"]
    # timestamp IS NOT NULL is pushed and applied: 0.7 rows have none
    not_null, rest = Pushdown.from_filters([GreaterThanOrEqual("offset", a),
                                            IsNotNull("timestamp")])
    assert not rest
    assert values(plan([root / "my_topic_0"], None, not_null)) == []
    since, _ = Pushdown.from_filters([GreaterThanOrEqual(
        "timestamp", datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc))])
    assert values(plan([root / "my_topic_0"], None, since)) == []
    assert values([dict(t, ts_lo=0) for t in tasks]) == []


def values(tasks):
    return [v for t in tasks for b in read_task(t) for v in b.column("value").to_pylist()]
