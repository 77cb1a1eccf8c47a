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
tasks, each the offsets between two cuts made on the driver (``Share.within``): at the base
offsets of its listed segments, or with ``minPartitions`` past its segments at even offsets
of its log's span (as Spark's ``KafkaOffsetRangeCalculator``), so the parts are disjoint and
cover it whatever each worker's listing says (a segment rolled, deleted by retention or
swapped by the cleaner between them); each plans its part (``planner.plan``'s ``within``).
Options naming partitions (``assign``, JSON offsets, offsets by timestamp) are checked against
all of them on the driver, and each share plans its own. A partition directory created since
the shares were dealt is planned by one of them (``Route``); one gone by then is data loss
(``share_plan``).

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
import logging
import os
import zlib
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, NamedTuple

from kafkalog import storage
from kafkalog.errors import OffsetOutOfRangeError
from kafkalog.files import (
    LOG07_SUFFIX, LOG_SUFFIX, log07_topic_partition, parse_file_name, parse_log07_file_name,
)
from kafkalog.log_dirs import partition_listing
from kafkalog.scan.planner import plan, plan_ranges, select_topics
from kafkalog.spark.options import Options

if TYPE_CHECKING:
    from kafkalog.scan.pushdown import Pushdown

log = logging.getLogger(__name__)

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
               listings: dict[str, Any] | None = None,
               within: Mapping[tuple[str, int], tuple[Any, Any]] | None = None
               ) -> list[dict[str, Any]]:
    """``planner.plan`` of a Spark query, or of a share of it (``only`` picks its
    topic-partitions, ``within`` cuts one to a part), counted."""
    count_plan(kind)
    return plan(paths, opts, pushdown, only=only, listings=listings, within=within)


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
    ``segments`` of the first one: (base offset, size in bytes) of each segment file, in
    order."""
    key: tuple[str, int]
    dirs: list[str]
    segments: tuple[tuple[int, int], ...]

    @property
    def size(self) -> int:
        return sum(size for _, size in self.segments)


def _segment_files(entries: list[Any]) -> tuple[tuple[int, int], ...]:
    """(base offset, size) of the segment files (``.log``, Kafka 0.7's ``.kafka``, whose
    offsets are byte offsets) a partition directory's listing ``entries`` show, in order."""
    out = []
    for e in entries:
        if not e.is_file or not e.name.endswith((LOG_SUFFIX, LOG07_SUFFIX)):
            continue                          # (no name parsed but a segment's)
        if e.name.endswith(LOG07_SUFFIX):
            base = parse_log07_file_name(e.name)
        else:                                 # <offset>.log, not <offset>.<suffix>.log
            parsed = parse_file_name(e.name)
            base = None if parsed is None or parsed[2] else parsed[0]
        if base is not None:
            out.append((base, e.size))
    return tuple(sorted(out))


def directory_groups(paths: list[str] | list[storage.Location], opts: Options
                     ) -> list[Group]:
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
                groups[key] = Group(key, [directory], _segment_files(entries))
    return [groups[key] for key in sorted(select_topics(groups, opts))]


class Share(NamedTuple):
    """What one Spark task plans and reads: the topic-partitions ``keys`` (whole groups), or
    of one group too big for one task the offsets ``within`` (lo, hi) (None: from its log
    start, to its latest): a part of it, the same in every worker whatever its listing."""
    keys: list[tuple[str, int]]
    within: tuple[int | None, int | None] | None = None


def shares(groups: list[Group], count: int, cut: bool = False,
           spans: Callable[[list[tuple[str, int]]], Mapping[tuple[str, int], tuple[int, int]]]
           | None = None) -> list[Share]:
    """``groups`` dealt to about ``count`` Spark tasks of about equal bytes: a group of more
    than a task's bytes to several tasks, each reading a range of its offsets: runs of its
    segments of about equal bytes, cut at their base offsets (at most one task per segment),
    unless ``cut`` (``minPartitions``) asks more parts than it has segments: then its offsets
    ``spans(keys)`` gives ((earliest, latest) of each) cut into even spans, as Spark's
    ``KafkaOffsetRangeCalculator`` cuts them (a batch across a cut is read by both tasks, each
    keeping its records). The other groups are packed whole, the biggest first into the task
    with the fewest bytes so far."""
    total = sum(g.size for g in groups)
    target = total / max(count, 1)
    split: list[tuple[Group, int]] = []
    small = []
    for g in groups:
        parts = -(-g.size // int(target)) if target >= 1 else 1
        parts = parts if cut else min(parts, len(g.segments))
        if parts > 1:
            split.append((g, parts))
        else:
            small.append(g)
    past = [g.key for g, parts in split if parts > len(g.segments)]
    offsets = spans(past) if past and spans is not None else {}
    out: list[Share] = []
    for g, parts in split:
        if parts <= len(g.segments):
            bounds = _segment_bounds(g.segments, parts)
        elif g.key in offsets:
            lo, hi = offsets[g.key]
            bounds = sorted({lo + (hi - lo) * n // parts for n in range(1, parts)} - {lo})
        else:                            # gone since listed: its share finds it gone
            bounds = []
        out.extend(Share([g.key], (lo, hi)) for lo, hi in zip([None, *bounds], [*bounds, None]))
    bins: list[tuple[int, int, list[tuple[str, int]]]] = [
        (0, i, []) for i in range(max(count - len(out), 1 if small else 0))]
    for g in sorted(small, key=lambda g: -g.size):
        size, i, keys = heapq.heappop(bins)
        keys.append(g.key)
        heapq.heappush(bins, (size + g.size, i, keys))
    out.extend(Share(keys) for _, _, keys in sorted(bins, key=lambda b: b[1]) if keys)
    return out


def _segment_bounds(segments: tuple[tuple[int, int], ...], parts: int) -> list[int]:
    """The base offsets cutting ``segments`` into ``parts`` runs of about equal bytes."""
    total = sum(size for _, size in segments)
    bounds: list[int] = []
    done = 0
    for i, (base, size) in enumerate(segments):
        if i and len(bounds) < parts - 1 and done >= total * (len(bounds) + 1) / parts:
            bounds.append(base)
        done += size
    return bounds


class Route(NamedTuple):
    """Where a share sends partitions created after the listing its query's shares were dealt
    from: ``known``, that listing's topic-partitions (``known_keys``); a partition not among
    them is read by the share ``slot`` of ``slots`` (all the query's shares) that a stable
    hash of it picks, so exactly one share of an action reads it."""
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


def share_picks(keys: list[tuple[str, int]], route: Route
                ) -> Callable[[tuple[str, int]], bool]:
    """Whether a share plans a topic-partition found: one of its ``keys``, or a new one
    ``route`` sends it."""
    mine = set(keys)

    def picks(key: tuple[str, int]) -> bool:
        if key in mine:
            return True
        known = route.known.get(key[0])
        if known is not None and (key[1] < known if isinstance(known, int)
                                  else key[1] in known):
            return False                          # another share's
        return zlib.crc32(f"{key[0]}-{key[1]}".encode()) % route.slots == route.slot
    return picks


def share_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options a share is planned with: the query's but ``minPartitions``, which the
    shares are cut by (``shares`` with ``cut``)."""
    return {k: v for k, v in options.items() if k.lower() != "minpartitions"}


def share_plan(paths: list[storage.Location], opts: Options, pushdown: Pushdown | None,
               share: Share, route: Route,
               listings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """``query_plan`` of a share (``opts``: ``share_options``' ): its topic-partitions, and
    those ``route`` sends it; of a group dealt in parts, the part ``within`` its offsets. One
    of its topic-partitions gone since the shares were dealt (its directories deleted) is data
    loss, as for Spark's Kafka source a partition gone between planning and reading: an
    ``OffsetOutOfRangeError``, or with failOnDataLoss=false a WARNING naming it."""
    picks = share_picks(share.keys, route)
    found = set()

    def only(key: tuple[str, int]) -> bool:
        found.add(key)                 # the planner asks of every partition it finds
        return picks(key)
    tasks = query_plan(paths, opts, pushdown, "share", only, listings,
                       None if share.within is None else {share.keys[0]: share.within})
    gone = [k for k in share.keys if k not in found]
    if gone:
        data_loss(f"{', '.join(f'{t}-{p}' for t, p in gone)} listed when the query's partitions "
                  "were made: gone (the directory deleted) when its task planned it",
                  opts.flag("failOnDataLoss", True), log)
    return tasks


# What Spark's Kafka source adds to a data-loss message (in kafkalog's words).
_FAIL_HINT = ("Some data may have been lost because it is not in the log any more: retention "
              "deleted it, or the partition was removed, before the query read it. To let the "
              "query go on when data is lost, set the source option \"failOnDataLoss\" to "
              "\"false\".")
_WARN_HINT = ("Some data may have been lost because it is not in the log any more: retention "
              "deleted it, or the partition was removed, before the query read it. To make the "
              "query fail in such cases, set the source option \"failOnDataLoss\" to \"true\".")


def data_loss(message: str, fail: bool, logger: logging.Logger) -> None:
    """Report data loss as Spark's Kafka source does (``reportDataLoss``): with
    failOnDataLoss (``fail``) an ``OffsetOutOfRangeError``, else a WARNING on ``logger``."""
    if fail:
        raise OffsetOutOfRangeError(f"{message}. {_FAIL_HINT}") from None
    logger.warning("%s. %s", message, _WARN_HINT)


def parallel_threshold(opts: Options) -> int:
    """``parallelPlanningThreshold``: a query of more partition directories than this is
    planned by the tasks that read it, each its share (``InvalidConfigError`` unless a
    positive integer)."""
    return opts.integer("parallelPlanningThreshold", DEFAULT_PARALLEL_THRESHOLD)


def kept(groups: list[Group], pushdown: Pushdown | None) -> list[Group]:
    """The ``groups`` whose topic-partitions the pushed filters keep."""
    return groups if pushdown is None else [g for g in groups if pushdown.keeps(g.key)]
