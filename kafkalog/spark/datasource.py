"""Spark glue: ``read(spark, paths, **options)`` through ``mapInArrow``, and the Python data
source ``spark.read.format("kafkalog")``; both plan on the driver and read on executors."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable

from kafkalog.spark.options import Options, paths_option
from kafkalog.spark.planner import plan
from kafkalog.spark.reader import read_task
from kafkalog.spark.schema import kafka_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from kafkalog._typing import StrPath


def _read_tasks_arrow(iterator):
    for batch in iterator:
        for task_json in batch.column(0).to_pylist():
            yield from read_task(json.loads(task_json))


def read(spark: SparkSession, paths: StrPath | Iterable[StrPath], **options: Any) -> DataFrame:
    """A DataFrame of the records under ``paths`` (partition dirs, log dirs, or folders of
    them), with the schema of Spark's Kafka source. Options use Spark's Kafka names."""
    opts = Options(options)
    tasks = plan(paths, opts)
    schema = kafka_schema(opts.include_headers)
    payload = [(json.dumps(t),) for t in tasks]
    rdd = spark.sparkContext.parallelize(payload, max(1, len(payload)))
    frame = spark.createDataFrame(rdd, "task string")
    return frame.mapInArrow(_read_tasks_arrow, schema)


def _datasource_classes():
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class TaskPartition(InputPartition):
        def __init__(self, task_json):
            super().__init__(task_json)
            self.task_json = task_json

    class KafkaLogReader(DataSourceReader):
        def __init__(self, options):
            self.options = options

        def partitions(self):
            opts = dict(self.options)
            paths = paths_option(opts)
            return [TaskPartition(json.dumps(t)) for t in plan(paths, Options(opts))]

        def read(self, partition):
            # PySpark runs one InputPartition(None) when partitions() planned no task
            task_json = getattr(partition, "task_json", None)
            if task_json is not None:
                yield from read_task(json.loads(task_json))

    class KafkaLogDataSource(DataSource):
        """``spark.read.format("kafkalog").load(path)``."""

        @classmethod
        def name(cls):
            return "kafkalog"

        def schema(self):
            return kafka_schema(Options(dict(self.options)).include_headers)

        def reader(self, schema):
            return KafkaLogReader(self.options)

    return KafkaLogDataSource


def register(spark: SparkSession) -> None:
    """Register the ``kafkalog`` data source with a SparkSession."""
    spark.dataSource.register(_datasource_classes())
