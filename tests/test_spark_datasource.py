"""The data source as Spark's SQL and DataFrame users meet it: tables and views
(``CREATE TABLE ... USING kafkalog``), the options Spark's catalog adds, misspelt options,
columns picked by a schema, filters pushed for one scan only (batch and streaming), and the
errors a DataFrame's creation raises."""
import gc
import json
import logging
import os
import shutil

import pytest

import kafkalog.spark as ks
from kafkalog.errors import InvalidConfigError
from kafkalog.spark.options import Options

import test_spark
from conftest import FIXTURES
from test_spark_options import write_topic
import test_spark_pushdown

spark = test_spark.spark          # the one session-scoped SparkSession of the suite
pushdown_on = test_spark_pushdown.pushdown_on

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    return write_topic(tmp_path_factory.mktemp("ds") / "logs", "t", partitions=3, records=20)


def test_a_worker_process_is_tuned_once_in_a_task(monkeypatch):
    # PySpark's daemon runs a full gc.collect() after every task of a reused worker, and
    # glibc's malloc gave every chunk's arrays back to the system: in its first task a worker
    # freezes the modules it holds and keeps freed memory; outside a task nothing is changed
    from pyspark import TaskContext

    from kafkalog.spark import worker
    calls, freezes, freeze = [], [], gc.freeze
    monkeypatch.setattr(worker, "_mallopt", lambda: lambda *a: calls.append(a))
    monkeypatch.setattr(gc, "freeze", lambda: (freezes.append(1), freeze()))
    assert gc.get_freeze_count() == 0
    worker.tune_worker_process()
    assert gc.get_freeze_count() == 0 and freezes == calls == []
    monkeypatch.setattr(TaskContext, "get", classmethod(lambda cls: object()))
    try:
        worker.tune_worker_process()
        assert gc.get_freeze_count() > 0 and freezes == [1]
        assert calls == [(-3, 32 << 20), (-1, 64 << 20)]    # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
        # (the frozen count itself may fall: a frozen object is still freed when unreferenced)
        worker.tune_worker_process()
        assert freezes == [1] and len(calls) == 2
    finally:
        gc.unfreeze()
    assert worker._mallopt() is not None       # glibc, as on this project's Linux machines


def test_a_narrow_schema_is_read_by_fewer_tasks(monkeypatch):
    # A task that ships no key, value or headers reads 512 MiB of log by default, not 128 MiB
    # (PySpark's cost per task would outweigh its rows); maxBytesPerTask given is kept.
    from kafkalog.spark.datasource import _slots
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    total, tasks = 900 << 20, 10                # 10 tasks of 90 MiB
    assert _slots(total, tasks, Options({})) == 8
    assert _slots(total, tasks, Options({}), ["key", "offset"]) == 8
    assert _slots(total, tasks, Options({}), ["headers"]) == 8
    assert _slots(total, tasks, Options({}), ["partition", "offset", "timestamp"]) == 2
    assert _slots(total, tasks, Options({"maxBytesPerTask": str(128 << 20)}), ["offset"]) == 8
    assert _slots(total, 3, Options({})) == 3     # no more than there are tasks to deal


# ------------------------------------------------------------------------------------ SQL
def test_sql_temporary_view_and_table(spark, three):
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW kafkalog_v USING kafkalog OPTIONS "
              f"(path '{three}', startingOffsets 'earliest')")
    spark.sql("DROP TABLE IF EXISTS kafkalog_t")
    spark.sql("DROP TABLE IF EXISTS kafkalog_cols")
    try:
        assert spark.sql("SELECT count(*) FROM kafkalog_v").first()[0] == 60
        got = spark.sql("SELECT partition, offset FROM kafkalog_v "
                        "WHERE offset >= 18 AND partition <> 1 ORDER BY 1, 2").collect()
        assert [tuple(r) for r in got] == [(0, 18), (0, 19), (2, 18), (2, 19)]
        # the options the catalog adds (location, owner, provider) are accepted; the table's
        # own reach its reader through its schema (options.catalog_table_options)
        spark.sql(f"CREATE TABLE kafkalog_t USING kafkalog OPTIONS (path '{three}', "
                  f"endingOffsets '{{\"t\": {{\"0\": 10, \"1\": -1, \"2\": -1}}}}')")
        assert spark.sql("SELECT count(*) FROM kafkalog_t").first()[0] == 50
        got = spark.sql("SELECT partition, offset FROM kafkalog_t "
                        "WHERE offset >= 9 AND partition <> 1 ORDER BY 1, 2").collect()
        assert [tuple(r) for r in got] == [(0, 9)] + [(2, o) for o in range(9, 20)]
        assert spark.table("kafkalog_t").schema.simpleString() == \
            ks.kafka_schema().simpleString()
        # a column list keeps kafkalog's schema, and with it the options, out of the table
        spark.sql(f"CREATE TABLE kafkalog_cols (offset BIGINT) USING kafkalog "
                  f"OPTIONS (path '{three}')")
        with pytest.raises(Exception, match="with no column list"):
            spark.sql("SELECT count(*) FROM kafkalog_cols").collect()
        with pytest.raises(Exception, match="storageOptions cannot be a table's"):
            spark.sql(f"CREATE TABLE kafkalog_s3 USING kafkalog OPTIONS (path '{three}', "
                      f"storageOptions '{{\"anon\": true}}')")
    finally:
        spark.sql("DROP TABLE IF EXISTS kafkalog_t")
        spark.sql("DROP TABLE IF EXISTS kafkalog_cols")
        spark.sql("DROP VIEW IF EXISTS kafkalog_v")


def test_catalog_options_are_ignored_and_typos_named():
    Options({"location": "file:/x", "owner": "me", "provider": "kafkalog",
             "comment": "c", "external": "true"})
    with pytest.raises(InvalidConfigError, match=r"startingoffset \(did you mean "
                                                 r"startingOffsets\?\)"):
        Options({"startingoffset": "earliest"})
    with pytest.raises(InvalidConfigError, match=r"^unknown option\(s\) whatever$"):
        Options({"whatever": "1"})


def test_typo_through_spark_names_the_option(spark, three):
    with pytest.raises(Exception, match="did you mean startingOffsets"):
        spark.read.format("kafkalog").option("startingOffset", "earliest").load(str(three))
    with pytest.raises(InvalidConfigError, match=r"includeHeader \(did you mean "
                                                 r"includeHeaders\?\)"):
        ks.read(spark, three, includeHeader=True)


# ------------------------------------------------------------------------------ projection
def test_schema_picks_columns_in_any_order(spark, three):
    df = spark.read.format("kafkalog").schema("partition INT, offset LONG, timestamp TIMESTAMP") \
        .load(str(three))
    assert df.columns == ["partition", "offset", "timestamp"]
    got = sorted((r.partition, r.offset) for r in df.collect())
    assert got == [(p, o) for p in range(3) for o in range(20)]
    one = spark.read.format("kafkalog").schema("value BINARY").load(str(three))
    assert sorted(bytes(r.value) for r in one.collect())[:2] == [b"t-0-0", b"t-0-1"]
    headers = spark.read.format("kafkalog").option("includeHeaders", "true") \
        .schema("headers ARRAY<STRUCT<key: STRING, value: BINARY>>, offset LONG") \
        .load(str(FIXTURES / "headers-0"))
    assert headers.count() == 1900 and headers.columns == ["headers", "offset"]


@pytest.mark.parametrize("schema,message", [
    ("offset LONG, partiton INT", "column 'partiton' is not a column"),
    ("offset INT", "column 'offset' is bigint in Spark's Kafka source, not int"),
    ("headers ARRAY<STRUCT<key: STRING, value: BINARY>>", "includeHeaders=true"),
])
def test_a_bad_schema_names_the_column(spark, three, schema, message):
    # PySpark runs no Python when a DataFrame is made with a schema, nor when its plan is
    # made: the error comes with the first action (see KafkaLogDataSource._columns)
    df = spark.read.format("kafkalog").schema(schema).load(str(three))
    df._jdf.queryExecution().executedPlan()
    with pytest.raises(Exception, match=message):
        df.collect()


def test_a_schema_may_declare_columns_not_null(spark, three):
    # Spark checks the batches against the schema (and skips null checks for such columns)
    df = spark.read.format("kafkalog") \
        .schema("partition INT NOT NULL, offset LONG NOT NULL, timestamp TIMESTAMP") \
        .load(str(three))
    assert [f.nullable for f in df.schema.fields] == [False, False, True]
    assert sorted((r.partition, r.offset) for r in df.collect()) == \
        [(p, o) for p in range(3) for o in range(20)]
    # a column that does hold a null is refused, naming it (headers-0: records without a key)
    keyed = spark.read.format("kafkalog").schema("offset LONG, key BINARY NOT NULL") \
        .load(str(FIXTURES / "headers-0"))
    with pytest.raises(Exception, match="column 'key' is declared NOT NULL .* headers-0"):
        keyed.collect()


# --------------------------------------------------------------------------------- pushdown
def test_pushed_filters_belong_to_one_scan(pushdown_on, three):
    path = str(FIXTURES / "multiseg-0")
    for df in (ks.read(pushdown_on, path), spark_read(pushdown_on, path)):
        assert df.filter("offset >= 29000").count() == 1000
        assert df.count() == 30000
        assert df.filter("offset < 100").count() == 100
        assert df.select("offset").distinct().count() == 30000
    # ks.read's DataFrame prunes: Spark keeps no Filter for what the source handled
    plan = ks.read(pushdown_on, path).filter("offset >= 29000")._jdf.queryExecution() \
        .executedPlan().toString()
    assert "Filter " not in plan, plan


def spark_read(spark, path):
    return spark.read.format("kafkalog").load(path)


def test_streaming_queries_of_one_dataframe_do_not_share_filters(spark, three, tmp_path):
    stream = spark.readStream.format("kafkalog").option("startingOffsets", "earliest") \
        .load(str(three))
    for i, (frame, want) in enumerate(((stream.filter("offset >= 15"), 15),
                                       (stream, 60), (stream.filter("partition = 1"), 20))):
        name = f"kafkalog_pushdown_{i}"
        query = frame.writeStream.format("memory").queryName(name) \
            .option("checkpointLocation", str(tmp_path / name)) \
            .trigger(availableNow=True).start()
        query.awaitTermination(120)
        assert spark.sql(f"SELECT count(*) FROM {name}").first()[0] == want


# ----------------------------------------------------------------------------------- errors
def test_path_errors_are_raised_when_the_dataframe_is_made(spark, three, tmp_path):
    from kafkalog.errors import LogNotFoundError, PartitionNotFoundError
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    misnamed = tmp_path / "copy"
    shutil.copytree(FIXTURES / "plain-0", misnamed)
    for bad, error in ((tmp_path / "missing", LogNotFoundError),
                       (tmp_path / "file", PartitionNotFoundError),
                       (tmp_path / "empty", PartitionNotFoundError),
                       (misnamed, PartitionNotFoundError)):
        with pytest.raises(Exception, match=str(bad)):
            spark.read.format("kafkalog").load(str(bad))         # no action
        with pytest.raises(error, match=str(bad)):
            ks.read(spark, bad)


def test_a_selection_matching_nothing_is_empty_with_a_warning(spark, three, caplog):
    with caplog.at_level(logging.WARNING, logger="kafkalog"):
        df = ks.read(spark, three, assign=json.dumps({"nosuch": [0]}))
    assert df.count() == 0
    assert any("matches no partition" in r.getMessage() and "t-0" in r.getMessage()
               for r in caplog.records), caplog.records
