"""``Log07``: a Kafka 0.7 partition directory (``.kafka`` files), read and written as 0.7's
``kafka.log.Log`` did.

A file is named by the byte offset of its first entry; a message's offset is its entry's
byte position in the partition's stream. No index exists: a read finds the file by binary
search over the files' base offsets and starts at the byte given, which must be an entry
boundary. A writable open checks every entry of the newest file and truncates it at the first
invalid one (0.7's ``FileMessageSet.recover``: a crash can lose a tail, or leave nonsense
bytes when the inode grew before the data blocks were written).
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import numpy as np

from kafkalog import storage
from kafkalog._kernels import walk_log07
from kafkalog._layout import WALK_END, WALK_INVALID, WALK_PARTIAL
from kafkalog.config import LogConfig
from kafkalog.errors import (
    CorruptRecordError, KafkaLogError, LogClosedError, LogNotFoundError,
    NotAPartitionDirectoryError, OffsetOutOfRangeError, RecordTooLargeError, io_failure,
)
from kafkalog.files import log07_file_name, log07_files
from kafkalog.loader import RecoveryReport
from kafkalog.log_dirs import check_partition_dir
from kafkalog.log07.format import (
    Message07, codec_of, encode_message_set, messages_of, walk_all,
)
from kafkalog.log_segments import LogSegments
from kafkalog.records import open_buffer
from kafkalog.storage_local import cut_under
from kafkalog.retention import breached_policies, deletable_segments

if TYPE_CHECKING:
    from typing import Mapping

    from kafkalog._typing import StrPath

log = logging.getLogger(__name__)


class Segment07:
    """One ``.kafka`` file: ``base_offset`` (byte offset of its first entry), ``path``,
    ``size`` (bytes of it the log holds: the file's size, or up to the first invalid entry of
    a newest file opened read-only)."""

    def __init__(self, path: str, base_offset: int, size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.size = size
        self._positions: np.ndarray | None = None

    @property
    def largest_timestamp(self) -> int:
        """The file's modification time in ms (0.7 aged files by it)."""
        return int(os.stat(self.path).st_mtime * 1000)

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size

    def positions(self) -> np.ndarray:
        """The positions at which its entries start (a fetch may start at one of them, or at
        its end), walked once and kept."""
        if self._positions is None:
            buf = open_buffer(self.path)
            try:
                found = [e["position"] for e, _, _, _ in walk_all(buf, 0, self.size, False)]
            finally:
                _close(buf)
            self._positions = np.concatenate(found) if found else np.empty(0, np.int64)
        return self._positions

    def entry_start(self, offset: int) -> int:
        """The position of its first entry at or after byte offset ``offset`` (its size when
        there is none): where a read of the offsets from ``offset`` starts."""
        positions = self.positions()
        i = int(np.searchsorted(positions, offset - self.base_offset))
        return int(positions[i]) if i < len(positions) else self.size

    def appended(self, size: int) -> None:
        self.size += size
        self._positions = None

    def __repr__(self) -> str:
        return f"Segment07({self.path!r}, base_offset={self.base_offset}, size={self.size})"


def _close(buf: Any) -> None:
    if hasattr(buf, "close"):
        buf.close()


def valid_prefix(buf: Any, end: int) -> tuple[int, int, str | None]:
    """(bytes of ``buf[:end]`` up to its first invalid entry, walk status, why it stopped):
    0.7's rule, an entry is valid when its length fits and its CRC32 matches."""
    stop, status, message = 0, WALK_END, None
    for _, status, stop, message in walk_all(buf, 0, end, True):
        pass
    return stop, status, message


class Log07:
    """A Kafka 0.7 partition directory. Open with ``Log07.open(path)``; use as a context
    manager or ``close()`` it.

    ``segments``: a ``LogSegments`` of ``Segment07`` (the newest last); offsets are byte
    offsets: ``log_start_offset`` is the first file's base offset, ``log_end_offset`` the
    newest file's end. ``recovery_report``: what opening did to the newest file."""

    def __init__(self, path: str, config: LogConfig, read_only: bool,
                 segments: LogSegments, recovery_report: RecoveryReport,
                 time_fn: Callable[[], float]) -> None:
        self.path = path
        self.config = config
        self.read_only = read_only
        # a LogSegments of Segment07 (LogSegments is annotated for LogSegment)
        self.segments: Any = segments
        self.recovery_report = recovery_report
        self._time_fn = time_fn
        self._lock = threading.RLock()
        self._closed = False
        self._failed: OSError | None = None
        self._active_file: Any = None
        self._unflushed = 0
        self._last_flush_ms = self._now_ms()

    @classmethod
    def open(cls, path: StrPath, read_only: bool = False,
             config: LogConfig | Mapping[str, Any] | StrPath | None = None,
             time_fn: Callable[[], float] = time.time,
             salvage_dir: StrPath | None = None) -> Log07:
        """Open the 0.7 partition directory ``path``.

        Writable (the default): the newest file is checked entry by entry and truncated at
        the first invalid one (logged at WARNING, in ``recovery_report``); an empty directory
        gets its first file, ``00000000000000000000.kafka``. ``read_only=True``: no file is
        changed and the log ends at the newest file's first invalid entry. ``config``: the
        settings appends and retention follow (``segment.bytes``, ``flush.messages``,
        ``flush.ms``, ``retention.ms``, ``retention.bytes``, ``max.message.bytes``).
        ``salvage_dir``: bytes recovery cuts are copied there first (``<file>.from-<position>``,
        as ``Log.open`` keeps them).

        Raises ``LogNotFoundError`` when ``path`` does not exist,
        ``NotAPartitionDirectoryError`` when it is not a directory, ``PartitionNotFoundError``
        when it is a Kafka 0.8+ partition directory, a log dir or (``read_only``) holds no
        ``.kafka`` file, naming what was found there.
        """
        if storage.is_remote(storage.normalize(os.fspath(path))):
            raise KafkaLogError(f"{path}: Kafka 0.7 logs are read from local directories only")
        path = os.path.abspath(os.fspath(path))
        if not os.path.exists(path):
            raise LogNotFoundError(f"{path}: no such Kafka 0.7 partition directory")
        if not os.path.isdir(path):
            raise NotAPartitionDirectoryError(f"{path}: is a file, not a Kafka 0.7 partition "
                                              "directory")
        check_partition_dir(path, read_only=read_only, log07=True)
        config = LogConfig.of(config)
        report = RecoveryReport(path)
        try:
            files = log07_files(os.listdir(path))
            if not files and not read_only:
                name = log07_file_name(0)
                open(os.path.join(path, name), "ab").close()
                files = [(0, name)]
            segments: list[Any] = [Segment07(os.path.join(path, n), o,
                                             os.path.getsize(os.path.join(path, n)))
                                   for o, n in files]
            if segments:
                _check_newest(segments[-1], read_only, report, salvage_dir)
        except OSError as e:
            raise io_failure(f"opening {path} failed: {e}", e) from e
        return cls(path, config, read_only, LogSegments(segments), report, time_fn)

    # ------------------------------------------------------------------------------ offsets
    @property
    def log_start_offset(self) -> int:
        first = self.segments.first
        return first.base_offset if first is not None else 0

    @property
    def log_end_offset(self) -> int:
        active = self.segments.active
        return active.end_offset if active is not None else 0

    @property
    def high_watermark(self) -> int:
        """The log end offset (0.7 had no replication); the retention policies read it."""
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """The log end offset (0.7 had no transactions)."""
        return self.log_end_offset

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[Any]:
        """None: 0.7 had no transactions (the scan planner asks every log)."""
        return []

    def offset_for_timestamp(self, timestamp: int) -> None:
        """None: 0.7 messages carry no timestamp, so none matches (Spark's source then
        follows ``startingOffsetsByTimestampStrategy``)."""
        return None

    @property
    def size(self) -> int:
        """Bytes in all files."""
        return self.segments.size

    # ------------------------------------------------------------------------------ reading
    def _locate(self, offset: int) -> Segment07 | None:
        """The file a fetch at ``offset`` reads (None at the log end); raises
        OffsetOutOfRangeError outside [log start, log end] or off an entry boundary."""
        self._check_open()
        segments = self.segments
        if offset == self.log_end_offset:
            return None
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"{self.path}: offset {offset} is outside the log [{self.log_start_offset}, "
                f"{self.log_end_offset}]")
        segment, nxt = segments.floor_and_higher(offset)
        position = offset - segment.base_offset
        if position == segment.size:
            return nxt
        if position == 0:
            return segment           # a file starts with an entry: no walk to find it
        positions = segment.positions()
        i = int(np.searchsorted(positions, position))
        if i == len(positions) or positions[i] != position:
            raise OffsetOutOfRangeError(
                f"{self.path}: offset {offset} is not at a message boundary of "
                f"{os.path.basename(segment.path)}")
        return segment

    def read(self, offset: int, max_bytes: int) -> bytes:
        """The whole entries of the file holding ``offset`` that fit in ``max_bytes`` from it
        (bytes, as a 0.7 fetch returns a message set; empty at the log end or when the first
        entry is larger). CRCs are not checked here: a consumer checks them.

        Raises OffsetOutOfRangeError for an offset outside the log or not at an entry
        boundary."""
        with self._lock:
            segment = self._locate(offset)
            if segment is None or max_bytes <= 0:
                return b""
            start = max(offset, segment.base_offset) - segment.base_offset
            end = min(segment.size, start + max_bytes)
            with self._io("read"):
                buf = open_buffer(segment.path)
        try:
            stop = start
            for _, status, stop, message in walk_all(buf, start, end, False):
                pass
            if status not in (WALK_END, WALK_PARTIAL) and stop == start:
                raise cut_under(buf) or CorruptRecordError(message, start, segment.path)
            return bytes(buf[start:stop])
        finally:
            _close(buf)

    def messages(self, start_offset: int | None = None,
                 validate_crc: bool = True) -> Iterator[Message07]:
        """Yield the messages from ``start_offset`` (None: the log start) to the log end as
        ``Message07`` (offset, next_offset, payload, codec, ...); a compressed wrapper's
        inner messages each carry the wrapper's offset, and its end as next offset.

        Raises OffsetOutOfRangeError for a start outside the log or not at an entry
        boundary; CorruptRecordError at an invalid entry (a CRC32 mismatch with
        ``validate_crc``) inside the log, after the messages before it."""
        offset = self.log_start_offset if start_offset is None else start_offset
        segment = self._locate(offset)
        while segment is not None:
            self._check_open()
            start = max(offset, segment.base_offset) - segment.base_offset
            yield from self._segment_messages(segment, start, validate_crc)
            segment = self.segments.higher(segment.base_offset)

    def _segment_messages(self, segment, start, validate_crc):
        with self._io("read"):
            buf = open_buffer(segment.path)
        try:
            for entries, status, stop, message in walk_all(buf, start, segment.size,
                                                           validate_crc):
                yield from messages_of(buf, entries, segment.base_offset, validate_crc,
                                       segment.path)
                if status != WALK_END:
                    raise cut_under(buf) or CorruptRecordError(
                        message or "truncated message", stop, segment.path,
                        segment.base_offset + stop)
        finally:
            _close(buf)

    # ------------------------------------------------------------------------------ writing
    def append(self, payloads: Iterable[bytes], codec: int | str = "none") -> tuple[int, int]:
        """Append ``payloads`` as 0.7 did: magic 1 messages, or with ``codec`` (``"gzip"``,
        ``"snappy"``) one wrapper message holding them compressed. The newest file is rolled
        first when it holds more than ``segment.bytes``; the log is flushed every
        ``flush.messages`` messages or ``flush.ms`` ms. Returns (offset of the first entry
        written, log end offset after it).

        Raises RecordTooLargeError for a message above ``max.message.bytes``,
        UnsupportedCompressionError for a codec 0.7 did not know."""
        data, count = encode_message_set(payloads, codec_of(codec))
        with self._lock:
            self._check_writable()
            if not data:
                return self.log_end_offset, self.log_end_offset
            limit = self.config["max.message.bytes"]
            if count == 1 and len(data) > limit:
                raise RecordTooLargeError(f"{self.path}: message of {len(data)} bytes is above "
                                          f"max.message.bytes ({limit})")
            with self._io("append"):
                if self.segments.active.size > self.config["segment.bytes"]:
                    self._roll()
                first = self.log_end_offset
                active = self.segments.active
                if self._active_file is None:
                    self._active_file = open(active.path, "ab")
                self._active_file.write(data)
                self._active_file.flush()
                active.appended(len(data))
                self._unflushed += count
                self.maybe_flush()
            return first, self.log_end_offset

    def _roll(self) -> None:
        offset = self.log_end_offset
        path = os.path.join(self.path, log07_file_name(offset))
        if os.path.exists(path):
            # 0.7 deleted a leftover file of the new name before rolling
            log.warning("%s: deleting %s found where a new file rolls",
                        self.path, os.path.basename(path))
            os.remove(path)
        self._close_active_file()
        open(path, "ab").close()
        self.segments = self.segments.replace(add=[Segment07(path, offset, 0)])
        log.info("%s: rolled to %s", self.path, os.path.basename(path))

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """Flush when ``flush.messages`` messages are unflushed or ``flush.ms`` passed since
        the last flush (0.7's log.flush.interval and its flush scheduler); returns whether it
        did."""
        with self._lock:
            if self._unflushed == 0:
                return False
            now = self._now_ms() if now_ms is None else now_ms
            if self._unflushed >= self.config["flush.messages"] or \
                    now - self._last_flush_ms >= self.config["flush.ms"]:
                self.flush()
                return True
            return False

    def flush(self) -> None:
        """fsync the newest file."""
        with self._lock, self._io("flush"):
            if self._active_file is not None:
                os.fsync(self._active_file.fileno())
            self._unflushed = 0
            self._last_flush_ms = self._now_ms()

    def delete_old_segments(self, policies: Iterable[Any] = (),
                            now_ms: int | None = None) -> int:
        """Delete whole files by age (``retention.ms``, from the files' modification times)
        or total size (``retention.bytes``), and by ``policies`` (the ``kafkalog.retention``
        policies, as ``Log.delete_old_segments`` takes them); the newest file is rolled
        first when every file goes. Returns the number of files deleted."""
        with self._lock:
            self._check_writable()
            now = self._now_ms() if now_ms is None else now_ms
            with self._io("retention"):
                return self._delete_breached(tuple(policies), now)

    def _delete_breached(self, policies, now):
        """Delete what each breached policy releases; returns the number of files deleted."""
        deleted = 0
        for predicate, reason in breached_policies(self, policies, now):
            doomed = deletable_segments(self, predicate)
            if not doomed:
                continue
            if len(doomed) == len(self.segments):
                self._roll()
            self.segments = self.segments.replace(remove=doomed)
            for segment in doomed:
                log.warning("%s: deleting %s (%d bytes, offsets [%d, %d)): %s", self.path,
                            os.path.basename(segment.path), segment.size,
                            segment.base_offset, segment.end_offset, reason)
                os.remove(segment.path)
            deleted += len(doomed)
        return deleted

    # ------------------------------------------------------------------------------ lifecycle
    def _now_ms(self) -> int:
        return int(self._time_fn() * 1000)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.path} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise KafkaLogError(f"log {self.path} was opened read-only")
        if self._failed is not None:
            raise KafkaLogError(f"log {self.path} is offline after an I/O error "
                                f"({self._failed}); reopen it") from self._failed

    @contextlib.contextmanager
    def _io(self, what: str) -> Iterator[None]:
        """A failed file operation takes the log offline (LogDirFailureError, or
        TooManyOpenFilesError when out of descriptors), as ``Log`` does after Kafka's
        ``maybeHandleIOException``."""
        try:
            yield
        except OSError as e:
            self._failed = e
            raise io_failure(f"{what} failed for {self.path}: {e}; the log is offline until "
                             "reopened", e) from e

    def _close_active_file(self) -> None:
        if self._active_file is not None:
            try:
                if self._failed is None:         # an offline log's data is not flushed
                    self.flush()
            finally:
                self._active_file.close()
                self._active_file = None

    def close(self) -> None:
        """Flush and close; later reads and writes raise LogClosedError."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._close_active_file()

    def __enter__(self) -> Log07:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Log07({self.path!r}, log_start_offset={self.log_start_offset}, "
                f"log_end_offset={self.log_end_offset}, segments={len(self.segments)})")


def _check_newest(segment: Segment07, read_only: bool, report: RecoveryReport,
                  salvage_dir: StrPath | None) -> None:
    """0.7's recovery of the newest file: keep it up to its first invalid entry (read-only:
    only the log's view of it)."""
    if segment.size == 0:
        return
    buf = open_buffer(segment.path)
    try:
        valid, status, message = valid_prefix(buf, segment.size)
        if valid == segment.size:
            return
        if not read_only:
            _count_dropped(report, buf, segment.base_offset, valid, segment.size)
    finally:
        _close(buf)
    cut = segment.size - valid
    reason = message if status != WALK_PARTIAL else "the last message is truncated"
    if read_only:
        log.info("%s: reading up to offset %d, %d bytes before the end: %s",
                 os.path.dirname(segment.path), segment.base_offset + valid, cut, reason)
    else:
        if salvage_dir is not None:
            _keep_tail(segment.path, valid, salvage_dir, report)
        os.truncate(segment.path, valid)
        report.add("truncated", segment.path, segment.base_offset + valid, cut, reason)
    segment.size = valid


def _count_dropped(report: RecoveryReport, buf: Any, base_offset: int, start: int,
                   end: int) -> None:
    """Add ``buf[start:end]`` (the bytes recovery cuts) to ``report.dropped``: its intact
    entries (a wrapper counts once) are the runs of valid ones between CRC32 failures, up to
    the first entry whose size does not fit."""
    count, first, last, pos = 0, None, None, start
    while pos < end:
        for rows, status, stop, _ in walk_all(buf, pos, end, True):
            if len(rows):
                count += len(rows)
                if first is None:
                    first = base_offset + int(rows["position"][0])
                last = base_offset + int(rows["position"][-1])
        if status != WALK_INVALID:
            break
        pos = stop + int(walk_log07(buf, stop, end, False, 1)[0]["size"][0])
    d = report.dropped
    d["records"] += count
    d["bytes"] += end - start
    if first is not None:
        d["first_offset"] = first if d["first_offset"] is None else min(first, d["first_offset"])
        d["last_offset"] = last if d["last_offset"] is None else max(last, d["last_offset"])


def _keep_tail(path: str, valid: int, salvage_dir: StrPath, report: RecoveryReport) -> None:
    os.makedirs(salvage_dir, exist_ok=True)
    kept = os.path.join(salvage_dir, f"{os.path.basename(path)}.from-{valid}")
    with open(path, "rb") as src, open(kept, "wb") as dst:
        src.seek(valid)
        shutil.copyfileobj(src, dst)
        dst.flush()
        os.fsync(dst.fileno())
    report.add("kept_bytes", kept, None, os.path.getsize(kept),
               f"cut from {os.path.basename(path)} at position {valid}")
