"""Discovery on the driver: the partition directories under the paths given
(``log_dirs.partition_listing``, the one listing of them every tool uses, made once) and, when several
paths hold one topic-partition, its replicas and which offsets each serves.

Replicas: when several paths hold the same topic-partition (copies from several brokers), the
replica whose newest segment starts at the highest offset (then: the most bytes, then the first
path given) is read for every offset it holds; offsets below its log start are read from the
next replica that holds them, and so on down. Each offset is read once.

Kafka 0.7 partition directories (``.kafka`` files, named ``<topic>-<partition>`` or
``<topic>_<partition>``) are found too and read through ``Log07``: their offsets are byte offsets.

Kafka's internal topics (``files.INTERNAL_TOPICS``, and KRaft's ``__cluster_metadata``) found
below a path are left out unless asked for (``without_internal``), as Spark's Kafka source never
shows them; a path above the log dirs says at INFO which log dirs it read.

Tiered storage: a prefix of objects written by Aiven's RemoteStorageManager (see
``kafkalog.tiered``) is discovered as partition directories like a log dir; given with a
broker's log dir, it is one more replica of each partition.
"""
from __future__ import annotations

import collections
import concurrent.futures
import contextvars
import logging
import os
import threading

from kafkalog import storage
from kafkalog.config import LogConfig
from kafkalog.errors import PartitionNotFoundError
from kafkalog.files import (
    CLUSTER_METADATA_TOPIC, INDEX_SUFFIX, INTERNAL_TOPICS, LOG_SUFFIX, SNAPSHOT_SUFFIX,
    file_path, log07_topic_partition,
    looks_like_log_file, parse_file_name, topic_partition_or_none,
)
from kafkalog.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Log
from kafkalog.log07 import Log07
from kafkalog.checkpoint import LogDirCheckpoints
from kafkalog.log_dirs import is_log07_dir, partition_listing
from kafkalog.loader import rebuild_producer_state
from kafkalog.local_log import LocalLog
from kafkalog.log_segments import LogSegments
from kafkalog.producer_state import last_stable_offset
from kafkalog.segment import LogSegment

log = logging.getLogger(__name__)

ABOVE_ANY_OFFSET = 2 ** 63 - 1   # a high watermark the engine clamps to the log end
#: the time indexes of one listed partition a timestamp bound fetches at once
_TIME_INDEXES_AT_ONCE = 8


def listed_segments(entries):
    """((base offset, size), ...) of the segments of a partition directory as its listing
    ``entries`` show them, in offset order, and the offsets of its producer snapshots, in
    order; None when the listing alone cannot tell them (no segment, a segment without its
    offset index, or files a loader must resolve: ``.swap``/``.cleaned``/``.deleted``, an
    unparsable name). Plain tuples of ints: the cyclic GC stops tracking them, a plan of
    100,000 partitions holds one each."""
    segments, indexed, snapshots = [], set(), []
    for e in entries:
        parsed = parse_file_name(e.name)
        if parsed is None:
            if looks_like_log_file(e.name):
                return None
            continue
        if parsed[2]:
            return None
        if parsed[1] == LOG_SUFFIX:
            if not e.is_file:
                return None
            segments.append((parsed[0], e.size))
        elif parsed[1] == INDEX_SUFFIX:
            indexed.add(parsed[0])
        elif parsed[1] == SNAPSHOT_SUFFIX:
            snapshots.append(parsed[0])
    if not segments or any(base not in indexed for base, _ in segments):
        return None
    return tuple(sorted(segments)), tuple(sorted(snapshots))


class Replica:
    """One copy of a topic-partition, as listed: its directory ``path`` and
    ``listed_segments`` and ``listed_snapshots`` (from discovery's listing,
    ``listed_segments``), and the engine's
    read-only view of it (``log``: a
    ``Log07`` for a Kafka 0.7 one, whose offsets are byte offsets), opened when first asked
    for and released by ``close`` (planning holds no view of a partition it is done with).
    ``log_end_is_latest``: its high watermark is the log end (``readAboveHighWatermark``);
    ``location``: the ``storage.Location`` of the path it was found under; ``given``: the
    path given was this partition directory (not one above it); ``log_dir``: the directory
    holding it (whose checkpoints are its)."""
    # no __dict__: a plan of 100,000 partitions holds 100,000 of them
    __slots__ = ("path", "order", "listed_segments", "listed_snapshots", "log07",
                 "log_end_is_latest", "given", "_log_dirs", "_log_dir", "location", "_log")

    def __init__(self, path, log_dir, order, listed_segments, listed_snapshots, log_dirs,
                 location, log_end_is_latest=False, log07=False, given=False):
        self.path = path
        self._log_dir = log_dir
        self.order = order
        self.listed_segments, self.listed_snapshots = listed_segments, listed_snapshots
        self.log07 = log07
        self.given = given
        self.log_end_is_latest = log_end_is_latest
        self._log_dirs = log_dirs
        self.location = location
        self._log = None

    @property
    def log(self):
        if self._log is None:
            if self.log07:
                self._log = Log07.open(self.path, read_only=True)
            else:
                # clean_shutdown: no walk of every segment to warn of damage after an unclean
                # shutdown on each plan (every action and reading slot plans): the tasks walk
                # the bytes they read, CRCs checked, and report damage as data loss. The log
                # dir's checkpoints as discovery read them (once per log dir), not again per
                # partition: each a request on an object store. No storage options: the path
                # lies below its location, which recorded them in this process.
                saved = self.checkpoints(topic_partition_or_none(os.path.basename(self.path)))
                high_watermark = saved.high_watermark
                if self.log_end_is_latest or high_watermark is None:
                    high_watermark = ABOVE_ANY_OFFSET       # clamped to the log end
                self._log = Log.open(
                    self.path, read_only=True, clean_shutdown=True,
                    high_watermark=high_watermark,
                    recovery_point=_known(saved.recovery_point),
                    log_start_offset=_known(saved.log_start_offset),
                    first_dirty_offset=_known(saved.cleaner_offset))
        return self._log

    def checkpoints(self, key):
        """What its log dir's checkpoint files say of partition ``key``
        (``checkpoint.PartitionCheckpoints``; each log dir's files read once per discovery,
        only those its listing holds)."""
        return self._log_dirs.of(self._log_dir).for_partition(key)

    def listed_log(self, committed=False):
        """A ``ListedLog`` of this remote replica (its offsets from the listing and the log
        dir's checkpoints, no request made), or None where the engine must load it (a local
        path, or no ``listed_segments``). ``committed``: read_committed plans it."""
        if not storage.is_remote(self.path):
            return None
        segments = self.listed_segments
        if segments is None:
            return None
        saved = self.checkpoints(topic_partition_or_none(os.path.basename(self.path)))
        high_watermark = None if self.log_end_is_latest else saved.high_watermark
        return ListedLog(self.path, self.location, segments, saved.log_start_offset or 0,
                         high_watermark, self.listed_snapshots, committed)

    @property
    def log_start_offset(self):
        return self.log.log_start_offset

    def preference(self):
        segments = self.log.segments
        return (segments.active.base_offset, segments.size, -self.order)

    def close(self):
        if self._log is not None:
            log_, self._log = self._log, None
            log_.close()


class ListedLog:
    """The read-only view a bounded plan needs of a remote partition, made from discovery's
    listing and its log dir's checkpoints instead of loading it (``Log.open`` lists the
    directory again and reads leader epochs, producer snapshots and the active segment's
    tail): its segments (``LogSegments`` of the listed sizes; a segment's index and bytes are
    fetched only when a bound asks them), log start offset and high watermark.

    As the listing plan of a default read, a checkpointed high watermark is taken as is (above
    the log end it bounds nothing: a read stops at the bytes' end); without one, the log end
    is read when first asked for (the active segment's index and the bytes past its last
    entry). Used like a ``Replica`` (``path``, ``location``, ``log``, ``log_start_offset``,
    ``close``)."""
    __slots__ = ("path", "location", "segments", "log_start_offset", "_high_watermark",
                 "_snapshots", "_committed")

    def __init__(self, path, location, segments, log_start_offset, high_watermark=None,
                 snapshots=(), committed=False):
        self.path = path
        self.location = location
        self._snapshots = snapshots
        self._committed = committed
        config = LogConfig()
        self.segments = LogSegments(
            _ListedSegment(path, base, config, read_only=True, size=size, next_base=following)
            for (base, size), following in zip(segments, [b for b, _ in segments[1:]] + [None]))
        self.segments.active.set_active(True)       # (what a load marks: see _max_ts)
        self.log_start_offset = max(log_start_offset, segments[0][0])
        self._high_watermark = None if high_watermark is None else \
            max(high_watermark, self.log_start_offset)

    @property
    def log(self):
        return self

    @property
    def high_watermark(self):
        if self._high_watermark is None:
            self._high_watermark = max(self.segments.active.read_next_offset(),
                                       self.log_start_offset)
        return self._high_watermark

    def offset_for_timestamp(self, timestamp):
        """``Log.offset_for_timestamp`` of the segments as listed: the largest timestamp of
        each (its ``.timeindex``, whose last entry is the segment's largest timestamp) until
        one reaches ``timestamp``, then that segment's offset index and the bytes it points
        to."""
        if timestamp == EARLIEST_TIMESTAMP:
            return (self.log_start_offset, -1)
        if timestamp == LATEST_TIMESTAMP:
            return (self.segments.active.read_next_offset(), -1)
        closed = list(self.segments)[:-1]
        if len(closed) > 1:
            # the search reads every closed segment's largest timestamp first: their time
            # indexes fetched at once, not one round trip after another
            runs = [contextvars.copy_context().run for _ in closed]   # with the listing
            with concurrent.futures.ThreadPoolExecutor(min(len(closed), _TIME_INDEXES_AT_ONCE)
                                                       ) as pool:
                for _ in pool.map(lambda run, s: run(lambda: s.largest_timestamp), runs,
                                  closed):
                    pass
        return self.segments.offset_for_timestamp(timestamp, self.log_start_offset)

    @property
    def last_stable_offset(self):
        """``Log.last_stable_offset``: the producer state at the log end, rebuilt as a
        loaded log's (the newest listed snapshot at or below the log end, then the batches
        after it)."""
        log_end = self.segments.active.read_next_offset()
        snapshots = [(o, file_path(self.path, o, SNAPSHOT_SUFFIX)) for o in self._snapshots]
        state = rebuild_producer_state(self.path, self.segments, log_end, read_only=True,
                                       snapshots=snapshots)
        # as a loaded log: its high watermark at most the log end, whose completed
        # transactions below it are forgotten
        high_watermark = min(self.high_watermark, log_end)
        state.on_high_watermark_updated(high_watermark)
        return last_stable_offset(state.first_unstable_offset(), self.log_start_offset,
                                  high_watermark)

    def aborted_transactions(self, start_offset, end_offset):
        """``Log.aborted_transactions``: from the transaction indexes of the segments."""
        return LocalLog.collect_aborted_transactions(self.segments, start_offset, end_offset)

    def ends_above(self, offset):
        """Whether the latest offset a read may reach is known to lie above ``offset``
        without a read: the high watermark is the log end (no checkpoint), ``offset`` lies
        below the last segment, and the read is not read_committed (whose latest, the last
        stable offset, needs the producer state)."""
        return not self._committed and self._high_watermark is None and \
            offset < self.segments.active.base_offset

    def close(self):
        for segment in self.segments:
            segment.close()


class _ListedSegment(LogSegment):
    """A segment of a ``ListedLog``: a closed one's offsets lie below the next segment's base
    offset (``next_base``), which its time index is checked against when opened, instead of
    the offset after its last batch (a GET of its offset index and one of its tail, per
    segment a timestamp bound looks at). An upper bound (a cleaned segment's last batch may
    lie below it): the time index of an unchanged closed segment has no entry past its
    records, and the offset index and the bytes it points to are read of the one segment a
    bound is found in."""
    __slots__ = ("next_base",)

    def __init__(self, *args, next_base=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.next_base = next_base

    def read_next_offset(self):
        return super().read_next_offset() if self.next_base is None else self.next_base


def _known(offset):
    """A checkpointed offset, 0 where none is (what ``Log.open`` reads for a missing one)."""
    return 0 if offset is None else offset


class _LogDirs:
    """The checkpoints of the log dirs holding the partitions found, read once each."""

    def __init__(self):
        self._names = {}
        self._read = {}
        # partitions planned at once ask together: the first reads, the others wait
        self._lock = threading.Lock()

    def listed(self, listed, log_dirs):
        """Know the names in ``log_dirs`` (the partitions' parents) from ``listed`` (a
        listing's entries by directory): not their entries, a plan outlives the listing."""
        self._names.update((d, [e.name for e in listed[d]]) for d in log_dirs if d in listed)

    def of(self, log_dir):
        saved = self._read.get(log_dir)
        if saved is None:
            with self._lock:
                saved = self._read.get(log_dir)
                if saved is None:
                    saved = self._read[log_dir] = LogDirCheckpoints(log_dir,
                                                                    self._names.get(log_dir))
        return saved


def discover(locations, stack, log_end_is_latest=False, snapshot=True, listings=None):
    """{(topic, partition): [Replica, ...]} for every partition directory under ``locations``
    (``storage.Location`` s: ``log_dirs.partition_listing`` at any depth of local paths or
    fsspec URLs, or tiered-storage prefixes, each listed once; each replica's view, once
    opened, closed by ``stack``, a ``contextlib.ExitStack``). ``snapshot``: until ``stack``
    closes, in this context (and copies of it), what is below a remote location is what its
    listing said (``storage.listed``: no request per partition to list, look for or size a
    file): for a plan, closed where it was made; not for views kept open as the files change.
    ``listings``: a dict the caller keeps to reuse a root's listing, and its log dirs'
    checkpoints once read, in later calls (the shares of one Spark action a Python worker
    plans: one listing per worker and action).

    Raises ``LogNotFoundError`` for a path that does not exist, ``PartitionNotFoundError`` for
    a path that is a file, a directory with no partition directory below it, or a directory
    holding segments whose name is not ``<topic>-<partition>`` (the topic and partition of its
    records come from the name). Below a path, directories not named so (a broker's
    ``-delete``/``-future`` copies) are skipped."""
    found = {}
    order = 0
    replicas = []
    stack.callback(close_all, replicas)
    for location in locations:
        root = location.root
        if listings is not None and root in listings:
            listing, log_dirs = listings[root]
        else:
            # each partition directory's entries made into plain tuples as it is listed: no
            # entry object per file of 100,000 partitions lives through the walk
            listing = partition_listing(root, recursive=True, required=True, log07=True,
                                        keep=_Summary(location))
            log_dirs = _LogDirs()
            if listings is not None:
                listings[root] = listing, log_dirs
        if snapshot and location.is_remote:
            # what the plan opens or reads below it is known from the listing: no LIST, no
            # HEAD per partition (in the threads planning them too: each in a copy of this
            # context)
            stack.enter_context(storage.listed(listing.listed))
        parents = collections.Counter()
        top = storage.abspath(storage.normalize(root))
        for directory, log07, segments, snapshots in listing.partitions:
            log_dir, name = os.path.split(directory)
            parents[log_dir] += 1
            key = log07_topic_partition(name) if log07 else topic_partition_or_none(name)
            if key is None:
                if directory == top:
                    raise PartitionNotFoundError(
                        f"{directory}: holds segments but is not named <topic>-<partition> "
                        "(the topic and partition of its records come from the name): copy "
                        "or link it under such a name")
                log.debug("skipping %s: not named <topic>-<partition>", directory)
                continue
            replica = Replica(directory, log_dir, order, segments, snapshots, log_dirs,
                              location, log_end_is_latest, log07, given=directory == top)
            replicas.append(replica)
            found.setdefault(key, []).append(replica)
            order += 1
        log_dirs.listed(listing.listed, parents)
        _say_log_dirs_below(top, parents)
    return found


class _Summary:
    """What discovery keeps of a partition directory and its listed entries: (directory,
    whether it is a Kafka 0.7 one, its ``listed_segments``): tuples the GC stops tracking
    before they grow old (a nesting of few levels: each young collection untracks one)."""
    __slots__ = ("remote", "view")

    def __init__(self, location):
        self.remote = location.is_remote
        self.view = storage.is_view(location.root)

    def __call__(self, directory, entries):
        listed = None if self.view else listed_segments(entries)
        # 0.7 logs are read from local dirs only; a listed segment is a .log: not 0.7
        log07 = listed is None and not self.remote and is_log07_dir(directory, entries)
        return (directory, log07, None, None) if listed is None else \
            (directory, log07, *listed)


def _say_log_dirs_below(root, parents):
    """Log at INFO what a path above the log dirs holds (the partition directories found below
    it, by log dir: ``parents`` counts them), since all of them are read: a path one level too
    high reads every broker's and every topic's data at once. Nothing for a log dir or a
    tiered-storage prefix."""
    by_log_dir = sorted((d, n) for d, n in parents.items()
                        if d != root and d != os.path.dirname(root)
                        and not storage.groups_partitions(d))
    if not by_log_dir:
        return
    shown = ", ".join(f"{os.path.relpath(d, root)} ({n})" for d, n in by_log_dir[:10])
    more = ", ..." if len(by_log_dir) > 10 else ""
    log.info("%s is above the log dirs: reading the partition directories below it, by log "
             "dir: %s%s", storage.shown(root), shown, more)


def without_internal(found):
    """``found`` (``discover`` 's) without the partitions of Kafka's internal topics
    (``files.INTERNAL_TOPICS``) and KRaft's metadata log that no path named
    (``Replica.given``), as a consumer's pattern subscription leaves them out: logged at
    INFO, or at WARNING when nothing else is left."""
    left_out = {k for k, replicas in found.items()
                if (k[0] in INTERNAL_TOPICS or k[0] == CLUSTER_METADATA_TOPIC) and
                not any(r.given for r in replicas)}
    if not left_out:
        return found
    kept = {k: v for k, v in found.items() if k not in left_out}
    topics = collections.Counter(k[0] for k in left_out)
    log.log(logging.WARNING if not kept else logging.INFO,
            "left out the partitions of Kafka's internal topics %s, as Spark's Kafka source "
            "does: to read them, subscribe to them or set kafka.exclude.internal.topics=false "
            "(in Python exclude_internal_topics=False)",
            ", ".join(f"{t} ({n})" for t, n in sorted(topics.items())))
    return kept


def close_all(replicas):
    """Close each replica's view (a ``Replica``'s loaded log, a ``ListedLog``'s segments)."""
    for r in replicas:
        r.close()


def preferred(replicas, committed=False):
    """``replicas`` of a partition, the preferred first (see the module's docstring); a single
    remote one as its ``ListedLog`` where the listing can tell (read by a read_committed plan:
    ``committed``)."""
    if len(replicas) > 1:
        return sorted(replicas, key=lambda r: r.preference(), reverse=True)
    view = replicas[0].listed_log(committed)
    return replicas if view is None else [view]


def served_ranges(replicas):
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
