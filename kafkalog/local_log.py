"""``LocalLog``: the operations on a log's segment files (Kafka's ``LocalLog``): roll, flush,
read, truncate, delete, and the one crash-safe replacement of segments.

Not thread-safe: the ``Log`` that owns it calls it under its lock. Readers need no lock: they
take the current ``LogSegments`` (immutable) and read from it.

Replacing segments (compaction, the offset-overflow split, and a load finishing either after a
crash) always goes the same way, so a crash at any point leaves the old segments or the new ones
whole (FORMAT.md "Log load"):

1. the new segments are written complete under ``<base>.log.cleaned`` (and their indexes);
   a crash here leaves ``.cleaned`` files, which a load throws away;
2. they are renamed ``.swap`` and the directory fsynced; from here a load finishes the
   replacement: it deletes the old segments the ``.swap`` segments cover and renames them;
3. the old segments are renamed ``.deleted`` (removed now, or later for a live log whose
   readers may still hold them);
4. the ``.swap`` files are renamed to their final names and the directory fsynced.
"""
import concurrent.futures
import contextlib
import logging
import os
import warnings
import weakref

from kafkalog import checkpoint, storage
from kafkalog._kernels import ActiveSegmentAppender
from kafkalog._layout import HEADER_SIZE_UP_TO_MAGIC
from kafkalog.errors import FileShrunkError, SegmentDeletedError, io_failure
from kafkalog.files import CLEANED_SUFFIX, DELETED_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, file_path
from kafkalog.log_segments import LogSegments
from kafkalog.producer_state import ProducerStateManager
from kafkalog.fetch_data_info import (
    FetchDataInfo, LogAppendInfo, LogOffsetMetadata, offset_metadata,
)
from kafkalog.index import TimestampOffset
from kafkalog.segment import LogSegment

log = logging.getLogger(__name__)

#: bytes of a batch up to the end of its CRC (v2; a legacy entry's CRC comes before)
_TAIL_BYTES = HEADER_SIZE_UP_TO_MAGIC + 4
_FLUSH_THREADS = 8           # fsyncs in flight at once when a flush covers many segments


def _flush_all(segments):
    for segment in segments:
        segment.flush()


def create_cleaned_segment(directory, base_offset, data, config, time_fn, leader_epochs=None):
    """Step 1 of a replacement: ``data`` (whole batches) written as ``<base>.log.cleaned``,
    fsynced, with its indexes built. Returns (the closed segment, bytes its recovery cut)."""
    path = file_path(directory, base_offset, LOG_SUFFIX + CLEANED_SUFFIX)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    segment = LogSegment(directory, base_offset, config, file_suffix=CLEANED_SUFFIX,
                         time_fn=time_fn)
    truncated = segment.recover(ProducerStateManager(directory), leader_epochs)
    segment.flush()
    segment.close()
    return segment, truncated


def _rename_files(segment, old_suffix, new_suffix):
    """Rename the files of a closed segment from ``<name><old_suffix>`` to
    ``<name><new_suffix>`` (those that exist)."""
    cut = len(segment.file_suffix)
    for path in segment.files():
        stem = path[:-cut] if cut else path
        if os.path.exists(stem + old_suffix):
            os.replace(stem + old_suffix, stem + new_suffix)


def replace_segments(directory, new_segments, old_segments, delete, open_segment):
    """Steps 2-4 of the replacement: ``new_segments`` (closed, their files suffixed
    ``.cleaned`` or already ``.swap``) take the place of ``old_segments``.

    ``delete(segments)`` removes the old ones (step 3); ``open_segment(base_offset)`` opens a
    new one under its final name. Returns the new segments, opened.
    """
    # Last first: a crash part-way leaves a .cleaned file below every .swap one, and a load
    # then drops them all (a .swap at or above the lowest .cleaned is an unfinished write).
    for segment in reversed(new_segments):
        if segment.file_suffix == CLEANED_SUFFIX:
            _rename_files(segment, CLEANED_SUFFIX, SWAP_SUFFIX)
    checkpoint.fsync_dir(directory)
    delete(old_segments)
    for segment in new_segments:
        _rename_files(segment, SWAP_SUFFIX, "")
    checkpoint.fsync_dir(directory)
    return [open_segment(s.base_offset) for s in new_segments]


def delete_segments_now(segments):
    """Rename to ``.deleted``, then remove: for segments no reader holds (at load)."""
    for segment in segments:
        segment.change_file_suffixes("", DELETED_SUFFIX)
        segment.delete_files()


class LocalLog:
    """A partition directory's segments and the offsets that follow from the files alone:
    log end offset and recovery point."""

    def __init__(self, directory, config, segments, *, log_end_offset, recovery_point,
                 scheduler, time_fn, changed=True, managed=False):
        self.directory = directory
        self.managed = managed        # a LogManager writes the log dir's checkpoints
        self.config = config
        self._segments = LogSegments()
        self.segments = segments if isinstance(segments, LogSegments) else \
            LogSegments(segments)
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self._scheduler = scheduler
        self._time_fn = time_fn
        self.failed = None      # the OSError that took the log offline
        self.unflushed_messages = 0      # appended since the last flush (the log counts them)
        #: files changed other than by appends since the last flush (a cut, a roll, a
        #: deletion; at load: a repair); ``changed=False`` from a load that changed nothing
        self.changed = changed
        self.last_flush_ms = int(time_fn() * 1000)
        #: the ``ActiveSegmentAppender`` of the next appends (``arm_appender``), or None; any
        #: other file operation (``io``) drops it
        self.appender = None
        #: a local read-only view's last batch: (segment, position, its bytes up to its CRC
        #: in the buffer its load walked), or None (``check_loaded_tail``)
        self.loaded_tail = None
        active = self.segments.active
        if active is not None and active.read_only and not storage.is_remote(directory):
            last = active.last_batch()
            if last is not None:
                position = int(last["position"])
                self.loaded_tail = (active, position,
                                    bytes(active.buffer()[position:position + _TAIL_BYTES]))

    @contextlib.contextmanager
    def io(self, what):
        """Turn a failed file operation into LogDirFailureError and take the log offline (as
        Kafka's ``maybeHandleIOException``)."""
        self.appender = None
        try:
            yield
        except OSError as e:
            raise self.offline(what, e) from e

    def offline(self, what, e):
        """Take the log offline after ``e`` (an OSError); returns the LogDirFailureError (or,
        out of descriptors, TooManyOpenFilesError) to raise."""
        self.failed = e
        self.appender = None
        return io_failure(f"{what} failed for {self.directory}: {e}; the log is offline "
                          f"until reopened", e)

    @property
    def segments(self):
        """The current immutable ``LogSegments``."""
        return self._segments

    @segments.setter
    def segments(self, segments):
        # The segment appends go to owns its indexes: a read that finds them lying leaves
        # the rebuild to its roll (LogSegment._index_lies).
        old, new = self._segments.active, segments.active
        if old is not new:
            if old is not None:
                old.set_active(False)
            if new is not None:
                new.set_active(True)
        self._segments = segments
        #: ``segments.active``, kept beside them: every append reads it
        self.active_segment = new

    @property
    def log_end_offset(self):
        return self.log_end_metadata[0]

    @log_end_offset.setter
    def log_end_offset(self, offset):
        # Set once the files hold it: with it goes where it is (Kafka's nextOffsetMetadata),
        # so a read bounded by the log end needs no index lookup for its last position.
        active = self._segments.active
        #: ``LogOffsetMetadata`` of the log end offset: the active segment's base offset
        #: and size when it was set (one attribute: readers take both at once).
        self.log_end_metadata = offset_metadata(
            (offset, -1, -1) if active is None else (offset, active.base_offset, active.size))

    def new_segment(self, base_offset):
        return LogSegment(self.directory, base_offset, self.config, time_fn=self._time_fn)

    # ------------------------------------------------------------------------------ append
    def append(self, segment, last_offset, max_timestamp, offset_of_max_timestamp, data):
        segment.append(last_offset, max_timestamp, offset_of_max_timestamp, data)
        # (the log_end_offset setter's work, for the segment known to be the active one)
        self.log_end_metadata = offset_metadata((last_offset + 1, segment.base_offset,
                                                 segment.size))

    def count_unflushed(self, count, now, settings):
        """``count`` more records appended at ``now`` (ms): whether a flush is due (Kafka's
        ``flush.messages`` and ``flush.ms``)."""
        self.unflushed_messages += count
        return self.unflushed_messages >= settings.flush_messages or \
            now - self.last_flush_ms >= settings.flush_ms

    def arm_appender(self, log, settings, leader_epochs, replicated, lock):
        """After an append of the general path: the ``ActiveSegmentAppender`` of the next
        appends of a few records or a batch to the active segment (``log``'s, under
        ``settings``, with its ``LeaderEpochCache`` and ``lock``), unless the topic's settings
        (LogAppendTime, timestamp bounds, compression) or the segment (empty, no roll
        timestamp, an index full) leave it nothing to do."""
        validator = settings.validator
        segment = self.active_segment
        rolling = segment.rolling_based_timestamp
        if validator.log_append_time or validator.bounded_timestamps or \
                settings.compress is not None or segment.size == 0 or rolling is None or \
                rolling < 0 or segment.offset_index.is_full() or segment.time_index.is_full():
            return
        file, desc = segment.append_handles()
        leader_epochs.on_change = self.drop_appender     # it holds the latest epoch
        latest_epoch = leader_epochs.latest_epoch()
        self.appender = ActiveSegmentAppender(
            log.config, segment, file, desc, self.log_end_offset,
            segment.bytes_since_last_index_entry, segment.config["index.interval.bytes"],
            segment.max_timestamp_so_far, segment.offset_of_max_timestamp_so_far, rolling,
            settings.segment_ms - segment.roll_jitter_ms, settings.segment_bytes,
            validator.max_message_bytes, self.unflushed_messages, settings.flush_messages,
            self.last_flush_ms, settings.flush_ms, -1 if latest_epoch is None else latest_epoch,
            replicated, lock, self._time_fn, segment.index_entry, segment.offset_index,
            segment.time_index, LogOffsetMetadata, TimestampOffset, LogAppendInfo)

    def drop_appender(self):
        self.appender = None

    def appending(self):
        """"append" while the appender runs a call (holding the log's lock), else None."""
        appender = self.appender
        return "append" if appender is not None and appender.running else None

    def roll(self, new_offset):
        """Start a new active segment at ``new_offset``; returns it (the old one when it is
        empty and already starts there)."""
        old = self.active_segment
        if old.base_offset == new_offset and old.size == 0:
            return old                     # rolling an empty segment would only rename it
        old.on_becoming_inactive_segment()
        old.flush()
        segment = self.new_segment(new_offset)
        segment.resize_indexes(self.config.max_index_size)
        checkpoint.fsync_dir(self.directory)
        self.segments = self.segments.replace(add=[segment])
        # Everything below the new segment is flushed now (older segments at their own roll).
        self.recovery_point = max(self.recovery_point, new_offset)
        self.changed = True
        return segment

    def flush(self):
        """fsync every segment from the one holding the recovery point; the recovery point
        becomes the log end offset."""
        if not self.changed and not self.unflushed_messages and \
                self.recovery_point >= self.log_end_offset:
            # nothing written since the last flush (Kafka flushes only past the recovery
            # point): an idle partition's close costs no fsync
            self.last_flush_ms = int(self._time_fn() * 1000)
            return
        first = self.segments.floor(self.recovery_point)
        start = first.base_offset if first is not None else 0
        due = [s for s in self.segments if s.base_offset >= start]
        if len(due) > _FLUSH_THREADS:
            # Many fsyncs at once (after recovery, every recovered segment): the device
            # merges their cache flushes, where one after another each waits for its own.
            with concurrent.futures.ThreadPoolExecutor(_FLUSH_THREADS) as pool:
                for _ in pool.map(_flush_all, [due[i::_FLUSH_THREADS]
                                               for i in range(_FLUSH_THREADS)]):
                    pass
        else:
            _flush_all(due)
        if self.recovery_point == 0 and due:
            # A new log's directory entries, deferred from its creation (as Kafka flushes
            # the directory with a segment new since the recovery point): before anything
            # in it counts as flushed.
            checkpoint.fsync_dir(self.directory)
            checkpoint.fsync_dir(os.path.dirname(self.directory))
        self.recovery_point = self.log_end_offset
        self.unflushed_messages = 0
        self.changed = False
        self.last_flush_ms = int(self._time_fn() * 1000)

    # ------------------------------------------------------------------------------ read
    def read(self, start_offset, max_bytes, max_offset, min_one_message=True,
             include_aborted_txns=False, zero_copy=False):
        """Batches from the first holding ``start_offset`` up to ``max_bytes``, nothing at or
        past ``max_offset``: a FetchDataInfo, with the aborted transactions of its range when
        ``include_aborted_txns`` (read_committed); ``zero_copy`` as ``LogSegment.read``."""
        segments = self._segments
        end = self.log_end_metadata
        if start_offset < max_offset:
            segment, nxt = segments.floor_and_higher(start_offset)
            while segment is not None and segment.base_offset < max_offset:
                if nxt is not None and nxt.base_offset <= max_offset:
                    max_position = segment.size
                elif max_offset == end[0] and segment.base_offset == end[1]:
                    max_position = end[2]         # the log end's position, known
                else:
                    max_position = segment.size
                    found = segment.translate_offset(max_offset)
                    if found is not None:
                        max_position = found[0]
                info = segment.read(start_offset, max_bytes, max_position, min_one_message,
                                    zero_copy)
                if info is not None and (info.records or info.first_entry_incomplete):
                    if include_aborted_txns:
                        info.aborted_transactions = self._aborted_transactions(
                            segments, start_offset, segment, info, end[0])
                    if self.loaded_tail is not None:
                        self._check_view_read(segment, info, include_aborted_txns, zero_copy)
                    return info
                segment = nxt
                nxt = None if nxt is None else segments.higher(nxt.base_offset)
        return FetchDataInfo(LogOffsetMetadata(start_offset, -1, -1), b"",
                             aborted_transactions=[] if include_aborted_txns else None)

    def check_loaded_tail(self):
        """A read-only view's read_committed read, after its copy (a ``zero_copy`` slice is
        read after this): the view's last stable offset and aborted transactions are its
        load's, true of the batches it walked. A writer that truncated below its last batch
        since, then appended (maybe an open transaction's batches, at the same offsets), left
        other batches under them: the last batch is no longer where the load walked it
        (FileShrunkError) or its segment is gone (SegmentDeletedError). Reopen the log to read
        it as it is now."""
        segment, position, head = self.loaded_tail
        if segment.read_bytes(position, _TAIL_BYTES, now=True) != head:
            try:
                now = os.stat(segment.log_path).st_size
            except OSError:
                now = None
            raise FileShrunkError(segment.log_path, segment.size, now)

    def _check_view_read(self, segment, info, committed, zero_copy):
        """A local read-only view's read ``info`` of ``segment``, after its copy (a
        ``zero_copy`` slice is read after this): a writer's change since the view's load is
        FileShrunkError (or SegmentDeletedError), reopen: the mapped file cut below the bytes
        copied (past the cut they are zeros, not the log's: ``cut_since_mapped``), or, for a
        read_committed read, the view's last batch cut or rewritten (``check_loaded_tail``:
        its last stable offset and aborted transactions are its load's)."""
        if committed:
            self.check_loaded_tail()
        if not zero_copy:
            cut = segment.cut_since_mapped(
                info.fetch_offset_metadata.relative_position_in_segment + len(info.records))
            if cut is not None:
                raise cut

    def check_view_after_walk_error(self, segment_base_offset):
        """A local read-only view's read of segment ``segment_base_offset`` that walked badly
        (its copy checked already against a cut of the file it mapped: ``_check_view_read``):
        a writer's change since the view listed the files, not damage, raises saying reopen:
        its last batch cut or rewritten (``check_loaded_tail``), or the segment after it gone
        (a compaction merged it into this one, whose file the read found at this path)."""
        self.check_loaded_tail()
        nxt = self.segments.higher(segment_base_offset)
        if nxt is not None and not os.path.exists(nxt.log_path):
            raise SegmentDeletedError(
                f"{nxt.log_path}: deleted (a compaction or retention) after the read-only log "
                f"was opened, under a read of the segment before it: reopen the log")

    @classmethod
    def _aborted_transactions(cls, segments, start_offset, segment, info, log_end):
        """Those of a read from ``segment`` (Kafka's ``addAbortedTransactions``): up to the
        offset after its last batch."""
        meta = info.fetch_offset_metadata
        upper = segment.fetch_upper_bound_offset(meta.relative_position_in_segment,
                                                 len(info.records))
        if upper is None:
            upper = segments.next_base(segment, log_end)
        return cls.collect_aborted_transactions(segments, start_offset, upper, segment)

    def offset_for_timestamp(self, timestamp, log_start_offset):
        """(offset, timestamp) of the first record at or above ``log_start_offset`` with a
        timestamp >= ``timestamp``, or None."""
        return self.segments.offset_for_timestamp(timestamp, log_start_offset)

    @staticmethod
    def collect_aborted_transactions(segments, start_offset, upper_offset, first=None):
        """The ``AbortedTxn`` entries of the transaction indexes that overlap
        [start_offset, upper_offset), from the segment holding ``start_offset`` on."""
        found = []
        segment = first if first is not None else segments.floor(start_offset)
        while segment is not None:
            result = segment.collect_aborted_txns(start_offset, upper_offset)
            found.extend(result.aborted_transactions)
            if result.is_complete:
                break
            segment = segments.higher(segment.base_offset)
        return found

    # ------------------------------------------------------------------------------ truncate
    def truncate_to(self, offset):
        """Remove every record at or above ``offset``: later segments go, the one holding it
        is cut. The log end offset becomes ``offset`` (as Kafka's LocalLog.truncateTo does,
        even when compaction left a gap below it). Returns the deleted segments."""
        doomed = [s for s in self.segments if s.base_offset > offset]
        self.segments = self.segments.replace(remove=doomed)
        self.delete_segment_files(doomed)
        self.active_segment.truncate_to(offset)
        self.log_end_offset = offset
        self.recovery_point = min(self.recovery_point, offset)
        self.changed = True
        return doomed

    def truncate_fully_and_start_at(self, new_offset):
        """Delete every segment and start an empty one at ``new_offset``."""
        doomed = list(self.segments)
        fresh = None
        for segment in doomed:
            if segment.base_offset == new_offset:
                segment.truncate_to(new_offset)
                fresh = segment
        if fresh is None:
            fresh = self.new_segment(new_offset)
        self.segments = LogSegments([fresh])
        self.delete_segment_files([s for s in doomed if s is not fresh])
        self.log_end_offset = new_offset
        self.recovery_point = min(self.recovery_point, new_offset)
        self.changed = True
        return doomed

    # ------------------------------------------------------------------------------ delete
    def delete_segments(self, segments):
        """Take ``segments`` out of the list and delete their files (see
        ``delete_segment_files``); rolls first when that would leave no segment."""
        if len(segments) == len(self.segments):
            self.roll(self.log_end_offset)
        self.segments = self.segments.replace(remove=segments)
        self.delete_segment_files(segments)

    def delete_segment_files(self, segments):
        """Rename to ``.deleted`` now; remove after ``file.delete.delay.ms`` in the
        background. Readers holding the segments keep reading them until then."""
        segments = list(segments)
        if not segments:
            return
        self.changed = True
        for segment in segments:
            segment.mark_deleted()
            segment.change_file_suffixes("", DELETED_SUFFIX)
        delay = self.config["file.delete.delay.ms"] / 1000.0
        # (the files are .deleted already: removed now if the scheduler is shut down)
        self._scheduler.schedule_once(delay, lambda: [s.delete_files() for s in segments],
                                      now_if_stopped=True)

    def replace_segments(self, new_segments, old_segments):
        """Swap closed ``.cleaned`` segments in for ``old_segments`` (all still in the list)
        through the crash-safe protocol; returns the old segments no new one took the base
        offset of (as Kafka's: their producer snapshots go with them)."""
        opened = replace_segments(self.directory, new_segments, old_segments,
                                  self.delete_segment_files, self.new_segment)
        self.changed = True
        self.segments = self.segments.replace(remove=old_segments, add=opened)
        kept = {s.base_offset for s in opened}
        return [s for s in old_segments if s.base_offset not in kept]

    def release_when_collected(self, log, locks):
        """The finalizer (``release_unclosed``) of ``log``, which ``close()`` detaches."""
        unclosed = weakref.finalize(log, release_unclosed, self, locks, log.path)
        unclosed.atexit = False         # (at exit the process lets go of everything anyway)
        return unclosed

    def close(self, checkpoint=False):
        """Trim the indexes and close every segment; when that fails, release them all
        without writing (and raise). ``checkpoint``: then record the recovery point (a
        standalone log's clean close: the next open recovers from the active segment only,
        as a broker's after its clean shutdown, finding the files as this close left them)."""
        try:
            for segment in self.segments:
                segment.close()
        except OSError:
            self.close_handlers()
            raise
        if checkpoint:
            self.checkpoint("recovery_point", self.recovery_point)

    def checkpoint(self, field, offset):
        """Record the partition's ``field`` (a ``LogDirCheckpoints.NAMES`` key) in its log
        dir's checkpoint file: a standalone log's (a LogManager writes a managed log's)."""
        if not self.managed:
            checkpoint.write_partition_offset(self.directory, field, offset)

    def close_handlers(self):
        """Release every file without writing (a log whose dir failed)."""
        for segment in self.segments:
            segment.close_handlers()


def release_unclosed(local, locks, path):
    """A ``Log`` collected without ``close()``: its files and locks are released without
    writing, as a file object closes itself, so the process may open the partition again (its
    next load recovers the tail, as after a crash: every append was written)."""
    warnings.warn(f"unclosed Log {path}: close() it, or open it in a with block",
                  ResourceWarning)
    try:
        local.close_handlers()
    finally:
        for lock in locks:
            lock.release()
