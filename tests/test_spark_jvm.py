"""``kafkalog.spark.read`` through the JVM reader (``kafkalog-spark.jar``, ``jvm/``) against
the Python reader (``kafkalog.reader=python``): every column of the Kafka-written fixtures,
isolation levels, corrupt and legacy data, the ``kafkalog.reader`` option, grouping of tasks
into Spark partitions, planning again on every action (appends seen, retention followed), and
filters pushed into the plan (the rows they keep, the partitions and segments they prune).
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


# ---------------------------------------------------------------------------- filter pushdown
T0 = 1_700_000_000_000          # ms
PUSHDOWN_LOGS = ("a-0", "a-1", "a-2", "b-0")


def timestamp_of(topic, offset):
    """Record ``offset``'s timestamp (ms): one second apart in topic a; in b every other batch
    of 5 is 100 s older, so batches after the time index's first match may be older than a
    filter's lower bound (the JVM reader skips them)."""
    return T0 + 1000 * (offset - (100 if topic == "b" and offset // 5 % 2 else 0))


@pytest.fixture(scope="module")
def pushdown_logs(tmp_path_factory):
    """Topics a (partitions 0-2) and b (partition 0), 200 records each in batches of 5, in
    segments of about 2 KB (several per partition)."""
    root = tmp_path_factory.mktemp("pushdown")
    for name in PUSHDOWN_LOGS:
        topic = name.split("-")[0]
        log = Log.open(root / name, {"segment.bytes": 2048, "index.interval.bytes": 256})
        try:
            for first in range(0, 200, 5):
                log.append([kafkalog.Record(key=b"k%d" % o, value=b"v%d" % o,
                                            timestamp=timestamp_of(topic, o))
                            for o in range(first, first + 5)])
        finally:
            log.close()
    return root


def ts(offset, micros=0):
    """A TIMESTAMP literal (folded before pushdown) of topic a's record ``offset``, plus
    ``micros``."""
    return f"timestamp_micros({timestamp_of('a', offset) * 1000 + micros})"


PUSHED = [
    ("offset >= 150", lambda t, p, o, ms: o >= 150),
    ("offset > 150", lambda t, p, o, ms: o > 150),
    ("offset < 20", lambda t, p, o, ms: o < 20),
    ("offset <= 20", lambda t, p, o, ms: o <= 20),
    ("offset = 77", lambda t, p, o, ms: o == 77),
    ("offset BETWEEN 40 AND 60", lambda t, p, o, ms: 40 <= o <= 60),
    ("offset IN (3, 4, 99, 150, 1000)", lambda t, p, o, ms: o in (3, 4, 99, 150)),
    ("offset >= 300", lambda t, p, o, ms: False),
    ("partition = 1", lambda t, p, o, ms: p == 1),
    ("partition IN (0, 2)", lambda t, p, o, ms: p in (0, 2)),
    ("partition NOT IN (0, 2)", lambda t, p, o, ms: p not in (0, 2)),
    ("topic = 'b'", lambda t, p, o, ms: t == "b"),
    ("topic <> 'a'", lambda t, p, o, ms: t != "a"),
    (f"timestamp >= {ts(150)}", lambda t, p, o, ms: ms >= timestamp_of("a", 150)),
    (f"timestamp > {ts(150, 500)}", lambda t, p, o, ms: ms > timestamp_of("a", 150)),
    (f"timestamp < {ts(20)}", lambda t, p, o, ms: ms < timestamp_of("a", 20)),
    (f"timestamp BETWEEN {ts(40)} AND {ts(60)}",
     lambda t, p, o, ms: timestamp_of("a", 40) <= ms <= timestamp_of("a", 60)),
    ("topic = 'a' AND partition = 2 AND offset >= 190",
     lambda t, p, o, ms: t == "a" and p == 2 and o >= 190),
    (f"partition <> 0 AND offset IN (1, 199) AND timestamp >= {ts(100)}",
     lambda t, p, o, ms: p != 0 and o in (1, 199) and ms >= timestamp_of("a", 100)),
    ("offset >= 150 OR partition = 0", lambda t, p, o, ms: o >= 150 or p == 0),
]


@pytest.mark.parametrize("condition, keeps", PUSHED, ids=[c for c, _ in PUSHED])
def test_pushed_filters_keep_the_rows_they_should(spark, pushdown_logs, condition, keeps):
    j, p = both(spark, pushdown_logs)
    got = rows(j.filter(condition))
    assert got == rows(p.filter(condition))
    expected = [(t, int(part), o, timestamp_of(t, o), 0, b"k%d" % o, b"v%d" % o)
                for t, part in (name.split("-") for name in PUSHDOWN_LOGS)
                for o in range(200) if keeps(t, int(part), o, timestamp_of(t, o))]
    assert got == expected


def explained(df):
    return df._jdf.queryExecution().executedPlan().toString()


def test_pushed_filters_are_explained(spark, pushdown_logs):
    df = ks.read(spark, str(pushdown_logs))
    plan = explained(df.filter("offset >= 150 AND partition NOT IN (0, 2) AND key = 'k1'"))
    assert "PushedFilters: [" in plan
    assert "GreaterThanOrEqual(offset,150)" in plan
    assert "Not(In(partition, [0,2]))" in plan
    assert "key" not in plan.split("PushedFilters: ")[1]      # not a column the planner prunes
    assert "PushedFilters: []" in explained(df)


def recording_dataframe(spark, path):
    """A JVM-read DataFrame of ``path`` and the list of the plans (JSON-decoded) its actions
    make."""
    plan_json = datasource._jvm_planner([str(path)], Options({}))
    plans = []

    def recorded(pushdown):
        out = plan_json(pushdown)
        plans.append(json.loads(out))
        return out
    assert jvm.unavailable(spark) is None
    return jvm.dataframe(spark, recorded, False), plans


def last_segment_before(path, offset):
    return max(int(f.stem) for f in path.glob("*.log") if int(f.stem) <= offset)


def test_pushdown_prunes_partitions_and_segments(spark, pushdown_logs):
    df, plans = recording_dataframe(spark, pushdown_logs)
    assert df.count() == 800
    everything = [t for group in plans[-1] for t in group]
    segments = {(d.name.split("-")[0], int(d.name.split("-")[1]), int(f.stem))
                for d in pushdown_logs.iterdir() for f in d.glob("*.log")}
    assert len(segments) >= 2 * len(PUSHDOWN_LOGS)
    assert {(t["topic"], t["partition"], t["segment"]) for t in everything} == segments
    assert df.filter("topic = 'a' AND partition = 2 AND offset >= 190").count() == 10
    tasks = [t for group in plans[-1] for t in group]
    segment = last_segment_before(pushdown_logs / "a-2", 190)
    assert [(t["topic"], t["partition"], t["segment"], t["start_offset"]) for t in tasks] == \
        [("a", 2, segment, 190)]
    # timestamps through the time index: in topic a offset o is at T0 + o s
    assert df.filter(f"topic = 'a' AND timestamp >= {ts(190)}").count() == 30
    tasks = [t for group in plans[-1] for t in group]
    assert sorted((t["partition"], t["segment"]) for t in tasks) == \
        [(p, last_segment_before(pushdown_logs / f"a-{p}", 190)) for p in range(3)]
    assert {t["start_offset"] for t in tasks} == {190}
    assert df.filter("offset >= 1000").count() == 0
    assert plans[-1] == []


def test_the_planner_turns_pushed_filters_into_a_pushdown():
    seen = []
    planner = jvm._Planner(lambda pushdown: seen.append(pushdown) or "[]")
    assert planner.planTasks(json.dumps([
        {"kind": "GreaterThanOrEqual", "column": "offset", "value": 10},
        {"kind": "In", "column": "offset", "values": [12, 11, None, 40]},
        {"kind": "Not", "child": {"kind": "In", "column": "partition", "values": [0, 1]}},
        {"kind": "EqualTo", "column": "topic", "value": "a"},
        {"kind": "GreaterThan", "column": "timestamp", "value": 1_500_999},
        {"kind": "LessThan", "column": "timestamp", "value": -1_500},
        {"kind": "IsNotNull", "column": "timestamp"},
    ])) == "[]"
    (pushdown,) = seen
    assert (pushdown.offset_lo, pushdown.offset_in) == (10, (11, 12, 40))
    assert (pushdown.topics, pushdown.no_partitions) == ({"a"}, {0, 1})
    assert (pushdown.ts_lo, pushdown.ts_hi) == (1501, -1)      # ms kept exactly
    with pytest.raises(ValueError, match="unknown filter"):
        planner.planTasks('[{"kind": "StringStartsWith", "column": "topic", "value": "a"}]')
    with pytest.raises(json.JSONDecodeError):
        planner.planTasks("[{")


def _waiting_planners(spark):
    cls = spark._jvm.java.lang.Class.forName("io.kafkalog.spark.Planners", True,
                                             spark._jvm.org.apache.spark.util.Utils
                                             .getContextOrSparkClassLoader())
    field = cls.getDeclaredField("WAITING")
    field.setAccessible(True)
    return field.get(None).size()


def test_no_planner_is_left_waiting(spark):
    # load() takes the planner it is given; one it never took (load failed) is dropped
    path = str(FIXTURES / "plain-0")
    df = ks.read(spark, path)
    assert uses_jvm(df) and _waiting_planners(spark) == 0
    planners = spark._jvm.io.kafkalog.spark.Planners
    planner_id = planners.register(jvm._Planner(lambda pushdown: "[]"))
    assert _waiting_planners(spark) == 1
    planners.discard(planner_id)
    assert _waiting_planners(spark) == 0
