"""Typed errors raised by kafkalog.

Every failure caused by bad input (a corrupt file, an invalid argument) is one of these, so
callers can tell "the data is damaged" from "the program is wrong".
"""
from __future__ import annotations

import difflib
import errno as _errno
import os
from typing import Iterable


class KafkaLogError(Exception):
    """Base class of every kafkalog error."""


def closest_name(name: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` closest to ``name`` in spelling (case-insensitive: PySpark gives a
    data source its options lower-cased), or None when none is close: the answer to a typo in
    an option, a setting or a command-line flag."""
    by_lower = {n.lower(): n for n in names}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.75)
    return by_lower[close[0]] if close else None


def with_closest(name: str, names: Iterable[str], quote: str = "") -> str:
    """``name`` (in ``quote`` s), followed by ``(did you mean X?)`` when ``closest_name`` finds
    one: how every misspelt name is answered."""
    close = closest_name(name, names)
    return f"{quote}{name}{quote}" + (f" (did you mean {close}?)" if close else "")


class CorruptRecordError(KafkaLogError):
    """A record batch or record is malformed.

    Attributes
    ----------
    position : int or None
        Byte position (in the file, or in the buffer that was walked) of the batch or record
        at fault.
    path : str or None
        The file the bytes came from, when known.
    base_offset : int or None
        The base offset of the batch at fault, when known.
    """

    def __init__(self, message, position=None, path=None, base_offset=None):
        self.position = position
        self.path = path
        self.base_offset = base_offset
        where = []
        if path is not None:
            where.append(str(path))
        if position is not None:
            where.append(f"position {position}")
        if base_offset is not None:
            where.append(f"base offset {base_offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.reason = message


class FileShrunkError(KafkaLogError):
    """A file shrank under a reader: another process (a writer's truncation, a broker's
    recovery, ``os.truncate``) cut it while it was mapped, so bytes the read needed are gone,
    or other batches were appended where the walked ones were. The records read before are
    correct; reopen the log to read it as it is now. (Kafka's JVM turns the same fault into an
    ``InternalError``.)

    Attributes
    ----------
    path : str or None
        The file.
    mapped_size : int
        Bytes mapped when the read began.
    size_now : int or None
        The file's size when the fault was seen (None when it is gone).
    """

    def __init__(self, path, mapped_size, size_now):
        self.path = path
        self.mapped_size = mapped_size
        self.size_now = size_now
        now = "deleted" if size_now is None else f"{size_now} bytes now"
        super().__init__(f"{path}: the file was cut under the reader ({mapped_size} bytes "
                         f"mapped, {now}); reopen the log to read it as it is")


class CorruptIndexError(KafkaLogError):
    """An offset, time or transaction index fails its sanity check."""


class InvalidOffsetError(KafkaLogError):
    """An offset is out of order or does not fit the segment (Kafka's InvalidOffsetException)."""


class IndexOffsetOverflowError(InvalidOffsetError):
    """An offset that does not fit an index entry relative to the segment's base offset."""


class InvalidTimestampError(KafkaLogError):
    """A timestamp out of order in a time index, or a record timestamp outside the
    ``message.timestamp.before/after.max.ms`` bounds of an append."""


class LogDirFailureError(KafkaLogError):
    """A write, fsync, rename or truncate failed (disk full, I/O error): the log is offline
    until it is reopened, as Kafka takes a failed log dir offline.

    Attributes
    ----------
    errno : int or None
        The OS error number (``errno.ENOSPC``, ``errno.EIO``, ...).
    """

    def __init__(self, message, errno=None):
        super().__init__(message)
        self.errno = errno


class TooManyOpenFilesError(KafkaLogError):
    """The process reached its limit of open files (EMFILE; ENFILE: the system's) while
    opening one: not a disk fault. The message names the limit and the knobs: the limit
    itself (``ulimit -n``, RLIMIT_NOFILE) and how many segments keep files open
    (``KAFKALOG_MAX_OPEN_SEGMENTS``, ``set_max_open_segments``). A log it interrupted is
    offline until reopened, as after a ``LogDirFailureError`` (the operation may be half
    done).

    Attributes
    ----------
    errno : int
        ``errno.EMFILE`` or ``errno.ENFILE``.
    limit : int or None
        The process's soft limit of open files (RLIMIT_NOFILE), when known.
    """

    def __init__(self, message, errno=None, limit=None):
        super().__init__(message)
        self.errno = errno
        self.limit = limit


class TooManyMappingsError(KafkaLogError):
    """Mapping a file failed with ENOMEM: most often the process reached the kernel's limit
    of memory mappings (``vm.max_map_count``, 65,530 by default; each open segment maps its
    ``.log`` and indexes), not a disk fault. The message names the limit, the mappings the
    process holds and the knobs (``sysctl vm.max_map_count``, fewer logs open at once).

    Attributes
    ----------
    errno : int
        ``errno.ENOMEM``.
    limit : int or None
        ``vm.max_map_count``, when known.
    """

    def __init__(self, message, errno=None, limit=None):
        super().__init__(message)
        self.errno = errno
        self.limit = limit


def _read_int(path):
    try:
        with open(path, "rb") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def io_failure(message: str, e: OSError) -> KafkaLogError:
    """The typed error of a failed file operation ``e`` described by ``message``:
    ``TooManyOpenFilesError`` when the process is out of descriptors,
    ``TooManyMappingsError`` when a mapping failed for want of memory (ENOMEM), else
    ``LogDirFailureError``."""
    if e.errno == _errno.ENOMEM:
        limit = _read_int("/proc/sys/vm/max_map_count")
        try:
            with open("/proc/self/maps", "rb") as f:
                held: int | None = sum(1 for _ in f)
        except OSError:
            held = None
        return TooManyMappingsError(
            f"{message}: out of memory mappings (ENOMEM): the process holds "
            f"{'?' if held is None else held} of the kernel's limit of "
            f"{'?' if limit is None else limit} (vm.max_map_count). Raise it (sysctl -w "
            f"vm.max_map_count=262144) or hold fewer logs open at once",
            errno=e.errno, limit=limit)
    if e.errno not in (_errno.EMFILE, _errno.ENFILE):
        return LogDirFailureError(message, errno=e.errno)
    from kafkalog.descriptor_cache import OPEN_SEGMENTS   # (imports nothing of kafkalog)
    try:
        import resource
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        limit = None
    which = "the system's open file limit (ENFILE)" if e.errno == _errno.ENFILE else \
        f"its limit of {limit} open files (RLIMIT_NOFILE)"
    # (less the one listing them)
    open_now = len(os.listdir("/proc/self/fd")) - 1 if os.path.isdir("/proc/self/fd") else None
    return TooManyOpenFilesError(
        f"{message}: the process reached {which}"
        + (f", {open_now} open" if open_now is not None else "")
        + f". Raise the limit (ulimit -n) or lower KAFKALOG_MAX_OPEN_SEGMENTS "
          f"(set_max_open_segments; now {OPEN_SEGMENTS.limit} segments keep files open); "
          f"a written partition holds 2 (its .log and its directory lock)",
        errno=e.errno, limit=limit)


class OutOfOrderSequenceError(KafkaLogError):
    """An idempotent producer's batch whose sequence does not follow its last one."""


class InvalidProducerEpochError(KafkaLogError):
    """A batch from a producer epoch older than the last one seen (a fenced producer)."""


class InvalidTxnStateError(KafkaLogError):
    """A non-transactional batch from a producer whose transaction is open (Kafka's
    InvalidTxnStateException)."""


class TransactionCoordinatorFencedError(KafkaLogError):
    """An end-transaction marker from a coordinator epoch older than the producer's last
    marker's (a zombie coordinator; Kafka's TransactionCoordinatorFencedException)."""


class OffsetOutOfRangeError(KafkaLogError):
    """A requested offset lies outside the log."""


class SegmentDeletedError(OffsetOutOfRangeError):
    """A segment a reader listed was deleted before it read it (the writer's retention,
    ``delete_records`` or a truncation): its offsets are below the log start or past the
    log end now, as a Kafka fetch of them fails with ``OffsetOutOfRange``. Reopen the log to
    read from its start as it is now."""


class RecordTooLargeError(KafkaLogError):
    """A batch exceeds a size limit (``max.message.bytes``, or the decompression limit)."""


class UnsupportedCompressionError(KafkaLogError):
    """A batch names a compression codec kafkalog cannot decode."""


class LogDirLockedError(KafkaLogError):
    """Another writer holds the lock: a ``LogManager`` the log dir's ``.lock``, or a writable
    ``Log`` (standalone or a manager's, in any process) the partition directory."""


class InvalidTopicError(KafkaLogError):
    """A topic name is not one Kafka accepts."""


class InvalidPartitionError(InvalidTopicError):
    """A partition number outside Kafka's range (0 to 2**31 - 1, a Java int), given or in a
    partition directory's name."""


class IndexFullError(KafkaLogError):
    """An append to an index that has no free slot."""


class CorruptCheckpointError(KafkaLogError):
    """A checkpoint file whose text does not follow the format."""


class CorruptSnapshotError(KafkaLogError):
    """A producer snapshot whose version, CRC or length is wrong."""


class LogNotFoundError(KafkaLogError, FileNotFoundError):
    """A path that does not exist where a partition directory, a log dir or a segment file is
    expected, or a read-only open of a directory that holds no segment."""


class PartitionNotFoundError(LogNotFoundError):
    """A path given to read names no partition: a file where a directory is expected, a
    directory with no partition directory below it, or one whose name gives no topic and
    partition. The message names the path and what was found there."""


class NotAPartitionDirectoryError(PartitionNotFoundError, NotADirectoryError):
    """A file (or other non-directory) given where a partition directory or a log dir is
    expected. The message names the path and what it is."""


class NotASegmentFileError(KafkaLogError, IsADirectoryError):
    """A directory, or a file that holds no record batches (an index, a producer snapshot, a
    checkpoint, a text file), given where a segment file is expected. The message names the
    path and what it is. (An ``IsADirectoryError`` for the directory's sake.)"""


class MissingExtraError(KafkaLogError, ImportError):
    """A function was called without the optional packages of its extra installed.

    Attributes
    ----------
    missing : tuple of str
        The modules that could not be imported.
    """
    extra = ""
    module = "kafkalog"

    def __init__(self, missing: Iterable[str], function: str) -> None:
        self.missing = tuple(missing)
        super().__init__(
            f"{self.module}.{function} needs {', '.join(self.missing)}, which "
            f"{'is' if len(self.missing) == 1 else 'are'} not installed: install "
            f"kafkalog[{self.extra}] (pip install 'kafkalog[{self.extra}]'; from a clone, "
            f"pip install '.[{self.extra}]')")


class MissingSparkExtraError(MissingExtraError):
    """A ``kafkalog.spark`` function was called without the ``spark`` extra (pyspark,
    pyarrow, pandas)."""
    extra = "spark"
    module = "kafkalog.spark"


class SparkSetupError(KafkaLogError):
    """Spark's Python workers cannot run kafkalog's data source: the interpreter they run
    (``PYSPARK_PYTHON``, else ``python3``) cannot import kafkalog or what it needs.

    Attributes
    ----------
    python : str
        The interpreter Spark's workers run.
    missing : str
        The module it cannot import.
    """

    def __init__(self, message, python=None, missing=None):
        super().__init__(message)
        self.python = python
        self.missing = missing


class MissingArrowExtraError(MissingExtraError):
    """``kafkalog.read_arrow`` and its kin were called without the ``arrow`` extra (pyarrow,
    pandas)."""
    extra = "arrow"


class CleaningAbortedError(KafkaLogError):
    """A cleaner pass was aborted (by a truncation, a deletion or close) before its swap."""


class InvalidConfigError(KafkaLogError, ValueError):
    """An unknown setting, or a value of the wrong type or outside its range."""


class OffsetsOutOfOrderError(CorruptRecordError):
    """A batch does not start after the one before it ended (its base offset, which its CRC
    does not cover, is at or below the previous batch's last offset, or below its segment's
    base offset): reading on would return offsets twice or out of order. ``previous_offset``:
    the offset it had to be above. Spark's Kafka source fails on such data loss; with
    ``failOnDataLoss=false`` the scan readers skip the batch with a WARNING instead."""

    def __init__(self, message, position=None, path=None, base_offset=None,
                 previous_offset=None):
        super().__init__(message, position, path, base_offset)
        self.previous_offset = previous_offset


class InternalRecordError(CorruptRecordError):
    """A key or value of an internal topic (``__consumer_offsets``, ``__transaction_state``,
    ``__cluster_metadata``) that its schema cannot read: an unknown record type or version,
    or bytes that do not follow the schema."""


class ProtocolError(KafkaLogError):
    """A Kafka protocol frame that cannot be decoded (``kafkalog serve``): a length, count or
    varint that runs past the frame, bytes left over, a null where the schema allows none, an
    unknown API key. Kafka's broker answers such a request by closing the connection
    (``InvalidRequestException``); so does kafkalog's server."""


class UnsupportedVersionError(ProtocolError):
    """A request for an API or version that the server does not support (Kafka's
    ``UnsupportedVersionException``).

    Attributes
    ----------
    api_key, api_version, correlation_id : int
        From the request's header.
    """

    def __init__(self, message, api_key, api_version, correlation_id):
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class ProtocolEncodeError(KafkaLogError):
    """A body that its Kafka protocol schema cannot hold (a null where none is allowed, a number
    out of range, a wrong type): a fault of the code that built it, not of the peer, so not a
    ``ProtocolError`` (the server logs it as its own fault)."""


class NotARegularFileError(KafkaLogError):
    """A file a log needs (a segment, an index, a snapshot, a checkpoint) is not a regular
    file: a FIFO, socket, device or directory of that name. It is never opened (opening a
    FIFO blocks); the log is not loaded until it is moved away."""


class SymlinkOutsideError(NotARegularFileError):
    """A writable open found a file the log writes or replaces (a segment, an index, a
    producer snapshot, ``leader-epoch-checkpoint``, ``partition.metadata``; a log dir's offset
    checkpoints) that is a symbolic link leading outside its partition directory (a log dir's
    file: outside the log dir). Refused before anything is written, since recovery,
    truncation, appends and checkpoint writes would change what it leads to; a read-only open
    reads through it.

    Attributes
    ----------
    path : str
        The symbolic link.
    target : str
        Where it leads (resolved).
    """

    def __init__(self, message, path=None, target=None):
        super().__init__(message)
        self.path = path
        self.target = target


class LogClosedError(KafkaLogError):
    """A read or write of a ``Log`` after ``close()`` (incl. a ``records()`` iteration still
    running when the log was closed)."""


class ReentrantCallError(KafkaLogError):
    """A call that changes a ``Log`` (append, roll, truncation, retention, a cleaned
    segment's swap, close) made while another of them is running in the same thread: from a
    ``__del__``, ``weakref.finalize`` or ``gc.callbacks`` callback the garbage collector ran
    inside the first one. Refused before it wrote anything; the first one completes."""


class UnknownCodecError(UnsupportedCompressionError, CorruptRecordError):
    """A stored batch names a codec id Kafka does not define (5-7): unsupported, and corrupt
    (Kafka's ``CompressionType.forId`` refuses it), so both ``except`` clauses catch it."""


class ObjectStorageError(KafkaLogError):
    """A request to remote storage (an fsspec URL: ``s3://``, ``gs://``, ``hdfs://``, ...)
    failed after the client's retries.

    Attributes
    ----------
    url : str or None
        The object or prefix the request was for.
    """

    def __init__(self, message, url=None):
        super().__init__(message)
        self.url = url


class StorageAccessDeniedError(ObjectStorageError):
    """Remote storage refused the credentials (HTTP 403, wrong or missing keys)."""


class ObjectChangedError(ObjectStorageError):
    """A remote object was deleted, truncated or replaced after the log listing it was
    opened: its bytes no longer match what the read was planned on."""


class ReadOnlyStorageError(KafkaLogError):
    """A writable open of a remote URL: remote logs are read-only (``read_only=True``)."""


class TieredStorageError(KafkaLogError):
    """Objects of Kafka tiered storage (Aiven's RemoteStorageManager format) could not be
    read.

    Attributes
    ----------
    object : str or None
        The object (``.rsm-manifest``, ``.log``, ``.indexes``) and part of it concerned.
    """

    def __init__(self, message, object=None):
        super().__init__(message)
        self.object = object


class CorruptTieredObjectError(TieredStorageError):
    """A tiered-storage object is damaged: a manifest that is not valid or whose chunk sizes
    do not add up to the ``.log`` object, a chunk that fails authentication or does not
    decompress to its size, an index object shorter than its manifest says.

    Attributes
    ----------
    chunk : int or None
        The ``.log`` chunk concerned (None for a manifest or an index).
    """

    def __init__(self, message, object=None, chunk=None):
        super().__init__(message, object)
        self.chunk = chunk


class TieredKeyError(TieredStorageError):
    """An encrypted segment's data key cannot be unwrapped: no private key registered under
    its key-pair id, a different key under that id, or a key file that cannot be read.

    Attributes
    ----------
    key_id : str or None
        The key-pair id the segment names.
    """

    def __init__(self, message, key_id=None, object=None):
        super().__init__(message, object)
        self.key_id = key_id


class MissingTieredExtraError(MissingExtraError):
    """Encrypted tiered-storage segments were read without the ``tiered`` extra
    (cryptography)."""
    extra = "tiered"


__all__ = [
    "KafkaLogError",
    "CorruptRecordError",
    "CorruptIndexError",
    "InvalidOffsetError",
    "OffsetOutOfRangeError",
    "SegmentDeletedError",
    "FileShrunkError",
    "RecordTooLargeError",
    "UnsupportedCompressionError",
    "LogDirLockedError",
    "InvalidTopicError",
    "InvalidPartitionError",
    "IndexFullError",
    "IndexOffsetOverflowError",
    "InvalidTimestampError",
    "OutOfOrderSequenceError",
    "LogDirFailureError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "TransactionCoordinatorFencedError",
    "CorruptCheckpointError",
    "CorruptSnapshotError",
    "InvalidConfigError",
    "CleaningAbortedError",
    "LogNotFoundError",
    "PartitionNotFoundError",
    "NotAPartitionDirectoryError",
    "NotASegmentFileError",
    "MissingExtraError",
    "MissingSparkExtraError",
    "SparkSetupError",
    "MissingArrowExtraError",
    "InternalRecordError",
    "ProtocolError",
    "UnsupportedVersionError",
    "ProtocolEncodeError",
    "OffsetsOutOfOrderError",
    "NotARegularFileError",
    "SymlinkOutsideError",
    "LogClosedError",
    "ReentrantCallError",
    "UnknownCodecError",
    "ObjectStorageError",
    "TieredStorageError",
    "CorruptTieredObjectError",
    "TieredKeyError",
    "MissingTieredExtraError",
    "StorageAccessDeniedError",
    "ObjectChangedError",
    "ReadOnlyStorageError",
]

