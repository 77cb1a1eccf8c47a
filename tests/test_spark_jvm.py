"""``kafkalog.spark.read`` through the JVM reader (``kafkalog-spark.jar``, ``jvm/``) against
the Python reader (``kafkalog.reader=python``): every column of the Kafka-written fixtures,
isolation levels, corrupt and legacy data, the ``kafkalog.reader`` option, grouping of tasks
into Spark partitions, and planning again on every action (appends seen, retention followed).
Skipped when the jar was not built (no ``javac``: ``jvm/build.sh`` builds it)."""
import json
import logging
import time

import pytest

pytest.importorskip("pyspark")

import kafkalog  # noqa: E402
import kafkalog.spark as ks  # noqa: E402
from kafkalog.errors import InvalidConfigError  # noqa: E402
from kafkalog.log import Log  # noqa: E402
from kafkalog.spark import datasource, jvm  # noqa: E402
from kafkalog.spark.options import Options  # noqa: E402

import test_spark  # noqa: E402
from conftest import FIXTURES, LARGE_FIXTURES, reference  # noqa: E402
from test_spark import rows  # noqa: E402

if ks.jar_path() is None:
    pytest.skip("kafkalog/spark/kafkalog-spark.jar not built (no javac?): jvm/build.sh builds "
                "it", allow_module_level=True)

spark = test_spark.spark          # the one session-scoped SparkSession of the suite

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

PYTHON = {"kafkalog.reader": "python"}
JVM = {"kafkalog.reader": "jvm"}


def uses_jvm(df):
    """Whether ``df`` reads through the JVM reader (a DataSource V2 relation) rather than
    Python workers (mapInArrow)."""
    return df._jdf.queryExecution().analyzed().getClass().getSimpleName() == \
        "DataSourceV2Relation"


def both(spark, path, **options):
    """``path`` read through the JVM reader and through the Python one."""
    jvm_df = ks.read(spark, str(path), **options)
    assert uses_jvm(jvm_df)
    return jvm_df, ks.read(spark, str(path), **options, **PYTHON)


@pytest.mark.parametrize("name", ["plain-0", "gzip-0", "snappy-0", "lz4-0", "zstd-0",
                                  "headers-0", "append_time-0", "multiseg-0", "crashed-0",
                                  "corrupt_garbage-0"])
def test_every_column_equals_the_python_reader(spark, name):
    j, p = both(spark, FIXTURES / name, includeHeaders=True)
    got = rows(j, headers=True)
    assert got == rows(p, headers=True)
    assert got == reference(name, headers=True)


@pytest.mark.parametrize("level", ["read_committed", "read_uncommitted"])
def test_transactions(spark, level):
    j, p = both(spark, FIXTURES / "txn-0", **{"kafka.isolation.level": level})
    assert rows(j) == rows(p)


@pytest.mark.parametrize("options", [
    {"startingOffsets": json.dumps({"multiseg": {"0": 1234}}),
     "endingOffsets": json.dumps({"multiseg": {"0": 20001}})},
    {"minPartitions": "7"},
    {"maxRecordsPerPartition": "999", "maxBytesPerTask": "4096"},
    {"startingTimestamp": "0", "failOnDataLoss": "false"},
])
def test_offset_ranges_and_splits(spark, options):
    j, p = both(spark, FIXTURES / "multiseg-0", **options)
    assert rows(j) == rows(p)


@pytest.mark.parametrize("name", ["bench-0", "bench_lz4-0"])
def test_large_logs(spark, name):
    j, p = both(spark, LARGE_FIXTURES / name)
    query = ["count(*)", "sum(length(value))", "sum(length(key))", "min(offset)", "max(offset)",
             "bit_xor(xxhash64(key, value, offset, timestamp, timestampType))"]
    assert j.selectExpr(*query).collect() == p.selectExpr(*query).collect()
    sample = "offset % 997 = 0"
    assert rows(j.filter(sample)) == rows(p.filter(sample))


def test_a_bad_crc_fails_naming_the_file_and_position(spark):
    df = ks.read(spark, str(FIXTURES / "corrupt_flip-0"), **JVM)
    with pytest.raises(Exception, match="00000000000000001470.log at position 38490"):
        df.count()
    # failOnDataLoss=false: the read stops at the bad batch, as the Python reader's does
    j, p = both(spark, FIXTURES / "corrupt_flip-0", failOnDataLoss="false")
    assert rows(j) == rows(p)
    assert len(rows(j)) > 0


@pytest.mark.parametrize("name", ["legacy_v0-0", "legacy_v1-0", "legacy_v1_codecs-0"])
def test_legacy_message_sets_are_read_in_python(spark, name):
    df = ks.read(spark, str(FIXTURES / name), includeHeaders=True)
    assert not uses_jvm(df)
    assert rows(df, headers=True) == reference(name, headers=True)
    with pytest.raises(InvalidConfigError, match="legacy message sets"):
        ks.read(spark, str(FIXTURES / name), **JVM)


def test_the_reader_option_is_checked(spark):
    with pytest.raises(InvalidConfigError, match="kafkalog.reader must be auto, jvm or python"):
        ks.read(spark, str(FIXTURES / "plain-0"), **{"kafkalog.reader": "fast"})
    assert Options({"KAFKALOG.READER": " JVM "}).reader == "jvm"
    assert Options({}).reader == "auto"
    df = ks.read(spark, str(FIXTURES / "plain-0"), **PYTHON)
    assert not uses_jvm(df)


def test_without_the_jar(spark, monkeypatch, caplog):
    monkeypatch.setattr(jvm, "_loadable", lambda _: False)
    monkeypatch.setattr(jvm, "_JAR", "/nonexistent/kafkalog-spark.jar")
    assert ks.jar_path() is None
    with pytest.raises(InvalidConfigError, match="no kafkalog-spark.jar"):
        ks.read(spark, str(FIXTURES / "plain-0"), **JVM)
    with caplog.at_level(logging.INFO, logger="kafkalog.spark.datasource"):
        df = ks.read(spark, str(FIXTURES / "plain-0"))
    assert not uses_jvm(df)
    assert "reads through Python workers" in caplog.text
    assert rows(df) == reference("plain-0")


def test_tasks_are_grouped_into_partitions_of_consecutive_tasks():
    tasks = [{"start_pos": 0, "end_pos": 1000, "n": i} for i in range(10_000)]
    opts = Options({"maxBytesPerTask": str(1_000_000)})
    groups = datasource._groups(tasks, opts)
    assert len(groups) == datasource._slots(tasks, opts) == 10
    assert [t["n"] for g in groups for t in g] == list(range(10_000))
    assert {len(g) for g in groups} == {1000}
    # minPartitions: at least that many, never more than the tasks
    assert len(datasource._groups(tasks[:50], Options({"minPartitions": "40"}))) == 40
    assert len(datasource._groups(tasks[:3], Options({"minPartitions": "40"}))) == 3
    uneven = [{"start_pos": 0, "end_pos": size} for size in (10, 10, 10, 10, 10_000, 10)]
    groups = datasource._groups(uneven, Options({"minPartitions": "3"}))
    assert len(groups) == 3 and all(groups)
    assert datasource._groups([], Options({})) == []


def test_spark_partitions_follow_the_groups(spark):
    path = str(FIXTURES / "multiseg-0")
    for options in ({}, {"minPartitions": "5"}, {"maxBytesPerTask": "2048"}):
        opts = Options(options)
        expected = len(datasource._groups(ks.plan([path], opts), opts))
        df = ks.read(spark, path, **options)
        assert uses_jvm(df)
        assert df.rdd.getNumPartitions() == expected


def append(log, n):
    first = log.log_end_offset
    for o in range(first, first + n):
        # timestamps of now: retention.bytes, not retention.ms, deletes segments
        log.append([kafkalog.Record(key=b"k%d" % o, value=b"v%d" % o,
                                    timestamp=int(time.time() * 1000))])


def test_every_action_plans_again(spark, tmp_path):
    config = {"segment.bytes": 1024, "retention.bytes": 2048, "file.delete.delay.ms": 0}
    log = Log.open(tmp_path / "t-0", config)
    try:
        append(log, 20)
        df = ks.read(spark, str(tmp_path / "t-0"))
        assert uses_jvm(df)
        assert df.count() == 20
        append(log, 30)                   # past retention.bytes: segments to delete
        assert df.count() == 50
        assert df.filter("offset >= 45").count() == 5
        assert log.delete_old_segments() > 0
        first = log.log_start_offset
        assert 0 < first < 40
        assert df.count() == 50 - first
        assert min(r.offset for r in df.select("offset").collect()) == first
        assert sorted(r.offset for r in df.select("offset").collect()) == \
            list(range(first, 50))
    finally:
        log.close()
