"""Structured Streaming: ``spark.readStream.format("kafkalog")``, a PySpark
``DataSourceStreamReader`` that behaves as the micro-batch stream of Spark's Kafka source
(``KafkaMicroBatchStream``).

- Offsets are written to the checkpoint as Spark's Kafka source writes them (its
  ``KafkaSourceOffset``): ``{"topic": {"0": 23}}``, partitions as string keys, each the next
  offset to read. A query restarted from its checkpoint goes on from the offsets Spark
  committed; the starting options apply only to a query without one.
- ``latest`` is what a consumer may read: the high watermark, the last stable offset for
  read_committed, the log end with ``readAboveHighWatermark``.
- ``maxOffsetsPerTrigger`` divides its offsets over the partitions in proportion to what each
  has to read (Spark's ``rateLimit``); ``minOffsetsPerTrigger`` waits for that many new offsets
  until ``maxTriggerDelay`` has passed; ``Trigger.AvailableNow`` reads what was there when the
  query started, in batches of ``maxOffsetsPerTrigger``, then stops.
- Partitions that appear are read from their log start; offsets deleted (by retention) before
  they were read, partitions that disappear and offsets that went backwards are data loss:
  an ``OffsetOutOfRangeError`` with ``failOnDataLoss`` (the default), else a WARNING on the
  ``kafkalog.spark.streaming`` logger and the query goes on with what is there.

The planning (offsets, micro-batch tasks) is :class:`KafkaLogStream`, which needs no Spark;
the PySpark class made by :func:`stream_reader_class` calls it.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from kafkalog.errors import InvalidConfigError
from kafkalog.scan.planner import partition_offsets
from kafkalog.scan.reader import read_task
from kafkalog.spark.options import Options, paths_list, paths_option
from kafkalog.spark.planning import data_loss, microbatch_plan
from kafkalog.spark.schema import declared_not_null
from kafkalog.spark.worker import tune_worker_process

if TYPE_CHECKING:
    import pyarrow

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
OffsetMap = dict[TopicPartition, int]


def offsets_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Offsets as Spark's Kafka source writes them to the checkpoint: {"topic": {"0": 23}},
    topics and partitions in order (the same offsets always give the same JSON)."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def parse_offsets(value: Mapping[str, Any] | None) -> OffsetMap:
    """{(topic, partition): offset} of a checkpointed offset {"topic": {"0": 23}}."""
    if not value:
        return {}
    try:
        return {(str(t), int(p)): int(o) for t, parts in value.items()
                for p, o in parts.items()}
    except (AttributeError, TypeError, ValueError):
        raise InvalidConfigError(f"not a Kafka source offset: {value!r} (expected e.g. "
                                 "{\"topicA\":{\"0\":23,\"1\":-1}})") from None


def _tp(key: TopicPartition) -> str:
    return f"{key[0]}-{key[1]}"


def _tp_set(keys: Any) -> str:
    return "Set(" + ", ".join(_tp(k) for k in sorted(keys)) + ")"


def rate_limit(limit: int, start: Mapping[TopicPartition, int],
               latest: Mapping[TopicPartition, int],
               earliest: Mapping[TopicPartition, int]) -> OffsetMap:
    """The end offsets of a micro-batch of at most about ``limit`` offsets from ``start`` to
    ``latest``, as Spark's ``rateLimit`` divides them: each partition gets its share of
    ``limit`` in proportion to the offsets it has to read, rounded down, but at least one
    offset when its share is below one. A partition not in ``start`` (new) starts at its
    ``earliest``."""
    sizes = {}
    for key, end in latest.items():
        begin = start.get(key, earliest.get(key))
        if begin is not None and end - begin > 0:
            sizes[key] = end - begin
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(latest)
    out = {}
    for key, end in latest.items():
        if key not in sizes:
            out[key] = end
            continue
        share = limit * (sizes[key] / total)
        # small partitions are not starved: a share under one offset reads one
        count = int(-(-share // 1)) if share < 1 else int(share // 1)
        out[key] = min(end, start.get(key, earliest.get(key, 0)) + count)
    return out


class KafkaLogStream:
    """The planning of a streaming query over log directories, as ``KafkaMicroBatchStream``
    plans a Kafka topic's: offsets (initial, latest under a read limit) and the read tasks of
    a micro-batch. Needs no Spark.

    ``options`` are Spark's Kafka source options (and kafkalog's own), checked for a streaming
    query (``InvalidConfigError``); ``clock`` gives milliseconds (for ``maxTriggerDelay``).
    """

    def __init__(self, paths: list[str], options: Mapping[str, Any],
                 clock: Callable[[], float] | None = None) -> None:
        self.paths = paths
        self.options = dict(options)
        self.opts = Options(self.options, streaming=True)
        self.max_offsets = self.opts.integer("maxOffsetsPerTrigger")
        self.min_offsets = self.opts.integer("minOffsetsPerTrigger")
        self.max_trigger_delay_ms = self.opts.max_trigger_delay_ms
        self.fail_on_data_loss = self.opts.flag("failOnDataLoss", True)
        self._clock = clock or (lambda: time.time() * 1000.0)
        self._last_trigger_ms = 0.0        # Spark's first trigger never waits
        self._available_now = False
        self._target: OffsetMap | None = None
        self.latest: OffsetMap | None = None

    # ------------------------------------------------------------------ offsets
    def initial_offset(self) -> dict[str, dict[str, int]]:
        """Where a query without a checkpoint starts: ``startingTimestamp``, else
        ``startingOffsetsByTimestamp``, else ``startingOffsets`` (default latest)."""
        facts = partition_offsets(self.paths, self.opts, resolve_start=True)
        return offsets_json({k: f[2] for k, f in facts.items() if f[2] is not None})

    def prepare_for_available_now(self) -> None:
        """``Trigger.AvailableNow``: the next ``latest_offset`` fixes the end of the query."""
        self._available_now = True

    def latest_offset(self, start: Mapping[str, Any] | None, max_rows: int | None = None,
                      min_rows: int | None = None) -> dict[str, dict[str, int]]:
        """The end offset of the next micro-batch from ``start``: everything available, at
        most ``max_rows`` offsets (``maxOffsetsPerTrigger``, divided as :func:`rate_limit`
        does), or ``start`` itself while fewer than ``min_rows`` are new and
        ``maxTriggerDelay`` has not passed since the last batch."""
        begin = parse_offsets(start)
        facts = None
        if self._available_now and self._target is not None:
            latest = self._target
        else:
            facts = partition_offsets(self.paths, self.opts)
            latest = {k: f[1] for k, f in facts.items()}
            if self._available_now:
                self._target = latest
        self.latest = latest
        if min_rows is not None and not self._available_now and \
                self._delay(min_rows, latest, begin):
            return offsets_json(begin)
        if max_rows is None:
            return offsets_json(latest)
        if facts is None:
            facts = partition_offsets(self.paths, self.opts)
        earliest = {k: f[0] for k, f in facts.items()}
        return offsets_json(rate_limit(max_rows, begin, latest, earliest))

    def _delay(self, min_rows: int, latest: OffsetMap, begin: OffsetMap) -> bool:
        """Spark's ``delayBatch``: wait while fewer than ``min_rows`` offsets are new, until
        ``maxTriggerDelay`` has passed since the last batch ran."""
        now = self._clock()
        if now - self._last_trigger_ms >= self.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        new = sum(end - begin.get(key, 0) for key, end in latest.items())
        if new < min_rows:
            return True
        self._last_trigger_ms = now
        return False

    # ------------------------------------------------------------------ planning
    def _data_loss(self, message: str) -> None:
        data_loss(message, self.fail_on_data_loss, log)

    def ranges(self, start: Mapping[str, Any] | None,
               end: Mapping[str, Any] | None) -> dict[TopicPartition, tuple[int, int]]:
        """{tp: (first offset, end offset)} a micro-batch from ``start`` to ``end`` reads,
        checked for data loss as Spark's ``getOffsetRangesFromResolvedOffsets`` checks it,
        and for offsets deleted since they were chosen."""
        begin, until = parse_offsets(start), parse_offsets(end)
        facts = partition_offsets(self.paths, self.opts)
        new = set(until) - set(begin)
        gone_new = {k for k in new if k not in facts}
        if gone_new:
            self._data_loss(f"Cannot find earliest offsets of {_tp_set(gone_new)}. Some data "
                            "may have been missed")
        froms = dict(begin)
        for key in sorted(new - gone_new):
            froms[key] = facts[key][0]
            log.info("partition %s added: reading it from offset %d", _tp(key), facts[key][0])
            if facts[key][0] != 0:
                self._data_loss(f"Added partition {_tp(key)} starts from {facts[key][0]} "
                                "instead of 0. Some data may have been missed")
        gone = set(begin) - set(until)
        if gone:
            self._data_loss(f"{_tp_set(gone)} are gone. Some data may have been missed")
        out = {}
        for key in sorted(until):
            if key not in froms:
                continue
            first, last = froms[key], until[key]
            if last < first:
                self._data_loss(f"Partition {_tp(key)}'s offset was changed from {first} to "
                                f"{last}, some data may have been missed")
                continue
            if key not in facts:
                if first < last:
                    self._data_loss(f"Cannot read offsets {first} to {last} of {_tp(key)}: "
                                    "the partition is gone")
                continue
            earliest = facts[key][0]
            if first < earliest and first < last:
                self._data_loss(f"Cannot fetch offsets {first} to {min(earliest, last)} of "
                                f"{_tp(key)}: its log starts at offset {earliest}")
                first = min(earliest, last)
            if first < last:
                out[key] = (first, last)
        return out

    def plan(self, start: Mapping[str, Any] | None,
             end: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """The read tasks (JSON-able dicts for ``read_task``) of a micro-batch."""
        ranges = self.ranges(start, end)
        return microbatch_plan(self.paths, self.opts, ranges) if ranges else []


def read_stream_task(task: dict[str, Any], columns: list[str] | None = None,
                     rsm_keys: Mapping[str, Any] | None = None
                     ) -> Iterator[pyarrow.RecordBatch]:
    """``read_task`` for a micro-batch task (only ``columns``, None: all; ``rsm_keys``: the
    query's, for tiered segments read in another process than the planning one); a segment
    deleted (by retention) between planning and reading is data loss, as in
    :class:`KafkaLogStream`."""
    batches = read_task(task, columns, rsm_keys)
    try:
        first = next(batches)
    except StopIteration:
        return
    except FileNotFoundError as e:
        message = (f"Cannot fetch offsets of {task['topic']}-{task['partition']} from segment "
                   f"{task['segment']}: it was deleted before the query read it ({e})")
        data_loss(message, task["fail_on_data_loss"], log)
        return
    yield first
    yield from batches


def _stream_reader_classes() -> type:
    from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                                  ReadMinRows, SupportsTriggerAvailableNow)

    class TaskPartition(InputPartition):
        """One planned read task of a micro-batch."""

        def __init__(self, task: dict[str, Any]) -> None:
            super().__init__(task)
            self.task = task

    class KafkaLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        """``spark.readStream.format("kafkalog")``: Spark's Kafka micro-batch stream over log
        directories (see :mod:`kafkalog.spark.streaming`)."""

        def __init__(self, options: Mapping[str, Any], columns: list[str] | None,
                     not_null: tuple[str, ...] = ()) -> None:
            opts = dict(options)
            # Made again on every executor that reads: checks options, touches no file.
            self.stream = KafkaLogStream(paths_list(paths_option(opts)), opts)
            self.columns = columns
            self.not_null = not_null            # the schema's NOT NULL columns

        def initialOffset(self) -> dict:
            return self.stream.initial_offset()

        def getDefaultReadLimit(self) -> ReadLimit:
            # PySpark has no composite limit: with both options the minimum is applied
            # from the options (latestOffset) and the maximum given as the limit.
            if self.stream.max_offsets is not None:
                return ReadMaxRows(self.stream.max_offsets)
            if self.stream.min_offsets is not None:
                return ReadMinRows(self.stream.min_offsets)
            return ReadAllAvailable()

        def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
            if isinstance(limit, ReadAllAvailable):
                return self.stream.latest_offset(start)
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
            min_rows = limit.min_rows if isinstance(limit, ReadMinRows) \
                else self.stream.min_offsets
            return self.stream.latest_offset(start, max_rows=max_rows, min_rows=min_rows)

        def reportLatestOffset(self) -> dict | None:
            latest = self.stream.latest
            return offsets_json(latest) if latest else None

        def prepareForTriggerAvailableNow(self) -> None:
            self.stream.prepare_for_available_now()

        def partitions(self, start: dict, end: dict) -> list[InputPartition]:
            return [TaskPartition(t) for t in self.stream.plan(start, end)]

        def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
            task = getattr(partition, "task", None)
            if task is None:           # InputPartition(None): PySpark's stand-in for none
                return iter(())
            tune_worker_process()
            batches = read_stream_task(task, self.columns, self.stream.opts.rsm_keys)
            return declared_not_null(batches, self.not_null, task) \
                if self.not_null else batches

    return KafkaLogStreamReader


_STREAM_READER: type | None = None


def stream_reader_class() -> type:
    """The ``pyspark.sql.datasource.DataSourceStreamReader`` subclass of the ``kafkalog``
    data source (made once)."""
    global _STREAM_READER
    if _STREAM_READER is None:
        _STREAM_READER = _stream_reader_classes()
    return _STREAM_READER
