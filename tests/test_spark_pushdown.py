"""Filter pushdown (``DataSourceReader.pushFilters``) for ``spark.read.format("kafkalog")``:
filters on topic, partition, offset and timestamp prune partitions, segments and batches, and
the rows are those of the unfiltered read filtered in Python.

Planning and reading are checked without Spark first (``plan(..., pushdown)`` and
``read_task`` with PySpark's own ``Filter`` objects, bytes planned as the measure of pruning),
then through Spark with ``spark.sql.python.filterPushdown.enabled`` (the session of
``test_spark.py``; the number of Spark partitions as the measure)."""
import datetime
import os

import pytest

import kafkalog
import kafkalog.spark as ks
from kafkalog.log import Log
from kafkalog.scan.pushdown import Pushdown
from kafkalog.scan.reader import read_task
from kafkalog.spark import plan
from kafkalog.spark.options import PRUNE_OPTION

import test_spark
from conftest import FIXTURES

spark = test_spark.spark          # the one session-scoped SparkSession of the suite

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

ds = pytest.importorskip("pyspark.sql.datasource")
if not hasattr(ds, "Filter"):
    pytest.skip("PySpark < 4.1 has no filter pushdown for Python data sources",
                allow_module_level=True)

T0 = 1_700_000_000_000
UTC = datetime.timezone.utc


def ts(ms, extra_us=0):
    """The Spark TimestampType literal (an aware datetime) of ``ms`` Kafka milliseconds."""
    return datetime.datetime.fromtimestamp(0, UTC) + datetime.timedelta(milliseconds=ms,
                                                                          microseconds=extra_us)


def stamp(offset):
    """Record timestamps: rising a second per offset, except every 7th record, which is an
    hour early (CreateTime timestamps need not follow offsets)."""
    return T0 + offset * 1000 - (3_600_000 if offset % 7 == 3 else 0)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Topics ``a`` (3 partitions) and ``b`` (1), 120 records each in batches of 1 to 4,
    several segments each, timestamps from ``stamp``."""
    root = tmp_path_factory.mktemp("pushdown") / "logs"
    for topic, partitions in (("a", 3), ("b", 1)):
        for p in range(partitions):
            log = Log.open(root / f"{topic}-{p}", {"segment.bytes": 2048,
                                                   "index.interval.bytes": 64})
            try:
                o = 0
                while o < 120:
                    n = min(1 + (o // 3) % 4, 120 - o)
                    log.append([kafkalog.Record(key=b"k%d" % i,
                                                value=b"%s-%d-%d" % (topic.encode(), p, i),
                                                timestamp=stamp(i)) for i in range(o, o + n)])
                    o += n
            finally:
                log.close()
    return root


def read(paths, options=None, pushdown=None):
    """(rows, bytes planned, tasks): rows as (topic, partition, offset, timestamp ms, key,
    value), sorted."""
    tasks = plan(paths, options or {}, pushdown)
    rows = []
    for t in tasks:
        for b in read_task(t):
            d = b.to_pydict()
            for i in range(b.num_rows):
                when = d["timestamp"][i]
                ms = (when - ts(0)) // datetime.timedelta(milliseconds=1)
                rows.append((d["topic"][i], d["partition"][i], d["offset"][i], ms, d["key"][i],
                             d["value"][i]))
    return sorted(rows), sum(t["end_pos"] - t["start_pos"] for t in tasks), len(tasks)


def check(paths, filters, keep, options=None, prunes=True, handled=True):
    """The pushed read of ``filters``, with the filters it leaves to Spark applied by ``keep``,
    equals the unfiltered read filtered by ``keep`` (a predicate on a row); it plans fewer
    bytes when ``prunes``."""
    everything, all_bytes, _ = read(paths, options)
    pushdown, unhandled = Pushdown.from_filters(filters)
    assert (unhandled == []) == handled, unhandled
    assert all(any(u is f for f in filters) for u in unhandled)
    got, got_bytes, _ = read(paths, options, pushdown)
    want = [r for r in everything if keep(r)]
    if handled:
        assert got == want
    else:
        assert set(want) <= set(got)
        assert [r for r in got if keep(r)] == want
    if prunes:
        assert got_bytes < all_bytes
    else:
        assert got_bytes <= all_bytes
    return got


TOPIC, PART, OFF, TS, KEY, VALUE = range(6)
O = ("offset",)


@pytest.mark.parametrize("filters,keep", [
    ([ds.GreaterThanOrEqual(O, 100)], lambda r: r[OFF] >= 100),
    ([ds.GreaterThan(O, 100)], lambda r: r[OFF] > 100),
    ([ds.LessThan(O, 20)], lambda r: r[OFF] < 20),
    ([ds.LessThanOrEqual(O, 20)], lambda r: r[OFF] <= 20),
    ([ds.GreaterThanOrEqual(O, 30), ds.LessThan(O, 45)], lambda r: 30 <= r[OFF] < 45),
    ([ds.EqualTo(O, 77)], lambda r: r[OFF] == 77),
    ([ds.In(O, (3, 4, 5, 90, 119, 500, None))], lambda r: r[OFF] in (3, 4, 5, 90, 119)),
    ([ds.In(O, (3, 90)), ds.GreaterThan(O, 10)], lambda r: r[OFF] == 90),
    ([ds.GreaterThan(O, 50), ds.LessThan(O, 40)], lambda r: False),
    ([ds.IsNotNull(O), ds.GreaterThanOrEqual(O, 110)], lambda r: r[OFF] >= 110),
])
def test_offset_filters(logs, filters, keep):
    check(logs, filters, keep)


TS_ = ("timestamp",)


@pytest.mark.parametrize("filters,keep", [
    # every 7th record is an hour early: the bound comes from the time index, not offsets
    ([ds.GreaterThanOrEqual(TS_, ts(stamp(60)))], lambda r: r[TS] >= stamp(60)),
    ([ds.GreaterThan(TS_, ts(stamp(60)))], lambda r: r[TS] > stamp(60)),
    ([ds.GreaterThan(TS_, ts(stamp(60), 500))], lambda r: r[TS] > stamp(60)),
    ([ds.GreaterThanOrEqual(TS_, ts(stamp(60), 500))], lambda r: r[TS] > stamp(60)),
    ([ds.GreaterThanOrEqual(TS_, ts(T0 + 100_000))], lambda r: r[TS] >= T0 + 100_000),
    ([ds.EqualTo(TS_, ts(stamp(82)))], lambda r: r[TS] == stamp(82)),
    ([ds.GreaterThanOrEqual(TS_, ts(T0 + 10**9))], lambda r: False),
])
def test_timestamp_lower_bounds_prune(logs, filters, keep):
    check(logs, filters, keep)


@pytest.mark.parametrize("filters,keep", [
    # upper bounds cannot prune (a late offset may have an early timestamp): rows are masked
    ([ds.LessThan(TS_, ts(stamp(50)))], lambda r: r[TS] < stamp(50)),
    ([ds.LessThanOrEqual(TS_, ts(stamp(50), 999))], lambda r: r[TS] <= stamp(50)),
    ([ds.GreaterThanOrEqual(TS_, ts(0))], lambda r: True),
    ([ds.GreaterThanOrEqual(TS_, ts(-5000))], lambda r: True),
])
def test_timestamp_filters_without_pruning(logs, filters, keep):
    check(logs, filters, keep, prunes=False)


def test_timestamp_range_with_offsets(logs):
    check(logs, [ds.GreaterThanOrEqual(TS_, ts(stamp(40))), ds.LessThan(TS_, ts(stamp(90))),
                 ds.LessThan(O, 100)],
          lambda r: stamp(40) <= r[TS] < stamp(90) and r[OFF] < 100)


@pytest.mark.parametrize("filters,keep", [
    ([ds.EqualTo(("topic",), "b")], lambda r: r[TOPIC] == "b"),
    ([ds.In(("partition",), (0, 2))], lambda r: r[PART] in (0, 2)),
    ([ds.EqualTo(("partition",), 1), ds.EqualTo(("topic",), "a")],
     lambda r: r[PART] == 1 and r[TOPIC] == "a"),
    ([ds.Not(ds.EqualTo(("topic",), "a"))], lambda r: r[TOPIC] != "a"),
    ([ds.Not(ds.In(("partition",), (1, 2)))], lambda r: r[PART] not in (1, 2)),
    ([ds.In(("topic",), ("a", "zzz")), ds.EqualTo(("partition",), 2),
      ds.GreaterThanOrEqual(O, 60)], lambda r: (r[TOPIC], r[PART]) == ("a", 2)
     and r[OFF] >= 60),
    ([ds.EqualTo(("topic",), "nosuchtopic")], lambda r: False),
])
def test_topic_and_partition_filters(logs, filters, keep):
    check(logs, filters, keep)


@pytest.mark.parametrize("filters,keep", [
    # not handled: left to Spark, nothing pruned by them
    ([ds.EqualTo(("value",), b"a-0-5")], lambda r: r[VALUE] == b"a-0-5"),
    ([ds.StringStartsWith(("topic",), "a")], lambda r: r[TOPIC].startswith("a")),
    ([ds.Not(ds.EqualTo(O, 5))], lambda r: r[OFF] != 5),
    ([ds.In(("timestamp",), (ts(stamp(3)),))], lambda r: r[TS] == stamp(3)),
    ([ds.EqualTo(O, "5")], lambda r: r[OFF] == 5),
    ([ds.EqualTo(("timestampType",), 0)], lambda r: True),
])
def test_filters_not_pushed(logs, filters, keep):
    check(logs, filters, keep, prunes=False, handled=False)


def test_handled_and_unhandled_together(logs):
    check(logs, [ds.EqualTo(("key",), b"k100"), ds.GreaterThanOrEqual(O, 100)],
          lambda r: r[OFF] >= 100 and r[KEY] == b"k100", handled=False)
    _, unhandled = Pushdown.from_filters([f := ds.EqualTo(("key",), b"k1"),
                                          ds.GreaterThanOrEqual(O, 1)])
    assert len(unhandled) == 1 and unhandled[0] is f


def test_offsets_options_intersect_filters(logs):
    options = {"startingOffsets": '{"a":{"0":10,"1":10,"2":10},"b":{"0":10}}',
               "endingOffsets": '{"a":{"0":50,"1":50,"2":50},"b":{"0":-1}}'}
    check(logs, [ds.GreaterThanOrEqual(O, 40)],
          lambda r: r[OFF] >= 40, options=options)
    check(logs, [ds.LessThan(O, 20), ds.EqualTo(("topic",), "b")],
          lambda r: r[OFF] < 20 and r[TOPIC] == "b", options=options)
    # disjoint: nothing planned
    got, planned, tasks = read(logs, options, Pushdown.from_filters([ds.LessThan(O, 10)])[0])
    assert got == [] and planned == 0 and tasks == 0


def test_filters_keep_option_errors(logs):
    """Options are resolved for every partition the options select, as without filters."""
    from kafkalog.errors import InvalidConfigError
    options = {"startingTimestamp": str(T0 + 10**9)}     # no record that late anywhere
    with pytest.raises(InvalidConfigError, match="No offset matched"):
        plan(logs, options, Pushdown.from_filters([ds.EqualTo(("topic",), "b")])[0])
    options = {"startingOffsets": '{"a":{"0":10}}', "endingOffsets": '{"a":{"0":20}}'}
    with pytest.raises(InvalidConfigError, match="must specify all TopicPartitions"):
        plan(logs, options, Pushdown.from_filters([ds.EqualTo(("partition",), 0)])[0])


def test_starting_timestamp_and_filter(logs):
    check(logs, [ds.GreaterThanOrEqual(O, 100)],
          lambda r: r[OFF] >= 100, options={"startingTimestamp": str(stamp(30))})


def test_offset_in_many_runs_is_one_span(logs):
    values = tuple(range(0, 120, 2))             # 60 runs of one offset
    got = check(logs, [ds.In(O, values)], lambda r: r[OFF] in values, prunes=False)
    assert len(got) == 4 * 60
    import kafkalog.scan.pushdown as pushdown
    old, pushdown._MAX_OFFSET_RUNS = pushdown._MAX_OFFSET_RUNS, 8
    try:
        check(logs, [ds.In(O, values)], lambda r: r[OFF] in values, prunes=False)
    finally:
        pushdown._MAX_OFFSET_RUNS = old


def test_last_percent_reads_one_percent(logs):
    """The batches below the filter are not even walked: planned bytes are about the part
    kept."""
    _, all_bytes, _ = read(logs)
    _, few, _ = read(logs, None, Pushdown.from_filters([ds.GreaterThanOrEqual(O, 118)])[0])
    assert few * 20 < all_bytes


# ------------------------------------------------------------- Kafka-written fixtures

@pytest.mark.parametrize("name", ["multiseg-0", "append_time-0", "legacy_v1-0", "gzip-0"])
def test_kafka_written_offsets_and_timestamps(name):
    path = FIXTURES / name
    rows, _, _ = read(path)
    assert rows
    middle = rows[len(rows) // 2]
    check(path, [ds.GreaterThanOrEqual(O, middle[OFF])], lambda r: r[OFF] >= middle[OFF],
          prunes=name == "multiseg-0")
    check(path, [ds.GreaterThanOrEqual(TS_, ts(middle[TS]))], lambda r: r[TS] >= middle[TS],
          prunes=False)
    check(path, [ds.LessThan(TS_, ts(middle[TS])), ds.In(O, (rows[0][OFF], middle[OFF]))],
          lambda r: r[TS] < middle[TS] and r[OFF] in (rows[0][OFF], middle[OFF]),
          prunes=False)


def test_kafka_written_legacy_v0_timestamps():
    path = FIXTURES / "legacy_v0-0"
    check(path, [ds.GreaterThanOrEqual(TS_, ts(0))], lambda r: r[TS] >= 0, prunes=False)
    check(path, [ds.LessThan(TS_, ts(0))], lambda r: r[TS] < 0, prunes=False)
    check(path, [ds.GreaterThan(TS_, ts(-2))], lambda r: r[TS] > -2, prunes=False)


def test_kafka_written_read_committed():
    path = FIXTURES / "txn-0"
    options = {"kafka.isolation.level": "read_committed"}
    rows, _, _ = read(path, options)
    assert rows
    cut = rows[len(rows) // 2][OFF]
    check(path, [ds.GreaterThan(O, cut)], lambda r: r[OFF] > cut, options=options,
          prunes=False)
    check(path, [ds.In(O, tuple(r[OFF] for r in rows[::3]) + (10**6,))],
          lambda r: r[OFF] in {x[OFF] for x in rows[::3]}, options=options, prunes=False)


# ------------------------------------------------------------------------------ Spark

@pytest.fixture
def pushdown_on(spark):
    key = "spark.sql.python.filterPushdown.enabled"
    old = spark.conf.get(key)
    spark.conf.set(key, "true")
    yield spark
    spark.conf.set(key, old)


def spark_rows(df):
    return sorted((r.topic, r.partition, r.offset, r.ts, bytes(r.key), bytes(r.value))
                  for r in df.selectExpr("topic", "partition", "offset",
                                         "unix_millis(timestamp) AS ts", "key",
                                         "value").collect())


@pytest.fixture(scope="module")
def full_rows(spark, logs):
    """The unfiltered rows of ``logs`` (read once for the filters compared with them)."""
    return spark_rows(spark.read.format("kafkalog").load(str(logs)))


@pytest.mark.parametrize("where,keep,pushed", [
    ("offset >= 110", lambda r: r[OFF] >= 110, True),
    ("offset BETWEEN 30 AND 40 AND partition IN (0, 2)",
     lambda r: 30 <= r[OFF] <= 40 and r[PART] in (0, 2), True),
    ("topic = 'b' AND offset IN (1, 2, 3, 119)",
     lambda r: r[TOPIC] == "b" and r[OFF] in (1, 2, 3, 119), True),
    (f"timestamp >= timestamp_millis({stamp(100)})", lambda r: r[TS] >= stamp(100), True),
    (f"timestamp < timestamp_millis({stamp(20)})", lambda r: r[TS] < stamp(20), True),
    # cannot be pushed: OR across columns, a filter on value
    ("offset >= 110 OR partition = 1", lambda r: r[OFF] >= 110 or r[PART] == 1, False),
    ("value = 'a-1-7'", lambda r: r[VALUE] == b"a-1-7", False),
    ("offset > 100 AND value LIKE '%-1-%'", lambda r: r[OFF] > 100 and b"-1-" in r[VALUE],
     False),
])
def test_spark_filters(pushdown_on, logs, full_rows, where, keep, pushed):
    spark = pushdown_on
    # several tasks per partition; ks.read's DataFrames prune (see kafkalog.spark.datasource)
    df = ks.read(spark, logs, maxBytesPerTask=1024)
    full = full_rows
    filtered = df.filter(where)
    assert spark_rows(filtered) == [r for r in full if keep(r)]
    assert filtered.count() == len([r for r in full if keep(r)])
    # Spark keeps a Filter only for what pushFilters returned
    plan_text = filtered._jdf.queryExecution().executedPlan().toString()
    assert ("Filter " not in plan_text) == pushed, plan_text


def reader_partitions(path, filters, **options):
    """The partitions the data source's reader plans after ``pushFilters(filters)`` (what
    PySpark's pushdown worker asks), and the filters it returned."""
    from kafkalog.spark.datasource import data_source_class
    source = data_source_class()({"path": str(path), PRUNE_OPTION: "true", **options})
    reader = source.reader(source.schema())
    unhandled = list(reader.pushFilters(filters))
    return reader.partitions(), unhandled


def test_reader_plans_fewer_partitions(logs):
    everything, _ = reader_partitions(logs, [], maxBytesPerTask="1024")
    few, unhandled = reader_partitions(
        logs, [f := ds.EqualTo(("value",), b"x"), ds.GreaterThanOrEqual(O, 110),
               ds.In(("partition",), (0, 2))], maxBytesPerTask="1024")
    assert unhandled == [f] and unhandled[0] is f
    assert 0 < len(few) < len(everything)
    none, _ = reader_partitions(logs, [ds.EqualTo(("topic",), "nosuchtopic")])
    assert len(none) == 1                     # one partition that reads nothing
    assert type(none[0]).__name__ == "PlannedPartition" and none[0].tasks == []


def test_spark_filters_and_starting_offsets(pushdown_on, logs):
    df = pushdown_on.read.format("kafkalog").option("subscribe", "a") \
        .option("startingOffsets", '{"a":{"0":100,"1":-2,"2":115}}').load(str(logs))
    full = spark_rows(df)
    got = spark_rows(df.filter("offset < 110 AND partition != 1"))
    assert got == [r for r in full if r[OFF] < 110 and r[PART] != 1]
    assert {r[PART] for r in got} == {0}


def test_spark_without_pushdown_setting(spark, logs):
    """With ``spark.sql.python.filterPushdown.enabled`` false (PySpark's default) the source
    reads and Spark filters."""
    key = "spark.sql.python.filterPushdown.enabled"
    old = spark.conf.get(key)
    spark.conf.set(key, "false")          # ks.read turns it on for the session
    try:
        df = spark.read.format("kafkalog").load(str(logs))
        assert df.filter("offset >= 110").count() == 4 * 10
    finally:
        spark.conf.set(key, old)


def test_spark_filter_sees_appended_records(pushdown_on, tmp_path):
    """Pushed filters are re-applied when each action plans again."""
    path = tmp_path / "logs" / "c-0"
    log = Log.open(path)
    try:
        log.append([kafkalog.Record(value=b"%d" % i, timestamp=T0 + i) for i in range(10)])
        df = pushdown_on.read.format("kafkalog").load(str(path)).filter("offset >= 8")
        assert df.count() == 2
        log.append([kafkalog.Record(value=b"%d" % i, timestamp=T0 + i) for i in range(10, 15)])
        assert sorted(r.offset for r in df.collect()) == [8, 9, 10, 11, 12, 13, 14]
    finally:
        log.close()


def test_large_fixture_last_percent(pushdown_on):
    path = FIXTURES.parent / "kafka-written-large" / "bench-0"
    if not os.path.isdir(path):
        pytest.skip("kafka-written-large/bench-0 missing")
    df = pushdown_on.read.format("kafkalog").load(str(path))
    assert df.filter("offset >= 990000").count() == 10_000
    tasks = plan(path, {}, Pushdown.from_filters([ds.GreaterThanOrEqual(O, 990000)])[0])
    whole = plan(path, {})
    planned = sum(t["end_pos"] - t["start_pos"] for t in tasks)
    assert planned * 50 < sum(t["end_pos"] - t["start_pos"] for t in whole)
