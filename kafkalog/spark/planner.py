"""Planning on the driver: which partitions, which offsets, which byte ranges.

Every log fact comes from the engine's read-only view of each partition directory
(``Log.open(path, read_only=True)``): log start and end offsets, last stable offset, aborted
transactions, offsets for timestamps, segment list and offset index entries. The planner only
plans: a partition's offset range is split into tasks at offset-index entries (batch starts),
so every batch belongs to exactly one task.

Replicas: when several paths hold the same topic-partition (copies from several brokers), the
replica whose newest segment starts at the highest offset (then: the most bytes, then the first
path given) is read for every offset it holds; offsets below its log start are read from the
next replica that holds them, and so on down. Each offset is read once.
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from kafkalog.errors import OffsetOutOfRangeError
from kafkalog.files import holds_segments, topic_partition_or_none
from kafkalog.log import Log
from kafkalog.spark.options import Options

if TYPE_CHECKING:
    from kafkalog._typing import StrPath

EARLIEST, LATEST = -2, -1
DEFAULT_MAX_BYTES_PER_TASK = 128 * 1024 * 1024


class Replica:
    """One copy of a topic-partition: the engine's read-only view of its directory."""

    def __init__(self, path, order):
        self.path = path
        self.order = order
        self.log = Log.open(path, read_only=True)

    @property
    def log_start_offset(self):
        return self.log.log_start_offset

    def preference(self):
        segments = self.log.segments
        return (segments.active.base_offset, segments.size, -self.order)

    def close(self):
        self.log.close()


def discover(paths, stack):
    """{(topic, partition): [Replica, ...]} for every partition directory under ``paths``
    (each replica's view closed by ``stack``, a ``contextlib.ExitStack``)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found = {}
    order = 0
    for root in paths:
        root = os.path.abspath(os.fspath(root))
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{root}: no such directory")
        for directory, subdirs, _ in os.walk(root):
            subdirs.sort()
            key = topic_partition_or_none(os.path.basename(directory))
            if key is not None and holds_segments(directory):
                replica = Replica(directory, order)
                stack.callback(replica.close)
                found.setdefault(key, []).append(replica)
                order += 1
                subdirs[:] = []
    return found


def _select_topics(found, opts):
    subscribe = opts.get("subscribe")
    pattern = opts.get("subscribePattern")
    assign = opts.json("assign")
    chosen = [o for o in (subscribe, pattern, assign) if o is not None]
    if len(chosen) > 1:
        raise ValueError("only one of subscribe, subscribePattern and assign may be given")
    if subscribe is not None:
        topics = {t.strip() for t in str(subscribe).split(",") if t.strip()}
        return {k: v for k, v in found.items() if k[0] in topics}
    if pattern is not None:
        regex = re.compile(pattern)
        return {k: v for k, v in found.items() if regex.fullmatch(k[0])}
    if assign is not None:
        wanted = {(t, int(p)) for t, ps in assign.items() for p in ps}
        return {k: v for k, v in found.items() if k in wanted}
    return found


def _per_partition(spec, key, default):
    """Value for ``key`` from a Spark JSON offsets spec {"topic": {"0": n}}."""
    topic, partition = key
    if spec is None:
        return default
    return spec.get(topic, {}).get(str(partition), default)


def plan(paths: StrPath | Iterable[StrPath],
         options: Options | Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The read tasks for ``paths`` (JSON-able dicts)."""
    opts = options if isinstance(options, Options) else Options(options or {})
    starting = opts.offsets_spec("startingOffsets", "earliest", ("earliest", "latest"))
    ending = opts.offsets_spec("endingOffsets", "latest", ("latest",))
    request = {
        "starting": starting, "ending": ending,
        "start_ts": opts.integer("startingTimestamp"),
        "end_ts": opts.integer("endingTimestamp"),
        "start_ts_spec": opts.json("startingOffsetsByTimestamp"),
        "end_ts_spec": opts.json("endingOffsetsByTimestamp"),
        "fail_on_data_loss": opts.flag("failOnDataLoss", True),
        "committed": opts.read_committed,
    }
    max_records = opts.integer("maxRecordsPerPartition")
    max_bytes = opts.integer("maxBytesPerTask", DEFAULT_MAX_BYTES_PER_TASK)
    min_partitions = opts.integer("minPartitions")
    tasks = []
    with contextlib.ExitStack() as stack:
        found = _select_topics(discover(paths, stack), opts)
        for key in sorted(found):
            replicas = sorted(found[key], key=lambda r: r.preference(), reverse=True)
            tasks.extend(_plan_partition(key, replicas, request))
    total = sum(t["end_pos"] - t["start_pos"] for t in tasks)
    target = max_bytes
    if min_partitions and tasks:
        target = max(1, min(max_bytes, total // max(min_partitions, 1) or 1))
    tasks = [piece for t in tasks for piece in _split(t, target, max_records)]
    common = {"validate_crc": opts.flag("validateCrc", True),
              "fail_on_data_loss": request["fail_on_data_loss"],
              "committed": request["committed"], "include_headers": opts.include_headers}
    for t in tasks:
        t.update(common)
    return tasks


def _served_ranges(replicas):
    """[(replica, first offset, end offset or None)] in offset order: the preferred replica
    from its log start on, the next one below that, and so on."""
    ranges = []
    covered_from = None
    for r in replicas:
        if covered_from is None:
            ranges.append((r, r.log_start_offset, None))
            covered_from = r.log_start_offset
        elif r.log_start_offset < covered_from:
            ranges.append((r, r.log_start_offset, covered_from))
            covered_from = r.log_start_offset
    ranges.reverse()          # adjacent by construction: each ends where the next begins
    return ranges


def _offset_for_timestamp(ranges, timestamp):
    """The first offset whose record has a timestamp >= ``timestamp``, or None."""
    for replica, lo, hi in ranges:
        found = replica.log.offset_for_timestamp(timestamp)
        if found is None:
            continue
        offset = max(found[0], lo)
        if hi is None or offset < hi:
            return offset
    return None


def _plan_partition(key, replicas, request):
    primary = replicas[0].log
    ranges = _served_ranges(replicas)
    earliest = ranges[0][1]
    starting, ending = request["starting"], request["ending"]
    start = _per_partition(starting, key, EARLIEST) if isinstance(starting, dict) else \
        (EARLIEST if starting == "earliest" else LATEST)
    end = _per_partition(ending, key, LATEST) if isinstance(ending, dict) else LATEST
    # Spark's `latest` is what a consumer could see: the high watermark (a broker's
    # replication-offset-checkpoint, else the log end), the last stable offset for read_committed.
    latest = primary.last_stable_offset if request["committed"] else primary.high_watermark
    if start == EARLIEST:
        start = earliest
    elif start == LATEST:
        start = latest
    elif start < earliest:
        if request["fail_on_data_loss"]:
            raise OffsetOutOfRangeError(
                f"startingOffsets {start} for {key[0]}-{key[1]} is below the earliest "
                f"available offset {earliest} (set failOnDataLoss=false to start there)")
        start = earliest
    if end == EARLIEST:
        raise ValueError("endingOffsets cannot be earliest (-2)")
    if end == LATEST:
        end = latest
    elif request["committed"]:
        end = min(end, latest)
    start_ts = request["start_ts"] if request["start_ts"] is not None else \
        _per_partition(request["start_ts_spec"], key, None)
    end_ts = request["end_ts"] if request["end_ts"] is not None else \
        _per_partition(request["end_ts_spec"], key, None)
    if start_ts is not None:
        found = _offset_for_timestamp(ranges, start_ts)
        if found is None:
            return []
        start = max(start, found)
    if end_ts is not None:
        found = _offset_for_timestamp(ranges, end_ts)
        if found is not None:
            end = min(end, found)
    tasks = []
    for replica, lo, hi in ranges:
        lo = max(lo, start)
        hi = end if hi is None else min(hi, end)
        if lo >= hi:
            continue
        aborted = [tuple(a) for a in replica.log.aborted_transactions(lo, hi)] \
            if request["committed"] else []
        tasks.extend(_segment_tasks(key, replica, lo, hi, aborted))
    return tasks


def _index_entries(segment):
    """(offsets, positions) of a segment's offset index; empty when it has none."""
    try:
        return segment.offset_index.entries_array()
    except FileNotFoundError:
        return np.empty(0, np.int64), np.empty(0, np.int64)


def _segment_tasks(key, replica, lo, hi, aborted):
    """Tasks covering offsets [lo, hi) of one replica."""
    tasks = []
    for segment in replica.log.segments.range(lo, hi):
        start_pos = 0
        if lo > segment.base_offset:
            found = segment.translate_offset(lo)
            start_pos = segment.size if found is None else found[0]
        found = segment.translate_offset(hi)
        # the batch holding hi may start below it: it is read whole, its records filtered
        end_pos = segment.size if found is None else found[0] + found[1]
        if start_pos >= end_pos:
            continue
        offsets, positions = _index_entries(segment)
        inside = (positions > start_pos) & (positions < end_pos)
        tasks.append({
            "topic": key[0], "partition": key[1], "dir": replica.path,
            "segment": segment.base_offset, "start_pos": start_pos, "end_pos": end_pos,
            "start_offset": lo, "end_offset": hi, "aborted": aborted,
            "split_positions": positions[inside].tolist(),
            "split_offsets": offsets[inside].tolist(),
        })
    return tasks


def _split(task, target_bytes, max_records):
    """Cut a task at offset-index entries so no piece exceeds ``target_bytes`` or (by offset
    span) ``max_records``."""
    positions = task.pop("split_positions")
    offsets = task.pop("split_offsets")
    pieces = []
    start, start_offset = task["start_pos"], task["start_offset"]
    for pos, off in zip(positions, offsets):
        too_big = pos - start >= target_bytes
        too_many = max_records is not None and off - start_offset >= max_records
        if too_big or too_many:
            pieces.append(dict(task, start_pos=start, end_pos=pos))
            start, start_offset = pos, off
    pieces.append(dict(task, start_pos=start))
    return pieces
