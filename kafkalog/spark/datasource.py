"""Spark glue: ``read(spark, paths, **options)`` through ``mapInArrow``, and the Python data
source ``spark.read.format("kafkalog")`` (found by PySpark through the ``pyspark_kafkalog``
module, or registered with ``register(spark)``).

Both plan again on every action, as Spark's ``KafkaRelation`` plans in ``buildScan``: appended
records are read and segments deleted by retention are not looked for. Options are checked
(and the logs planned once, for the number of Spark tasks) when the DataFrame is made.

- ``read`` through the JVM reader (``kafkalog.spark.jvm``; the default when its jar is loaded
  and every partition is local with record batches v2): the driver plans when Spark plans the
  scan (a Py4J callback), and the planned tasks are grouped into Spark partitions of about
  ``maxBytesPerTask`` (``_groups``).
- ``read`` through Python workers (``mapInArrow``; remote and tiered paths, legacy message
  sets, or ``kafkalog.reader=python``): the plan is made by a Spark task of the action itself
  (a one-row DataFrame whose ``mapInArrow`` plans), its tasks dealt round-robin to the reading
  tasks. There are fewer reading tasks than planned ones when the planned ones are small
  (``_slots``).
- Either way one action reads one snapshot of the logs.
- The data source: PySpark asks a reader for its partitions once per DataFrame and keeps
  them, so its partitions are slots: each slot plans when it runs and reads every n-th task of
  that plan. Slots of one action plan separately; when the logs change while it runs they may
  see different ends (use ``read`` for one snapshot of live logs).

Paths may be fsspec URLs (``s3://bucket/broker-1``); the ``storageOptions`` option (a JSON
object, fsspec's options) reaches the planning and every reading task. Without it each
process uses its filesystem's defaults (for S3 the AWS_* environment, which executors get from
``spark.executorEnv.*``). In ``read`` the options are not written into the planned tasks' rows
(which are shuffled): they travel with the functions Spark ships to its tasks.
"""
from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

from kafkalog import storage, tiered

from kafkalog.errors import InvalidConfigError
from kafkalog.scan.planner import DEFAULT_MAX_BYTES_PER_TASK, plan
from kafkalog.scan.pushdown import Pushdown
from kafkalog.scan.reader import read_task
from kafkalog.spark import jvm
from kafkalog.spark.options import Options, paths_option
from kafkalog.spark.schema import kafka_schema

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame, SparkSession

    from kafkalog._typing import StrPath

log = logging.getLogger(__name__)


def _request_json(paths: list[str], options: dict[str, Any]) -> str:
    return json.dumps({"paths": paths, "options": options})


_Arrow = Callable[[Iterator["pyarrow.RecordBatch"]], Iterator["pyarrow.RecordBatch"]]


def _task_planner(storage_options: Mapping[str, Any] | None,
                  rsm_keys: Mapping[str, str] | None = None) -> _Arrow:
    """The ``mapInArrow`` function planning at execution (one request row in, one row per
    task out); the storage options and keys travel in the function, not in the rows."""
    def _plan_tasks_arrow(iterator: Iterator[pyarrow.RecordBatch]
                          ) -> Iterator[pyarrow.RecordBatch]:
        import pyarrow as pa
        tiered.add_keys(rsm_keys)
        for batch in iterator:
            for request_json in batch.column(0).to_pylist():
                request = json.loads(request_json)
                # checked, and what they ignore logged, when the DataFrame was made
                opts = Options(request["options"], log_ignored=False)
                tasks = plan(request["paths"], opts, storage_options=storage_options)
                rows = [json.dumps(_shipped(t)) for t in tasks]
                yield pa.RecordBatch.from_arrays([pa.array(rows, pa.string())],
                                                 names=["task"])
    return _plan_tasks_arrow


def _shipped(task: dict[str, Any]) -> dict[str, Any]:
    """A planned task as it travels to a reading task: without its storage options (they
    travel with the function, or are the executor's own)."""
    return {k: v for k, v in task.items() if k != "storage_options"}


def _task_reader(storage_options: Mapping[str, Any] | None,
                 rsm_keys: Mapping[str, str] | None = None) -> _Arrow:
    """The ``mapInArrow`` function reading the planned tasks' rows; the keys of encrypted
    tiered segments travel in it as PEM text (executors need no key files)."""
    def _read_tasks_arrow(iterator: Iterator[pyarrow.RecordBatch]
                          ) -> Iterator[pyarrow.RecordBatch]:
        tiered.add_keys(rsm_keys)
        for batch in iterator:
            for task_json in batch.column(0).to_pylist():
                task = json.loads(task_json)
                if storage.is_remote(task["dir"]):
                    task["storage_options"] = storage_options
                yield from read_task(task)
    return _read_tasks_arrow


def _slots(tasks: list[dict[str, Any]], opts: Options) -> int:
    """How many Spark tasks read the planned ``tasks``. One per planned task (a segment, or a
    part of one) would pay PySpark's cost per task (0.1-0.3 s: a Python worker round trip,
    Arrow to the JVM) for every segment: the planned tasks are dealt to as many Spark tasks as
    read about ``maxBytesPerTask`` each, and at least ``minPartitions`` and one per core of
    the driver's machine."""
    if not tasks:
        return 1
    total = sum(t["end_pos"] - t["start_pos"] for t in tasks)
    max_bytes = opts.integer("maxBytesPerTask", DEFAULT_MAX_BYTES_PER_TASK)
    wanted = max(-(-total // max_bytes), os.cpu_count() or 1,
                 opts.integer("minPartitions") or 0)
    return min(len(tasks), wanted)


def _groups(tasks: list[dict[str, Any]], opts: Options) -> list[list[dict[str, Any]]]:
    """The planned ``tasks`` as ``_slots`` Spark partitions of the JVM reader: runs of
    consecutive tasks (a partition's segments in order) of about equal bytes, so a log of
    10,000 small segments is not 10,000 Spark tasks."""
    if not tasks:
        return []
    count = _slots(tasks, opts)
    sizes = [t["end_pos"] - t["start_pos"] for t in tasks]
    total = sum(sizes)
    groups: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    done = 0
    for i, (task, size) in enumerate(zip(tasks, sizes)):
        current.append(task)
        done += size
        left, to_fill = len(tasks) - i - 1, count - len(groups) - 1
        # close a group at its share of the bytes, keeping a task for every group to come
        if 0 < to_fill <= left and (left == to_fill or
                                    done * count >= total * (len(groups) + 1)):
            groups.append(current)
            current = []
    groups.append(current)
    return groups


def _jvm_unsupported(paths: list[str], tasks: list[dict[str, Any]]) -> str | None:
    """Why the JVM reader cannot read this plan (None: it can). The plan of ``read()`` decides
    for the DataFrame; a later action meeting a legacy message set fails with the JVM reader's
    message."""
    remote = [p for p in paths if storage.is_remote(p)] or \
        sorted({t["dir"] for t in tasks if storage.is_remote(t["dir"])})
    if remote:
        return (f"remote or tiered-storage paths ({', '.join(remote[:3])}) are read through "
                f"fsspec, in Python")
    legacy = sorted({f"{t['topic']}-{t['partition']}" for t in tasks if t["magic"] in (0, 1)})
    if legacy:
        return (f"legacy message sets (magic 0 or 1) in {', '.join(legacy[:3])}: the JVM "
                f"reader reads record batches v2 only")
    return None


def _jvm_planner(paths: list[str], opts: Options) -> Callable[[Pushdown], str]:
    """The JVM reader's planning on the driver: the JSON of ``_groups`` of a new plan pruned
    by the filters Spark pushed into the scan."""
    def plan_json(pushdown: Pushdown) -> str:
        tasks = plan(paths, opts, pushdown)
        return json.dumps([[_shipped(t) for t in group] for group in _groups(tasks, opts)])
    return plan_json


def _paths_list(paths: StrPath | Iterable[StrPath]) -> list[str]:
    """Local paths made absolute (executors may start elsewhere); URLs as given."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    return [p if storage.is_remote(p) else os.path.abspath(p)
            for p in (os.fspath(x) for x in paths)]


def _json_options(options: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in options.items():
        if v is None:
            continue
        out[k] = v if isinstance(v, (str, bool, int, float, dict)) else str(v)
    return out


def read(spark: SparkSession, paths: StrPath | Iterable[StrPath], **options: Any) -> DataFrame:
    """A DataFrame of the records under ``paths`` (partition dirs, log dirs, or folders of
    them), with the schema of Spark's Kafka source. Options use Spark's Kafka names.

    Options are checked now (``InvalidConfigError``); every action plans again from the logs
    as they are then and reads that plan.

    The ``kafkalog.reader`` option picks the reader: ``auto`` (default) the JVM reader when
    its jar is loaded (build the session with ``.config("spark.jars",
    kafkalog.spark.jar_path())``; else it is added with ``ADD JAR``) and every partition is
    local with record batches v2, else Python workers (the reason logged at INFO); ``jvm``
    (``InvalidConfigError`` when it cannot) or ``python``.

    Paths may be fsspec URLs (``s3://bucket/broker-1``, ``s3a://...``) with the
    ``storageOptions`` option (a JSON object of fsspec's options, or a dict); without it the
    driver and the executors use their environment (for S3 the AWS_* variables).
    """
    opts = Options(options)
    path_list = _paths_list(paths)
    # Planned now for the option errors Spark raises up front, the reader and the number of
    # tasks; each action plans again.
    tasks = plan(path_list, opts)
    if opts.reader != "python":
        why_not = _jvm_unsupported(path_list, tasks) or jvm.unavailable(spark)
        if why_not is None:
            return jvm.dataframe(spark, _jvm_planner(path_list, opts), opts.include_headers)
        if opts.reader == "jvm":
            raise InvalidConfigError(f"kafkalog.reader is jvm, but {why_not}")
        log.info("kafkalog.spark.read reads through Python workers (mapInArrow): %s", why_not)
    storage_options = opts.storage_options
    slots = _slots(tasks, opts)
    schema = kafka_schema(opts.include_headers)
    request_options = {k: v for k, v in _json_options(options).items()
                       if k.lower() not in ("storageoptions", "rsmkeys")}
    request = spark.createDataFrame([(_request_json(path_list, request_options),)],
                                    "request string")
    # the keys as PEM text: executors need no key files
    keys = {k: tiered.key_pem(v) for k, v in (opts.rsm_keys or {}).items()}
    task_rows = request.mapInArrow(_task_planner(storage_options, keys), "task string")
    # A repartition to a number of partitions is never coalesced by adaptive execution, and
    # round-robin from one partition gives each task its own Spark task.
    return task_rows.repartition(slots).mapInArrow(_task_reader(storage_options, keys), schema)


def _datasource_classes() -> type:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class SlotPartition(InputPartition):
        """Slot ``index`` of ``count``: reads tasks index, index + count, ... of the plan
        made when it runs."""

        def __init__(self, index: int, count: int) -> None:
            super().__init__(index)
            self.index = index
            self.count = count

    class KafkaLogReader(DataSourceReader):
        pushdown: Pushdown | None = None

        def __init__(self, options: dict[str, Any]) -> None:
            opts = dict(options)
            self.paths = _paths_list(paths_option(opts))
            self.options = opts
            # the option errors Spark raises up front, and what a batch query ignores (logged
            # once: the planning of every action and slot reuses this)
            self.opts = Options(opts)

        def partitions(self) -> list[InputPartition]:
            # PySpark calls this once per DataFrame; the plan is remade in read()
            count = _slots(plan(self.paths, self.opts, self.pushdown), self.opts)
            return [SlotPartition(i, count) for i in range(count)]

        def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
            index = getattr(partition, "index", None)
            if index is None:          # InputPartition(None): PySpark's stand-in for none
                return
            tasks = plan(self.paths, self.opts, self.pushdown)
            for task in tasks[index::getattr(partition, "count")]:
                yield from read_task(task)

    class KafkaLogPushdownReader(KafkaLogReader):
        def pushFilters(self, filters: list[Any]) -> Iterable[Any]:
            """Handle the filters on topic, partition, offset and timestamp that prune
            (``planner.Pushdown``: comparisons, ranges, IN, = and <> on topic/partition,
            IS NOT NULL); return the others, which Spark applies after the read."""
            self.pushdown, unhandled = Pushdown.from_filters(filters)
            return unhandled

    class KafkaLogDataSource(DataSource):
        """``spark.read.format("kafkalog").load(path)``: Spark's Kafka source over log
        directories."""

        def __init__(self, options: dict[str, Any]) -> None:
            super().__init__(options)
            # Spark's Kafka source: "Kafka source has a fixed schema and cannot be set with a
            # custom one". PySpark passes a user schema to reader() only, so it is refused there.

        @classmethod
        def name(cls) -> str:
            return "kafkalog"

        def schema(self) -> Any:
            # PySpark asks for it for batch and streaming reads alike: the options ignored
            # in one mode are logged by reader() or streamReader(), which know the mode.
            return self._schema(streaming=False)

        def _schema(self, streaming: bool) -> Any:
            opts = Options(dict(self.options), streaming, log_ignored=False)
            return kafka_schema(opts.include_headers)

        def reader(self, schema: Any) -> DataSourceReader:
            if schema != self._schema(streaming=False):
                raise InvalidConfigError("Kafka source has a fixed schema and cannot be set "
                                         "with a custom one")
            if _called_by_plain_planner():
                return KafkaLogReader(dict(self.options))
            return KafkaLogPushdownReader(dict(self.options))

        def streamReader(self, schema: Any) -> Any:
            """``spark.readStream.format("kafkalog")``: see :mod:`kafkalog.spark.streaming`."""
            from kafkalog.spark.streaming import stream_reader_class
            if schema != self._schema(streaming=True):
                raise InvalidConfigError("Kafka source has a fixed schema and cannot be set "
                                         "with a custom one")
            return stream_reader_class()(dict(self.options))

    return KafkaLogDataSource


def _called_by_plain_planner() -> bool:
    """Whether PySpark's planning worker without filter pushdown asks for the reader.

    PySpark (4.1+) calls ``pushFilters`` only when ``spark.sql.python.filterPushdown.enabled``
    is true (false by default), from its pushdown worker; its other planning worker
    (``plan_data_source_read``) never calls it, and refuses a reader that defines it when the
    setting is false (DATA_SOURCE_PUSHDOWN_DISABLED). That worker gets the reader without
    ``pushFilters`` (it would not call it), so reading works with the setting either way and
    filters are pushed when it is true."""
    import sys
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "pyspark.sql.worker.plan_data_source_read":
            return True
        frame = frame.f_back      # type: ignore[assignment]
    return False


_DATA_SOURCE: type | None = None


def data_source_class() -> type:
    """The ``pyspark.sql.datasource.DataSource`` subclass named ``kafkalog`` (made once)."""
    global _DATA_SOURCE
    if _DATA_SOURCE is None:
        _DATA_SOURCE = _datasource_classes()
    return _DATA_SOURCE


def register(spark: SparkSession) -> None:
    """Register the ``kafkalog`` data source with a SparkSession (PySpark 4 finds it without
    this when kafkalog is installed: the ``pyspark_kafkalog`` module exposes it)."""
    spark.dataSource.register(data_source_class())
