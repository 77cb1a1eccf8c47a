"""Spark glue: the Python data source ``spark.read.format("kafkalog")`` (found by PySpark
through the ``pyspark_kafkalog`` module, or registered with ``register(spark)``), and
``read(spark, paths, **options)``, a convenience over it.

One plan per action (:mod:`kafkalog.spark.planning`): where PySpark asks a reader for its
partitions once per query, the plan made then travels inside them (``PlannedPartition``) and
the workers only read. That is every scan of ``read``'s DataFrames: each pushes a filter (see
below), and PySpark plans a scan that pushes filters in its pushdown worker, with a new reader,
whenever it plans a query (``df.count()`` twice: two plans, each seeing the logs as of its
action); and each SQL query of a ``USING kafkalog`` table, which makes a new relation. A scan
of a DataFrame that pushes nothing (``format("kafkalog")`` alone, ``spark.table``, a view,
filter pushdown off) is asked once per DataFrame: PySpark 4.3 keeps its partitions on the
DataFrame's relation (``PythonDataSourceV2.getOrCreateReadInfo``) and reuses them for every
later action without running any Python. There the partitions carry shares of the listing
(``SlotPartition``): each plans its share of the topic-partitions when it runs (as Spark's
``KafkaRelation`` plans in ``buildScan``: appended records are read and segments deleted by
retention are not looked for), so every partition is planned once per action, by the task
reading it, from one listing of the paths per Python worker and action; a partition dealt in
parts is cut on the driver at offsets every part's plan keeps to. Past
``parallelPlanningThreshold`` partition directories a query's partitions are
such shares too, of the directories its filters keep: the read's tasks plan in parallel.
Options are checked when the DataFrame is made.

Filter pushdown (``spark.sql.python.filterPushdown.enabled``): PySpark 4.3 keeps the reader
planned for the last scan that pushed filters on the DataFrame's relation and reuses it for a
later scan with no filter to push (``df.filter(...).count()`` then ``df.count()``): its
``PythonScanBuilder.pushFilters`` stores the read function and partitions it gets from Python
on the relation's ``PythonDataSourceV2`` (``setReadInfo``), and a scan that pushes nothing
(a scan with no ``Filter`` above it never calls ``pushFilters``) takes them from there
(``getOrCreateReadInfo``) without running any Python, so no reader can tell that scan apart.
Filters therefore prune only a DataFrame every scan of which pushes a filter: ``read``'s,
which carries an ``offset IS NOT NULL`` filter (and the ``kafkalog.pruneByFilters`` option
saying so). Elsewhere (``format("kafkalog")`` alone, a table, a view) pushed filters are
handed back to Spark, which applies them after the read.

Paths may be fsspec URLs (``s3://bucket/broker-1``); the ``storageOptions`` option (a JSON
object, fsspec's options) reaches the planning and every reading task. Without it each
process uses its filesystem's defaults (for S3 the AWS_* environment, which executors get from
``spark.executorEnv.*``).
"""
from __future__ import annotations

import contextlib
import json
import os
import weakref
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from kafkalog import storage, tiered
from kafkalog.log_dirs import located_each
from kafkalog.scan.planner import (
    DEFAULT_MAX_BYTES_PER_TASK, batch_limits, check_assigned, partition_offsets, plan,
)
from kafkalog.scan.pushdown import Pushdown
from kafkalog.scan.reader import read_task
from kafkalog.spark.options import (
    BOUND_OPTIONS, PRUNE_OPTION, Options, catalog_table_options, paths_list, paths_option,
)
from kafkalog.spark.planning import (
    Route, Share, directory_groups, kept, known_keys, parallel_threshold, query_plan,
    share_options, share_plan, shares,
)
from kafkalog.spark.schema import (
    declared_not_null, kafka_schema, not_null_columns, projected_columns, table_options,
)
from kafkalog.spark.environment import (
    check_workers, lookup_finds_kafkalog, warn_not_found_by_lookup,
)
from kafkalog.spark.worker import tune_worker_process

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame, SparkSession

    from kafkalog._typing import StrPath

PUSHDOWN_SETTING = "spark.sql.python.filterPushdown.enabled"


#: The log bytes a Spark task reads by default when the schema picks no key, value or
#: headers: such a task ships about a fifth of the bytes per record (10 copies of bench-0 in
#: 8 tasks of 128 MiB took 0.15-0.4 s more CPU than in 2 tasks of 512 MiB, of 1.8-2.1 s: the
#: cost PySpark pays per task).
NARROW_BYTES_PER_TASK = 512 * 1024 * 1024


def _slots(total: int, most: int, opts: Options, columns: list[str] | None = None) -> int:
    """How many Spark tasks read ``total`` log bytes, at most ``most`` (the planned tasks, or
    segments, they are dealt). One per planned task (a segment, or a part of one) would pay
    PySpark's cost per task (0.05-0.3 s: a Python worker round trip, Arrow to the JVM) for
    every segment: the planned tasks are dealt to as many Spark tasks as
    read about ``maxBytesPerTask`` each (default 128 MiB, ``NARROW_BYTES_PER_TASK`` when the
    ``columns`` read have no key, value or headers), and at least ``minPartitions`` and one
    per core of the driver's machine, rounded up to a multiple of its cores: 7 equal slots on
    2 cores take 4 rounds on one core while the other idles through the last (10 copies of
    bench-0: 34 segments read by one core, 26 by the other, instead of 30 each)."""
    if not most:
        return 1
    narrow = columns is not None and not {"key", "value", "headers"} & set(columns)
    max_bytes = opts.integer("maxBytesPerTask", NARROW_BYTES_PER_TASK if narrow
                             else DEFAULT_MAX_BYTES_PER_TASK)
    cores = os.cpu_count() or 1
    wanted = max(-(-total // max_bytes), cores, opts.integer("minPartitions") or 0)
    return min(most, -(-wanted // cores) * cores)


def _option_text(name: str, value: Any) -> str:
    """An option value as the string a data source option is: JSON for a mapping (the keys
    of ``rsmKeys`` as PEM text, so executors need no key files), ``true``/``false``."""
    if name.lower() == "rsmkeys":
        keys = value if not isinstance(value, (str, bytes)) else json.loads(value)
        value = {k: tiered.key_pem(v) for k, v in keys.items()}
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


_REGISTERED: weakref.WeakSet[Any] = weakref.WeakSet()


def read(spark: SparkSession, paths: StrPath | Iterable[StrPath], **options: Any) -> DataFrame:
    """A DataFrame of the records under ``paths`` (partition dirs, log dirs, or folders of
    them), with the schema of Spark's Kafka source: ``spark.read.format("kafkalog")`` with
    these options (Spark's Kafka names; values may be Python values, a dict for the JSON
    ones), checked now (``InvalidConfigError``). Every action plans again from the logs as
    they are then.

    Turns on ``spark.sql.python.filterPushdown.enabled`` for the session, so filters on
    topic, partition, offset and timestamp prune what is read, and registers the data source
    with the session when it was not found by PySpark (see ``register``). Raises
    ``SparkSetupError`` when Spark's Python workers cannot import kafkalog.

    Paths may be fsspec URLs (``s3://bucket/broker-1``, ``s3a://...``) with the
    ``storageOptions`` option (a JSON object of fsspec's options, or a dict); without it the
    driver and the executors use their environment (for S3 the AWS_* variables).
    """
    options = {k: v for k, v in options.items() if v is not None}
    # The errors of the options and paths, raised here as kafkalog's (the data source raises
    # them too, inside Spark's), and the options a batch query ignores, logged once.
    opts = Options(options)
    path_list = paths_list(paths)
    if spark not in _REGISTERED and _register(spark):
        warn_not_found_by_lookup()
    _check(path_list, opts, any(opts.get(name) is not None for name in BOUND_OPTIONS))
    spark.conf.set(PUSHDOWN_SETTING, "true")
    reader = spark.read.format("kafkalog").option(PRUNE_OPTION, "true")
    for name, value in options.items():
        reader = reader.option(name, _option_text(name, value))
    # Every scan of the DataFrame pushes this filter (handled: offsets are never null), so
    # PySpark plans every scan with its own filters (see the module's docstring).
    return reader.option("paths", json.dumps(path_list)).load() \
        .where("offset IS NOT NULL")


def _check(paths: list[str], opts: Options, bounded: bool = False) -> None:
    """Raise now what a DataFrame of ``paths`` would fail on, with one listing: the path
    errors, and up to ``parallelPlanningThreshold`` partition directories the partitions'
    errors (their offsets found) and, when options bound the offsets (``bounded``), a
    whole plan's, as an action makes it: a start past the end (Spark's "resolved start
    offset ... greater than the resolved end offset") is refused here, not mid-action (only
    then: a plan also finds every task's byte range, 10 partitions: 17-24 ms against 8-11). Past
    the threshold the listing is all: opening every partition here would cost what the
    tasks planning their shares spend (2,000 partitions: 21 s against 1 s, loaded), and they
    raise the rest; options naming partitions are checked against the listing's. Logs the
    warning of a selection matching none."""
    with contextlib.ExitStack() as stack:
        # each path resolved, its groups found and the partitions opened from one listing
        locations = located_each(paths, stack, opts.storage_options, opts.rsm_keys)
        groups = directory_groups(locations, opts)
        if len(groups) > parallel_threshold(opts):
            if bounded:
                check_assigned([g.key for g in groups], *batch_limits(opts))
            return
        if bounded:
            plan(locations, opts)
        else:
            partition_offsets(locations, opts)


def _datasource_classes() -> type:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class SlotPartition(InputPartition):
        """Partition ``index`` of a scan planned when it runs: it plans the topic-partitions
        ``keys`` of the query's paths, as located on the driver (``locations``: not resolved
        again), of one dealt in parts the offsets ``within`` (lo, hi), and those created
        since that ``route`` sends it (``planning.Share``, ``planning.Route``), and reads that
        plan."""

        def __init__(self, index: int, locations: list[storage.Location],
                     keys: list[tuple[str, int]], route: Route,
                     within: tuple[int | None, int | None] | None = None) -> None:
            super().__init__(index)
            self.index = index
            self.locations = locations
            self.keys = keys
            self.route = route
            self.within = within

    class PlannedPartition(InputPartition):
        """Part ``index`` of a query's plan: the ``tasks`` it reads."""

        def __init__(self, index: int, tasks: list[dict[str, Any]]) -> None:
            super().__init__(index)
            self.index = index
            self.tasks = tasks

    class KafkaLogReader(DataSourceReader):
        pushdown: Pushdown | None = None
        per_query = False       # PySpark asks this reader for partitions once per query

        def __init__(self, options: dict[str, Any], columns: list[str] | None,
                     not_null: tuple[str, ...] = ()) -> None:
            opts = dict(options)
            self.paths = paths_list(paths_option(opts))
            self.options = opts
            # the option errors Spark raises up front, and what a batch query ignores (logged
            # once: the planning of every action reuses this), unless read() logged them when
            # it made the DataFrame
            made_by_read = any(str(k).lower() == PRUNE_OPTION.lower() for k in opts)
            self.opts = Options(opts, log_ignored=not made_by_read)
            self.columns = columns
            self.not_null = not_null            # the schema's NOT NULL columns

        def partitions(self) -> list[InputPartition]:
            with contextlib.ExitStack() as stack:
                # each path resolved, its groups found and planned from one listing
                return self._partitions(located_each(self.paths, stack,
                                                     self.opts.storage_options,
                                                     self.opts.rsm_keys))

        def _partitions(self, locations: list[storage.Location]) -> list[InputPartition]:
            groups = directory_groups(locations, self.opts)
            if self.per_query and len(groups) <= parallel_threshold(self.opts):
                tasks = query_plan(locations, self.opts, self.pushdown)
                count = _slots(_bytes(tasks), len(tasks), self.opts, self.columns)
                return [PlannedPartition(i, tasks[i::count]) for i in range(count)]
            # what needs all partitions is checked here: each share plans only its own
            check_assigned([g.key for g in groups], *batch_limits(self.opts))
            known = known_keys(g.key for g in groups)
            groups = kept(groups, self.pushdown)
            # minPartitions: at least that many shares, a group cut past its segments if need
            # be, at offsets from its log (opened here: the driver's cuts hold in every worker)
            cut = self.opts.integer("minPartitions") or 0
            count = _slots(sum(g.size for g in groups),
                           max(sum(len(g.segments) for g in groups), cut), self.opts,
                           self.columns)

            def spans(keys: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
                offsets = partition_offsets(locations, self.opts, only=set(keys).__contains__)
                return {k: (earliest, latest) for k, (earliest, latest, _) in offsets.items()}
            dealt = shares(groups, count, bool(cut), spans)
            # partitions created later: each read by the one share a hash of it picks
            return [SlotPartition(i, locations, s.keys, Route(known, i, len(dealt)), s.within)
                    for i, s in enumerate(dealt)]

        def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
            index = getattr(partition, "index", None)
            if index is None:          # InputPartition(None): PySpark's stand-in for none
                return
            tune_worker_process()
            tasks = getattr(partition, "tasks", None)
            if tasks is None:
                share = Share(getattr(partition, "keys"), getattr(partition, "within"))
                tasks = _action_plan(getattr(partition, "locations"), share,
                                     getattr(partition, "route"), self.options, self.pushdown)
            for task in tasks:
                # a tiered task planned in another process: the keys of the query
                batches = read_task(task, self.columns, self.opts.rsm_keys)
                yield from declared_not_null(batches, self.not_null, task) \
                    if self.not_null else batches

    class KafkaLogPushdownReader(KafkaLogReader):
        def pushFilters(self, filters: list[Any]) -> Iterable[Any]:
            """Handle the filters on topic, partition, offset and timestamp that prune
            (``planner.Pushdown``: comparisons, ranges, IN, = and <> on topic/partition,
            IS NOT NULL); return the others, which Spark applies after the read. Only for a
            DataFrame whose every scan pushes filters (``PRUNE_OPTION``); elsewhere all are
            returned (see the module's docstring)."""
            filters = list(filters)
            if not self.opts.flag(PRUNE_OPTION, False):
                return filters
            self.pushdown, unhandled = Pushdown.from_filters(filters)
            self.per_query = True
            return unhandled

    class KafkaLogDataSource(DataSource):
        """``spark.read.format("kafkalog").load(path)``: Spark's Kafka source over log
        directories. A schema given with ``.schema(...)`` picks columns of Spark's Kafka
        source (any of them, in any order): only those are decoded and shipped."""

        @classmethod
        def name(cls) -> str:
            return "kafkalog"

        def schema(self) -> Any:
            # PySpark asks for it when the DataFrame is made (not when a schema is given:
            # see _columns), for batch and streaming reads alike, and when a catalog table is
            # created: the option and path errors surface here; the options ignored in one
            # mode are logged by reader() or streamReader(), which know the mode.
            table = catalog_table_options(self.options)
            options = dict(self.options) if table is None else table
            opts = Options(options, log_ignored=False)
            # finds the partitions: a path that holds none, or is not there, fails now
            _check(paths_list(paths_option(dict(options))), opts)
            return kafka_schema(opts.include_headers, table)

        def _options(self, schema: Any) -> dict[str, Any]:
            """The query's options over those of the catalog table read, if one is."""
            return {**table_options(schema), **dict(self.options)}

        def _columns(self, schema: Any, streaming: bool) -> list[str] | None:
            # Where a schema is given (.schema(...)) PySpark 4.3 runs no Python when the
            # DataFrame is made (DataFrameReader.load gives it to PythonDataSourceV2.getTable,
            # which takes it as it is) nor when its physical plan is made: the data source
            # is first created, and its reader asked for, when an action runs the scan
            # (PythonBatch.planInputPartitions; with filter pushdown on, when the optimizer
            # pushes a filter). A bad schema fails there, before any task starts.
            opts = Options(self._options(schema), streaming, log_ignored=False)
            return projected_columns(schema, opts.include_headers)

        def reader(self, schema: Any) -> DataSourceReader:
            columns = self._columns(schema, streaming=False)
            reader = KafkaLogReader if _called_by_plain_planner() else KafkaLogPushdownReader
            return reader(self._options(schema), columns, not_null_columns(schema))

        def streamReader(self, schema: Any) -> Any:
            """``spark.readStream.format("kafkalog")``: see :mod:`kafkalog.spark.streaming`."""
            from kafkalog.spark.streaming import stream_reader_class
            columns = self._columns(schema, streaming=True)
            return stream_reader_class()(self._options(schema), columns,
                                         not_null_columns(schema))

    return KafkaLogDataSource


# The last plan made by a slot in this Python worker, by its action's stage and reader; the
# listings of the query's paths that the action's shares run here are planned from.
_ACTION_PLAN: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
_ACTION_LISTINGS: dict[tuple[Any, ...], dict[str, Any]] = {}


def _action_plan(paths: list[storage.Location], share: Share, route: Route,
                 query_options: dict[str, Any], pushdown: Pushdown | None
                 ) -> list[dict[str, Any]]:
    """The plan a slot reads: of its ``share`` (``planning.share_plan``). Made by the first
    slot of an action
    (its stage) that a Python worker runs and reused by the next ones there of the same
    share and ``route`` (PySpark reuses its workers), so an action plans them once per
    worker, not once per slot. Every plan of an action in a worker starts from one listing
    of ``paths`` (made with ``query_options``), each log dir's checkpoints read once: no
    request per directory."""
    from pyspark import TaskContext
    # the query's notes were logged where its partitions were made
    opts = Options(share_options(query_options), log_ignored=False)

    def planned(listings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return share_plan(paths, opts, pushdown, share, route, listings)
    context = TaskContext.get()
    if context is None:
        return planned()
    stage = context.stageId()
    query = (stage, repr(paths), repr(sorted(query_options.items())))
    key = (*query, repr(share), repr(route), repr(pushdown))
    if key not in _ACTION_PLAN:
        _ACTION_PLAN.clear()
        if query not in _ACTION_LISTINGS:
            _ACTION_LISTINGS.clear()
            _ACTION_LISTINGS[query] = {}
        _ACTION_PLAN[key] = planned(_ACTION_LISTINGS[query])
    return _ACTION_PLAN[key]


def _bytes(tasks: list[dict[str, Any]]) -> int:
    """The log bytes planned ``tasks`` read."""
    return sum(t["end_pos"] - t["start_pos"] for t in tasks)


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
    """Register the ``kafkalog`` data source with a SparkSession where PySpark does not find
    it by itself (it does when kafkalog is installed: the ``pyspark_kafkalog`` module exposes
    it; an editable install needs ``--config-settings editable_mode=compat`` for that).

    Raises ``SparkSetupError`` when Spark's Python workers run an interpreter that cannot
    import kafkalog (``PYSPARK_PYTHON`` unset and no virtual environment activated: the
    system's ``python3``); see :mod:`kafkalog.spark.environment`."""
    _register(spark)


def _register(spark: SparkSession) -> bool:
    """``register``; whether PySpark had not found the data source by itself."""
    found = check_workers(spark)
    # registering over the source PySpark found makes Spark warn that it replaced it
    missed = not lookup_finds_kafkalog(spark, found)
    if missed:
        spark.dataSource.register(data_source_class())
    _REGISTERED.add(spark)
    return missed
