"""The columns of Spark's Kafka source as Arrow types (what ``read_task`` builds)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from kafkalog.errors import InvalidConfigError

if TYPE_CHECKING:
    import pyarrow

#: The Kafka source's columns, in its order (``headers`` only with ``includeHeaders``).
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
           "headers")


def arrow_schema(include_headers: bool = False,
                 columns: Sequence[str] | None = None) -> pyarrow.Schema:
    """The schema of Spark's Kafka source as a ``pyarrow.Schema``: every column (``headers``
    with ``include_headers``), or the ``columns`` named, in that order. An unknown or repeated
    name is an ``InvalidConfigError`` naming it."""
    import pyarrow as pa
    types = {"key": pa.binary(), "value": pa.binary(), "topic": pa.string(),
             "partition": pa.int32(), "offset": pa.int64(),
             "timestamp": pa.timestamp("us", "UTC"), "timestampType": pa.int32(),
             "headers": pa.list_(pa.struct([pa.field("key", pa.string()),
                                            pa.field("value", pa.binary())]))}
    if columns is None:
        columns = COLUMNS if include_headers else COLUMNS[:-1]
    unknown = [c for c in columns if c not in types]
    if unknown:
        raise InvalidConfigError(f"unknown column(s) {', '.join(map(repr, unknown))}: the "
                                 f"Kafka source's columns are {', '.join(COLUMNS)}")
    repeated = sorted({c for c in columns if list(columns).count(c) > 1})
    if repeated:
        raise InvalidConfigError(f"column(s) {', '.join(repeated)} named more than once")
    return pa.schema([pa.field(c, types[c]) for c in columns])
