"""Spark's Kafka source options for batch reads, ported from Spark's ``KafkaRelationSuite`` and
``KafkaSourceProviderSuite`` (connector/kafka-0-10-sql): offsets, timestamps incl. "No offset
matched", precedence, isolation, option validation, minPartitions; re-planning on every action;
``readAboveHighWatermark``; discovery of the data source through ``pyspark_kafkalog``.

Planning tests run without Spark (``kafkalog.spark.plan`` and ``Options``); the Spark tests
share the session of ``test_spark.py``."""
import json

import pytest

import kafkalog
import kafkalog.spark as ks
from kafkalog.errors import InvalidConfigError, OffsetOutOfRangeError
from kafkalog.log import Log

import test_spark
from conftest import FIXTURES, expected, planned_end

spark = test_spark.spark          # the one session-scoped SparkSession of the suite

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

T0 = 1_700_000_000_000           # record timestamps: T0 + offset * 1000


def write_topic(root, topic, partitions=1, records=60, per_batch=1, config=None):
    """A log dir ``root`` with ``topic``'s partitions written by kafkalog: ``records`` records
    each, ``per_batch`` to a batch, timestamps T0 + offset seconds, values ``b"topic-p-offset"``."""
    for p in range(partitions):
        log = Log.open(root / f"{topic}-{p}", config)
        try:
            append(log, topic, p, records, per_batch)
        finally:
            log.close()
    return root


def append(log, topic, partition, records, per_batch=1):
    first = log.log_end_offset
    for lo in range(first, first + records, per_batch):
        hi = min(lo + per_batch, first + records)
        log.append([kafkalog.Record(key=b"k%d" % o, value=b"%s-%d-%d" % (topic.encode(),
                                                                         partition, o),
                                    timestamp=T0 + o * 1000) for o in range(lo, hi)])


def offsets(tasks):
    return sorted((t["topic"], t["partition"], t["start_offset"], t["end_offset"])
                  for t in tasks)


def ranges(tasks):
    """{tp: (start, end)} the tasks of a plan read."""
    out = {}
    for t in tasks:
        key = (t["topic"], t["partition"])
        end = planned_end(t)
        lo, hi = out.get(key, (t["start_offset"], end))
        out[key] = (min(lo, t["start_offset"]), max(hi, end))
    return out


@pytest.fixture
def three(tmp_path):
    """Topic ``t`` with three partitions of 60 one-record batches each."""
    return write_topic(tmp_path / "logs", "t", partitions=3)


# --------------------------------------------------------------- option validation (no Spark)

@pytest.mark.parametrize("options,message", [
    # KafkaSourceProviderSuite / KafkaRelationSuite "bad batch query options"
    ({"subscribe": "t", "subscribePattern": "t.*"}, "Only one of the following options"),
    ({"subscribe": "t", "assign": '{"t":[0]}'}, "Only one of the following options"),
    ({"subscribe": " , "}, "No topics to subscribe to"),
    ({"subscribePattern": "  "}, "Pattern to subscribe is empty"),
    ({"assign": "t-0"}, "No topicpartitions to assign"),
    ({"startingOffsets": "latest"}, "starting offset can't be latest for batch queries"),
    ({"startingOffsets": '{"t":{"0":-1,"1":-2,"2":-2}}'},
     "startingOffsets for t-0 can't be latest for batch queries"),
    ({"endingOffsets": "earliest"}, "ending offset can't be earliest for batch queries"),
    ({"endingOffsets": '{"t":{"0":-2,"1":-1,"2":-1}}'},
     "ending offset for t-0 can't be earliest for batch queries"),
    ({"minPartitions": "0"}, "minPartitions must be positive"),
    ({"minPartitions": "-1"}, "minPartitions must be positive"),
    ({"maxRecordsPerPartition": "0"}, "maxRecordsPerPartition must be positive"),
    ({"kafka.auto.offset.reset": "earliest"}, "'auto.offset.reset' is not supported"),
    ({"kafka.key.deserializer": "x"}, "'key.deserializer' is not supported"),
    ({"kafka.value.deserializer": "x"}, "'value.deserializer' is not supported"),
    ({"kafka.enable.auto.commit": "true"}, "'enable.auto.commit' is not supported"),
    ({"kafka.interceptor.classes": "x"}, "'interceptor.classes' is not supported"),
    ({"startingTimestamp": "soon"}, "Expected a single long value, got soon"),
    ({"startingOffsetsByTimestampStrategy": "closest"}, "must be error or latest"),
    ({"kafka.isolation.level": "read_everything"}, "read_committed or read_uncommitted"),
    ({"startingOfsets": "earliest"}, "unknown option"),
    # checkOffsetLimitValidity: the same partitions on both ends, start <= end
    ({"startingOffsets": '{"t":{"0":1,"1":1,"2":1}}', "endingOffsets": '{"t":{"0":5,"1":5}}'},
     "should have the same topic-partitions"),
    ({"startingOffsets": '{"t":{"0":9,"1":1,"2":1}}',
      "endingOffsets": '{"t":{"0":5,"1":5,"2":5}}'},
     "The specified start offset 9 is greater than the end offset 5 for topic t partition 0"),
    ({"startingOffsetsByTimestamp": json.dumps({"t": {"0": T0 + 9000, "1": T0, "2": T0}}),
      "endingOffsetsByTimestamp": json.dumps({"t": {"0": T0, "1": T0, "2": T0}})},
     "start timestamp"),
    # a JSON must name exactly the partitions read (KafkaOffsetReaderAdmin's assertion)
    ({"startingOffsets": '{"t":{"0":1,"1":1}}'}, "you must specify all TopicPartitions"),
    ({"endingOffsets": '{"t":{"0":1,"1":1,"2":1,"3":1}}'},
     "you must specify all TopicPartitions"),
    ({"startingOffsetsByTimestamp": json.dumps({"t": {"0": T0}})}, "you must specify all"),
])
def test_bad_batch_options_are_refused_as_spark_refuses_them(three, options, message):
    with pytest.raises(InvalidConfigError, match=message) as e:
        ks.plan([three], options)
    assert isinstance(e.value, ValueError)


def test_options_spark_accepts_for_brokers_are_accepted_and_ignored(three, caplog):
    caplog.set_level("INFO", logger="kafkalog.spark.options")
    ignored = {"groupIdPrefix": "job", "kafka.group.id": "g", "kafka.bootstrap.servers": "h:9092",
               "maxOffsetsPerTrigger": "10", "minOffsetsPerTrigger": "1",
               "maxTriggerDelay": "5m", "kafka.security.protocol": "SSL",
               "fetchOffset.numRetries": "3", "kafkaConsumer.pollTimeoutMs": "100"}
    assert offsets(ks.plan([three], ignored)) == offsets(ks.plan([three]))
    warned = {r.getMessage() for r in caplog.records if r.levelname == "WARNING"}
    assert any("maxoffsetspertrigger" in m for m in warned)      # Spark warns for batch
    assert any("kafka.group.id" in m for m in warned)
    assert any("kafka.bootstrap.servers" in r.getMessage() for r in caplog.records)


def test_option_names_and_words_are_case_insensitive_and_trimmed(three):
    everything = {("t", p): (0, 60) for p in range(3)}
    assert ranges(ks.plan([three], {"STARTINGOFFSETS": " EARLIEST ",
                                    "endingoffsets": " Latest"})) == everything
    assert ranges(ks.plan([three], {"subscribe": " t , nope ",
                                    "KAFKA.ISOLATION.LEVEL": "READ_COMMITTED"})) == everything
    assert ranges(ks.plan([three], {"subscribePattern": " t "})) == everything
    assert ranges(ks.plan([three], {"startingTimestamp": f" {T0 + 7000} "})) == \
        {("t", p): (7, 60) for p in range(3)}


def test_no_strategy_option_reads_every_partition_under_the_paths(three):
    # Spark needs one of subscribe/subscribePattern/assign to find partitions on brokers;
    # kafkalog's paths already name them.
    assert set(ranges(ks.plan([three]))) == {("t", 0), ("t", 1), ("t", 2)}
    assert set(ranges(ks.plan([three], {"assign": '{"t":[2]}'}))) == {("t", 2)}


# ----------------------------------------------------------------------- offsets (no Spark)

def test_explicit_offsets_with_earliest_and_latest_markers(three):
    # KafkaRelationSuite "explicit offsets": -2 earliest, -1 latest
    tasks = ks.plan([three], {"startingOffsets": '{"t":{"0":-2,"1":10,"2":20}}',
                              "endingOffsets": '{"t":{"0":5,"1":-1,"2":20}}'})
    assert ranges(tasks) == {("t", 0): (0, 5), ("t", 1): (10, 60)}   # t-2 is empty


def test_resolved_start_above_the_end_is_an_error(three):
    with pytest.raises(InvalidConfigError, match="resolved start offset 70 is greater than the "
                                                 "resolved end offset 60 for topic t partition 1"):
        ks.plan([three], {"startingOffsets": '{"t":{"0":0,"1":70,"2":0}}'})


def test_start_below_the_log_start_is_data_loss(tmp_path):
    root = write_topic(tmp_path / "logs", "t", config={"segment.bytes": 1024})
    log = Log.open(root / "t-0", {"segment.bytes": 1024})
    try:
        log.delete_records(30)
    finally:
        log.close()
    start = ks.plan([root])[0]["start_offset"]
    assert 0 < start <= 30
    with pytest.raises(OffsetOutOfRangeError):
        ks.plan([root], {"startingOffsets": '{"t":{"0":0}}'})
    lenient = ks.plan([root], {"startingOffsets": '{"t":{"0":0}}', "failOnDataLoss": "false"})
    assert ranges(lenient)[("t", 0)][0] == start


# -------------------------------------------------------------------- timestamps (no Spark)

def test_starting_and_ending_timestamps(three):
    tasks = ks.plan([three], {"startingTimestamp": str(T0 + 10_500),
                              "endingTimestamp": str(T0 + 20_000)})
    assert ranges(tasks) == {("t", p): (11, 20) for p in range(3)}
    per = {"t": {"0": T0 + 5000, "1": T0 + 6000, "2": T0}}
    tasks = ks.plan([three], {"startingOffsetsByTimestamp": json.dumps(per)})
    assert ranges(tasks) == {("t", 0): (5, 60), ("t", 1): (6, 60), ("t", 2): (0, 60)}


def test_no_offset_matched_for_a_starting_timestamp(three):
    # KafkaRelationSuite "no matched offset for timestamp - startingOffsets"
    late = str(T0 + 3_600_000)
    with pytest.raises(InvalidConfigError, match="No offset matched from request of "
                                                 f"topic-partition t-0 and timestamp {late}"):
        ks.plan([three], {"startingTimestamp": late})
    per = json.dumps({"t": {"0": T0, "1": int(late), "2": T0}})
    with pytest.raises(InvalidConfigError, match="topic-partition t-1"):
        ks.plan([three], {"startingOffsetsByTimestamp": per})
    # startingOffsetsByTimestampStrategy=latest: start at latest (reads nothing there)
    for strategy in ("latest", "LATEST"):
        tasks = ks.plan([three], {"startingOffsetsByTimestamp": per,
                                  "startingOffsetsByTimestampStrategy": strategy})
        assert ranges(tasks) == {("t", 0): (0, 60), ("t", 2): (0, 60)}


def test_no_offset_matched_for_an_ending_timestamp_reads_to_latest(three):
    tasks = ks.plan([three], {"endingTimestamp": str(T0 + 3_600_000)})
    assert ranges(tasks) == {("t", p): (0, 60) for p in range(3)}


def test_timestamp_options_win_over_offsets(three):
    # getKafkaOffsetRangeLimit: startingTimestamp, then startingOffsetsByTimestamp, then
    # startingOffsets (the others are not looked at, not even for errors)
    per = json.dumps({"t": {"0": T0 + 5000, "1": T0 + 5000, "2": T0 + 5000}})
    tasks = ks.plan([three], {"startingTimestamp": str(T0 + 7000),
                              "startingOffsetsByTimestamp": per,
                              "startingOffsets": "latest"})
    assert ranges(tasks) == {("t", p): (7, 60) for p in range(3)}
    tasks = ks.plan([three], {"startingOffsetsByTimestamp": per,
                              "startingOffsets": '{"t":{"0":50,"1":50,"2":50}}'})
    assert ranges(tasks) == {("t", p): (5, 60) for p in range(3)}
    tasks = ks.plan([three], {"endingTimestamp": str(T0 + 9000),
                              "endingOffsets": '{"t":{"0":2,"1":2,"2":2}}'})
    assert ranges(tasks) == {("t", p): (0, 9) for p in range(3)}


def test_timestamps_on_kafka_written_fixture():
    exp = expected(FIXTURES / "multiseg-0")
    recs = sorted((r["offset"], r["timestamp"]) for s in exp["segments"] for b in s["batches"]
                  if not b["is_control"] for r in b["records"])
    ts = recs[len(recs) // 3][1]
    want = min(o for o, t in recs if t >= ts)
    tasks = ks.plan([FIXTURES / "multiseg-0"], {"startingTimestamp": str(ts)})
    assert ranges(tasks)[("multiseg", 0)][0] == want
    with pytest.raises(InvalidConfigError, match="No offset matched"):
        ks.plan([FIXTURES / "multiseg-0"], {"startingTimestamp": str(recs[-1][1] + 1)})


# ------------------------------------------------------ isolation and the tail (no Spark)

def test_latest_is_the_last_stable_offset_for_read_committed():
    committed = ks.plan([FIXTURES / "txn-0"], {"kafka.isolation.level": "read_committed"})
    assert ranges(committed)[("txn", 0)][1] == 637        # the open transaction's first offset
    tail = ks.plan([FIXTURES / "txn-0"], {"kafka.isolation.level": "read_committed",
                                          "readAboveHighWatermark": "true"})
    assert ranges(tail)[("txn", 0)][1] == 637             # still bounded by the open txn


def test_read_above_high_watermark_reads_to_the_log_end(tmp_path):
    from kafkalog.checkpoint import write_offset_checkpoint
    root = write_topic(tmp_path / "broker", "t", records=50)
    write_offset_checkpoint(root / "replication-offset-checkpoint", {("t", 0): 40})
    assert ranges(ks.plan([root]))[("t", 0)] == (0, 40)
    assert ranges(ks.plan([root], {"readAboveHighWatermark": "true"}))[("t", 0)] == (0, 50)
    with pytest.raises(InvalidConfigError):
        ks.plan([root], {"readAboveHighWatermark": "sometimes"})


# ---------------------------------------------------------------- minPartitions (no Spark)

def test_min_partitions_splits_small_partitions_at_batch_starts(three):
    # KafkaRelationSuite / KafkaOffsetRangeCalculatorSuite: minPartitions above the number of
    # partitions divides their offset ranges
    tasks = ks.plan([three], {"minPartitions": "6"})
    assert len(tasks) >= 6
    per = {}
    for t in tasks:
        per.setdefault(t["partition"], []).append((t["start_pos"], t["end_pos"]))
    for spans in per.values():
        spans.sort()
        assert len(spans) == 2
        assert spans[0][1] == spans[1][0]                # contiguous, cut at a batch start
    assert len(ks.plan([three], {"minPartitions": "2"})) == 3       # enough partitions already
    assert len(ks.plan([three], {"minPartitions": "12"})) >= 12


def test_min_partitions_proportional_to_partition_sizes(tmp_path):
    root = tmp_path / "logs"
    write_topic(root, "big", records=300, per_batch=3)
    write_topic(root, "small", records=10)
    tasks = ks.plan([root], {"minPartitions": "4"})
    counts = {}
    for t in tasks:
        counts[t["topic"]] = counts.get(t["topic"], 0) + 1
    # KafkaOffsetRangeCalculator: the small range stays whole, the big one takes the rest
    assert counts == {"big": 3, "small": 1}


# ---------------------------------------------------------------------- through Spark

def test_spark_offsets_and_errors(spark, three):
    df = ks.read(spark, three, startingOffsets='{"t":{"0":10,"1":-2,"2":59}}',
                 endingOffsets='{"t":{"0":20,"1":5,"2":-1}}')
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)] + [(2, 59)]
    reader = spark.read.format("kafkalog").option("startingOffsets", '{"t":{"0":10,"1":-2,'
                                                  '"2":59}}')
    assert reader.option("endingOffsets", '{"t":{"0":20,"1":5,"2":-1}}') \
        .load(str(three)).count() == 16
    with pytest.raises(ValueError, match="starting offset can't be latest"):
        ks.read(spark, three, startingOffsets="latest")
    with pytest.raises(Exception, match="No offset matched"):
        spark.read.format("kafkalog").option("startingTimestamp", str(T0 + 10 ** 9)) \
            .load(str(three)).count()


def test_spark_min_partitions(spark, three):
    df = ks.read(spark, three, minPartitions=6)
    assert df.rdd.getNumPartitions() >= 6
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(p, o) for p in range(3) for o in range(60)]
    ds = spark.read.format("kafkalog").option("minPartitions", "6").load(str(three))
    assert ds.rdd.getNumPartitions() >= 6
    assert ds.count() == 180


def test_every_action_plans_again(spark, tmp_path):
    # KafkaRelationSuite "test late binding start offsets": records appended after the
    # DataFrame was made are read by the next action
    root = write_topic(tmp_path / "logs", "t", records=40, config={"segment.bytes": 1024})
    frames = [ks.read(spark, root),
              spark.read.format("kafkalog").load(str(root))]
    for df in frames:
        assert df.count() == 40
    log = Log.open(root / "t-0", {"segment.bytes": 1024, "file.delete.delay.ms": 0})
    try:
        append(log, "t", 0, 25)
        for df in frames:
            assert df.count() == 65
            assert df.union(df).count() == 130          # "reuse same dataframe in query"
        # retention deleted the first segments: the next action plans from the new start
        log.delete_records(30)
        first = log.log_start_offset
        assert first > 0
        for df in frames:
            assert df.count() == 65 - first
            assert min(r.offset for r in df.select("offset").collect()) == first
    finally:
        log.close()


def test_pyspark_kafkalog_exposes_the_data_source():
    import pyspark_kafkalog
    from pyspark.sql.datasource import DataSource
    assert issubclass(pyspark_kafkalog.DefaultSource, DataSource)
    assert pyspark_kafkalog.DefaultSource.name() == "kafkalog"


@pytest.mark.parametrize("end", [1, 180, 189, 190])
def test_an_end_inside_a_legacy_compressed_wrapper_keeps_its_first_records(end):
    """A legacy compressed wrapper carries only its last inner offset: a range ending inside
    one must still return the wrapper's records below the end (they were dropped)."""
    import json

    from kafkalog.scan.reader import read_task
    pytest.importorskip("pyarrow")
    path = FIXTURES / "legacy_v1_codecs-0"
    if not path.exists():
        pytest.skip("no shared fixtures")
    tasks = ks.plan([str(path)], {"endingOffsets": json.dumps({"legacy_v1_codecs": {"0": end}})})
    offsets = [o for t in tasks for b in read_task(t) for o in b.column("offset").to_pylist()]
    assert offsets == list(range(end))
