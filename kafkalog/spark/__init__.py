"""Kafka partition directories as Spark DataFrames, with the schema of Spark's Kafka source.

Two entry points: ``kafkalog.spark.read(spark, paths, **options)`` (tasks run through
``mapInArrow``) and the Python data source ``spark.read.format("kafkalog")`` (after
``kafkalog.spark.register(spark)``). Rooms: ``options`` (Spark's Kafka option names),
``planner`` (the driver: offsets and byte ranges from the engine's read-only view of each
partition), ``reader`` (executors: kernels to Arrow), ``schema``, ``datasource`` (Spark glue).
"""
from kafkalog.spark.datasource import read, register
from kafkalog.spark.options import Options
from kafkalog.spark.planner import plan
from kafkalog.spark.reader import read_task
from kafkalog.spark.schema import arrow_schema, kafka_schema

__all__ = ["read", "register", "plan", "read_task", "Options", "kafka_schema",
           "arrow_schema"]
