"""Producer snapshot files (``<20-digit offset>.snapshot``).

Layout: int16 version (1), uint32 CRC32C of bytes [6, end), int32 entry count, then 46-byte
entries: producer id int64, epoch int16, last sequence int32, last offset int64, offset delta
int32, timestamp int64, coordinator epoch int32, current txn first offset int64 (-1 if none).
"""
import collections
import struct

import numpy as np
from crc32c import crc32c

from kafkalog.checkpoint import write_atomically_bytes
from kafkalog.errors import KafkaLogError

SNAPSHOT_VERSION = 1
SNAPSHOT_ENTRY_DTYPE = np.dtype([
    ("producer_id", ">i8"), ("producer_epoch", ">i2"), ("last_sequence", ">i4"),
    ("last_offset", ">i8"), ("offset_delta", ">i4"), ("timestamp", ">i8"),
    ("coordinator_epoch", ">i4"), ("current_txn_first_offset", ">i8"),
])
assert SNAPSHOT_ENTRY_DTYPE.itemsize == 46
_HEADER = struct.Struct(">hIi")


class CorruptSnapshotError(KafkaLogError):
    """A producer snapshot whose version, CRC or length is wrong."""


ProducerSnapshotEntry = collections.namedtuple(
    "ProducerSnapshotEntry",
    "producer_id producer_epoch last_sequence last_offset offset_delta timestamp "
    "coordinator_epoch current_txn_first_offset")


def read_snapshot(path):
    """Entries of a producer snapshot, as a numpy array of ``SNAPSHOT_ENTRY_DTYPE``."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"snapshot {path} is too short ({len(data)} bytes)")
    version, crc, count = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot {path} has unknown version {version}")
    if crc32c(memoryview(data)[6:]) != crc:
        raise CorruptSnapshotError(f"snapshot {path} failed its CRC check")
    body = memoryview(data)[_HEADER.size:]
    if count < 0 or len(body) != count * SNAPSHOT_ENTRY_DTYPE.itemsize:
        raise CorruptSnapshotError(f"snapshot {path} holds {len(body)} bytes of entries, "
                                   f"not {count} entries")
    return np.frombuffer(body, SNAPSHOT_ENTRY_DTYPE)


def encode_snapshot(entries):
    """The bytes of a snapshot holding ``entries`` (iterable of ProducerSnapshotEntry)."""
    arr = np.array([tuple(e) for e in entries], dtype=SNAPSHOT_ENTRY_DTYPE)
    body = struct.pack(">i", len(arr)) + arr.tobytes()
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body


def write_snapshot(path, entries):
    write_atomically_bytes(path, encode_snapshot(entries))
