"""The options a read mode ignores are logged by the mode that ignores them, once: a batch read
warns about the trigger limits (``maxOffsetsPerTrigger``, ...) as Spark does, a streaming read
about ``endingTimestamp``; the data source's ``schema()``, which PySpark asks for in both
modes, logs nothing; re-planning (every action, every slot) logs nothing again."""
import logging

import pytest

import kafkalog.spark as ks
from kafkalog.spark.datasource import data_source_class
from kafkalog.spark.options import Options

import test_spark
from test_spark_options import write_topic

spark = test_spark.spark          # the one session-scoped SparkSession of the suite

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

TRIGGER = {"maxOffsetsPerTrigger": "10", "minOffsetsPerTrigger": "1", "maxTriggerDelay": "5m"}
BATCH_WARNING = "ignored in batch queries"
STREAM_WARNING = "endingtimestamp ignored in streaming queries"


@pytest.fixture
def logdir(tmp_path):
    return write_topic(tmp_path / "logs", "t", partitions=2, records=30)


@pytest.fixture
def warnings(caplog):
    caplog.set_level(logging.INFO, logger="kafkalog.spark")

    def messages(level="WARNING"):
        got = [r.getMessage() for r in caplog.records if r.levelname == level]
        caplog.clear()
        return got
    return messages


def _batch(messages):
    return sorted(m for m in messages if BATCH_WARNING in m)


def test_options_log_what_their_mode_ignores(warnings):
    Options({**TRIGGER, "endingTimestamp": "5"})
    assert _batch(warnings()) == [f"option {k} ignored in batch queries"
                                  for k in ("maxoffsetspertrigger", "maxtriggerdelay",
                                            "minoffsetspertrigger")]
    Options({**TRIGGER, "endingTimestamp": "5"}, streaming=True)
    assert [m for m in warnings() if "option" in m] == [f"option {STREAM_WARNING}"]
    Options({**TRIGGER, "endingTimestamp": "5", "kafka.group.id": "g",
             "groupIdPrefix": "p"}, streaming=True, log_ignored=False)
    assert warnings() == [] and warnings("INFO") == []
    # the broker/consumer settings are ignored in both modes
    for streaming in (False, True):
        Options({"kafka.group.id": "g"}, streaming=streaming)
        assert [m for m in warnings() if "kafka.group.id" in m]
        Options({"kafka.bootstrap.servers": "h:9092", "groupIdPrefix": "p"},
                streaming=streaming)
        info = warnings("INFO")
        assert any("kafka.bootstrap.servers" in m for m in info)
        assert any("groupidprefix" in m and "batch" not in m for m in info)


def test_schema_logs_nothing_reader_logs_the_batch_warnings_once(logdir, warnings):
    source = data_source_class()({"path": str(logdir), "startingOffsets": "earliest",
                                  **TRIGGER})
    schema = source.schema()
    assert warnings() == []
    reader = source.reader(schema)
    assert len(_batch(warnings())) == 3
    # the planning of every action and slot reuses the checked options
    partitions = reader.partitions()
    rows = sum(b.num_rows for p in partitions for b in reader.read(p))
    assert rows == 60
    assert warnings() == []


def test_stream_reader_logs_no_batch_warning(logdir, warnings):
    source = data_source_class()({"path": str(logdir), "startingOffsets": "earliest",
                                  "endingTimestamp": "5", **TRIGGER})
    schema = source.schema()
    assert warnings() == []
    reader = source.streamReader(schema)
    got = warnings()
    assert _batch(got) == []
    assert got == [f"option {STREAM_WARNING}"]          # logged once, by the stream
    reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())
    assert warnings() == []


def test_ks_read_logs_once_per_dataframe(spark, logdir, warnings):
    df = ks.read(spark, [str(logdir)], **TRIGGER)
    assert len(_batch(warnings())) == 3
    assert df.count() == 60


def _worker_warnings(spark):
    rows = spark.tvf.python_worker_logs().where("level = 'WARNING'").select("msg").collect()
    return [r.msg for r in rows]


def test_spark_streaming_query_logs_no_batch_warning(spark, logdir, tmp_path):
    """End to end: the Python workers' logs (``spark.tvf.python_worker_logs``) of a batch
    read and of a streaming query with the same trigger options."""
    key = "spark.sql.pyspark.worker.logging.enabled"
    old = spark.conf.get(key, "false")
    spark.conf.set(key, "true")
    try:
        before = len(_batch(_worker_warnings(spark)))
        q = (spark.readStream.format("kafkalog").option("startingOffsets", "earliest")
             .options(**TRIGGER).load(str(logdir))
             .writeStream.format("memory").queryName("read_mode_warnings")
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert spark.table("read_mode_warnings").count() == 60
        assert len(_batch(_worker_warnings(spark))) == before
        df = spark.read.format("kafkalog").options(**TRIGGER).load(str(logdir))
        assert df.count() == 60
        assert len(_batch(_worker_warnings(spark))) > before
    finally:
        spark.conf.set(key, old)


def test_a_selection_matching_nothing_is_warned_once_per_dataframe(logdir, warnings):
    """PySpark asks for the schema, the partitions and each slot's read in processes of their
    own: the warning comes from one of them (the reader's, for ``format("kafkalog")``), or
    from none where ``ks.read`` logged it in the driver when it made the DataFrame."""
    from kafkalog.scan import planner
    from kafkalog.spark.options import PRUNE_OPTION

    def steps(options):
        source = data_source_class()({"path": str(logdir), "subscribe": "nosuch", **options})
        out = []
        for step in ("schema", "partitions", "read"):
            planner._warn_once.cache_clear()          # as if in a process of its own
            if step == "schema":
                schema = source.schema()
            elif step == "partitions":
                reader = source.reader(schema)
                partitions = reader.partitions()
            else:
                assert sum(b.num_rows for p in partitions for b in reader.read(p)) == 0
            out.append(sum("matches no partition" in m for m in warnings()))
        return out
    assert steps({}) == [0, 1, 0]
    assert steps({PRUNE_OPTION: "true"}) == [0, 0, 0]
