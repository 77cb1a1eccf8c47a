"""The schema of Spark's Kafka source, as Spark and as Arrow types."""
from __future__ import annotations

from typing import TYPE_CHECKING

from kafkalog.scan.schema import arrow_schema

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["arrow_schema", "kafka_schema"]


def kafka_schema(include_headers: bool = False) -> StructType:
    """The schema of Spark's Kafka source (a ``pyspark.sql.types.StructType``)."""
    from pyspark.sql.types import (
        ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
        TimestampType,
    )
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


