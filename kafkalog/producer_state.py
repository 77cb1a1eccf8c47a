"""Producer state: snapshot files (``<20-digit offset>.snapshot``) and the per-partition state
the log needs for transactions (ongoing transactions, last stable offset, aborted-txn entries).

Snapshot layout: int16 version (1), uint32 CRC32C of bytes [6, end), int32 entry count, then
46-byte entries: producer id int64, epoch int16, last sequence int32, last offset int64, offset
delta int32, timestamp int64, coordinator epoch int32, current txn first offset int64 (-1 if none).
"""
import collections
import logging
import os
import struct

import numpy as np
from crc32c import crc32c

from kafkalog import storage
from kafkalog.checkpoint import write_atomically_bytes
from kafkalog.errors import (
    CorruptSnapshotError, InvalidProducerEpochError, NotARegularFileError,
    OutOfOrderSequenceError,
)
from kafkalog.files import SNAPSHOT_SUFFIX, file_path, parse_file_name, read_regular_file
from kafkalog.index import AbortedTxn
from kafkalog.records import (
    CONTROL_MASK, TRANSACTIONAL_MASK, decode_batches, increment_sequence, parse_control_record,
)

log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
SNAPSHOT_ENTRY_DTYPE = np.dtype([
    ("producer_id", ">i8"), ("producer_epoch", ">i2"), ("last_sequence", ">i4"),
    ("last_offset", ">i8"), ("offset_delta", ">i4"), ("timestamp", ">i8"),
    ("coordinator_epoch", ">i4"), ("current_txn_first_offset", ">i8"),
])
assert SNAPSHOT_ENTRY_DTYPE.itemsize == 46
_HEADER = struct.Struct(">hIi")


ProducerSnapshotEntry = collections.namedtuple(
    "ProducerSnapshotEntry",
    "producer_id producer_epoch last_sequence last_offset offset_delta timestamp "
    "coordinator_epoch current_txn_first_offset")

BATCHES_RETAINED = 5       # Kafka keeps a producer's last five batches to spot duplicates
BatchMetadata = collections.namedtuple(
    "BatchMetadata", "first_sequence last_sequence first_offset last_offset timestamp")

CompletedTxn = collections.namedtuple("CompletedTxn",
                                      "producer_id first_offset last_offset is_aborted")


def read_snapshot(path):
    """Entries of a producer snapshot, as a numpy array of ``SNAPSHOT_ENTRY_DTYPE``."""
    try:
        data = read_regular_file(path)
    except NotARegularFileError as e:
        raise CorruptSnapshotError(str(e)) from None
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


def snapshot_path(directory, offset):
    return file_path(directory, offset, SNAPSHOT_SUFFIX)


def list_snapshots(directory):
    """[(offset, path)] of the snapshot files in ``directory``, by offset."""
    out = []
    for name in storage.listdir(directory):
        parsed = parse_file_name(name)
        if parsed is not None and parsed[1:] == (SNAPSHOT_SUFFIX, ""):
            out.append((parsed[0], os.path.join(directory, name)))
    return sorted(out)


def control_of(buf, row, path=None):
    """(control type, coordinator epoch) of a control batch's first record."""
    table = decode_batches(buf, row.reshape(1), path)
    if len(table) == 0:
        return None, -1
    kind, epoch = parse_control_record(table.key(0), table.value(0))
    return int(kind), (epoch if epoch is not None else -1)


def java_hash_map_order(entries):
    """``entries`` (insertion-ordered, keyed by producer id) in the iteration order of a
    java.util.HashMap<Long, ...> holding them: by bucket, then insertion order within a
    bucket. Kafka writes snapshots in that order."""
    capacity = 16
    while len(entries) > capacity * 3 // 4:
        capacity *= 2

    def bucket(pid):
        h = (pid ^ (pid >> 32)) & 0xFFFFFFFF          # Long.hashCode
        h ^= h >> 16                                     # HashMap.hash spreads the high bits
        return h & (capacity - 1)
    return [e for _, _, e in sorted((bucket(e.producer_id & 0xFFFFFFFFFFFFFFFF), i, e)
                                    for i, e in enumerate(entries))]


class ProducerStateManager:
    """What the log keeps about producers: the last batch of each (for snapshots) and the
    ongoing transactions (for the last stable offset and the transaction index).

    Sequence and epoch validation (duplicates, fencing) are not enforced here.
    """

    def __init__(self, directory):
        self.directory = directory
        self.producers = {}       # producer id -> ProducerSnapshotEntry
        self.ongoing = {}         # producer id -> first offset of its open transaction
        self.recent = {}          # producer id -> its last batches, for duplicate detection

    def clear(self):
        self.producers.clear()
        self.ongoing.clear()
        self.recent.clear()

    def load_latest_snapshot(self, upper_offset, snapshots=None, delete_corrupt=True):
        """Load the newest valid snapshot at or below ``upper_offset``; returns its offset, or
        None (state empty). A corrupt snapshot is deleted (logged), as Kafka does, and older
        ones tried; with ``delete_corrupt=False`` (read-only) it is only skipped.
        ``snapshots``: the directory's ``list_snapshots``, when the caller has it already (a
        loader recovering many segments lists the directory once, not once per segment)."""
        self.clear()
        if snapshots is None:
            snapshots = list_snapshots(self.directory)
        for offset, path in reversed(snapshots):
            if offset > upper_offset:
                continue
            try:
                entries = read_snapshot(path)
            except CorruptSnapshotError as e:
                log.warning("%s: %s", "deleting" if delete_corrupt else "skipping", e)
                if delete_corrupt:
                    os.remove(path)
                continue
            except FileNotFoundError:
                continue
            for fields in entries:
                entry = ProducerSnapshotEntry(*(int(x) for x in fields))
                self.producers[entry.producer_id] = entry
                if entry.current_txn_first_offset >= 0:
                    self.ongoing[entry.producer_id] = entry.current_txn_first_offset
            return offset
        return None

    def apply_batches(self, buf, batches, path=None, txn_index=None):
        """Apply the batches (``BATCH_DTYPE`` rows over ``buf``) in offset order: the one
        loop by which appends, recovery and load teach the state. Each aborted transaction
        completed on the way is appended to ``txn_index`` when given."""
        with_pid = batches[(batches["magic"] == 2) & (batches["producer_id"] >= 0)]
        for row in with_pid:
            control_type, coordinator_epoch = None, -1
            if int(row["attributes"]) & CONTROL_MASK:
                control_type, coordinator_epoch = control_of(buf, row, path)
            completed = self.update(row, control_type, coordinator_epoch)
            if completed is not None and completed.is_aborted and txn_index is not None:
                txn_index.append(self.aborted_txn(completed))

    def update(self, batch_row, control_type=None, coordinator_epoch=-1):
        """Apply one v2 batch (a ``BATCH_DTYPE`` row); returns a CompletedTxn for an
        end-transaction marker, else None."""
        pid = int(batch_row["producer_id"])
        last_offset = int(batch_row["last_offset"])
        if pid < 0:
            return None
        attributes = int(batch_row["attributes"])
        base_offset = int(batch_row["base_offset"])
        previous = self.producers.get(pid)
        completed = None
        if attributes & CONTROL_MASK:
            if control_type in (0, 1):       # ABORT, COMMIT
                first = self.ongoing.pop(pid, last_offset)
                completed = CompletedTxn(pid, first, last_offset, control_type == 0)
            last_seq = previous.last_sequence if previous else -1
            delta = previous.offset_delta if previous else 0
            entry_last_offset = previous.last_offset if previous else -1
            timestamp = int(batch_row["max_timestamp"])      # the marker's, as Kafka keeps
            epoch = coordinator_epoch if coordinator_epoch >= 0 else \
                (previous.coordinator_epoch if previous else -1)
        else:
            if attributes & TRANSACTIONAL_MASK and pid not in self.ongoing:
                self.ongoing[pid] = base_offset
            base_seq = int(batch_row["base_sequence"])
            delta = last_offset - base_offset
            last_seq = increment_sequence(base_seq, delta) if base_seq >= 0 else -1
            entry_last_offset = last_offset
            timestamp = int(batch_row["max_timestamp"])
            epoch = previous.coordinator_epoch if previous else -1
            if base_seq >= 0:
                recent = self.recent.setdefault(pid, collections.deque(maxlen=BATCHES_RETAINED))
                if previous is not None and previous.producer_epoch != \
                        int(batch_row["producer_epoch"]):
                    recent.clear()
                recent.append(BatchMetadata(base_seq, last_seq, base_offset, last_offset,
                                            timestamp))
        self.producers[pid] = ProducerSnapshotEntry(
            pid, int(batch_row["producer_epoch"]), last_seq, entry_last_offset, delta, timestamp,
            epoch, self.ongoing.get(pid, -1))
        return completed

    def validate(self, batch_row):
        """Kafka's producer checks for a leader append of one v2 batch (a ``BATCH_DTYPE``
        row). Returns the ``BatchMetadata`` of the original when the batch is a duplicate
        of one of the producer's last five; raises InvalidProducerEpochError for an older
        epoch and OutOfOrderSequenceError for a sequence that does not follow; else None."""
        pid = int(batch_row["producer_id"])
        entry = self.producers.get(pid)
        if pid < 0 or entry is None:
            return None
        epoch = int(batch_row["producer_epoch"])
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"epoch of producer {pid} is {epoch}, which is smaller than the last seen "
                f"epoch {entry.producer_epoch}")
        base_seq = int(batch_row["base_sequence"])
        if int(batch_row["attributes"]) & CONTROL_MASK or base_seq < 0:
            return None
        if epoch == entry.producer_epoch:
            last_seq = base_seq + int(batch_row["last_offset"] - batch_row["base_offset"])
            for meta in self.recent.get(pid, ()):
                if meta.first_sequence == base_seq and meta.last_sequence == last_seq:
                    return meta
            current = entry.last_sequence
            if current >= 0 and base_seq != (0 if current == 2**31 - 1 else current + 1):
                raise OutOfOrderSequenceError(
                    f"out of order sequence number for producer {pid} at offset "
                    f"{int(batch_row['base_offset'])}: {base_seq} (incoming seq. number), "
                    f"{current} (current end sequence number)")
        elif base_seq != 0:
            raise OutOfOrderSequenceError(
                f"invalid sequence number for new epoch of producer {pid}: {epoch} (request "
                f"epoch), {base_seq} (seq. number), {entry.producer_epoch} (current producer "
                f"epoch)")
        return None

    def remove_expired_producers(self, now_ms, expiration_ms):
        """Forget producers idle longer than ``expiration_ms`` with no open transaction."""
        for pid, entry in list(self.producers.items()):
            if pid not in self.ongoing and now_ms - entry.timestamp >= expiration_ms:
                del self.producers[pid]
                self.recent.pop(pid, None)

    def last_stable_offset(self, completed):
        """The LSO to record with a completed transaction: the first offset of the earliest
        other ongoing transaction, else just past the marker."""
        others = [first for pid, first in self.ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def aborted_txn(self, completed):
        return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                          self.last_stable_offset(completed))

    def first_unstable_offset(self):
        return min(self.ongoing.values()) if self.ongoing else None

    def take_snapshot(self, offset):
        """Write ``<offset>.snapshot`` with every producer's state (done at roll and close),
        in the order Kafka writes them (its producer map's iteration order)."""
        write_snapshot(snapshot_path(self.directory, offset),
                       java_hash_map_order(list(self.producers.values())))

    def delete_snapshots_above(self, offset):
        for snap_offset, path in list_snapshots(self.directory):
            if snap_offset > offset:
                os.remove(path)

    def delete_snapshots_below(self, offset):
        for snap_offset, path in list_snapshots(self.directory):
            if snap_offset < offset:
                os.remove(path)
