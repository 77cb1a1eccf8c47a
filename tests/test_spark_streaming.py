"""Structured Streaming (``spark.readStream.format("kafkalog")``), ported from Spark's
``KafkaMicroBatchSourceSuite`` (connector/kafka-0-10-sql): the checkpointed offset format,
starting offsets and timestamps, ``maxOffsetsPerTrigger`` split over partitions,
``minOffsetsPerTrigger``/``maxTriggerDelay``, ``Trigger.AvailableNow``, new records, segments
and partitions, data deleted by retention before it was read (``failOnDataLoss``),
read_committed, and exactly once across a restart from a checkpoint.

Offset planning is tested without Spark (``KafkaLogStream``); the Spark tests share the
session of ``test_spark.py`` and run ``Trigger.AvailableNow`` queries, writing to the logs
only between runs."""
import json
import logging
import os

import pytest

import kafkalog
from kafkalog import build_control_batch
from kafkalog.errors import InvalidConfigError, OffsetOutOfRangeError
from kafkalog.log import Log
from kafkalog.spark.options import Options
from kafkalog.spark.streaming import KafkaLogStream, offsets_json, parse_offsets, rate_limit

import test_spark
from conftest import FIXTURES, expected
from conftest import reference
from test_spark import READABLE, rows
from test_spark_options import T0, append, write_topic

spark = test_spark.spark          # the one session-scoped SparkSession of the suite

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SMALL_SEGMENTS = {"segment.bytes": 1024}


def stream(paths, **options):
    return KafkaLogStream([str(p) for p in paths], options)


def read_stream(spark, path, **options):
    reader = spark.readStream.format("kafkalog")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(path))


def start_now(df, checkpoint, convert):
    """Start a ``Trigger.AvailableNow`` query of ``df``; returns it and the list each
    micro-batch appends ``convert(batch DataFrame)`` to (a sink that recovers from a
    checkpoint, as the memory sink does not)."""
    out = []
    query = df.writeStream.foreachBatch(lambda batch, _: out.extend(convert(batch))) \
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    return query, out


def run_now(df, checkpoint, convert=None):
    """Run a ``Trigger.AvailableNow`` query to its end; returns it and what it read
    (``offsets_read`` of each micro-batch unless ``convert``). The tests write to the logs
    only between runs: a running query's planner reads them all the time."""
    query, out = start_now(df, checkpoint, convert or offsets_read)
    query.awaitTermination(300)
    assert not query.isActive
    return query, sorted(out)


def checkpointed_offsets(checkpoint, batch):
    """The source offset Spark wrote to the checkpoint's offset log for micro-batch
    ``batch`` (its last line)."""
    with open(os.path.join(checkpoint, "offsets", str(batch))) as f:
        return json.loads(f.read().splitlines()[-1])


def offsets_read(df):
    return sorted((r.topic, r.partition, r.offset) for r in
                  df.select("topic", "partition", "offset").collect())


def values_read(df):
    return [(r.topic, r.partition, r.offset, bytes(r.value)) for r in
            df.select("topic", "partition", "offset", "value").collect()]


def batch_sizes(query):
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


# ------------------------------------------------------------------ offsets (no Spark)

def test_offsets_are_written_as_sparks_kafka_source_writes_them():
    # KafkaSourceOffsetSuite / JsonUtils: {"topic":{"partition":offset}}, partitions as strings
    offsets = offsets_json({("b", 1): 5, ("a", 10): 3, ("a", 2): 7})
    assert json.dumps(offsets, separators=(",", ":")) == '{"a":{"2":7,"10":3},"b":{"1":5}}'
    assert parse_offsets(json.loads('{"a":{"2":7,"10":3},"b":{"1":5}}')) == \
        {("a", 2): 7, ("a", 10): 3, ("b", 1): 5}
    assert parse_offsets({}) == {}
    with pytest.raises(InvalidConfigError, match="not a Kafka source offset"):
        parse_offsets({"a": 3})


def test_max_offsets_per_trigger_is_divided_as_sparks_rate_limit():
    # KafkaMicroBatchSourceSuite "maxOffsetsPerTrigger": 100, 10 and 1 new offsets, limit 10:
    # shares 9.0, 0.9 and 0.09 -> 9, and the small partitions are not starved (1 each)
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 100, ("t", 1): 10, ("t", 2): 1}
    assert rate_limit(10, start, latest, {}) == {("t", 0): 9, ("t", 1): 1, ("t", 2): 1}
    assert rate_limit(1000, start, latest, {}) == latest
    # a new partition starts at its earliest offset; one with nothing new keeps its end
    assert rate_limit(10, {("t", 0): 0, ("t", 1): 4}, {("t", 0): 10, ("t", 1): 4, ("t", 2): 15},
                      {("t", 2): 5}) == {("t", 0): 5, ("t", 1): 4, ("t", 2): 10}
    assert rate_limit(10, start, start, {}) == start


def test_stream_options_are_checked_as_spark_checks_them(tmp_path):
    # KafkaSourceProviderSuite / validateStreamOptions
    cases = [({"endingOffsets": "latest"}, "ending offset not valid in streaming queries"),
             ({"endingOffsetsByTimestamp": '{"t":{"0":1}}'},
              "ending timestamp not valid in streaming queries"),
             ({"minOffsetsPerTrigger": "20", "maxOffsetsPerTrigger": "10"},
              r"minOffsetPerTrigger\(20\) is higher than the maxOffsetsPerTrigger\(10\)"),
             ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be positive"),
             ({"maxTriggerDelay": "soon"}, "maxTriggerDelay must be a time")]
    for options, message in cases:
        with pytest.raises(InvalidConfigError, match=message):
            Options(options, streaming=True)
    Options({"endingOffsets": "latest"})                   # fine for a batch read
    for text, ms in (("30s", 30_000), ("500ms", 500), ("2m", 120_000), ("1000", 1000)):
        assert Options({"maxTriggerDelay": text}, streaming=True).max_trigger_delay_ms == ms
    assert Options({}, streaming=True).max_trigger_delay_ms == 15 * 60_000


def test_starting_offsets_of_a_new_query(tmp_path):
    root = write_topic(tmp_path / "logs", "t", partitions=3)     # 60 records each

    def initial(**options):
        return stream([root], **options).initial_offset()

    every = {"t": {"0": 60, "1": 60, "2": 60}}
    assert initial() == every                                    # latest by default
    assert initial(startingOffsets=" LATEST ") == every          # allowed for streaming
    assert initial(startingOffsets="earliest") == {"t": {"0": 0, "1": 0, "2": 0}}
    assert initial(startingOffsets='{"t":{"0":-2,"1":-1,"2":7}}') == \
        {"t": {"0": 0, "1": 60, "2": 7}}
    with pytest.raises(InvalidConfigError, match="you must specify all TopicPartitions"):
        initial(startingOffsets='{"t":{"0":-2}}')
    # the timestamp options win over startingOffsets (getKafkaOffsetRangeLimit)
    assert initial(startingTimestamp=str(T0 + 10_500), startingOffsets="earliest") == \
        {"t": {"0": 11, "1": 11, "2": 11}}
    per = {"t": {"0": T0 + 5000, "1": T0 + 6000, "2": T0}}
    assert initial(startingOffsetsByTimestamp=json.dumps(per)) == \
        {"t": {"0": 5, "1": 6, "2": 0}}
    late = str(T0 + 3_600_000)
    with pytest.raises(InvalidConfigError, match="No offset matched from request of "
                                                 "topic-partition t-0"):
        initial(startingTimestamp=late)
    assert initial(startingTimestamp=late, startingOffsetsByTimestampStrategy="latest") == every


def test_latest_is_the_high_watermark_unless_read_above_it(tmp_path):
    from kafkalog.checkpoint import write_offset_checkpoint
    root = write_topic(tmp_path / "broker", "t", records=50)
    write_offset_checkpoint(root / "replication-offset-checkpoint", {("t", 0): 40})
    start = {"t": {"0": 0}}
    assert stream([root]).latest_offset(start) == {"t": {"0": 40}}
    assert stream([root], readAboveHighWatermark="true").latest_offset(start) == \
        {"t": {"0": 50}}
    assert stream([root]).initial_offset() == {"t": {"0": 40}}


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(tmp_path):
    root = write_topic(tmp_path / "logs", "t", records=60)
    now = [1_000_000.0]
    s = KafkaLogStream([str(root)], {"minOffsetsPerTrigger": "20", "maxTriggerDelay": "10s"},
                       clock=lambda: now[0])
    assert s.latest_offset({"t": {"0": 0}}, min_rows=20) == {"t": {"0": 60}}   # first: no wait
    log = Log.open(root / "t-0")
    try:
        append(log, "t", 0, 5)
        assert s.latest_offset({"t": {"0": 60}}, min_rows=20) == {"t": {"0": 60}}  # waits
        now[0] += 5000
        assert s.latest_offset({"t": {"0": 60}}, min_rows=20) == {"t": {"0": 60}}
        append(log, "t", 0, 15)                                 # 20 new offsets: enough
        assert s.latest_offset({"t": {"0": 60}}, min_rows=20) == {"t": {"0": 80}}
        append(log, "t", 0, 3)
        now[0] += 10_000                                        # maxTriggerDelay passed
        assert s.latest_offset({"t": {"0": 80}}, min_rows=20) == {"t": {"0": 83}}
        append(log, "t", 0, 1)
        s.prepare_for_available_now()                           # no waiting: it would hang
        assert s.latest_offset({"t": {"0": 83}}, min_rows=20) == {"t": {"0": 84}}
    finally:
        log.close()


def test_data_loss_is_reported_per_fail_on_data_loss(tmp_path, caplog):
    root = write_topic(tmp_path / "logs", "t", config=SMALL_SEGMENTS)
    log = Log.open(root / "t-0", SMALL_SEGMENTS)
    try:
        start = log.delete_records(30)
    finally:
        log.close()
    batch = ({"t": {"0": 0}}, {"t": {"0": 60}})
    with pytest.raises(OffsetOutOfRangeError, match=r"Cannot fetch offsets 0 to 30 of t-0.*"
                                                    r"\"failOnDataLoss\" to \"false\""):
        stream([root]).plan(*batch)
    caplog.set_level(logging.WARNING, logger="kafkalog.spark.streaming")
    lenient = stream([root], failOnDataLoss="false")
    assert lenient.ranges(*batch) == {("t", 0): (start, 60)}
    assert any("Cannot fetch offsets 0 to 30 of t-0" in r.getMessage()
               for r in caplog.records if r.levelname == "WARNING")
    # a partition that is gone, one added that does not start at 0 (its start was deleted)
    with pytest.raises(OffsetOutOfRangeError, match=r"Set\(u-0\) are gone"):
        stream([root]).plan({"t": {"0": 30}, "u": {"0": 0}}, {"t": {"0": 60}})
    with pytest.raises(OffsetOutOfRangeError, match="Added partition t-0 starts from 30"):
        stream([root]).plan({}, {"t": {"0": 60}})
    assert lenient.ranges({}, {"t": {"0": 60}}) == {("t", 0): (30, 60)}


# ---------------------------------------------------------------------------- Spark

def test_new_records_segments_and_partitions_are_read_once(spark, tmp_path):
    root = write_topic(tmp_path / "logs", "t", partitions=2, records=30, config=SMALL_SEGMENTS)
    checkpoint = tmp_path / "ck"
    first, got = run_now(read_stream(spark, root, startingOffsets="earliest"), checkpoint)
    assert got == [("t", p, o) for p in range(2) for o in range(30)]
    assert checkpointed_offsets(checkpoint, 0) == {"t": {"0": 30, "1": 30}}
    assert json.loads(first.lastProgress["sources"][0]["endOffset"]) == \
        {"t": {"0": 30, "1": 30}}
    log = Log.open(root / "t-0", SMALL_SEGMENTS)
    try:
        segments = len(log.segments)
        append(log, "t", 0, 40)                         # rolls new segments
        assert len(log.segments) > segments
    finally:
        log.close()
    write_topic(tmp_path / "logs", "u", records=5)       # a new topic's partition
    new = Log.open(root / "t-2")                         # and a new partition of t
    try:
        append(new, "t", 2, 7)
    finally:
        new.close()
    second, got = run_now(read_stream(spark, root), checkpoint, convert=values_read)
    added = sorted([("t", 0, o) for o in range(30, 70)] + [("t", 2, o) for o in range(7)] +
                   [("u", 0, o) for o in range(5)])
    assert [r[:3] for r in got] == added                # each once, new partitions from 0
    assert checkpointed_offsets(checkpoint, second.lastProgress["batchId"]) == \
        {"t": {"0": 70, "1": 30, "2": 7}, "u": {"0": 5}}
    assert all(value == b"%s-%d-%d" % (t.encode(), p, o) for t, p, o, value in got)


def test_starting_offsets_latest_reads_only_what_comes_after(spark, tmp_path):
    # KafkaMicroBatchSourceSuite "starting offset is latest by default"
    root = write_topic(tmp_path / "logs", "t", records=60)
    assert run_now(read_stream(spark, root), tmp_path / "ck")[1] == []
    log = Log.open(root / "t-0")
    try:
        append(log, "t", 0, 5)
    finally:
        log.close()
    assert run_now(read_stream(spark, root), tmp_path / "ck")[1] == \
        [("t", 0, o) for o in range(60, 65)]


def test_available_now_respects_max_offsets_per_trigger(spark, tmp_path):
    # KafkaMicroBatchSourceSuite "maxOffsetsPerTrigger" and "Trigger.AvailableNow"
    root = tmp_path / "logs"
    for p, n in enumerate((100, 10, 1)):
        log = Log.open(root / f"t-{p}")
        try:
            append(log, "t", p, n)
        finally:
            log.close()
    checkpoint = tmp_path / "ck"
    df = read_stream(spark, root, startingOffsets="earliest", maxOffsetsPerTrigger="10")
    query, got = run_now(df, checkpoint)
    # the batches Spark's rateLimit makes of 100, 10 and 1 offsets, ten at a time
    want, start = [], {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 100, ("t", 1): 10, ("t", 2): 1}
    while start != latest:
        end = rate_limit(10, start, latest, {})
        want.append(sum(end[k] - start[k] for k in end))
        start = end
    assert batch_sizes(query) == want and want[0] == 11
    assert checkpointed_offsets(checkpoint, 0) == {"t": {"0": 9, "1": 1, "2": 1}}
    assert got == sorted(("t", p, o) for p, n in enumerate((100, 10, 1)) for o in range(n))
    # appended later: read by the next run of the query, and only that
    log = Log.open(root / "t-1")
    try:
        append(log, "t", 1, 4)
    finally:
        log.close()
    again = run_now(read_stream(spark, root, maxOffsetsPerTrigger="10"), checkpoint)[1]
    assert again == [("t", 1, o) for o in range(10, 14)]


def test_restart_from_a_checkpoint_reads_every_offset_exactly_once(spark, tmp_path):
    root = write_topic(tmp_path / "logs", "t", partitions=2, records=30, config=SMALL_SEGMENTS)
    checkpoint = tmp_path / "ck"
    batches = {}

    def keep(df, batch_id):
        batches.setdefault(batch_id, []).append(offsets_read(df))

    def run(**options):
        query = read_stream(spark, root, maxOffsetsPerTrigger="25", **options) \
            .writeStream.foreachBatch(keep).option("checkpointLocation", str(checkpoint)) \
            .trigger(availableNow=True).start()
        query.awaitTermination(300)

    run(startingOffsets="earliest")
    assert sorted(batches) == [0, 1, 2]                  # 24, 24 and 12 offsets
    # stopped after batch 2's offsets were logged, before it was committed
    os.remove(checkpoint / "commits" / "2")
    os.remove(checkpoint / "commits" / ".2.crc")
    for p in range(2):
        log = Log.open(root / f"t-{p}", SMALL_SEGMENTS)
        try:
            append(log, "t", p, 15)
        finally:
            log.close()
    new = Log.open(root / "t-2")
    try:
        append(new, "t", 2, 4)
    finally:
        new.close()
    # the starting options apply only to a new query: this one goes on from its checkpoint
    run(startingOffsets="latest")
    assert len(batches[2]) == 2 and batches[2][0] == batches[2][1]    # the same batch again
    got = sorted(o for b in sorted(batches) for o in batches[b][-1])
    assert got == sorted([("t", p, o) for p in range(2) for o in range(45)] +
                         [("t", 2, o) for o in range(4)])         # no gap, nothing twice


def test_retention_that_deleted_unread_offsets(spark, tmp_path):
    # KafkaMicroBatchSourceSuite's data-loss cases: failOnDataLoss=true fails the query,
    # false goes on from the new log start
    from pyspark.errors import StreamingQueryException
    root = write_topic(tmp_path / "logs", "t", records=60, config=SMALL_SEGMENTS)
    checkpoint = tmp_path / "ck"
    run_now(read_stream(spark, root, startingOffsets="earliest"), checkpoint)
    log = Log.open(root / "t-0", SMALL_SEGMENTS)
    try:
        append(log, "t", 0, 60)
        log_start = log.delete_records(90)          # 60..89 deleted before they were read
    finally:
        log.close()
    failing = start_now(read_stream(spark, root), checkpoint, offsets_read)[0]
    with pytest.raises(StreamingQueryException, match="failOnDataLoss"):
        failing.awaitTermination(300)
    got = run_now(read_stream(spark, root, failOnDataLoss="false"), checkpoint)[1]
    assert got == [("t", 0, o) for o in range(log_start, 120)]


def test_read_committed_ends_at_the_last_stable_offset(spark, tmp_path):
    root = tmp_path / "logs"
    records = [kafkalog.Record(key=b"k", value=b"v%d" % i, timestamp=T0) for i in range(3)]
    options = {"startingOffsets": "earliest", "kafka.isolation.level": "read_committed"}
    log = Log.open(root / "t-0")
    try:
        append(log, "t", 0, 5)                                          # 0..4
        log.append(records, producer_id=7, producer_epoch=0, transactional=True,
                   base_sequence=0)                                     # 5..7, open
    finally:
        log.close()
    got = run_now(read_stream(spark, root, **options), tmp_path / "ck")[1]
    assert got == [("t", 0, o) for o in range(5)]
    assert checkpointed_offsets(tmp_path / "ck", 0) == {"t": {"0": 5}}
    log = Log.open(root / "t-0")
    try:
        log.append(build_control_batch("commit", producer_id=7, producer_epoch=0))  # 8
        log.append(records[:2], producer_id=8, producer_epoch=0, transactional=True,
                   base_sequence=0)                                     # 9..10
        log.append(build_control_batch("abort", producer_id=8, producer_epoch=0))   # 11
        append(log, "t", 0, 1)                                          # 12
    finally:
        log.close()
    got = run_now(read_stream(spark, root, **options), tmp_path / "ck")[1]
    assert got == [("t", 0, o) for o in (5, 6, 7, 12)]


def test_kafka_written_fixtures_stream_as_kafka_reads_them(spark, tmp_path):
    names = [n for n in READABLE if n != "txn-0"]
    paths = ",".join(str(FIXTURES / n) for n in names)
    query, got = run_now(read_stream(spark, paths, startingOffsets="earliest",
                                     includeHeaders="true", maxOffsetsPerTrigger="40000"),
                         tmp_path / "ck", convert=lambda df: rows(df, headers=True))
    assert got == sorted((r for n in names for r in reference(n, headers=True)),
                         key=lambda x: (x[0], x[1], x[2]))
    assert len(batch_sizes(query)) > 1                    # 30000 records of multiseg-0
    # read_committed on Kafka's own transactions: the open transaction bounds the batch
    exp = expected(FIXTURES / "txn-0")
    aborted = [e for s in exp["segments"] if s["txn_index"] for e in s["txn_index"]["entries"]]

    def committed(r, b):
        if r["offset"] >= 637:                  # the open transaction's first offset
            return False
        return not (b["is_transactional"] and any(
            a["producer_id"] == b["producer_id"] and a["first_offset"] <= r["offset"]
            <= a["last_offset"] for a in aborted))

    got = run_now(read_stream(spark, FIXTURES / "txn-0", startingOffsets="earliest",
                              **{"kafka.isolation.level": "read_committed"}),
                  tmp_path / "ck-txn", convert=rows)[1]
    assert got == reference("txn-0", keep=committed)
    assert checkpointed_offsets(tmp_path / "ck-txn", 0) == {"txn": {"0": 637}}
