"""Planning on the driver: which partitions, which offsets, which byte ranges.

Log facts (log start and end, last stable offset, aborted transactions, offsets for times,
segments, index entries) come from the engine's view of a partition (``Log.open``), or for a
default or offset-bounded read of a remote one from discovery's listing (``ListedLog``). Tasks
are cut at offset-index entries (batch starts): every batch belongs to exactly one task.

Partitions and their replicas are found by ``kafkalog.scan.discovery``; the filters pushed
from a query are a ``kafkalog.scan.pushdown.Pushdown``; the tasks are read by
``kafkalog.scan.reader.read_task``. ``options`` is a ``kafkalog.spark.options.Options``
(Spark's Kafka source option names, which ``kafkalog.arrow`` takes too).

Offsets and timestamps are resolved as Spark's Kafka source resolves them for a batch read
(``KafkaSourceProvider.getKafkaOffsetRangeLimit``, ``KafkaOffsetReaderAdmin``): a timestamp
option wins over a by-timestamp JSON, which wins over ``startingOffsets``/``endingOffsets``;
``minPartitions`` divides partitions' offset ranges as ``KafkaOffsetRangeCalculator`` does, cut
where a batch starts.

Paths may be fsspec URLs (``s3://bucket/broker-1``, ``gs://``; see ``kafkalog.storage``);
their storage options travel with each remote task; its ``segment_size`` is the ``.log``'s
size when planned (a read fetches only its byte range).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import numpy as np

from kafkalog import storage
from kafkalog.errors import InvalidConfigError, OffsetOutOfRangeError
from kafkalog.log07 import Segment07
from kafkalog.log07.format import LOG07_FORMAT
from kafkalog.log_dirs import located_each
from kafkalog.scan.discovery import (ABOVE_ANY_OFFSET, ListedLog, close_all, discover,
                                     preferred, served_ranges, without_internal)
from kafkalog.storage_backend import ahead

if TYPE_CHECKING:
    from kafkalog._typing import StrPath
    from kafkalog.scan.pushdown import Pushdown
    from kafkalog.spark.options import Options

log = logging.getLogger(__name__)

EARLIEST, LATEST = -2, -1
DEFAULT_MAX_BYTES_PER_TASK = 128 * 1024 * 1024
#: Remote partitions opened and planned at once by a bounded read (their requests in flight
#: together; each holds its view only while it is planned).
REMOTE_PARTITIONS_AT_ONCE = 64


def _locations(paths, opts, storage_options, stack):
    """``paths`` (one or several) located once each with the plan's storage options (the
    argument, else the ``storageOptions`` option) and ``rsmKeys``, a remote one within its
    listing until ``stack`` closes (``log_dirs.located_each``: discovery lists it no more)."""
    given = opts.storage_options
    if storage_options is not None and given is not None:
        raise InvalidConfigError("give storage_options or the storageOptions option, "
                                 "not both")
    options = dict(storage_options) if storage_options is not None else given
    return located_each(paths, stack, options, opts.rsm_keys)


def select_topics(found, opts):
    """The partitions ``subscribe``/``subscribePattern``/``assign`` select (all when none is
    given: the paths already choose); ``Options`` checked that at most one is. A selection
    that matches nothing stays empty, as Spark's Kafka source reads an unknown topic, with a
    WARNING naming what the paths hold. Kafka's internal topics are left out unless named
    (``subscribe``, ``assign``, or a path that is their partition directory), as a consumer's
    pattern subscription leaves them out, or ``kafka.exclude.internal.topics`` is false."""
    if opts.get("subscribe") is None and opts.get("assign") is None and \
            opts.exclude_internal_topics:
        found = without_internal(found)
    if opts.get("subscribe") is not None:
        topics = opts.topics()
        return _selected(found, {k: v for k, v in found.items() if k[0] in topics},
                         "subscribe", opts.get("subscribe"), opts)
    pattern = opts.get("subscribePattern")
    if pattern is not None:
        try:
            regex = re.compile(str(pattern).strip())
        except re.error as e:
            raise InvalidConfigError(f"subscribePattern {pattern!r}: {e}") from None
        return _selected(found, {k: v for k, v in found.items() if regex.fullmatch(k[0])},
                         "subscribePattern", pattern, opts)
    assign = opts.json("assign")
    if assign is not None:
        try:
            wanted = {(str(t), int(p)) for t, ps in assign.items() for p in ps}
        except (AttributeError, TypeError, ValueError):
            raise InvalidConfigError(f"Expected e.g. {{\"topicA\":[0,1]}}, got "
                                     f"{opts.get('assign')}") from None
        return _selected(found, {k: v for k, v in found.items() if k in wanted}, "assign",
                         opts.get("assign"), opts)
    return found


def _selected(found, kept, option, value, opts):
    # (a Spark query's Options log its notes in one process of the several that plan it)
    if not kept and opts.logs_notes:
        shown = ", ".join(_tp(k) for k in sorted(found)[:10]) + \
            (", ..." if len(found) > 10 else "")
        _warn_once(f"{option} {value!r} matches no partition: the paths hold "
                   f"{len(found)} ({shown or 'none'})")
    return kept


@functools.lru_cache(maxsize=64)
def _warn_once(message):
    """Log ``message`` once per process (a stream plans every trigger)."""
    log.warning("%s", message)


def _tp(key):
    """A topic-partition as Kafka's ``TopicPartition.toString`` writes it."""
    return f"{key[0]}-{key[1]}"


def _tp_set(keys):
    return "Set(" + ", ".join(_tp(k) for k in sorted(keys)) + ")"


class _Limit:
    """One end of the range Spark's Kafka source would read (a ``KafkaOffsetRangeLimit``):
    ``kind`` is earliest, latest, offsets ({tp: offset}), timestamp (one for all) or
    timestamps ({tp: timestamp})."""

    def __init__(self, kind, value=None):
        self.kind = kind
        self.value = value


def _limit(opts, timestamp_key, by_timestamp_key, offsets_key, default):
    """Spark's preference order: a global timestamp, then per-partition timestamps, then
    offsets (``getKafkaOffsetRangeLimit``)."""
    if opts.get(timestamp_key) is not None:
        return _Limit("timestamp", opts.timestamp(timestamp_key))
    if opts.get(by_timestamp_key) is not None:
        return _Limit("timestamps", opts.partition_map(by_timestamp_key))
    spec = opts.offsets_spec(offsets_key, default, ("earliest", "latest"))
    if isinstance(spec, str):
        return _Limit(spec)
    return _Limit("offsets", opts.partition_map(offsets_key))


def batch_limits(opts: Options) -> tuple[_Limit, _Limit]:
    """The (start, end) limits of a batch read, checked as Spark checks them
    (``validateBatchOptions``, ``checkOffsetLimitValidity``)."""
    start = _limit(opts, "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets",
                   "earliest")
    end = _limit(opts, "endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets", "latest")
    if start.kind == "latest":
        raise InvalidConfigError("starting offset can't be latest for batch queries on Kafka")
    if start.kind == "offsets":
        for key, offset in sorted(start.value.items()):
            if offset == LATEST:
                raise InvalidConfigError(f"startingOffsets for {_tp(key)} can't be latest for "
                                         "batch queries on Kafka")
    if end.kind == "earliest":
        raise InvalidConfigError("ending offset can't be earliest for batch queries on Kafka")
    if end.kind == "offsets":
        for key, offset in sorted(end.value.items()):
            if offset == EARLIEST:
                raise InvalidConfigError(f"ending offset for {_tp(key)} can't be earliest for "
                                         "batch queries on Kafka")
    if start.kind == end.kind and start.kind in ("offsets", "timestamps"):
        if set(start.value) != set(end.value):
            raise InvalidConfigError(
                "The specified start offset and end offset should have the same "
                f"topic-partitions. Topic-partitions for start offset: {_tp_set(start.value)}, "
                f"topic-partitions for end offset: {_tp_set(end.value)}.")
        what = "offset" if start.kind == "offsets" else "timestamp"
        for key in sorted(start.value):
            lo, hi = start.value[key], end.value[key]
            if lo > hi and lo >= 0 and hi >= 0:
                raise InvalidConfigError(
                    f"The specified start {what} {lo} is greater than the end {what} {hi} "
                    f"for topic {key[0]} partition {key[1]}.")
    return start, end


def check_assigned(keys, *limits):
    """A JSON of offsets or timestamps (of the ``limits``, ``batch_limits`` 's) names exactly
    the partitions read (``keys``), as Spark asserts (its message names the start for both)."""
    for limit in limits:
        if limit.kind == "offsets" and set(limit.value) != set(keys):
            raise InvalidConfigError(
                "If startingOffsets contains specific offsets, you must specify all "
                "TopicPartitions. Use -1 for latest, -2 for earliest. Specified: "
                f"{_tp_set(limit.value)} Assigned: {_tp_set(keys)}")
        if limit.kind == "timestamps" and set(limit.value) != set(keys):
            raise InvalidConfigError(
                "If starting/endingOffsetsByTimestamp contains specific offsets, you must "
                f"specify all topics. Specified: {_tp_set(limit.value)} Assigned: "
                f"{_tp_set(keys)}")


def plan(paths: StrPath | Iterable[StrPath | storage.Location], options: Options,
         pushdown: Pushdown | None = None, storage_options: Mapping[str, Any] | None = None,
         only: Callable[[tuple[str, int]], bool] | None = None, within: Mapping | None = None,
         listings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The read tasks for ``paths`` (JSON-able dicts), planned from the logs as they are now,
    with the ``options`` given (an ``Options``).

    ``paths``: partition directories, log dirs or folders of them, local or fsspec URLs
    (``s3://bucket/broker-1``), or ``storage.Location`` s. ``storage_options``: the
    filesystem's options for URL paths (as ``Log.open`` takes them; else the ``storageOptions``
    option; with neither, the filesystem's defaults, for S3 the AWS_* environment); remote
    tasks carry them (as ``storage_options``) for ``read_task``. ``pushdown``: filters on
    topic, partition, offset and timestamp (``Pushdown``) that prune partitions, segments and
    batches; the options are resolved (and checked) as without it. ``only``: picks the
    partitions planned (the options checked against all found); ``listings``: see ``discover``.
    ``within``: {tp: (lo, hi)} offsets that part of a partition's read is cut to (None: open).

    Raises ``InvalidConfigError`` (a ``ValueError``) for options Spark's Kafka source rejects,
    incl. a starting timestamp no record matches (unless
    ``startingOffsetsByTimestampStrategy=latest``) and a start above the end."""
    start, end = batch_limits(options)

    def check(found):
        check_assigned(found, start, end)
        return sorted(found if only is None else filter(only, found))
    with contextlib.ExitStack() as stack:
        return _plan_tasks(_locations(paths, options, storage_options, stack), options, start,
                           end, check, pushdown, listings, within)


def _plan_tasks(locations, opts, start, end, keys, pushdown=None, listings=None, within=None):
    """The tasks reading [start, end) of the partitions ``keys(found)`` picks from those
    found under ``locations``: planned per partition, split (``maxBytesPerTask``,
    ``maxRecordsPerPartition``), cut further for ``minPartitions``."""
    max_records = opts.integer("maxRecordsPerPartition")
    max_bytes = opts.integer("maxBytesPerTask", DEFAULT_MAX_BYTES_PER_TASK)
    if max_bytes <= 0:
        raise InvalidConfigError("maxBytesPerTask must be positive")
    min_partitions = opts.integer("minPartitions")
    request = {"start": start, "end": end, "strategy": opts.timestamp_strategy, "max_bytes":
               max_bytes, "fail_on_data_loss": opts.flag("failOnDataLoss", True), "committed":
               opts.read_committed, "max_records": max_records, "min_partitions": min_partitions,
               "within": within or {}}
    # a default read (earliest to latest, nothing bounding it) is planned from the listing
    listed_only = start.kind == "earliest" and end.kind == "latest" and pushdown is None \
        and not request["committed"] and not min_partitions and max_records is None
    with contextlib.ExitStack() as stack:
        found = select_topics(discover(locations, stack, opts.read_above_high_watermark,
                                        listings=listings), opts)

        cut_later = []          # minPartitions' views: its cut walks their batches

        def plan_one(key):
            replicas = found[key]
            tasks = _listed_tasks(key, replicas, request) if listed_only else None
            if tasks is None:
                replicas = preferred(replicas, request["committed"])
                tasks = [piece for t in _plan_partition(key, replicas, request, pushdown)
                         for piece in _split(t, max_bytes, max_records)]
            if min_partitions:
                cut_later.append(replicas)
            else:
                # nothing more asks the segments: no view kept per partition planned
                close_all(replicas)
            return tasks
        wanted = keys(found)
        planned = _each_partition(plan_one, wanted, found, not listed_only)
        if min_partitions:
            stack.callback(lambda: [close_all(replicas) for replicas in cut_later])
            per_partition = dict(zip(wanted, planned))
            for key, parts in _part_counts(per_partition, min_partitions).items():
                if parts > len(per_partition[key]):
                    per_partition[key] = _cut_at_batches(per_partition[key], parts)
            planned = iter(per_partition.values())
        # each partition's list gone once its tasks are in the plan (in ``wanted`` 's order)
        tasks = [t for partition_tasks in planned for t in partition_tasks]
    common = {"validate_crc": opts.flag("validateCrc", True),
              "fail_on_data_loss": request["fail_on_data_loss"],
              "committed": request["committed"], "include_headers": opts.include_headers}
    if pushdown is not None:
        common.update(pushdown.task_fields())
    for t in tasks:
        t.pop("_segment", None)
        t.update(common)
    return tasks


def _each_partition(plan_one, keys, found, ask_store=True):
    """``plan_one(key)`` of each of ``keys``, in order, as they are consumed; remote ones
    ``REMOTE_PARTITIONS_AT_ONCE`` at once (``ask_store``)."""
    if ask_store and len(keys) > 1 and \
            any(storage.is_remote(r.path) for key in keys for r in found[key]):
        # each in a copy of this context: with discovery's listing
        yield from ahead(plan_one, iter(keys), REMOTE_PARTITIONS_AT_ONCE, "kafkalog-plan")
        return
    for key in keys:
        yield plan_one(key)


def _listed_tasks(key, replicas, request):
    """The tasks of a default read (earliest to latest, unbounded) of a partition planned from
    its listing alone: one per segment, its listed size the byte range (the listing is the
    snapshot the query reads), offsets from the log dir's checkpoints (read once per log dir):
    the log start (else the first segment's base offset) and the high watermark (else none:
    up to the log end, ``end_offset`` None), cut to its ``within``. The reader drops the records
    of a segment's bytes outside [start_offset, end_offset), as it does for any task.

    None when the listing cannot tell (the engine plans then): several replicas, a segment to
    split (above ``max_bytes``, or by a ``within`` bound: index entries), no listed segments."""
    replica = replicas[0]
    segments = replica.listed_segments
    if len(replicas) > 1 or segments is None or \
            any(size > request["max_bytes"] for _, size in segments) or \
            key in request["within"] and not {*request["within"][key]} <= {None, *dict(segments)}:
        return None
    saved = replica.checkpoints(key)
    log_start = max(saved.log_start_offset or 0, segments[0][0])
    # a high watermark above the log end bounds nothing: the reader stops at the bytes' end
    end = None if replica.log_end_is_latest or saved.high_watermark is None else \
        max(saved.high_watermark, log_start)
    log_start, end = _cut_to(*request["within"].get(key, (None, None)), log_start, end)
    if end is not None and end <= log_start:
        return []
    tasks = []
    for i, (base, size) in enumerate(segments):
        if i + 1 < len(segments) and segments[i + 1][0] <= log_start:
            continue                                   # wholly below the log start
        if end is not None and base >= end:
            break
        if size == 0:
            continue
        tasks.append({
            "topic": key[0], "partition": key[1], "dir": replica.path, "segment": base,
            "start_pos": 0, "end_pos": size, "start_offset": log_start, "end_offset": end,
            "aborted": [], "segment_size": size,
            "storage_options": replica.location.task_options(replica.path),
            # the next segment's base bounds this one's offsets (the walker's order check)
            "segment_end": segments[i + 1][0] if i + 1 < len(segments) else None})
    return tasks


def _cut_to(lo, hi, start, end):                 # [start, end) within [lo, hi); None: open
    return max(start, lo or 0), min((x for x in (end, hi) if x is not None), default=None)


def _part_counts(per_partition, min_partitions):
    """{tp: number of tasks} as ``KafkaOffsetRangeCalculator.getRanges`` divides offset
    ranges (sizes in offsets) when there are fewer than ``min_partitions`` of them."""
    sizes = {k: _span(ts)[1] - _span(ts)[0] for k, ts in per_partition.items() if ts}
    sizes = {k: n for k, n in sizes.items() if n > 0}
    if len(sizes) >= min_partitions or not sizes:
        return {}
    total = sum(sizes.values())

    def count(size, whole, parts):
        return max(int(_round_half_up(size / whole * parts)), 1)

    unsplit = {k for k, n in sizes.items() if count(n, total, min_partitions) == 1}
    split_total = total - sum(sizes[k] for k in unsplit)
    split_min = max(min_partitions - len(unsplit), 1)
    return {k: 1 if k in unsplit else count(n, split_total, split_min)
            for k, n in sizes.items()}


def _span(tasks):
    """(first offset, end offset) a partition's tasks read."""
    return min(t["start_offset"] for t in tasks), max(t["end_offset"] for t in tasks)


def _round_half_up(x):
    # Scala's math.round rounds halves up
    return int(np.floor(x + 0.5))


def _cut_at_batches(tasks, parts):
    """Cut a partition's tasks (in offset order) into about ``parts`` pieces of even offset
    spans, each cut where a batch starts, so every batch still belongs to one task."""
    lo, hi = _span(tasks)
    starts = []                        # (base offset, task index, position) of batch starts
    for i, t in enumerate(tasks):
        if isinstance(t["_segment"], Segment07):
            bases, positions = _index_entries(t["_segment"])
        else:
            batches = t["_segment"].batches(t["start_pos"])[0]
            bases, positions = batches["base_offset"], batches["position"]
        inside = (positions > t["start_pos"]) & (positions < t["end_pos"])
        for base, pos in zip(bases[inside].tolist(), positions[inside].tolist()):
            starts.append((base, i, pos))
    if not starts:
        return tasks
    bases = [b for b, _, _ in starts]
    cuts = set()
    for n in range(1, parts):
        target = lo + (hi - lo) * n // parts
        j = int(np.searchsorted(bases, target, side="left"))
        if j < len(starts) and starts[j][0] < hi:
            cuts.add(starts[j][1:])
    pieces = []
    for i, t in enumerate(tasks):
        begin = t["start_pos"]
        for pos in sorted(p for ti, p in cuts if ti == i):
            pieces.append(dict(t, start_pos=begin, end_pos=pos))
            begin = pos
        pieces.append(dict(t, start_pos=begin))
    return pieces


def _offset_for_timestamp(ranges, timestamp, latest):
    """The first offset below ``latest()`` whose record has a timestamp >= ``timestamp``, or
    None (a broker's ListOffsets looks no further than what a consumer may read). ``latest``
    is not asked where a listed log's end, its latest, lies above the offset."""
    for replica, lo, hi in ranges:
        found = replica.log.offset_for_timestamp(timestamp)
        if found is None:
            continue
        offset = max(found[0], lo)
        if (hi is None or offset < hi) and (isinstance(replica, ListedLog) and
                                            replica.ends_above(offset) or offset < latest()):
            return offset
    return None


def _resolve_start(key, limit, earliest, latest, ranges, request):
    if limit.kind == "earliest":
        return earliest
    if limit.kind == "offsets":
        start = limit.value[key]
        if start == EARLIEST:
            return earliest
        if start < earliest:
            if request["fail_on_data_loss"]:
                raise OffsetOutOfRangeError(
                    f"startingOffsets {start} for {_tp(key)} is below the earliest "
                    f"available offset {earliest} (set failOnDataLoss=false to start there)")
            return earliest
        return start
    ts = limit.value if limit.kind == "timestamp" else limit.value[key]
    found = _offset_for_timestamp(ranges, ts, latest)
    if found is not None:
        return found
    if request["strategy"] == "latest":
        return latest()
    # Spark's message, and the way out: a partition without a record that late (or without
    # timestamps at all: magic v0) can start at its end instead.
    raise InvalidConfigError(f"No offset matched from request of topic-partition {_tp(key)} "
                             f"and timestamp {ts}. (No record there is that late, or it has no "
                             f"timestamps; startingOffsetsByTimestampStrategy=latest starts "
                             f"such a partition at its latest offset.)")


def _resolve_end(key, limit, latest, ranges):
    if limit.kind == "latest":
        return latest()
    if limit.kind == "offsets":
        end = limit.value[key]
        return latest() if end == LATEST else end
    ts = limit.value if limit.kind == "timestamp" else limit.value[key]
    found = _offset_for_timestamp(ranges, ts, latest)
    return latest() if found is None else found      # Spark: no match ends at latest


def _latest(primary, committed):
    """Spark's ``latest`` (high watermark; last stable offset) as a call made once, if asked."""
    @functools.lru_cache(maxsize=None)
    def latest():
        return primary.last_stable_offset if committed else primary.high_watermark
    return latest


def _plan_partition(key, replicas, request, pushdown=None):
    primary = replicas[0].log
    ranges = served_ranges(replicas)
    earliest = ranges[0][1]
    latest = _latest(primary, request["committed"])
    start = _resolve_start(key, request["start"], earliest, latest, ranges, request)
    # a part of the partition (``within``) ends at its bound, not the log end
    to_latest = request["end"].kind == "latest" and request["within"].get(key, (None,))[-1] is None
    if to_latest and pushdown is None and not request.get("min_partitions") and \
            isinstance(primary, ListedLog) and primary.ends_above(start):
        end = None                       # the log end, not read: the reader stops there
    else:
        end = _resolve_end(key, request["end"], latest, ranges)
    if end is not None and start > end:
        raise InvalidConfigError(
            f"The resolved start offset {start} is greater than the resolved end offset {end} "
            f"for topic {key[0]} partition {key[1]}.")
    if request["committed"]:
        end = min(end, latest())
    start, end = _cut_to(*request["within"].get(key, (None, None)), start, end)
    spans = [(start, end)] if pushdown is None else _pushed_spans(key, pushdown, start, end,
                                                                  ranges)
    tasks = []
    for span_lo, span_hi in spans:
        for replica, lo, hi in ranges:
            lo = max(lo, span_lo)
            hi = span_hi if hi is None else hi if span_hi is None else min(hi, span_hi)
            if hi is not None and lo >= hi:
                continue
            aborted = [tuple(a) for a in replica.log.aborted_transactions(lo, hi)] \
                if request["committed"] else []
            tasks.extend(_segment_tasks(key, replica, lo, hi, aborted, request,
                                        to_latest and hi == end))
    return tasks if len(spans) < 2 else _coalesce(tasks)


def _pushed_spans(key, pushdown, start, end, ranges):
    """The offset ranges of ``[start, end)`` (the options' range) the pushed filters keep."""
    if not pushdown.keeps(key):
        return []
    if pushdown.ts_lo is not None and pushdown.ts_lo >= 0 and start < end:
        # -1 and -2 ask Kafka's ListOffsets for the log end and start; legacy v0 records
        # have timestamp -1: a negative bound is left to the row mask
        first = _first_offset_at_or_after(ranges, pushdown.ts_lo)
        if first is None:
            return []
        start = max(start, first)
    return pushdown.offset_ranges(start, end)


def _index_entries(segment):
    """(offsets, positions) of a segment's offset index (of every entry of a 0.7 file, which
    has no index); empty when it has none."""
    if isinstance(segment, Segment07):
        positions = segment.positions()
        return segment.base_offset + positions, positions
    try:
        return segment.offset_index.entries_array()
    except FileNotFoundError:
        return np.empty(0, np.int64), np.empty(0, np.int64)


def _byte_range(segment, lo, hi, next_base):
    """(start, end) positions in a segment of the batches holding offsets [lo, hi) (hi None:
    to its end); only a bound below ``next_base`` (the next segment's) asks the index."""
    if isinstance(segment, Segment07):
        # a 0.7 offset is its entry's position: the entries starting in [lo, hi)
        return segment.entry_start(max(lo, segment.base_offset)), \
            segment.size if hi is None else segment.entry_start(hi)
    start_pos = 0
    if lo > segment.base_offset:
        found = segment.translate_offset(lo)
        start_pos = segment.size if found is None else found[0]
    if hi is None or (next_base is not None and next_base <= hi):
        return start_pos, segment.size
    found = segment.translate_offset(hi)
    # the batch holding hi may start below it: it is read whole, its records filtered
    end_pos = segment.size if found is None else found[0] + found[1]
    return start_pos, end_pos


def _segment_tasks(key, replica, lo, hi, aborted, request, to_latest=False):
    """Tasks covering offsets [lo, hi) of one replica (index entries only where cut)."""
    tasks = []
    segments = replica.log.segments
    for segment in segments.range(lo, hi):
        next_base = getattr(segments.higher(segment.base_offset), "base_offset", None)
        # to latest: the bytes to the end (the reader drops what lies above), no index lookup
        start_pos, end_pos = _byte_range(segment, lo, None if to_latest else hi, next_base)
        if start_pos >= end_pos:
            continue
        if end_pos - start_pos > request["max_bytes"] or request["max_records"] is not None:
            offsets, positions = _index_entries(segment)
            inside = (positions > start_pos) & (positions < end_pos)
            offsets, positions = offsets[inside], positions[inside]
        else:
            offsets = positions = np.empty(0, np.int64)
        task = {
            "topic": key[0], "partition": key[1], "dir": replica.path,
            "segment": segment.base_offset, "start_pos": start_pos, "end_pos": end_pos,
            "start_offset": lo, "end_offset": hi, "aborted": aborted, "_segment": segment,
            # its batches' offsets lie below the next segment's base (the walk checks)
            "segment_end": next_base, "segment_size": segment.size,
            "storage_options": replica.location.task_options(replica.path),
            "split_positions": positions, "split_offsets": offsets,
        }
        if isinstance(segment, Segment07):
            # read by the 0.7 walk; a shorter name than 20 digits is possible
            task.update(format=LOG07_FORMAT, file=os.path.basename(segment.path))
        tasks.append(task)
    return tasks


def _split(task, target_bytes, max_records):
    """Cut a task at offset-index entries so no piece exceeds ``target_bytes`` or (by offset
    span) ``max_records``: each cut at the first entry at least that far from the last cut
    (entries ascend in position and offset)."""
    positions = task.pop("split_positions")
    offsets = task.pop("split_offsets")
    pieces = []
    start, start_offset = task["start_pos"], task["start_offset"]
    while True:
        cut = int(np.searchsorted(positions, start + target_bytes, side="left"))
        if max_records is not None:
            cut = min(cut, int(np.searchsorted(offsets, start_offset + max_records,
                                               side="left")))
        if cut >= len(positions):
            break
        pos = int(positions[cut])
        pieces.append(dict(task, start_pos=start, end_pos=pos))
        start, start_offset = pos, int(offsets[cut])
    pieces.append(dict(task, start_pos=start))
    return pieces


# ------------------------------------------------------------------------------ streaming
def partition_offsets(paths: StrPath | Iterable[StrPath | storage.Location], options: Options,
                      resolve_start: bool = False, only: Callable | None = None,
                      storage_options: Mapping[str, Any] | None = None
                      ) -> dict[tuple[str, int], tuple[int, int, int | None]]:
    """{(topic, partition): (earliest, latest, start)} for the partitions the options select
    (asked ``REMOTE_PARTITIONS_AT_ONCE`` at once): earliest is the log start offset (over
    replicas), latest what a consumer may read (high watermark, last stable offset for
    read_committed, log end with ``readAboveHighWatermark``). ``start``: the starting offset
    Spark's Kafka source resolves for a new streaming query (``startingTimestamp``, then
    ``startingOffsetsByTimestamp``, ``startingOffsets``, default latest) when
    ``resolve_start``, else None. ``storage_options`` and ``only`` as ``plan`` takes them."""
    start = _limit(options, "startingTimestamp", "startingOffsetsByTimestamp",
                   "startingOffsets", "latest") if resolve_start else None
    request = {"start": start, "strategy": options.timestamp_strategy,
               "fail_on_data_loss": options.flag("failOnDataLoss", True),
               "committed": options.read_committed}
    with contextlib.ExitStack() as stack:
        found = select_topics(discover(_locations(paths, options, storage_options, stack),
                                        stack, options.read_above_high_watermark), options)
        if start is not None:
            check_assigned(found, start)

        def offsets_of(key):
            replicas = preferred(found[key], request["committed"])
            try:
                ranges = served_ranges(replicas)
                earliest = ranges[0][1]
                latest = _latest(replicas[0].log, request["committed"])
                first = None
                if start is not None:
                    if start.kind == "latest" or (start.kind == "offsets"
                                                  and start.value[key] == LATEST):
                        first = latest()
                    else:
                        first = _resolve_start(key, start, earliest, latest, ranges, request)
                return earliest, latest(), first
            finally:
                close_all(replicas)    # no view kept per partition asked
        keys = sorted(found if only is None else filter(only, found))
        return dict(zip(keys, _each_partition(offsets_of, keys, found)))


def plan_ranges(paths: StrPath | Iterable[StrPath], options: Options,
                ranges: Mapping[tuple[str, int], tuple[int, int]],
                storage_options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The read tasks for explicit offset ranges {(topic, partition): (start, end)} (a
    streaming micro-batch), split as ``plan`` splits (``maxBytesPerTask``,
    ``maxRecordsPerPartition``, ``minPartitions``). A start below the log start offset
    is an ``OffsetOutOfRangeError`` with ``failOnDataLoss`` (else read from the log start);
    read_committed ends at the last stable offset and drops aborted records. Partitions not
    found under ``paths`` plan nothing. ``storage_options`` as ``plan`` takes them."""
    wanted = {k: v for k, v in ranges.items() if v[0] < v[1]}
    if not wanted:
        return []
    with contextlib.ExitStack() as stack:
        return _plan_tasks(_locations(paths, options, storage_options, stack), options,
                           _Limit("offsets", {k: v[0] for k, v in wanted.items()}),
                           _Limit("offsets", {k: v[1] for k, v in wanted.items()}),
                           lambda found: [k for k in sorted(wanted) if k in found])


def _first_offset_at_or_after(ranges, timestamp):
    """The first offset whose record has a timestamp >= ``timestamp`` (ms, >= 0) in the
    replicas' ``ranges``, or None: every record before it is earlier (Kafka's ListOffsets by
    timestamp, from the time index)."""
    return _offset_for_timestamp(ranges, timestamp, lambda: ABOVE_ANY_OFFSET)


def _coalesce(tasks):
    """Merge the tasks of one segment whose byte ranges overlap or touch (offset runs of an IN
    filter that share batches), so every batch is read by one task; split lists are made again
    from the segment's index."""
    if len(tasks) < 2:
        return tasks
    out: list[dict[str, Any]] = []
    for t in tasks:
        last = out[-1] if out else None
        if last is not None and last["dir"] == t["dir"] and last["segment"] == t["segment"] \
                and t["start_pos"] <= last["end_pos"] and last["start_pos"] <= t["end_pos"]:
            start_pos = min(last["start_pos"], t["start_pos"])
            end_pos = max(last["end_pos"], t["end_pos"])
            offsets, positions = _index_entries(t["_segment"])
            inside = (positions > start_pos) & (positions < end_pos)
            out[-1] = dict(last, start_pos=start_pos, end_pos=end_pos,
                           start_offset=min(last["start_offset"], t["start_offset"]),
                           end_offset=max(last["end_offset"], t["end_offset"]),
                           split_positions=positions[inside],
                           split_offsets=offsets[inside])
        else:
            out.append(t)
    return out
