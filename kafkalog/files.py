"""File and directory names of a Kafka log, built and parsed in one place (Kafka's
``LogFileUtils`` and ``UnifiedLog``'s directory-name helpers).

A segment's files are ``<20-digit base offset><suffix>`` (``.log``, ``.index``, ``.timeindex``,
``.txnindex``), producer snapshots ``<20-digit offset>.snapshot``; any of them may carry one
more suffix while it changes state (``.deleted``, ``.cleaned``, ``.swap``). A partition
directory is ``<topic>-<partition>``; a deleted, future (alter-log-dirs) or stray one is
``<topic>-<partition>.<unique id>-delete`` / ``-future`` / ``-stray``, its topic cut so that the
name fits in 255 bytes (Kafka's ``logDirNameWithSuffixCappedLength``).

Kafka 0.7 logs: a partition directory of ``<byte offset>.kafka`` files (20 digits as 0.7 wrote
them, fewer from some tools), named ``<topic>-<partition>`` or, as 0.7's documentation shows,
``<topic>_<partition>``.
"""
from __future__ import annotations

import bisect
import collections
import functools
import os
import re
from typing import Iterable, NamedTuple, Sequence

from kafkalog._typing import StrPath
from kafkalog.errors import InvalidPartitionError, InvalidTopicError, KafkaLogError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
LOG07_SUFFIX = ".kafka"      # a Kafka 0.7 log file
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

# Files of a log dir (beside its partition directories).
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
META_PROPERTIES = "meta.properties"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
# Files of a partition directory besides its segments and snapshots.
PARTITION_METADATA = "partition.metadata"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

# Kafka's internal topics (``Topic.isInternal``; Metadata's ``isInternal``): a consumer's
# pattern subscription leaves them out (``exclude.internal.topics``), so Spark's Kafka source
# never shows them unless named. Other topics whose names start with ``__``
# (``__remote_log_metadata``, Connect's, Streams') are ordinary topics to a consumer.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
# KRaft's metadata log: a partition directory, but no topic a client sees at all.
CLUSTER_METADATA_TOPIC = "__cluster_metadata"

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
_DIR_SUFFIXES = {DELETE_DIR_SUFFIX: "delete", FUTURE_DIR_SUFFIX: "future",
                 STRAY_DIR_SUFFIX: "stray"}
_DIR_SUFFIX_TUPLE = tuple(_DIR_SUFFIXES)

_OFFSET_NAME = re.compile(r"^(\d{20})(\.[a-z]+)((?:\.[a-z]+)?)$")
_LOG07_NAME = re.compile(r"^(\d{1,20})\.kafka$")
_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
_MAX_OFFSET = 2**63 - 1
_LOG_FILE_ENDING = re.compile(r"\.(log|index|timeindex|txnindex|snapshot)"
                              r"(\.(deleted|cleaned|swap))?$")
KRAFT_SNAPSHOT_SUFFIX = ".checkpoint"
_KRAFT_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
MAX_TOPIC_LENGTH = 249
MAX_PARTITION = 2**31 - 1       # a Java int
MAX_DIR_NAME_BYTES = 255        # a file name's limit on common file systems
_PARTITION = re.compile(r"^[0-9]+$")

TopicPartitionDir = collections.namedtuple("TopicPartitionDir", "topic partition state unique_id",
                                           defaults=(None,))
TopicPartitionDir.__doc__ = """A partition directory's name parsed: ``state`` is ``""`` for a
live log (``unique_id`` None), else ``"delete"``, ``"future"`` or ``"stray"`` with the name's
``unique_id``; in those the topic may be cut (a long topic's, to fit 255 bytes)."""


def file_name(offset: int, suffix: str) -> str:
    """``<20-digit offset><suffix>``, e.g. ``00000000000000000042.log``."""
    return f"{offset:020d}{suffix}"


def file_path(directory: StrPath, offset: int, suffix: str) -> str:
    return os.path.join(directory, file_name(offset, suffix))


@functools.lru_cache(maxsize=1 << 17)     # a load parses each name of a directory several times
def parse_file_name(name: str) -> tuple[int, str, str] | None:
    """(offset, suffix, state suffix) of ``<20 digits><suffix>[<state suffix>]``, e.g.
    ``(42, ".log", ".swap")``; None for any other name, incl. 20 digits above the largest
    offset (2**63 - 1), which no Kafka file can carry."""
    m = _OFFSET_NAME.match(name)
    if m is None:
        return None
    offset = int(m.group(1))
    return (offset, m.group(2), m.group(3)) if offset <= _MAX_OFFSET else None


def looks_like_log_file(name: str) -> bool:
    """True for a name ending like a segment, index or snapshot file (with or without a state
    suffix), whether or not ``parse_file_name`` accepts it (a loader reports the ones it
    does not)."""
    return _LOG_FILE_ENDING.search(name) is not None


def offset_from_file_name(name: str) -> int | None:
    """The offset a file name starts with (whatever its suffixes), or None."""
    parsed = parse_file_name(name)
    return parsed[0] if parsed else None


def is_file_of(name: str, suffix: str, state: str = "") -> bool:
    """True when ``name`` is ``<20 digits><suffix><state>`` exactly."""
    parsed = parse_file_name(name)
    return parsed is not None and parsed[1] == suffix and parsed[2] == state


def offsets_of(names: Iterable[str], suffix: str, state: str = "") -> list[int]:
    """Sorted offsets of the names that are ``<20 digits><suffix><state>``."""
    return sorted(p[0] for p in map(parse_file_name, names)
                  if p is not None and p[1] == suffix and p[2] == state)


def next_log_offset(log_offsets: Sequence[int], base_offset: int) -> int | None:
    """The base offset of the segment after the one at ``base_offset``, of a directory's
    sorted ``.log`` offsets (``offsets_of(names, LOG_SUFFIX)``): where that segment's offsets
    must end (None: it is the last)."""
    i = bisect.bisect_right(log_offsets, base_offset)
    return log_offsets[i] if i < len(log_offsets) else None


def log07_file_name(offset: int) -> str:
    """``<20-digit byte offset>.kafka``, the name Kafka 0.7 gave a log file."""
    return file_name(offset, LOG07_SUFFIX)


def parse_log07_file_name(name: str) -> int | None:
    """The byte offset of a Kafka 0.7 log file name (``<1 to 20 digits>.kafka``: 0.7 parsed
    whatever digits precede the suffix), or None for any other name."""
    m = _LOG07_NAME.match(name)
    if m is None:
        return None
    offset = int(m.group(1))
    return offset if offset <= _MAX_OFFSET else None


def log07_files(names: Iterable[str]) -> list[tuple[int, str]]:
    """(byte offset, name) of the Kafka 0.7 log files among ``names``, by offset."""
    return sorted((o, n) for o, n in ((parse_log07_file_name(n), n) for n in names)
                  if o is not None)


class KRaftSnapshotId(NamedTuple):
    """A KRaft snapshot's id (``<20-digit end offset>-<10-digit epoch>.checkpoint`` in
    ``__cluster_metadata-0``): it holds the records below ``end_offset``, the last of them
    written in ``epoch``."""
    end_offset: int
    epoch: int


def kraft_snapshot_file_name(snapshot: KRaftSnapshotId) -> str:
    return f"{snapshot.end_offset:020d}-{snapshot.epoch:010d}{KRAFT_SNAPSHOT_SUFFIX}"


def parse_kraft_snapshot_name(name: str) -> KRaftSnapshotId | None:
    """The ``KRaftSnapshotId`` of a snapshot file name; None for any other name (a partial
    ``.checkpoint.part`` or a ``.checkpoint.deleted`` is none)."""
    m = _KRAFT_SNAPSHOT_NAME.match(name)
    return KRaftSnapshotId(int(m.group(1)), int(m.group(2))) if m else None


def validate_topic(topic: str) -> str:
    """Kafka's topic name rules; raises InvalidTopicError (so no name can escape a log dir)."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError("topic name is empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {topic!r}")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_LENGTH} characters")
    if not _TOPIC.match(topic):
        raise InvalidTopicError(f"topic name {topic!r} has characters other than ASCII "
                                f"alphanumerics, '.', '_' and '-'")
    return topic


def validate_partition(partition: int) -> int:
    """A partition number in Kafka's range (0 to 2**31 - 1); raises InvalidPartitionError."""
    if not isinstance(partition, int) or isinstance(partition, bool) or \
            not 0 <= partition <= MAX_PARTITION:
        raise InvalidPartitionError(f"invalid partition {partition!r}: a partition number is "
                                    f"0 to {MAX_PARTITION}")
    return partition


def partition_dir_name(topic: str, partition: int, state: str = "",
                       unique_id: str | None = None) -> str:
    """``<topic>-<partition>``, or with a state ``<topic>-<partition>.<unique id>-<state>`` with
    the topic cut so that the name fits in 255 bytes (as Kafka names its ``-delete`` and
    ``-stray`` directories; kafkalog its ``-future`` ones too, so that every legal topic can
    be moved). Raises InvalidPartitionError for a partition outside Kafka's range, and
    InvalidTopicError for a live name over 255 bytes (a 249-character topic's partition
    100000 and above: no file system takes it)."""
    validate_partition(partition)
    if not state:
        name = f"{topic}-{partition}"
        if len(name.encode()) > MAX_DIR_NAME_BYTES:
            raise InvalidTopicError(f"{topic}-{partition}: a partition directory name longer "
                                    f"than {MAX_DIR_NAME_BYTES} bytes")
        return name
    suffix = {v: k for k, v in _DIR_SUFFIXES.items()}[state]
    tail = f"-{partition}.{unique_id}{suffix}"
    return topic[:max(0, MAX_DIR_NAME_BYTES - len(tail.encode()))] + tail


def parse_partition_dir_name(name: str) -> TopicPartitionDir:
    """A ``TopicPartitionDir`` of a partition directory name; raises KafkaLogError for a name
    that is not one (as Kafka's ``parseTopicPartitionName``), InvalidPartitionError for a
    partition number outside Kafka's range."""
    state = ""
    stem = name
    unique = None
    # one test for a live directory's name (discovery parses 100,000 of them)
    for suffix, kind in _DIR_SUFFIXES.items() if name.endswith(_DIR_SUFFIX_TUPLE) else ():
        if name.endswith(suffix):
            stem, _, unique = name[:-len(suffix)].rpartition(".")
            if not stem or not unique:
                raise KafkaLogError(f"{name!r} is not a {kind} partition directory name")
            state = kind
            break
    topic, sep, partition = stem.rpartition("-")
    if not sep or not topic or not _PARTITION.match(partition) or not _TOPIC.match(topic):
        raise KafkaLogError(f"{name!r} is not a topic-partition directory name")
    if int(partition) > MAX_PARTITION:
        raise InvalidPartitionError(f"{name!r}: partition {partition} is above {MAX_PARTITION}")
    return TopicPartitionDir(topic, int(partition), state, unique)


def parse_topic_partition(name: str) -> tuple[str, int]:
    """(topic, partition) of a live partition directory name ``topic-partition``."""
    parsed = parse_partition_dir_name(name)
    if parsed.state:
        raise KafkaLogError(f"{name!r} is a {parsed.state} partition directory, not a live one")
    return parsed.topic, parsed.partition


def log07_topic_partition(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a Kafka 0.7 partition directory name: ``<topic>-<partition>``,
    else ``<topic>_<partition>`` (the spelling 0.7's documentation shows); None for another
    name."""
    found = topic_partition_or_none(name)
    if found is not None:
        return found
    topic, sep, partition = name.rpartition("_")
    if sep and topic and _PARTITION.match(partition) and _TOPIC.match(topic) and \
            int(partition) <= MAX_PARTITION:
        return topic, int(partition)
    return None


def topic_partition_or_none(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a live partition directory name, or None."""
    try:
        return parse_topic_partition(name)
    except KafkaLogError:
        return None
