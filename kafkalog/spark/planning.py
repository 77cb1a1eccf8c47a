"""Planning for Spark queries: where a query's plan is made and how it reaches the workers.

One plan per query: the plan made when PySpark asks the data source for its partitions
travels inside them (``PlannedPartition``: the tasks each one reads, pickled), so the workers
read and never plan, as Spark's Kafka source plans offset ranges on the driver and hands them
to executors. Where PySpark keeps a DataFrame's partitions for every later action (a scan
with no filter pushed; see :mod:`kafkalog.spark.datasource`) its partitions stay slots that
plan when they run, so each action still reads the logs as of its own start.

Past ``parallelPlanningThreshold`` partition directories (default 32, as Spark's
``spark.sql.sources.parallelPartitionDiscovery.threshold``) ``kafkalog.spark.read`` plans with
a Spark job over the directories found (each Spark task plans its share and returns the task
dicts), as Spark's ``InMemoryFileIndex`` lists paths in parallel: PySpark's planning worker
has no SparkSession, the driver's Python process does. Like ``InMemoryFileIndex``'s listing,
that plan is made when the DataFrame is made and kept by it (in a file of the driver's, named
by the internal ``PLAN_OPTION``).

``KAFKALOG_COUNT_PLANS`` (a file name, in the environment of the processes that plan):
every plan made for Spark appends a line ``<pid> <kind>`` to it (for the tests and
``bench/spark_compare.py``, which count plans per action).
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import uuid
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

from kafkalog import storage
from kafkalog.errors import InvalidConfigError
from kafkalog.files import log07_topic_partition
from kafkalog.log_dirs import partition_dirs
from kafkalog.scan.planner import plan, plan_ranges
from kafkalog.spark.options import Options

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import SparkSession

    from kafkalog.scan.pushdown import Pushdown

COUNT_ENV = "KAFKALOG_COUNT_PLANS"
DEFAULT_PARALLEL_THRESHOLD = 32
# Options that name partitions: a share of the directories cannot check them (Spark's
# "you must specify all topics"), so their reads are planned in one process.
_WHOLE_OPTIONS = ("assign", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
                  "minPartitions")


def count_plan(kind: str) -> None:
    """Note a plan made in this process (see the module's docstring)."""
    name = os.environ.get(COUNT_ENV)
    if name:
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{os.getpid()} {kind}\n".encode())
        finally:
            os.close(fd)


def query_plan(paths: list[str], opts: Options, pushdown: Pushdown | None = None,
               kind: str = "query") -> list[dict[str, Any]]:
    """``planner.plan`` of a Spark query (counted)."""
    count_plan(kind)
    return plan(paths, opts, pushdown)


def microbatch_plan(paths: list[str], opts: Options,
                    ranges: Mapping[tuple[str, int], tuple[int, int]]
                    ) -> list[dict[str, Any]]:
    """``planner.plan_ranges`` of a streaming micro-batch (counted)."""
    count_plan("microbatch")
    return plan_ranges(paths, opts, ranges)


# ------------------------------------------------------------------ parallel planning
def directory_groups(paths: list[str], opts: Options) -> list[list[str]] | None:
    """The partition directories under ``paths`` (one listing of each), grouped by
    topic-partition (replicas in the order of ``paths``, as the planner prefers them), in
    topic-partition order; only the topics of ``subscribe`` when it is given. None where a
    Spark job cannot plan them: options that name partitions (``_WHOLE_OPTIONS``, JSON
    offsets), or directories only this process can open (tiered-storage views).

    Raises the listing's errors (``LogNotFoundError``, ``PartitionNotFoundError``)."""
    if any(opts.get(name) is not None for name in _WHOLE_OPTIONS) or any(
            str(opts.get(name, "")).strip().startswith("{") or isinstance(opts.get(name), dict)
            for name in ("startingOffsets", "endingOffsets")):
        return None
    topics = opts.topics() if opts.get("subscribe") is not None else None
    groups: dict[tuple[str, int], list[str]] = {}
    for root in paths:
        root = storage.locate(root, opts.storage_options, opts.rsm_keys).root
        for directory in partition_dirs(root, recursive=True, required=True, log07=True):
            if storage.shown(directory) != directory:
                return None                  # a view registered in this process only
            key = log07_topic_partition(os.path.basename(directory))
            if key is not None and (topics is None or key[0] in topics):
                groups.setdefault(key, []).append(directory)
    return [groups[key] for key in sorted(groups)]


def parallel_threshold(opts: Options) -> int:
    """``parallelPlanningThreshold``: more partition directories than this are planned by a
    Spark job (``InvalidConfigError`` unless a positive integer)."""
    return opts.integer("parallelPlanningThreshold", DEFAULT_PARALLEL_THRESHOLD)


def _plan_shares(batches: Iterable[pyarrow.RecordBatch], shares: list[list[str]],
                 options: dict[str, Any]) -> Iterator[pyarrow.RecordBatch]:
    """In a Spark task: the tasks of each share whose number it is given, as JSON."""
    import pyarrow as pa
    opts = Options(options, log_ignored=False)
    for batch in batches:
        for i in batch.column(0).to_pylist():
            tasks = query_plan(shares[i], opts, kind="share")
            yield pa.RecordBatch.from_pydict({"tasks": [json.dumps(tasks)]},
                                             schema=pa.schema([("tasks", pa.string())]))


def spark_plan(spark: SparkSession, groups: list[list[str]], options: Mapping[str, Any],
               cores: int) -> list[dict[str, Any]]:
    """The plan of the directories ``groups`` (``directory_groups``) made by a Spark job of
    up to two tasks per core (``cores``), each planning every n-th group; the tasks in the
    order one process would plan them (by topic-partition)."""
    count = max(1, min(len(groups), 2 * cores))
    shares = [[d for group in groups[i::count] for d in group] for i in range(count)]
    options = dict(options)

    def plan_shares(batches: Iterable[pyarrow.RecordBatch]) -> Iterator[pyarrow.RecordBatch]:
        return _plan_shares(batches, shares, options)

    rows = spark.range(0, count, 1, count).mapInArrow(plan_shares, "tasks string").collect()
    tasks = [t for row in rows for t in json.loads(row.tasks)]
    # stable: the tasks of one partition keep their order
    tasks.sort(key=lambda t: (t["topic"], t["partition"]))
    return tasks


_PLAN_DIR: list[str] = []


def save_plan(tasks: list[dict[str, Any]]) -> str:
    """A file of this process's holding ``tasks`` as JSON (data only: an option naming a file
    runs no code), removed when the process exits: the ``PLAN_OPTION`` of a DataFrame, read
    by PySpark's planning worker on this host. Readable by this user only (remote tasks carry
    their storage options)."""
    if not _PLAN_DIR:
        _PLAN_DIR.append(tempfile.mkdtemp(prefix="kafkalog-plans-"))
        atexit.register(shutil.rmtree, _PLAN_DIR[0], True)
    name = os.path.join(_PLAN_DIR[0], uuid.uuid4().hex + ".json")
    with open(name, "w") as f:
        json.dump(tasks, f)
    return name


def load_plan(name: str) -> list[dict[str, Any]]:
    """The tasks ``save_plan`` wrote to ``name``; ``InvalidConfigError`` when it is gone (the
    process that made the DataFrame exited) or is not such a file."""
    try:
        with open(name) as f:
            tasks = json.load(f)
    except (OSError, ValueError) as e:
        raise InvalidConfigError(
            f"the plan of this DataFrame ({name}) cannot be read ({type(e).__name__}): it "
            "lives as long as the process that made it; call kafkalog.spark.read again") \
            from None
    if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
        raise InvalidConfigError(f"{name} holds no plan of kafkalog.spark.read")
    return tasks
