"""Kafka partition directories as Spark DataFrames, with the schema of Spark's Kafka source.

Two entry points: ``kafkalog.spark.read(spark, paths, **options)`` (tasks run through
``mapInArrow``) and the Python data source ``spark.read.format("kafkalog")`` (after
``kafkalog.spark.register(spark)``). Rooms: ``options`` (Spark's Kafka option names),
``planner`` (the driver: offsets and byte ranges from the engine's read-only view of each
partition), ``reader`` (executors: kernels to Arrow), ``schema``, ``datasource`` (Spark glue).

pyspark, pyarrow and pandas come with the ``spark`` extra (``pip install 'kafkalog[spark]'``).
Importing this package does not need them; calling a function that does without them raises
``MissingSparkExtraError`` (an ``ImportError`` and a ``KafkaLogError``) naming what is missing.
``plan`` and ``Options`` need none of them.
"""
import importlib

from kafkalog.errors import MissingSparkExtraError
from kafkalog.spark import datasource as _datasource
from kafkalog.spark import reader as _reader
from kafkalog.spark import schema as _schema
from kafkalog.spark.options import Options
from kafkalog.spark.planner import plan


def require_spark_extra(function="spark", modules=("pyspark", "pyarrow", "pandas")):
    """Import ``modules`` or raise ``MissingSparkExtraError`` naming the ones missing."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise MissingSparkExtraError(missing, function)


_DRIVER = ("pyspark", "pyarrow", "pandas")   # mapInArrow and Python data sources need all three


def read(spark, paths, **options):
    require_spark_extra("read", _DRIVER)
    return _datasource.read(spark, paths, **options)


def register(spark):
    require_spark_extra("register", _DRIVER)
    return _datasource.register(spark)


def read_task(task):
    require_spark_extra("read_task", ("pyarrow",))
    return _reader.read_task(task)


def kafka_schema(include_headers=False):
    require_spark_extra("kafka_schema", ("pyspark",))
    return _schema.kafka_schema(include_headers)


def arrow_schema(include_headers=False):
    require_spark_extra("arrow_schema", ("pyarrow",))
    return _schema.arrow_schema(include_headers)


for _public, _inner in ((read, _datasource.read), (register, _datasource.register),
                        (read_task, _reader.read_task), (kafka_schema, _schema.kafka_schema),
                        (arrow_schema, _schema.arrow_schema)):
    _public.__doc__ = _inner.__doc__
del _public, _inner

__all__ = ["MissingSparkExtraError", "Options", "arrow_schema", "kafka_schema", "plan", "read",
           "read_task", "register", "require_spark_extra"]
