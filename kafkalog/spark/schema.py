"""The schema of Spark's Kafka source, as Spark and as Arrow types."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from kafkalog.errors import InvalidConfigError

from kafkalog.scan.schema import arrow_schema

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql.types import StructType

__all__ = ["arrow_schema", "declared_not_null", "kafka_schema", "not_null_columns",
           "projected_columns", "table_options"]

# The metadata key of a catalog table's options (options.catalog_table_options says why).
TABLE_OPTIONS_KEY = "kafkalog.tableOptions"


def kafka_schema(include_headers: bool = False,
                 table_options: Mapping[str, Any] | None = None) -> StructType:
    """The schema of Spark's Kafka source (a ``pyspark.sql.types.StructType``); with
    ``table_options``, a catalog table's, carrying them (JSON) in its first field's metadata
    for ``table_options``."""
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
    if table_options is not None:
        fields[0] = StructField("key", BinaryType(), True,
                                {TABLE_OPTIONS_KEY: json.dumps(dict(table_options))})
    return StructType(fields)


def table_options(schema: Any) -> dict[str, Any]:
    """The options a catalog table's schema carries (``kafka_schema``), or {}."""
    carried = schema.fields[0].metadata.get(TABLE_OPTIONS_KEY) if schema.fields else None
    return json.loads(carried) if carried else {}


def projected_columns(schema: Any, include_headers: bool) -> list[str] | None:
    """The columns a schema given to the data source picks (None: all of Spark's Kafka
    source, in its order). Each field must be a column of ``kafka_schema(include_headers)``
    with its type (``InvalidConfigError`` naming the first that is not); any subset, in any
    order."""
    full = kafka_schema(include_headers)
    types = {f.name: f.dataType for f in full.fields}
    if [(f.name, f.dataType) for f in schema.fields] == list(types.items()):
        return None       # a table's schema too, which carries its options as metadata
    for field in schema.fields:
        if field.name not in types:
            hint = " (with the option includeHeaders=true)" if field.name == "headers" else ""
            raise InvalidConfigError(
                f"column {field.name!r} is not a column of Spark's Kafka source{hint}: the "
                f"schema may pick any of {', '.join(types)}")
        if field.dataType != types[field.name]:
            raise InvalidConfigError(
                f"column {field.name!r} is {types[field.name].simpleString()} in Spark's Kafka "
                f"source, not {field.dataType.simpleString()}")
    if not schema.fields:
        raise InvalidConfigError("the schema picks no column of Spark's Kafka source")
    return [f.name for f in schema.fields]


def not_null_columns(schema: Any) -> tuple[str, ...]:
    """The columns a schema given to the data source declares ``NOT NULL``."""
    return tuple(f.name for f in schema.fields if not f.nullable)


def declared_not_null(batches: Iterator[pyarrow.RecordBatch], not_null: tuple[str, ...],
                      task: Mapping[str, Any]) -> Iterator[pyarrow.RecordBatch]:
    """``batches`` (of the read ``task``) with the columns ``not_null`` names typed
    non-nullable, as Spark checks them against a schema declaring them ``NOT NULL`` (and
    then skips their null checks). A null in one (a record without a key or value, a v0 or
    0.7 record's timestamp) is an ``InvalidConfigError`` naming the column: Spark would
    otherwise take it as a value."""
    import pyarrow as pa
    schema = None
    for batch in batches:
        if schema is None:
            schema = pa.schema([f.with_nullable(False) if f.name in not_null else f
                                for f in batch.schema])
        for name in not_null:
            if batch.column(name).null_count:
                raise InvalidConfigError(
                    f"column {name!r} is declared NOT NULL by the schema given, but a record "
                    f"of {task['topic']}-{task['partition']} (segment {task.get('segment')} of "
                    f"{task.get('dir')}) has a null {name}: declare the column nullable")
        yield pa.RecordBatch.from_arrays(batch.columns, schema=schema)
