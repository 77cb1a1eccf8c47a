"""Planning for Spark queries: where a query's plan is made and how it reaches the workers.

One plan per action. Where PySpark asks the data source for its partitions once per query (a
scan pushing filters: every scan of ``kafkalog.spark.read``'s DataFrames; each SQL query of a
``USING kafkalog`` table), the plan made then travels inside them (``PlannedPartition``: the
tasks each one reads, pickled), so the workers read and never plan, as Spark's Kafka source
plans offset ranges on the driver and hands them to executors.

Where PySpark keeps a DataFrame's partitions for every later action (a scan with no filter
pushed; see :mod:`kafkalog.spark.datasource`) no Python runs on the driver at an action: a
plan shipped in the partitions would be the first action's forever. There the partitions
carry the listing made when Spark asked for them: each is a share of the topic-partitions
(``Group``: a partition's replicas together; ``shares``) and plans them when it runs, so every
partition is planned once per action, by the task that reads it, and each action reads the
logs as of its own start (as Spark's ``KafkaRelation`` plans in ``buildScan``). A Python
worker lists the query's paths once per action (one recursive listing: no request per
directory on an object store) and plans the shares it runs from that listing, each log dir's
checkpoints read once. A partition bigger than its share of the bytes is read by several
tasks, each planning it and reading every n-th of its tasks (with ``minPartitions``, cut at
batch starts into as many). Options naming partitions (``assign``, JSON offsets, offsets by
timestamp) are checked against all of them on the driver, and each share plans its own. A
partition directory created since the shares were dealt is planned by one of them
(``Route``).

Past ``parallelPlanningThreshold`` partition directories (default 32, as Spark's
``spark.sql.sources.parallelPartitionDiscovery.threshold``) a query that plans once too
is planned that way, by the tasks that read it (as Spark's file sources list in parallel and
read Parquet footers in the tasks): its partitions are shares of the directories its pushed
filters keep, planned with those filters.

``KAFKALOG_COUNT_PLANS`` (a file name, in the environment of the processes that plan):
every plan made for Spark appends a line ``<pid> <kind>`` to it (for
the tests and ``bench/spark_compare.py``, which count plans per action).
"""
from __future__ import annotations

import heapq
import os
import zlib
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, NamedTuple

from kafkalog import storage
from kafkalog.files import LOG07_SUFFIX, LOG_SUFFIX, log07_topic_partition
from kafkalog.log_dirs import partition_listing
from kafkalog.scan.planner import plan, plan_ranges, select_topics
from kafkalog.spark.options import Options

if TYPE_CHECKING:
    from kafkalog.scan.pushdown import Pushdown

COUNT_ENV = "KAFKALOG_COUNT_PLANS"
DEFAULT_PARALLEL_THRESHOLD = 32


def count_plan(kind: str) -> None:
    """Note a plan made in this process (see the module's docstring)."""
    name = os.environ.get(COUNT_ENV)
    if name:
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{os.getpid()} {kind}\n".encode())
        finally:
            os.close(fd)


def query_plan(paths: list[str] | list[storage.Location], opts: Options,
               pushdown: Pushdown | None = None, kind: str = "query",
               only: Callable[[tuple[str, int]], bool] | None = None,
               listings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """``planner.plan`` of a Spark query, or of a share of it (``only`` picks its
    topic-partitions), counted."""
    count_plan(kind)
    return plan(paths, opts, pushdown, only=only, listings=listings)


def microbatch_plan(paths: list[str], opts: Options,
                    ranges: Mapping[tuple[str, int], tuple[int, int]]
                    ) -> list[dict[str, Any]]:
    """``planner.plan_ranges`` of a streaming micro-batch (counted)."""
    count_plan("microbatch")
    return plan_ranges(paths, opts, ranges)


# ------------------------------------------------------------------ shares of a listing
class Group(NamedTuple):
    """A topic-partition found by a listing: ``key`` (topic, partition), ``dirs`` (its
    replicas' directories, in the order of the paths, as the planner prefers them), and the
    ``size`` in bytes and number of ``segments`` of the first one's segment files."""
    key: tuple[str, int]
    dirs: list[str]
    size: int
    segments: int


def directory_groups(paths: list[str] | list[storage.Location], opts: Options
                     ) -> list[Group] | None:
    """The topic-partitions under ``paths`` (one listing of each), in topic-partition order;
    only those ``subscribe``, ``subscribePattern`` or ``assign`` select
    (``planner.select_topics``: no share holds others, whose task would warn of a selection
    matching none). A tiered-storage view's too: a worker opens it from the ``Location`` its
    share carries, which brings the view's keys.

    Raises the listing's errors (``LogNotFoundError``, ``PartitionNotFoundError``)."""
    groups: dict[tuple[str, int], Group] = {}
    for location in storage.locate_each(paths, opts.storage_options, opts.rsm_keys):
        listing = partition_listing(location.root, recursive=True, required=True,
                                    log07=True)
        for directory, entries in listing.partitions:
            key = log07_topic_partition(os.path.basename(directory))
            if key is None:
                continue
            if key in groups:
                groups[key].dirs.append(directory)
            else:
                files = [e.size for e in entries
                         if e.is_file and e.name.endswith((LOG_SUFFIX, LOG07_SUFFIX))]
                groups[key] = Group(key, [directory], sum(files), len(files))
    return [groups[key] for key in sorted(select_topics(groups, opts))]


class Share(NamedTuple):
    """What one Spark task plans and reads: the topic-partitions ``keys`` (whole groups), and
    of their plan the tasks ``part``, ``part + parts``, ... (``parts`` > 1 for one group too
    big for one task)."""
    keys: list[tuple[str, int]]
    part: int
    parts: int


def shares(groups: list[Group], count: int, cut: bool = False) -> list[Share]:
    """``groups`` dealt to about ``count`` Spark tasks of about equal bytes: a group of more
    than a task's bytes to several tasks (at most one per segment, unless ``cut``: its plan
    cut at batch starts, for ``minPartitions``), each planning it and reading its part; the
    others packed whole, the biggest first into the task with the fewest bytes so far."""
    total = sum(g.size for g in groups)
    target = total / max(count, 1)
    out: list[Share] = []
    small = []
    for g in groups:
        parts = -(-g.size // int(target)) if target >= 1 else 1
        parts = parts if cut else min(parts, g.segments)
        if parts > 1:
            out.extend(Share([g.key], part, parts) for part in range(parts))
        else:
            small.append(g)
    bins: list[tuple[int, int, list[tuple[str, int]]]] = [
        (0, i, []) for i in range(max(count - len(out), 1 if small else 0))]
    for g in sorted(small, key=lambda g: -g.size):
        size, i, keys = heapq.heappop(bins)
        keys.append(g.key)
        heapq.heappush(bins, (size + g.size, i, keys))
    out.extend(Share(keys, 0, 1) for _, _, keys in sorted(bins, key=lambda b: b[1]) if keys)
    return out


class Route(NamedTuple):
    """Where a share sends partitions created after the listing its query's shares were dealt
    from: ``known``, that listing's topic-partitions (``known_keys``); a partition not among
    them is read by the share ``slot`` of ``slots`` (the shares of whole groups) that a
    stable hash of it picks, so exactly one share of an action reads it."""
    known: dict[str, Any]
    slot: int
    slots: int


def known_keys(keys: Iterable[tuple[str, int]]) -> dict[str, Any]:
    """``keys`` by topic, compact as every share carries them: a topic's partitions 0..n-1 as
    ``n``, others as a frozenset."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in keys:
        by_topic.setdefault(topic, []).append(partition)
    return {t: len(ps) if sorted(ps) == list(range(len(ps))) else frozenset(ps)
            for t, ps in by_topic.items()}


def share_picks(keys: list[tuple[str, int]], route: Route | None
                ) -> Callable[[tuple[str, int]], bool]:
    """Whether a share plans a topic-partition found: one of its ``keys``, or (``route``) a
    new one routed to it."""
    mine = set(keys)
    if route is None:
        return mine.__contains__

    def picks(key: tuple[str, int]) -> bool:
        if key in mine:
            return True
        known = route.known.get(key[0])
        if known is not None and (key[1] < known if isinstance(known, int)
                                  else key[1] in known):
            return False                          # another share's
        return zlib.crc32(f"{key[0]}-{key[1]}".encode()) % route.slots == route.slot
    return picks


def share_options(options: dict[str, Any], share: Share) -> dict[str, Any]:
    """The options a share is planned with: ``minPartitions`` is the shares' count (``shares``
    with ``cut``), and a share of one group cuts its plan into its ``parts`` at batch starts
    (``planner._part_counts`` of one partition: that many); a share of whole groups plans them
    from the listing, uncut."""
    out = {k: v for k, v in options.items() if k.lower() != "minpartitions"}
    if share.parts > 1 and len(out) < len(options):
        out["minPartitions"] = str(share.parts)
    return out


def parallel_threshold(opts: Options) -> int:
    """``parallelPlanningThreshold``: a query of more partition directories than this is
    planned by the tasks that read it, each its share (``InvalidConfigError`` unless a
    positive integer)."""
    return opts.integer("parallelPlanningThreshold", DEFAULT_PARALLEL_THRESHOLD)


def kept(groups: list[Group], pushdown: Pushdown | None) -> list[Group]:
    """The ``groups`` whose topic-partitions the pushed filters keep."""
    return groups if pushdown is None else [g for g in groups if pushdown.keeps(g.key)]
