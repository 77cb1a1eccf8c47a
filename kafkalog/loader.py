"""``LogLoader``: a partition directory loaded as Kafka's LogLoader does (FORMAT.md "Log load"):
temporary files dropped and interrupted replacements finished, segments opened, orphan and
damaged indexes dealt with, recovery from the recovery point after an unclean shutdown, the log
start offset, producer state and leader epochs. The recovery point, log start offset and
clean-shutdown state come in as arguments (the manager reads them from the log dir's checkpoint
files; ``open_partition``, ``Log.open``'s steps, does for a log opened alone, and holds the
partition's locks).
"""
import collections
import logging
import os
import shutil
import stat

import numpy as np

from kafkalog import checkpoint, progress, storage
from kafkalog._kernels import walk_batches
from kafkalog._text import counted
from kafkalog.errors import (
    CorruptIndexError, IndexOffsetOverflowError, InvalidOffsetError, KafkaLogError,
    LogNotFoundError, NotARegularFileError, SegmentDeletedError, io_failure,
)
from kafkalog.files import (
    CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIXES, LOG_SUFFIX, SNAPSHOT_SUFFIX,
    SWAP_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, file_name, file_path, looks_like_log_file,
    offsets_of, parse_file_name, topic_partition_or_none,
)
from kafkalog.leader_epoch import LeaderEpochCache
from kafkalog.local_log import create_cleaned_segment, delete_segments_now, replace_segments
from kafkalog.locks import lock_partition
from kafkalog.log_dirs import (
    check_log_dir_links, check_partition_dir, check_partition_links,
)
from kafkalog.log_segments import LogSegments
from kafkalog.producer_state import ProducerStateManager, stray_snapshot_offsets
from kafkalog.records import RecordBatch
from kafkalog.segment import LogSegment
from kafkalog.segment_walker import RECOVER, intact_extent, walk_segment
from kafkalog.storage_local import file_kind, open_regular

log = logging.getLogger(__name__)

_COPY_CHUNK = 16 * 1024 * 1024

LoadedLog = collections.namedtuple(
    "LoadedLog", "segments log_start_offset log_end_offset recovery_point producer_state "
                 "leader_epochs report")


class RecoveryReport:
    """What a load did to the files, in order: each action a dict ``{"action", "file",
    "offset", "bytes", "reason"}`` (``offset``/``bytes`` None where they do not apply).
    Actions: ``truncated`` (bytes cut from a segment at ``offset``), ``deleted_segment``,
    ``kept_segment`` / ``kept_bytes`` (moved to the salvage directory instead),
    ``rebuilt_index``, ``removed_orphan_index``, ``discarded_temp_file``, ``completed_swap``,
    ``split_segment``, ``deleted_snapshot``, ``skipped_file`` (a FIFO, socket, device or
    directory named like a segment's file: never opened). An index found lying after the
    load (by a read) is rebuilt and added here too. Each is also logged on ``kafkalog.loader`` at
    WARNING, as Kafka's LogLoader warns.

    ``dropped``: what the truncations and segment deletions (or moves) took out of the log:
    ``{"records", "first_offset", "last_offset"}`` of the intact batches among those bytes (a
    salvage read would keep them; offsets None when there were none), ``"segments"`` removed
    and ``"bytes"`` (truncated bytes and removed segments' sizes)."""

    def __init__(self, directory):
        self.directory = directory
        self.actions = []
        self.dropped = {"records": 0, "first_offset": None, "last_offset": None,
                        "segments": 0, "bytes": 0}

    def drop(self, buf, start, whole_segment):
        """Count ``buf[start:]`` (a segment's bytes about to be cut or removed) as dropped."""
        records, first, last = intact_extent(buf, start)
        d = self.dropped
        d["records"] += records
        d["segments"] += whole_segment
        d["bytes"] += len(buf) - start
        if first is not None:
            d["first_offset"] = first if d["first_offset"] is None else \
                min(first, d["first_offset"])
            d["last_offset"] = last if d["last_offset"] is None else max(last, d["last_offset"])

    def add(self, action, file, offset=None, size=None, reason=None):
        self.actions.append({"action": action, "file": os.path.basename(file),
                             "offset": offset, "bytes": size, "reason": reason})
        log.warning("%s: %s %s%s%s%s", self.directory, action.replace("_", " "),
                    os.path.basename(file), "" if offset is None else f" at offset {offset}",
                    "" if size is None else f" ({size} bytes)",
                    "" if reason is None else f": {reason}")

    def __bool__(self):
        return bool(self.actions)

    def __iter__(self):
        return iter(self.actions)

    def to_dict(self):
        return {"dir": self.directory, "actions": list(self.actions)}

    def __repr__(self):
        return f"RecoveryReport({self.directory!r}, {len(self.actions)} actions)"


def rebuild_producer_state(directory, segments, log_end_offset, read_only=False,
                           snapshots=None):
    """Producer state at ``log_end_offset``: the newest snapshot at or below it, then every
    batch after the snapshot (Kafka's ``rebuildProducerState``). ``read_only``: a corrupt
    snapshot is skipped, not deleted. ``snapshots``: the directory's ``list_snapshots``,
    when the caller has it."""
    state = ProducerStateManager(directory)
    loaded = state.load_latest_snapshot(log_end_offset, snapshots, delete_corrupt=not read_only)
    start = loaded if loaded is not None else (segments[0].base_offset if len(segments) else 0)
    for segment in segments.range(start):
        if segment.size == 0 or start >= log_end_offset:
            continue        # nothing to apply (a snapshot at the log end): no read at all
        buf = segment.buffer()
        batches = walk_batches(buf, 0, validate_crc=False)[0]
        batches = batches[(batches["last_offset"] >= start)
                          & (batches["last_offset"] < log_end_offset)]
        # (a read-only index learns the aborts replayed: the writer adds them after the marker)
        state.apply_batches(buf, batches, segment.log_path,
                            segment.txn_index if read_only else None)
    return state


def _entry_size(entry):
    """Bytes of a directory entry: an ``os.DirEntry`` or a ``storage.Entry``."""
    return entry.size if isinstance(entry, storage.Entry) else entry.stat().st_size


def _remove_quietly(path):
    """Remove a file that a concurrent deletion (a ``.deleted`` segment's timer) may have
    removed first."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


class LogLoader:
    """Loads one partition directory; ``load()`` returns a ``LoadedLog``.

    ``read_only`` loads without changing anything (no recovery, no file removed or created);
    ``clean_shutdown`` trusts the files (no recovery). ``salvage_dir``: what recovery would
    delete (bytes cut from a segment, segments after a truncated one) is moved there instead.
    """

    def __init__(self, directory, config, *, recovery_point, log_start_offset, clean_shutdown,
                 read_only, time_fn, salvage_dir=None):
        self.directory = directory
        self.config = config
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset
        self.clean_shutdown = clean_shutdown or read_only
        # read-only after an unclean shutdown: nothing is recovered, damage is only told
        self.check_unrecovered = read_only and clean_shutdown is False
        self.read_only = read_only
        self.time_fn = time_fn
        self.salvage_dir = salvage_dir
        self.report = RecoveryReport(directory)
        self._snapshots = None
        self._skipped = set()
        # The directory's entries by name, listed once per load (again only after the load
        # renamed or removed files): each step used to list 10,000s of names anew.
        self._entries = None
        #: base offsets of the segments recovered in this load: their transaction index may
        #: exist although the listing predates it
        self._recovered = set()

    def load(self):
        self._screen_files()
        if not self.read_only:
            self._remove_temp_files_and_complete_swaps()
        # The epoch cache is kept for logs of record batch v2 (Kafka deletes it for older
        # message formats); recovery below teaches it the epochs of the batches it keeps.
        self.leader_epochs = LeaderEpochCache.load(
            self.directory, create=not self.read_only and not self._legacy_format(),
            read_only=self.read_only)
        segments = self._load_segments()
        state = None
        if not self.clean_shutdown:
            segments, state = self._recover(segments)
        elif self.check_unrecovered:
            self._warn_if_damaged(segments)
        if segments:
            log_end = segments[-1].read_next_offset()
            if log_end < self.log_start_offset and not self.read_only:
                reason = (f"the log end offset {log_end} is below the log start offset "
                          f"{self.log_start_offset}")
                for s in segments:
                    self._drop(s, reason)
                segments = []
                # As Kafka's truncateFullyAndStartAt: no producer or epoch state of the
                # dropped data survives (a snapshot would describe records recovery cut).
                self._delete_snapshots_above(-1, reason)
                self.leader_epochs.clear()
        if not segments:
            state = None
            if self.read_only:
                raise LogNotFoundError(f"{self.directory} holds no segment")
            name = file_name(self.log_start_offset, LOG_SUFFIX)
            if name in self._skipped:
                raise NotARegularFileError(
                    f"{os.path.join(self.directory, name)} is not a regular file and the log "
                    f"has no other segment to start from")
            segments = [self._open_segment(self.log_start_offset)]
        segments = LogSegments(segments)
        log_end = segments.active.read_next_offset()
        if not self.read_only:
            segments.active.resize_indexes(self.config.max_index_size)
        recovery_point = log_end if self.clean_shutdown else min(self.recovery_point, log_end)
        log_start = max(self.log_start_offset, segments.first.base_offset)
        if not self.read_only:
            self._delete_snapshots_above(log_end)
            # (as Kafka's load: one left by an interrupted deletion would be loaded later)
            self._delete_snapshots(
                set(stray_snapshot_offsets([o for o, _ in self._snapshot_list()],
                                           [s.base_offset for s in segments])),
                "a stray: at no segment's base offset")
        if state is None:
            state = rebuild_producer_state(self.directory, segments, log_end, self.read_only,
                                           self._snapshot_list())
        for segment in segments:
            if segment is not segments.active:
                segment.release_handles()    # reopened when read
        self.leader_epochs.truncate_from_end(log_end)
        self.leader_epochs.truncate_from_start(log_start)
        return LoadedLog(segments, log_start, log_end, recovery_point, state, self.leader_epochs,
                         self.report)

    def _listing(self):
        """The directory's entries by name (``os.DirEntry``, remotely ``storage.Entry``),
        skipped files included."""
        if self._entries is None:
            if storage.is_remote(self.directory):
                found = storage.list_dir(self.directory)
            else:
                with os.scandir(self.directory) as scan:
                    found = list(scan)
            self._entries = {e.name: e for e in found}
        return self._entries

    def _snapshot_list(self):
        """``list_snapshots`` of the directory, from the load's listing."""
        if self._snapshots is None:
            self._snapshots = [(o, file_path(self.directory, o, SNAPSHOT_SUFFIX))
                               for o in offsets_of(self._listing(), SNAPSHOT_SUFFIX)]
        return self._snapshots

    def _delete_snapshots_above(self, log_end, reason=None):
        """Producer snapshots above the log end describe data that is gone (Kafka's
        ``truncateAndReload`` deletes them)."""
        self._delete_snapshots({o for o, _ in self._snapshot_list() if o > log_end},
                               reason or f"above the log end offset {log_end}")

    def _delete_snapshots(self, offsets, reason):
        """Delete (and report) the producer snapshots at ``offsets``."""
        kept = []
        for offset, path in self._snapshot_list():
            if offset in offsets:
                self.report.add("deleted_snapshot", path, offset, reason=reason)
                _remove_quietly(path)
            else:
                kept.append((offset, path))
        self._snapshots = kept

    def _drop(self, segment, reason):
        """Delete a segment recovery gave up, or move it to the salvage directory."""
        self.report.drop(segment.buffer(), 0, True)
        if self.salvage_dir is None:
            self.report.add("deleted_segment", segment.log_path, segment.base_offset,
                            segment.size, reason)
            delete_segments_now([segment])
            return
        os.makedirs(self.salvage_dir, exist_ok=True)
        segment.close_handlers()
        for path in segment.files():
            if os.path.exists(path):
                shutil.move(path, os.path.join(self.salvage_dir, os.path.basename(path)))
        self.report.add("kept_segment", segment.log_path, segment.base_offset, segment.size,
                        f"{reason}; moved to {self.salvage_dir}")

    def _before_truncate(self, segment, valid_bytes, reason):
        cut = segment.size - valid_bytes
        self.report.drop(segment.buffer(), valid_bytes, False)
        if self.salvage_dir is not None:
            os.makedirs(self.salvage_dir, exist_ok=True)
            kept = os.path.join(self.salvage_dir, f"{os.path.basename(segment.log_path)}"
                                                  f".from-{valid_bytes}")
            with open(kept, "wb") as f:
                for at in range(valid_bytes, segment.size, _COPY_CHUNK):
                    f.write(segment.read_bytes(at, min(_COPY_CHUNK, segment.size - at)))
                f.flush()
                os.fsync(f.fileno())
            self.report.add("kept_bytes", kept, None, cut,
                            f"cut from {os.path.basename(segment.log_path)} at position "
                            f"{valid_bytes}")
        self.report.add("truncated", segment.log_path, None, cut,
                        f"at position {valid_bytes}: {reason}")

    def _open_segment(self, base_offset, **kwargs):
        segment = LogSegment(self.directory, base_offset, self.config, time_fn=self.time_fn,
                             **kwargs)
        segment.report = self.report.add
        return segment

    def _legacy_format(self):
        logs = [o for o in offsets_of(self._listing(), LOG_SUFFIX)
                if file_name(o, LOG_SUFFIX) not in self._skipped]
        if not logs:
            return False
        fd = open_regular(file_path(self.directory, logs[-1], LOG_SUFFIX), os.O_RDONLY)
        try:
            head = os.pread(fd, 17, 0)
        finally:
            os.close(fd)
        return len(head) == 17 and head[16] < 2

    def _screen_files(self):
        """Look at every file the load may open before opening any: only regular files are
        opened (opening a FIFO blocks; a directory or device is no segment). A ``.log`` (or a
        file with a state suffix) that is not one is skipped with its segment, and reported;
        one where an index of a segment that is loaded must be is an error
        (NotARegularFileError), since the log could not be read correctly without it.
        (Snapshots and checkpoints are read through ``storage.read_regular_file``.) A file the
        log writes that is a symbolic link leading outside the directory fails a writable
        load (SymlinkOutsideError, ``log_dirs.check_partition_links``). In remote storage
        every object is a regular file; a prefix named like one is skipped."""
        if storage.is_remote(self.directory):
            self._screen_remote()
            return
        entries = list(self._listing().values())
        odd = {}
        links = []
        for entry in entries:
            name = entry.name
            parsed = parse_file_name(name)
            if parsed is None and looks_like_log_file(name):
                # e.g. 99999999999999999999.log (beyond the largest offset) or abc.log.swap:
                # no Kafka file, so never loaded, renamed or deleted; said once per load
                self.report.add("ignored_file", name,
                                reason="named like a log file but not <20-digit offset "
                                       "up to 2**63-1><suffix>: left alone")
                continue
            if entry.is_file(follow_symlinks=False):
                continue                          # a regular file (from readdir, no stat)
            if entry.is_symlink():
                links.append(name)
            if parsed is None or parsed[1] not in (LOG_SUFFIX,) + INDEX_SUFFIXES:
                continue
            try:
                mode = entry.stat().st_mode       # what a symbolic link points at
            except FileNotFoundError:
                if not entry.is_symlink():
                    continue                      # removed meanwhile
                mode = None
            if mode is None or not stat.S_ISREG(mode):
                odd[name] = (parsed, "a dangling symbolic link" if mode is None
                             else file_kind(mode))
        check_partition_links(self.directory, links, read_only=self.read_only)
        if not odd:
            return
        skipped_logs = {p[0] for p, _ in odd.values()
                        if p is not None and p[1:] == (LOG_SUFFIX, "")}
        names = {e.name for e in entries}
        for name, (parsed, kind) in sorted(odd.items()):
            path = os.path.join(self.directory, name)
            part_of_loaded_segment = (
                parsed is not None and not parsed[2] and parsed[1] in INDEX_SUFFIXES
                and parsed[0] not in skipped_logs
                and file_name(parsed[0], LOG_SUFFIX) in names)
            if part_of_loaded_segment:
                raise NotARegularFileError(f"{path} is {kind}, not a regular file; move it "
                                           f"away to load {self.directory}")
            self._skipped.add(name)
            self.report.add("skipped_file", name, parsed[0],
                            reason=f"{kind}, not a regular file: never opened")

    def _screen_remote(self):
        for entry in self._listing().values():
            parsed = parse_file_name(entry.name)
            if parsed is None and looks_like_log_file(entry.name):
                self.report.add("ignored_file", entry.name,
                                reason="named like a log file but not <20-digit offset "
                                       "up to 2**63-1><suffix>: left alone")
            elif parsed is not None and entry.is_dir:
                self._skipped.add(entry.name)
                self.report.add("skipped_file", entry.name, parsed[0],
                                reason="a directory (prefix), not an object: never opened")

    def _remove_temp_files_and_complete_swaps(self):
        """Drop ``.deleted`` and ``.cleaned`` files (and ``.swap`` files of a cleaning that
        had not finished writing), then finish every replacement whose ``.swap`` files are
        complete (``local_log.replace_segments``)."""
        names = [n for n in self._listing() if n not in self._skipped]
        parsed = {n: parse_file_name(n) for n in names}
        if not any(p is not None and p[2] in (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)
                   for p in parsed.values()):
            return
        self._entries = None       # files are removed and renamed below: list again after
        cleaned = [p[0] for p in parsed.values() if p is not None and p[2] == CLEANED_SUFFIX]
        min_cleaned = min(cleaned, default=None)
        swaps = []
        for name, p in parsed.items():
            if p is None or p[2] not in (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX):
                continue
            if p[2] == SWAP_SUFFIX and (min_cleaned is None or p[0] < min_cleaned):
                swaps.append((name, p))
                continue
            # .deleted, .cleaned, and .swap files of an unfinished cleaning
            self.report.add("discarded_temp_file", name, p[0],
                            reason="left by an interrupted operation")
            _remove_quietly(os.path.join(self.directory, name))
        log_swaps = sorted(p[0] for _, p in swaps if p[1] == LOG_SUFFIX)
        if not log_swaps:
            for name, _ in swaps:       # index swaps without their log: the log was renamed
                os.replace(os.path.join(self.directory, name),
                           os.path.join(self.directory, name[:-len(SWAP_SUFFIX)]))
            return
        new = [self._open_segment(base, file_suffix=SWAP_SUFFIX) for base in log_swaps]
        low = new[0].base_offset
        high = max(s.read_next_offset() for s in new)
        for s in new:
            s.close_handlers()
        old = [self._open_segment(p[0]) for p in parsed.values()
               if p is not None and p[1:] == (LOG_SUFFIX, "") and low <= p[0] < high]
        self.report.add("completed_swap", file_name(low, LOG_SUFFIX + SWAP_SUFFIX), low,
                        reason=f"an interrupted replacement of "
                               f"{[file_name(s.base_offset, LOG_SUFFIX) for s in old]}")
        for s in replace_segments(self.directory, new, old, delete_segments_now,
                                  self._open_segment):
            s.close_handlers()

    def _load_segments(self):
        listing = self._listing()
        entries = {n: e for n, e in listing.items() if n not in self._skipped}
        names = set(entries)
        parsed = {n: parse_file_name(n) for n in names}
        logs = {p[0] for p in parsed.values() if p is not None and p[1:] == (LOG_SUFFIX, "")}
        skipped_logs = {parse_file_name(n)[0] for n in self._skipped
                        if n.endswith(LOG_SUFFIX)}
        segments = []
        for name in sorted(names):
            p = parsed[name]
            if p is None or p[2]:
                continue
            if p[1] in INDEX_SUFFIXES:
                if p[0] not in logs and p[0] not in skipped_logs and not self.read_only:
                    self.report.add("removed_orphan_index", name, p[0],
                                    reason="its .log is missing")
                    _remove_quietly(os.path.join(self.directory, name))
                    del listing[name]
                continue
            if p[1] != LOG_SUFFIX:
                continue
            segment = LogSegment(self.directory, p[0], self.config, read_only=self.read_only,
                                 time_fn=self.time_fn, size=_entry_size(entries[name]))
            segment.report = self.report.add
            if not self.read_only:
                try:
                    segment.sanity_check(file_name(p[0], TIME_INDEX_SUFFIX) not in names, names)
                except (FileNotFoundError, CorruptIndexError) as e:
                    # a damaged transaction index; the offset and time indexes are
                    # reported by _recover_segment, which compares them with the rebuilt ones
                    if isinstance(e, CorruptIndexError):
                        self.report.add("rebuilt_index", segment.txn_index.path, p[0],
                                        reason=str(e))
                    pieces, _, _ = self._recover_or_split(segment, last_segment=p[0] == max(logs))
                    segments.extend(pieces)
                    continue
            segments.append(segment)
        return segments

    def _recover_segment(self, segment, state=None, report_indexes=True, last_segment=True):
        """Recover one segment. ``state``: the producer state at its base offset, when the
        caller has it (the state after the previous segment); else it is loaded from the
        snapshots. The segment's descriptors and mappings are released after."""
        if state is None:
            state = ProducerStateManager(self.directory)
            state.load_latest_snapshot(segment.base_offset, self._snapshot_list())
        # A segment recovered twice (its index was missing, then the recovery from the
        # recovery point came to it) must find the transaction index the first pass wrote,
        # or its aborted transactions are appended again and the segment is cut.
        txn_index_exists = None if segment.file_suffix or \
            segment.base_offset in self._recovered else \
            file_name(segment.base_offset, TXN_INDEX_SUFFIX) in self._listing()
        truncated = segment.recover(state, self.leader_epochs, self._before_truncate,
                                    txn_index_exists, last_segment)
        self._recovered.add(segment.base_offset)
        if report_indexes:
            # After a clean close (which recorded its recovery point, the log end) the active
            # segment is recovered as Kafka's loader recovers it without the clean-shutdown
            # marker; the final time index entries of its earlier closes, which recovery does
            # not write, are no damage to report.
            for path, was, now, closes_between in segment.rebuilt_indexes:
                if closes_between and segment.read_next_offset() <= self.recovery_point:
                    continue
                self.report.add("rebuilt_index", path, segment.base_offset, reason=(
                    "it was missing" if was is None else
                    f"its {counted(was, 'entry')} did not match the log; rebuilt with {now}"))
        segment.release_handles()
        return truncated

    def _recover(self, segments):
        """Recover every segment from the one holding the recovery point, in one pass: the
        producer state is loaded once and carried from segment to segment. The first that
        truncates makes every later segment go. Returns (the segments kept, the producer
        state at the log end, or None when a split segment left it unknown): as Kafka's
        recovery leaves the state of its last recovered segment (it snapshots each one), so
        the load does not read the log a second time to rebuild it."""
        start = self._recovery_start(segments)
        kept = list(segments[:start])
        truncated = False
        state = None
        exact = True
        for segment in segments[start:]:
            progress.advance(segment.size)
            if truncated:
                self._drop(segment, "after a truncated segment")
                continue
            if state is None:
                state = ProducerStateManager(self.directory)
                state.load_latest_snapshot(segment.base_offset, self._snapshot_list())
            pieces, truncated_bytes, applied = self._recover_or_split(
                segment, state, last_segment=segment is segments[-1])
            if not applied:
                state = None           # split or emptied: reload at the next segment
                exact = False
            kept.extend(pieces)
            if truncated_bytes > 0:
                truncated = True
        return kept, (state if exact else None)

    def _recovery_start(self, segments):
        """Index of the segment holding the recovery point: recovery starts there."""
        return max((i for i, s in enumerate(segments) if s.base_offset <= self.recovery_point),
                   default=0)

    def _warn_if_damaged(self, segments):
        """Say where recovery would cut the log (the first damage its walk meets from the
        recovery point), which a read-only load leaves in place."""
        for segment in segments[self._recovery_start(segments):]:
            walk = walk_segment(segment.buffer(), policy=RECOVER,
                                last_segment=segment is segments[-1])
            if walk.ended_early:
                event = walk.events[0]
                log.warning("%s: not recovered (read-only after an unclean shutdown) and "
                            "damaged: %s at position %d: %s; recovery would cut the log there "
                            "(`kafkalog recover --dry-run` says what it would drop)",
                            self.directory, os.path.basename(segment.log_path), event.start,
                            event.message)
                return

    def _recover_or_split(self, segment, state=None, report_indexes=True, last_segment=True):
        """Recover a segment; returns (the segments it became, bytes truncated, whether
        ``state`` now is the producer state at their end)."""
        try:
            return [segment], self._recover_segment(segment, state, report_indexes,
                                                    last_segment), True
        except IndexOffsetOverflowError:
            # A legacy segment whose offsets do not fit its base: split, as Kafka does.
            return (*self._split_overflowed(segment), False)
        except InvalidOffsetError as e:
            self._before_truncate(segment, 0, str(e))
            segment.truncate_to(segment.base_offset)
            return [segment], 1, False

    def _split_overflowed(self, segment):
        """Split a segment into segments whose offsets fit (Kafka's splitOverflowedSegment),
        through the crash-safe replacement. Returns (new segments, bytes their recovery
        truncated)."""
        buf = segment.buffer()
        batches = walk_batches(buf, validate_crc=False)[0]
        groups = []
        i = 0
        while i < len(batches):
            base = RecordBatch(buf, batches[i], segment.log_path).base_offset
            last = batches["last_offset"][i:]
            fits = (last >= base) & (last - base <= 2**31 - 1)
            j = i + (int(np.argmin(fits)) if not fits.all() else len(fits))
            if j == i:
                raise KafkaLogError(f"{segment.log_path}: offsets at position "
                                    f"{int(batches['position'][i])} cannot be split to fit")
            end = int(batches["position"][j - 1] + batches["size"][j - 1])
            groups.append((base, int(batches["position"][i]), end))
            i = j
        self.report.add("split_segment", segment.log_path, segment.base_offset, segment.size,
                        f"its offsets overflow its base offset: {len(groups)} segments")
        pieces, truncated = [], 0
        for base, start, end in groups:
            piece, cut = create_cleaned_segment(self.directory, base, buf[start:end],
                                                self.config, self.time_fn, self.leader_epochs)
            pieces.append(piece)
            truncated += cut
        return replace_segments(self.directory, pieces, [segment], delete_segments_now,
                                self._open_segment), truncated


# ------------------------------------------------------------------ opening a partition
#: Loads of a read-only view a writer's deletions or renames disturb before it gives up
READ_ONLY_LOAD_ATTEMPTS = 10


def open_partition(path, config, build, *, recovery_point, log_start_offset, clean_shutdown,
                   high_watermark, replicated, read_only, time_fn, topic_id,
                   first_dirty_offset, managed, salvage_dir):
    """Lock, load and hand a partition directory to ``build`` (``Log.open``'s steps).

    ``build(path, loaded, *, high_watermark, first_dirty_offset, read_only, managed, locks,
    topic_id)`` makes the log of a ``LoadedLog``; the partition's locks are released when it
    fails. Offsets not given are read from the log dir's checkpoint files. A remote ``path``
    opens read-only and unlocked; a local load that fails on I/O raises LogDirFailureError.
    A ``path`` that is a file, a log dir or (``read_only``, always for a remote one) missing or
    holding no segment raises a ``LogNotFoundError`` naming what is there
    (``log_dirs.check_partition_dir``).
    """
    def load(read_only, topic_id, managed, salvage_dir, locks):
        known = _from_checkpoints(path, replicated, recovery_point=recovery_point,
                                  log_start_offset=log_start_offset,
                                  clean_shutdown=clean_shutdown,
                                  first_dirty_offset=first_dirty_offset,
                                  high_watermark=high_watermark)
        # A read-only load recovers nothing; told clean_shutdown=False (a read-only
        # LogManager's, from its log dir), it checks what recovery would cut: not otherwise
        # (a reader's open of a directory without the marker must not read every segment).
        loaded = LogLoader(path, config, recovery_point=known["recovery_point"],
                           log_start_offset=known["log_start_offset"],
                           clean_shutdown=clean_shutdown if read_only else
                           known["clean_shutdown"], read_only=read_only,
                           time_fn=time_fn, salvage_dir=salvage_dir).load()
        return build(path, loaded, high_watermark=known["high_watermark"],
                     first_dirty_offset=known["first_dirty_offset"], read_only=read_only,
                     managed=managed, locks=locks, topic_id=topic_id)

    if storage.is_remote(path):
        if not read_only or topic_id is not None:
            storage.check_writable(path)
        storage.refresh(path)
        # as a local path: a log dir (a tiered topic prefix) or a file is named as such
        check_partition_dir(path, read_only=True)
        return load(True, None, False, None, [])
    path = os.path.abspath(path)
    if read_only or os.path.lexists(path):
        check_partition_dir(path, read_only=read_only)
    try:
        if not managed:                 # a LogManager checks its log dirs once
            check_log_dir_links(os.path.dirname(path), read_only=read_only)
        if not os.path.isdir(path):
            # (made durable by the log's first flush: LocalLog.flush)
            os.makedirs(path, exist_ok=True)       # a racing writer may make it first
        locks = [] if read_only else lock_partition(path, managed)
        try:
            for attempt in range(1, READ_ONLY_LOAD_ATTEMPTS + 1):
                try:
                    return load(read_only, topic_id, managed, salvage_dir, locks)
                except (FileNotFoundError, SegmentDeletedError) as e:
                    # a writer beside deleted or renamed a file the load listed: list again
                    if not read_only or attempt == READ_ONLY_LOAD_ATTEMPTS:
                        raise
                    log.info("%s changed while it was loaded (%s): loading it again", path, e)
        except BaseException:
            for lock in locks:
                lock.release()
            raise
    except OSError as e:
        if isinstance(e, KafkaLogError):        # e.g. LogNotFoundError: not an I/O failure
            raise
        raise io_failure(f"loading {path} failed: {e}", e) from e


def _from_checkpoints(path, replicated, **known):
    """``known`` with each None filled from the log dir's checkpoint files (a broker's view:
    no entry means recover everything from 0; a replicated log's missing high watermark is
    0)."""
    if all(v is not None for v in known.values()):
        return known
    saved = checkpoint.LogDirCheckpoints(os.path.dirname(path)).for_partition(
        topic_partition_or_none(os.path.basename(path)))
    if known["clean_shutdown"] is None:
        known["clean_shutdown"] = saved.clean_shutdown
    for name, value in (("recovery_point", saved.recovery_point),
                        ("log_start_offset", saved.log_start_offset),
                        ("first_dirty_offset", saved.cleaner_offset)):
        known[name] = _first_known(known[name], value, 0)
    if known["high_watermark"] is None:
        known["high_watermark"] = _first_known(saved.high_watermark, 0) if replicated else \
            saved.high_watermark
    return known


def _first_known(*values):
    return next(v for v in values if v is not None)
