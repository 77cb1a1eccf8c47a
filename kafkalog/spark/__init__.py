"""Kafka partition directories as Spark DataFrames, with the schema of Spark's Kafka source.

One reader: the Python data source ``spark.read.format("kafkalog")`` (found by PySpark through
the ``pyspark_kafkalog`` module; ``kafkalog.spark.register(spark)`` where it is not), and
``kafkalog.spark.read(spark, paths, **options)``, a convenience over it that turns filter
pushdown on. Every action plans again, once: the partitions Spark asks for carry the plan, or
shares of the listing that the tasks reading them plan. Rooms:
``options`` (Spark's Kafka option names), ``schema``, ``datasource`` (batch), ``streaming``
(the PySpark classes), ``planning`` (where a query's plan is made and how it reaches the
workers) and ``worker`` (once per Python worker); planning and reading are
``kafkalog.scan``'s.

pyspark, pyarrow and pandas come with the ``spark`` extra (``pip install 'kafkalog[spark]'``).
Importing this package does not need them; calling a function that does without them raises
``MissingSparkExtraError`` (an ``ImportError`` and a ``KafkaLogError``) naming what is missing.
``plan`` and ``Options`` need none of them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

from kafkalog._extras import require_extra
from kafkalog.errors import MissingSparkExtraError
from kafkalog.scan import planner as _planner
from kafkalog.scan import reader as _reader
from kafkalog.spark import datasource as _datasource
from kafkalog.spark import schema as _schema
from kafkalog.spark.options import Options

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from kafkalog._typing import StrPath
    from kafkalog.scan.pushdown import Pushdown


def plan(paths: StrPath | Iterable[StrPath],
         options: Options | Mapping[str, Any] | None = None,
         pushdown: Pushdown | None = None,
         storage_options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    opts = options if isinstance(options, Options) else Options(options or {})
    return _planner.plan(paths, opts, pushdown, storage_options)


def require_spark_extra(function: str = "spark",
                        modules: Iterable[str] = ("pyspark", "pyarrow", "pandas")) -> None:
    """Import ``modules`` or raise ``MissingSparkExtraError`` naming the ones missing."""
    require_extra(MissingSparkExtraError, function, modules)


_DRIVER = ("pyspark", "pyarrow", "pandas")   # Python data sources need all three


def read(spark: SparkSession, paths: StrPath | Iterable[StrPath], **options: Any) -> DataFrame:
    require_spark_extra("read", _DRIVER)
    return _datasource.read(spark, paths, **options)


def register(spark: SparkSession) -> None:
    require_spark_extra("register", _DRIVER)
    return _datasource.register(spark)


def read_task(task: dict[str, Any]) -> Iterator[pyarrow.RecordBatch]:
    require_spark_extra("read_task", ("pyarrow",))
    return _reader.read_task(task)


def kafka_schema(include_headers: bool = False) -> StructType:
    require_spark_extra("kafka_schema", ("pyspark",))
    return _schema.kafka_schema(include_headers)


def arrow_schema(include_headers: bool = False) -> pyarrow.Schema:
    require_spark_extra("arrow_schema", ("pyarrow",))
    return _schema.arrow_schema(include_headers)


for _public, _inner in ((plan, _planner.plan), (read, _datasource.read), (register, _datasource.register),
                        (read_task, _reader.read_task), (kafka_schema, _schema.kafka_schema),
                        (arrow_schema, _schema.arrow_schema)):
    _public.__doc__ = _inner.__doc__
del _public, _inner

# Kafka's internal topics as DataFrames (each checks the extra itself).
from kafkalog.spark.internal import (  # noqa: E402
    group_members_df, metadata_partitions_df, offsets_df, transactions_df,
)

__all__ = ["MissingSparkExtraError", "Options", "arrow_schema", "group_members_df",
           "kafka_schema", "metadata_partitions_df", "offsets_df", "plan", "read",
           "read_task", "register", "require_spark_extra", "transactions_df"]
