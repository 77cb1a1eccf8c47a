"""The Spark reader: both entry points against Kafka's own reading of every fixture, offset and
timestamp ranges and read_committed against a pure-Python reference, splits, replicas."""
import json
import os
import shutil

import pytest

import kafkalog.spark as ks

from conftest import FIXTURES, fixture_names, reference, txn0_committed

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="session")
def spark():
    import sys
    # Spark's Python workers must run this interpreter (it has kafkalog and its dependencies).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master("local[2]").appName("kafkalog-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    ks.register(session)
    yield session
    session.stop()


def rows(df, headers=False):
    cols = "topic, partition, offset, unix_millis(timestamp) AS ts, timestampType, key, value"
    if headers:
        cols += ", headers"
    out = []
    for r in df.selectExpr(*[c.strip() for c in cols.split(",")]).collect():
        item = (r.topic, r.partition, r.offset, r.ts, r.timestampType,
                None if r.key is None else bytes(r.key), None if r.value is None else
                bytes(r.value))
        if headers:
            item += (None if r.headers is None else
                     tuple((h.key, None if h.value is None else bytes(h.value))
                           for h in r.headers),)
        out.append(item)
    return sorted(out, key=lambda x: (x[0], x[1], x[2]))


def test_schema_equals_sparks_kafka_source(spark):
    from pyspark.sql.types import _parse_datatype_string
    kafka = _parse_datatype_string(
        "key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int")
    with_headers = _parse_datatype_string(
        "key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int, "
        "headers array<struct<key:string,value:binary>>")
    assert ks.kafka_schema(False) == kafka
    assert ks.kafka_schema(True) == with_headers
    assert ks.read(spark, FIXTURES / "plain-0").schema == kafka
    assert spark.read.format("kafkalog").option("includeHeaders", "true") \
        .load(str(FIXTURES / "plain-0")).schema == with_headers


READABLE = [n for n in fixture_names() if n != "corrupt_flip-0"]


@pytest.mark.parametrize("name", READABLE)
def test_every_fixture_through_read(spark, name):
    df = ks.read(spark, str(FIXTURES / name), includeHeaders=True)
    assert rows(df, headers=True) == reference(name, headers=True)


@pytest.mark.parametrize("name", READABLE)
def test_every_fixture_through_the_data_source(spark, name):
    df = spark.read.format("kafkalog").option("includeHeaders", "true") \
        .load(str(FIXTURES / name))
    assert rows(df, headers=True) == reference(name, headers=True)


def test_corrupt_batch_and_fail_on_data_loss(spark):
    path = str(FIXTURES / "corrupt_flip-0")
    with pytest.raises(Exception) as e:
        ks.read(spark, path).count()
    assert "CRC" in str(e.value) or "corrupt" in str(e.value).lower()
    lenient = rows(ks.read(spark, path, failOnDataLoss="false"))
    assert lenient == reference("corrupt_flip-0", keep=lambda r, b: r["offset"] < 1890)
    unchecked = rows(ks.read(spark, path, validateCrc="false"))
    assert unchecked == reference("corrupt_flip-0")


@pytest.mark.parametrize("start,end", [(0, 10), (95, 4410), (4321, 4322), (6000, None),
                                       (None, 3000)])
def test_offset_ranges(spark, start, end):
    name = "gzip-0"
    starting = "earliest" if start is None else json.dumps({"gzip": {"0": start}})
    ending = "latest" if end is None else json.dumps({"gzip": {"0": end}})
    df = ks.read(spark, str(FIXTURES / name), startingOffsets=starting, endingOffsets=ending)
    lo, hi = start or 0, end if end is not None else 10 ** 12
    assert rows(df) == reference(name, keep=lambda r, b: lo <= r["offset"] < hi)


def _first_offset_at_or_after(name, ts):
    recs = reference(name)
    hits = [r[2] for r in recs if r[3] >= ts]
    return hits[0] if hits else None


@pytest.mark.parametrize("name", ["multiseg-0", "gzip-0"])
@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.77])
def test_timestamp_ranges(spark, name, fraction):
    recs = reference(name)
    lo_ts = recs[int(len(recs) * fraction)][3]
    hi_ts = lo_ts + 2000
    df = ks.read(spark, str(FIXTURES / name), startingTimestamp=str(lo_ts),
                 endingTimestamp=str(hi_ts))
    start = _first_offset_at_or_after(name, lo_ts)
    end = _first_offset_at_or_after(name, hi_ts)
    want = [r for r in recs if r[2] >= start and (end is None or r[2] < end)]
    assert rows(df) == want
    by_ts = json.dumps({name.split("-")[0]: {"0": lo_ts}})
    df = ks.read(spark, str(FIXTURES / name), startingOffsetsByTimestamp=by_ts)
    assert rows(df) == [r for r in recs if r[2] >= start]


def test_read_committed_on_transactional_fixture(spark):
    committed = txn0_committed()
    for df in (ks.read(spark, str(FIXTURES / "txn-0"), **{"kafka.isolation.level":
                                                           "read_committed"}),
               spark.read.format("kafkalog").option("kafka.isolation.level", "read_committed")
               .load(str(FIXTURES / "txn-0"))):
        assert rows(df) == reference("txn-0", keep=committed)
    uncommitted = rows(ks.read(spark, str(FIXTURES / "txn-0")))
    assert uncommitted == reference("txn-0")


def test_splits_cover_every_offset_once(spark):
    path = str(FIXTURES / "multiseg-0")
    tasks = ks.plan([path], {"maxBytesPerTask": 20000})
    assert len(tasks) > 30
    spans = sorted((t["segment"], t["start_pos"], t["end_pos"]) for t in tasks)
    for (s1, a1, b1), (s2, a2, b2) in zip(spans, spans[1:]):
        assert s1 != s2 or b1 == a2          # contiguous, no overlap, within a segment
    df = ks.read(spark, path, maxBytesPerTask=20000)
    got = [r[2] for r in rows(df)]
    assert got == list(range(30000))
    # Spark tasks read about maxBytesPerTask each: never fewer than that needs, never more
    # than one per planned task
    total = sum(t["end_pos"] - t["start_pos"] for t in tasks)
    assert min(len(tasks), -(-total // 20000)) <= df.rdd.getNumPartitions() <= len(tasks)
    assert len(ks.plan([path], {"minPartitions": 40})) >= 40
    few = ks.plan([path], {"maxRecordsPerPartition": 500})
    assert len(few) >= 60


def test_replicas_read_each_offset_once(spark, tmp_path):
    src = FIXTURES / "multiseg-0"
    logs = sorted(p.name[:20] for p in src.glob("*.log"))
    broker1 = tmp_path / "broker1" / "multiseg-0"
    broker2 = tmp_path / "broker2" / "multiseg-0"
    shutil.copytree(src, broker1)
    shutil.copytree(src, broker2)
    # broker1 lost its oldest segments to retention; broker2 stopped early
    for stem in logs[:5]:
        for f in broker1.glob(stem + ".*"):
            f.unlink()
    for stem in logs[10:]:
        for f in broker2.glob(stem + ".*"):
            f.chmod(0o644)
            f.unlink()
    for f in broker2.glob("*.snapshot"):
        if int(f.name[:20]) > int(logs[9]):
            f.chmod(0o644)
            f.unlink()
    df = ks.read(spark, [str(tmp_path / "broker1"), str(tmp_path / "broker2")])
    got = [r[2] for r in rows(df)]
    assert got == list(range(30000))
    tasks = ks.plan([str(tmp_path / "broker1"), str(tmp_path / "broker2")])
    assert {os.path.dirname(t["dir"]) for t in tasks} == {str(tmp_path / "broker1"),
                                                           str(tmp_path / "broker2")}


def test_topic_selection_and_data_loss(spark):
    root = str(FIXTURES)
    assert {(t["topic"]) for t in ks.plan([root], {"subscribe": "gzip,lz4"})} == {"gzip", "lz4"}
    assert {(t["topic"]) for t in ks.plan([root], {"subscribePattern": "legacy_.*"})} == \
        {"legacy_v0", "legacy_v1", "legacy_v1_codecs"}
    assert {(t["topic"]) for t in ks.plan([root], {"assign": '{"txn": [0]}'})} == {"txn"}
    with pytest.raises(ValueError):
        ks.plan([root], {"subscribe": "a", "assign": '{"a": [0]}'})
    with pytest.raises(ValueError):
        ks.plan([root], {"startingOfsets": "earliest"})
    # startingOffsets below the earliest offset: an error unless failOnDataLoss is false
    from kafkalog.errors import OffsetOutOfRangeError
    tmp_plan = {"startingOffsets": json.dumps({"plain": {"0": -5}}), "subscribe": "plain"}
    with pytest.raises(OffsetOutOfRangeError):
        ks.plan([root], dict(tmp_plan))
    assert ks.plan([root], dict(tmp_plan, failOnDataLoss="false"))[0]["start_offset"] == 0


def test_multiple_topics_in_one_read(spark):
    df = ks.read(spark, str(FIXTURES), subscribe="plain,headers")
    counts = {r.topic: r["count"] for r in df.groupBy("topic").count().collect()}
    assert counts == {"plain": 3000, "headers": 1900}


def test_legacy_v0_records_have_timestamp_type_minus_one(spark):
    types = {r.timestampType for r in ks.read(spark, str(FIXTURES / "legacy_v0-0"))
             .select("timestampType").distinct().collect()}
    assert types == {-1}                       # NO_TIMESTAMP_TYPE, as Kafka and Spark report


def test_a_selection_that_plans_no_task_reads_nothing(spark):
    ks.register(spark)
    for options in ({"subscribe": "nosuchtopic"},
                    {"subscribe": "plain", "endingOffsets": '{"plain": {"0": 0}}'}):
        reader = spark.read.format("kafkalog")
        for k, v in options.items():
            reader = reader.option(k, v)
        assert reader.load(str(FIXTURES)).count() == 0
        assert ks.read(spark, str(FIXTURES), **options).count() == 0


def test_latest_is_the_brokers_high_watermark(spark, tmp_path):
    from kafkalog.checkpoint import write_offset_checkpoint
    root = tmp_path / "broker"
    shutil.copytree(FIXTURES / "plain-0", root / "plain-0")
    write_offset_checkpoint(root / "replication-offset-checkpoint", {("plain", 0): 2990})
    # records above the high watermark were never visible to a consumer
    assert ks.read(spark, str(root)).count() == 2990
    # (startingOffsets=latest is refused for a batch read, as Spark refuses it)
    (task,) = ks.plan([str(root)])
    assert task["end_offset"] == 2990
    # kafkalog's opt-in: the records above the high watermark too
    assert ks.read(spark, str(root), readAboveHighWatermark="true").count() == 3000
