"""Kafka's checkpoint text files.

Offset checkpoints (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint``, ``cleaner-offset-checkpoint``): version, entry count, then
``topic partition offset`` lines. ``leader-epoch-checkpoint``: version, count, ``epoch offset``
lines. Written to ``<name>.tmp``, fsynced, then renamed into place.
"""
from __future__ import annotations

import errno
import logging
import os
from typing import TYPE_CHECKING, Iterable, Mapping, NamedTuple, Sequence

from kafkalog import storage
from kafkalog.errors import CorruptCheckpointError, KafkaLogError, NotARegularFileError
from kafkalog.files import (
    CLEAN_SHUTDOWN_FILE, CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA, RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT,
    topic_partition_or_none,
)
from kafkalog.storage import read_regular_file

if TYPE_CHECKING:
    from kafkalog._typing import StrPath

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 0


def _read_lines(path, fields, parse):
    def bad(why):
        return CorruptCheckpointError(f"malformed checkpoint file {path}: {why}")

    try:
        raw = read_regular_file(path)
    except NotARegularFileError as e:
        raise bad(str(e)) from None
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise bad("not UTF-8 text") from None

    if len(lines) < 2:
        raise bad("missing version or entry count")
    try:
        version = int(lines[0])
        count = int(lines[1])
    except ValueError:
        raise bad("version and entry count must be integers") from None
    if version != CHECKPOINT_VERSION:
        raise bad(f"unrecognised version {version}")
    body = [line for line in lines[2:] if line.strip()]
    if len(body) != count:
        raise bad(f"expected {count} entries but found {len(body)}")
    entries = []
    for line in body:
        parts = line.split()
        if len(parts) != fields:
            raise bad(f"unexpected line {line!r}")
        try:
            entries.append(parse(parts))
        except ValueError:
            raise bad(f"unexpected line {line!r}") from None
    return entries


def write_atomically(path: StrPath, text: str) -> None:
    """Write ``text`` to ``path`` via ``path.tmp``, fsync, rename, fsync the directory."""
    write_atomically_bytes(path, text.encode("utf-8"))


def write_atomically_bytes(path: StrPath, data: bytes) -> None:
    """``write_atomically`` for bytes."""
    path = os.fspath(path)
    tmp = path + ".tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o666)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        os.unlink(tmp)          # a symbolic link where the temporary file goes: not followed
        fd = os.open(tmp, flags, 0o666)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(path: StrPath) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_leader_epoch_checkpoint(path: StrPath) -> list[tuple[int, int]]:
    """[(epoch, start_offset), ...] from a ``leader-epoch-checkpoint`` file."""
    return _read_lines(path, 2, lambda p: (int(p[0]), int(p[1])))


def write_leader_epoch_checkpoint(path: StrPath, entries: Sequence[tuple[int, int]]) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{epoch} {offset}" for epoch, offset in entries]
    write_atomically(path, "\n".join(lines) + "\n")


def read_offset_checkpoint(path: StrPath) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset} from an offset checkpoint file."""
    entries = _read_lines(path, 3, lambda p: ((p[0], int(p[1])), int(p[2])))
    return dict(entries)


def write_offset_checkpoint(path: StrPath, offsets: Mapping[tuple[str, int], int]) -> None:
    """Write {(topic, partition): offset} in Kafka's format, atomically."""
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in offsets.items()]
    write_atomically(path, "\n".join(lines) + "\n")


def read_partition_metadata(directory: StrPath) -> str | None:
    """The topic id in a partition's ``partition.metadata`` (``version: 0`` /
    ``topic_id: <id>``), or None when there is no such file."""
    path = os.path.join(directory, PARTITION_METADATA)
    try:
        lines = read_regular_file(path).decode("utf-8").splitlines()
    except FileNotFoundError:
        return None
    except NotARegularFileError as e:
        raise CorruptCheckpointError(str(e)) from None
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"malformed {path}: not UTF-8 text") from None
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    if fields.get("version", "").strip() != "0" or "topic_id" not in fields:
        raise CorruptCheckpointError(f"malformed {path}: {lines!r}")
    return fields["topic_id"].strip()


def write_partition_metadata(directory: StrPath, topic_id: str) -> None:
    write_atomically(os.path.join(directory, PARTITION_METADATA),
                     f"version: 0\ntopic_id: {topic_id}")


def assign_topic_id(directory: StrPath, topic_id: str, read_only: bool = False) -> None:
    """Write ``topic_id`` to a partition's ``partition.metadata`` unless it is there (as Kafka
    does); a different id there, or a missing one in a read-only log, is a KafkaLogError."""
    existing = read_partition_metadata(directory)
    if existing is not None and existing != topic_id:
        raise KafkaLogError(f"{directory} belongs to topic id {existing}, not {topic_id}")
    if existing is None:
        if read_only:
            raise KafkaLogError(f"log {directory} was opened read-only")
        write_partition_metadata(directory, topic_id)


class PartitionCheckpoints(NamedTuple):
    """What a log dir's checkpoint files say of one partition; an offset is None when no file
    holds it."""
    recovery_point: int | None
    log_start_offset: int | None
    high_watermark: int | None
    cleaner_offset: int | None
    clean_shutdown: bool


class LogDirCheckpoints:
    """A log dir's offset checkpoints and clean-shutdown marker, read once.

    The one policy for damaged checkpoint files, everywhere (``Log.open``, ``LogManager``,
    ``verify``): a corrupt or unreadable file is logged at WARNING and read as empty, so each
    of its offsets takes the safe default of its reader (recover from offset 0, the log start at
    the first segment), as Kafka's LogManager resets a checkpoint it cannot read. ``problems``
    lists what was wrong, for reports.
    """
    NAMES = {"recovery_point": RECOVERY_POINT_CHECKPOINT,
             "log_start_offset": LOG_START_OFFSET_CHECKPOINT,
             "high_watermark": REPLICATION_OFFSET_CHECKPOINT,
             "cleaner_offset": CLEANER_OFFSET_CHECKPOINT}

    def __init__(self, log_dir: StrPath, names: Iterable[str] | None = None) -> None:
        """``names``: the files in ``log_dir`` when a listing already said (absent ones are
        not asked for: a request each on an object store)."""
        self.log_dir = os.fspath(log_dir)
        self.problems: list[str] = []
        present = None if names is None else set(names)
        self.offsets = {field: self._read(name) if present is None or name in present else {}
                        for field, name in self.NAMES.items()}
        self.clean_shutdown = storage.exists(os.path.join(self.log_dir, CLEAN_SHUTDOWN_FILE)) \
            if present is None else CLEAN_SHUTDOWN_FILE in present

    def _read(self, name):
        path = os.path.join(self.log_dir, name)
        try:
            return read_offset_checkpoint(path)
        except FileNotFoundError:
            return {}
        except (CorruptCheckpointError, OSError) as e:
            self.problems.append(str(e))
            log.warning("ignoring %s (its offsets default as if it were missing): %s", path, e)
            return {}

    def for_partition(self, key: tuple[str, int] | None) -> PartitionCheckpoints:
        """A ``PartitionCheckpoints`` for ``key`` ((topic, partition), or None for a
        directory that is not named like a partition: nothing is known of it)."""
        values = {field: (offsets.get(key) if key is not None else None)
                  for field, offsets in self.offsets.items()}
        return PartitionCheckpoints(clean_shutdown=self.clean_shutdown, **values)

    def write(self, field: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Replace one of the offset checkpoint files with ``offsets``."""
        write_offset_checkpoint(os.path.join(self.log_dir, self.NAMES[field]), offsets)
        self.offsets[field] = dict(offsets)


def write_partition_offset(partition_dir: StrPath, field: str, offset: int) -> None:
    """Record one offset of a partition (``field``: a ``LogDirCheckpoints.NAMES`` key, e.g.
    its log start offset) in its log dir's checkpoint file, the other partitions' entries
    kept (nothing for a directory not named like a partition)."""
    key = topic_partition_or_none(os.path.basename(partition_dir))
    if key is not None:
        saved = LogDirCheckpoints(os.path.dirname(partition_dir))
        if saved.offsets[field].get(key) != offset:
            saved.write(field, {**saved.offsets[field], key: offset})
