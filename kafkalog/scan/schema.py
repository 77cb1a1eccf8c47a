"""The columns of Spark's Kafka source as Arrow types (what ``read_task`` builds)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow


def arrow_schema(include_headers: bool = False) -> pyarrow.Schema:
    """The schema of Spark's Kafka source as a ``pyarrow.Schema``."""
    import pyarrow as pa
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()),
              pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
              pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("us", "UTC")),
              pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.struct(
            [pa.field("key", pa.string()), pa.field("value", pa.binary())]))))
    return pa.schema(fields)
