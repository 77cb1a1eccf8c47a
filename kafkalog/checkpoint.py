"""Kafka's checkpoint text files.

Offset checkpoints (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint``, ``cleaner-offset-checkpoint``): version, entry count, then
``topic partition offset`` lines. ``leader-epoch-checkpoint``: version, count, ``epoch offset``
lines. Written to ``<name>.tmp``, fsynced, then renamed into place.
"""
import os

from kafkalog.errors import CorruptCheckpointError

CHECKPOINT_VERSION = 0


def _read_lines(path, fields, parse):
    def bad(why):
        return CorruptCheckpointError(f"malformed checkpoint file {path}: {why}")

    with open(path, "rb") as f:
        raw = f.read()
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


def write_atomically(path, text):
    """Write ``text`` to ``path`` via ``path.tmp``, fsync, rename, fsync the directory."""
    write_atomically_bytes(path, text.encode("utf-8"))


def write_atomically_bytes(path, data):
    """``write_atomically`` for bytes."""
    path = os.fspath(path)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_leader_epoch_checkpoint(path):
    """[(epoch, start_offset), ...] from a ``leader-epoch-checkpoint`` file."""
    return _read_lines(path, 2, lambda p: (int(p[0]), int(p[1])))


def write_leader_epoch_checkpoint(path, entries):
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{epoch} {offset}" for epoch, offset in entries]
    write_atomically(path, "\n".join(lines) + "\n")


def read_offset_checkpoint(path):
    """{(topic, partition): offset} from an offset checkpoint file."""
    entries = _read_lines(path, 3, lambda p: ((p[0], int(p[1])), int(p[2])))
    return dict(entries)


def write_offset_checkpoint(path, offsets):
    """Write {(topic, partition): offset} in Kafka's format, atomically."""
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in offsets.items()]
    write_atomically(path, "\n".join(lines) + "\n")
