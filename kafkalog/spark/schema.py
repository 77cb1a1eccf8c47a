"""The schema of Spark's Kafka source, as Spark and as Arrow types."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql.types import StructType


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


def arrow_schema(include_headers: bool = False) -> pyarrow.Schema:
    """``kafka_schema`` as a ``pyarrow.Schema``."""
    import pyarrow as pa
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()),
              pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
              pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("us", "UTC")),
              pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.struct(
            [pa.field("key", pa.string()), pa.field("value", pa.binary())]))))
    return pa.schema(fields)
