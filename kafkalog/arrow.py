"""Kafka partition directories as Arrow tables, pandas DataFrames and streaming
``pyarrow.RecordBatchReader`` s, outside Spark: the Spark reader's planner and reader, with
the schema of Spark's Kafka source and its options.

One call reads a partition directory, a log dir (every partition under it), a folder of log
dirs or a list of any of them::

    table = kafkalog.read_arrow("/backups/broker-1", subscribe="orders")
    df = kafkalog.read_pandas("/backups/broker-1/orders-0", **{"kafka.isolation.level":
                                                               "read_committed"})
    with kafkalog.record_batch_reader(path, starting_offsets={"orders": {"0": 1000}}) as r:
        for batch in r: ...

Options are Spark's Kafka source names (case-insensitive; ``kafkalog.spark`` documents them),
checked as Spark checks a batch read; each also has a snake_case keyword alias
(``OPTION_ALIASES``: ``starting_offsets`` for ``startingOffsets``, ``isolation_level`` for
``kafka.isolation.level``, ...). JSON options also take dicts, ``subscribe`` a list of topics,
and the timestamp options timezone-aware ``datetime`` s.

The logs are planned when the call is made (every option error is raised then); the reader
decodes one task at a time, each in pieces of at most about 4 MiB of log, so memory is
bounded by one piece, not by the data read. pyarrow (and pandas for ``read_pandas``) come with
the ``arrow`` extra (``pip install 'kafkalog[arrow]'``).
"""
from __future__ import annotations

import datetime
import json
import logging
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

from kafkalog._extras import require_extra
from kafkalog.errors import (
    InvalidConfigError, KafkaLogError, LogNotFoundError, MissingArrowExtraError, closest_name,
)
from kafkalog.scan.planner import plan
from kafkalog.scan.reader import read_tasks
from kafkalog.scan.schema import arrow_schema
from kafkalog.spark.options import Options, path_strings

if TYPE_CHECKING:
    import pandas
    import pyarrow

    from kafkalog._typing import StrPath

log = logging.getLogger(__name__)

#: snake_case keyword → Spark's Kafka option name.
OPTION_ALIASES: dict[str, str] = {
    "starting_offsets": "startingOffsets",
    "ending_offsets": "endingOffsets",
    "starting_timestamp": "startingTimestamp",
    "ending_timestamp": "endingTimestamp",
    "starting_offsets_by_timestamp": "startingOffsetsByTimestamp",
    "ending_offsets_by_timestamp": "endingOffsetsByTimestamp",
    "starting_offsets_by_timestamp_strategy": "startingOffsetsByTimestampStrategy",
    "subscribe_pattern": "subscribePattern",
    "include_headers": "includeHeaders",
    "fail_on_data_loss": "failOnDataLoss",
    "isolation_level": "kafka.isolation.level",
    "min_partitions": "minPartitions",
    "max_records_per_partition": "maxRecordsPerPartition",
    "validate_crc": "validateCrc",
    "max_bytes_per_task": "maxBytesPerTask",
    "read_above_high_watermark": "readAboveHighWatermark",
    "rsm_keys": "rsmKeys",
    "exclude_internal_topics": "kafka.exclude.internal.topics",
}
_TIMESTAMP_OPTIONS = {"startingtimestamp", "endingtimestamp"}


def _require(function: str, modules: Iterable[str]) -> None:
    require_extra(MissingArrowExtraError, function, modules)


def schema(include_headers: bool = False) -> pyarrow.Schema:
    """The ``pyarrow.Schema`` of what this module returns: Spark's Kafka source's
    (``key binary, value binary, topic string, partition int32, offset int64,
    timestamp timestamp[us, UTC], timestampType int32`` and, with ``include_headers``,
    ``headers list<struct<key: string, value: binary>>``)."""
    _require("arrow.schema", ("pyarrow",))
    return arrow_schema(include_headers)


def record_batch_reader(paths: StrPath | Iterable[StrPath], *,
                        storage_options: Mapping[str, Any] | None = None,
                        columns: Sequence[str] | None = None,
                        **options: Any) -> pyarrow.RecordBatchReader:
    """A ``pyarrow.RecordBatchReader`` streaming the records under ``paths``.

    Parameters
    ----------
    paths : str, os.PathLike or an iterable of them
        Partition directories (``<topic>-<partition>``), log dirs, or folders holding them;
        every partition found under them is read (``subscribe``, ``subscribePattern`` or
        ``assign`` select some) but those of Kafka's internal topics, unless asked for
        (``exclude_internal_topics=False``, or named). Copies of one partition from several brokers are read once
        (the Spark reader's replica rules).
    storage_options : mapping, optional
        Credentials and settings of the filesystem of URL paths (``s3://bucket/broker-1``,
        ``s3a://``, ``gs://``, ...; ``file://`` is local), as pandas and polars take them
        (for S3 ``key``, ``secret``, ``endpoint_url``, ``client_kwargs``, ...). Without them
        the filesystem's defaults apply (for S3 the AWS_* environment, incl.
        ``AWS_ENDPOINT_URL``). A URL is listed and read with ranged requests, never copied.
    columns : sequence of str, optional
        The columns to return, in that order (any of ``key``, ``value``, ``topic``,
        ``partition``, ``offset``, ``timestamp``, ``timestampType``, ``headers``); only those
        are built: without ``key``, ``value`` and ``headers`` no key, value or header byte is
        copied. Default: all (``headers`` with ``includeHeaders``).
    **options
        Spark's Kafka source options (``startingOffsets``, ``endingOffsets``,
        ``startingTimestamp``, ``endingTimestamp``, ``startingOffsetsByTimestamp``,
        ``endingOffsetsByTimestamp``, ``kafka.isolation.level``, ``includeHeaders``,
        ``subscribe``, ``subscribePattern``, ``assign``, ``failOnDataLoss``, ``validateCrc``,
        ``readAboveHighWatermark``, ``maxBytesPerTask``, ...) or their snake_case aliases
        (``OPTION_ALIASES``). Names Python keywords cannot spell go through a dict:
        ``**{"kafka.isolation.level": "read_committed"}`` (or ``isolation_level=...``).

    Returns
    -------
    pyarrow.RecordBatchReader
        Batches with ``schema(include_headers)``, partition by partition (topic, then
        partition) in offset order. Each holds the records of at most about 4 MiB of log;
        nothing is decoded before it is asked for, and closing the reader early stops there.

    Raises
    ------
    InvalidConfigError
        An option Spark's Kafka source refuses (also a ``ValueError``), an unknown option
        (with the closest name), an unknown column, or paths that are no paths, raised now.
    OffsetOutOfRangeError
        ``startingOffsets`` below the log start with ``failOnDataLoss`` (now), or a segment
        deleted (by retention) between planning and reading it (while reading).
    CorruptRecordError
        A CRC failure or corrupt batch with ``failOnDataLoss`` (while reading);
        ``OffsetsOutOfOrderError`` for a batch whose offsets go back (a damaged base offset).
    LogNotFoundError
        A path that does not exist; ``PartitionNotFoundError`` (one) when a path is a file, a
        directory with no partition directory below it, or a directory of segments not named
        ``<topic>-<partition>``, naming what was found there.
    """
    _require("record_batch_reader", ("pyarrow",))
    import pyarrow as pa
    opts = Options(_spark_options(options))
    schema = arrow_schema(opts.include_headers, columns)
    tasks = _plan(paths, opts, storage_options)
    return pa.RecordBatchReader.from_batches(schema, _read_tasks(tasks, schema.names))


def read_arrow(paths: StrPath | Iterable[StrPath], *,
               storage_options: Mapping[str, Any] | None = None,
               columns: Sequence[str] | None = None,
               **options: Any) -> pyarrow.Table:
    """A ``pyarrow.Table`` of the records under ``paths``: ``record_batch_reader(paths,
    storage_options=storage_options, columns=columns, **options).read_all()`` (see there for
    the arguments and errors). One chunk per batch read."""
    _require("read_arrow", ("pyarrow",))
    with record_batch_reader(paths, storage_options=storage_options, columns=columns,
                             **options) as reader:
        return reader.read_all()


def read_pandas(paths: StrPath | Iterable[StrPath], *,
                storage_options: Mapping[str, Any] | None = None,
                columns: Sequence[str] | None = None,
                **options: Any) -> pandas.DataFrame:
    """A ``pandas.DataFrame`` of the records under ``paths`` (``read_arrow(...).to_pandas()``;
    see ``record_batch_reader`` for the arguments and errors).

    Columns as pyarrow converts Spark's Kafka schema: ``key``, ``value``: ``object``
    (``bytes`` or None); ``topic``: ``object`` (``str``); ``partition``: ``int32``;
    ``offset``: ``int64``; ``timestamp``: ``datetime64[us, UTC]``; ``timestampType``:
    ``int32``; ``headers`` (with ``includeHeaders``): ``object`` (a numpy array of
    ``{"key": str, "value": bytes | None}`` dicts, None for a record without headers). For
    other conversions call ``read_arrow(...).to_pandas(...)`` with pyarrow's arguments.
    """
    _require("read_pandas", ("pyarrow", "pandas"))
    return read_arrow(paths, storage_options=storage_options, columns=columns,
                      **options).to_pandas()


# --------------------------------------------------------------------------------- options
def _spark_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` under Spark's names, with Python values written as the Spark reader reads
    them (dicts as JSON, lists of topics comma-separated, datetimes as milliseconds)."""
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for key, value in options.items():
        name = OPTION_ALIASES.get(key, key)
        lower = name.lower()
        if name == key and "_" in key and value is not None:
            # a snake_case keyword that is none of ours: answered in snake_case
            close = closest_name(key, OPTION_ALIASES)
            if close is not None:
                raise InvalidConfigError(f"unknown option(s) {key} (did you mean {close}?)")
        if lower in ("path", "paths"):
            raise InvalidConfigError(f"option {key}: give the paths as the first argument")
        if lower in given:
            raise InvalidConfigError(f"option {name} given twice (as {given[lower]} and {key})")
        given[lower] = key
        if value is None:
            continue
        if lower == "subscribe" and isinstance(value, (list, tuple, set, frozenset)):
            value = ",".join(str(t) for t in value)
        elif isinstance(value, Mapping):
            value = json.dumps(value, default=_json_value)
        elif lower in _TIMESTAMP_OPTIONS and isinstance(value, datetime.datetime):
            value = _epoch_millis(value, name)
        out[name] = value
    return out


def _json_value(value: Any) -> int:
    if isinstance(value, datetime.datetime):
        return _epoch_millis(value, "startingOffsetsByTimestamp/endingOffsetsByTimestamp")
    raise InvalidConfigError(f"option value {value!r} cannot be written as JSON")


def _epoch_millis(value: datetime.datetime, name: str) -> int:
    """Kafka's timestamp (milliseconds since the epoch) of an aware ``datetime``, floored."""
    if value.tzinfo is None:
        raise InvalidConfigError(f"option {name}: a datetime needs a time zone "
                                 f"(e.g. tzinfo=datetime.timezone.utc), got {value!r}")
    delta = value - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


# -------------------------------------------------------------------------------- planning
def _plan(paths: Any, opts: Options,
          storage_options: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    path_list = path_strings(paths)
    try:
        return plan(path_list, opts, storage_options=storage_options)
    except FileNotFoundError as e:
        if isinstance(e, KafkaLogError):
            raise
        raise LogNotFoundError(str(e)) from e


def _read_tasks(tasks: list[dict[str, Any]], columns: list[str]
                ) -> Iterator[pyarrow.RecordBatch]:
    yield from read_tasks(tasks, columns)
