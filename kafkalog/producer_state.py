"""Producer state: snapshot files (``<20-digit offset>.snapshot``) and the per-partition state
Kafka's ``ProducerStateManager`` keeps: each producer's epoch, last batches (duplicates,
sequence checks) and coordinator epoch, the ongoing transactions, and the completed ones whose
marker is not yet below the high watermark (both hold the last stable offset back).

Appends are checked and applied the way Kafka's ``ProducerAppendInfo`` does it: one per
producer per append, validating against the producer's stored entry and accumulating an
updated one, which ``ProducerStateManager.update`` merges in once the append is written.

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
from kafkalog.control_records import ControlType, parse_control_record
from kafkalog.errors import (
    CorruptSnapshotError, InvalidProducerEpochError, InvalidTxnStateError, NotARegularFileError,
    OutOfOrderSequenceError, TransactionCoordinatorFencedError,
)
from kafkalog.files import SNAPSHOT_SUFFIX, file_path, parse_file_name
from kafkalog.storage import read_regular_file
from kafkalog.transaction_index import AbortedTxn
from kafkalog.records import (
    CONTROL_MASK, NO_SEQUENCE, TRANSACTIONAL_MASK, decode_batches, increment_sequence,
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
NO_PRODUCER_EPOCH = -1
NO_TIMESTAMP = -1
_INT32_MAX = 2**31 - 1

#: Where an append comes from (Kafka's ``AppendOrigin``): a client's batches get every check;
#: a coordinator's (transaction markers, batches without sequence numbers) no sequence check;
#: replicated or recovered batches were checked by their leader and are only applied.
CLIENT, COORDINATOR, REPLICATION = "client", "coordinator", "replication"

CompletedTxn = collections.namedtuple("CompletedTxn",
                                      "producer_id first_offset last_offset is_aborted")


def decrement_sequence(sequence, decrement):
    """Kafka's sequence arithmetic backwards: wraps from 0 to Int.MAX_VALUE."""
    if sequence < decrement:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement



def last_stable_offset(first_unstable, log_start_offset, high_watermark):
    """The first offset of the earliest transaction open or whose marker is not below the
    high watermark yet (``first_unstable``: ``first_unstable_offset()``), not below the log
    start offset (as Kafka bounds it), else the high watermark."""
    return high_watermark if first_unstable is None else \
        min(max(first_unstable, log_start_offset), high_watermark)

class BatchMetadata(collections.namedtuple("BatchMetadata",
                                           "last_seq last_offset offset_delta timestamp")):
    """One of a producer's last batches, as a snapshot entry keeps it."""
    __slots__ = ()

    @property
    def first_seq(self):
        return NO_SEQUENCE if self.last_seq < 0 else \
            decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self):
        return self.last_offset - self.offset_delta


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


def stray_snapshot_offsets(offsets, segment_base_offsets):
    """The snapshot offsets Kafka's ``removeStraySnapshots`` deletes: those at no segment's
    base offset, except the largest of them when it is above every base offset (the
    snapshot a clean shutdown wrote at the log end)."""
    bases = set(segment_base_offsets)
    strays = sorted(o for o in offsets if o not in bases)
    if strays and (not bases or strays[-1] > max(bases)):
        strays.pop()
    return strays


def control_of(buf, row, path=None):
    """(control type, coordinator epoch or None) of a control batch's first record; (None,
    None) for an empty one."""
    table = decode_batches(buf, row.reshape(1), path)
    if len(table) == 0:
        return None, None
    kind, epoch = parse_control_record(table.key(0), table.value(0))
    return int(kind), epoch


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


class ProducerStateEntry:
    """What is known of one producer (Kafka's ``ProducerStateEntry``): its epoch, the
    coordinator epoch of its last marker, its last timestamp (ms), the first offset of its open
    transaction (None when none) and its last batches (``BatchMetadata``, oldest first; at
    most five, all of the current epoch)."""
    __slots__ = ("producer_id", "producer_epoch", "coordinator_epoch", "last_timestamp",
                 "current_txn_first_offset", "batches")

    def __init__(self, producer_id, producer_epoch=NO_PRODUCER_EPOCH, coordinator_epoch=-1,
                 last_timestamp=NO_TIMESTAMP, current_txn_first_offset=None, batches=()):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batches = collections.deque(batches, maxlen=BATCHES_RETAINED)

    @classmethod
    def from_snapshot(cls, entry):
        """The entry a ``ProducerSnapshotEntry`` describes (its one batch when it has an
        offset: a snapshot keeps only the last)."""
        batches = () if entry.last_offset < 0 else (BatchMetadata(
            entry.last_sequence, entry.last_offset, entry.offset_delta, entry.timestamp),)
        first = entry.current_txn_first_offset
        return cls(entry.producer_id, entry.producer_epoch, entry.coordinator_epoch,
                   entry.timestamp, first if first >= 0 else None, batches)

    def to_snapshot(self):
        """This entry as a ``ProducerSnapshotEntry`` (its last batch, -1s when none)."""
        first = self.current_txn_first_offset
        return ProducerSnapshotEntry(
            self.producer_id, self.producer_epoch, self.last_seq, self.last_data_offset,
            self.last_offset_delta, self.last_timestamp, self.coordinator_epoch,
            -1 if first is None else first)

    @property
    def is_empty(self):
        return not self.batches

    @property
    def first_seq(self):
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self):
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_data_offset(self):
        return self.batches[0].first_offset if self.batches else -1

    @property
    def last_data_offset(self):
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self):
        return self.batches[-1].offset_delta if self.batches else 0

    def maybe_update_producer_epoch(self, epoch):
        """A new epoch starts the producer's sequences anew: its batches are forgotten."""
        if self.producer_epoch != epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(self, epoch, last_seq, last_offset, offset_delta, timestamp):
        self.maybe_update_producer_epoch(epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def end_transaction(self, epoch, coordinator_epoch, timestamp):
        """An end-transaction marker's change (Kafka's ``update(epoch, coordinatorEpoch,
        timestamp)``): a bumped epoch forgets the batches."""
        self.maybe_update_producer_epoch(epoch)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = None
        self.last_timestamp = timestamp

    def merge(self, updated):
        """Take in an append's updated entry (Kafka's ``update(nextEntry)``)."""
        self.maybe_update_producer_epoch(updated.producer_epoch)
        self.batches.extend(updated.batches)
        self.coordinator_epoch = updated.coordinator_epoch
        self.current_txn_first_offset = updated.current_txn_first_offset
        self.last_timestamp = updated.last_timestamp

    def find_duplicate_batch(self, epoch, first_seq, last_seq):
        """The ``BatchMetadata`` of a retained batch of ``epoch`` with exactly this sequence
        range, or None."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def _fields(self):
        return (self.producer_id, self.producer_epoch, self.coordinator_epoch,
                self.last_timestamp, self.current_txn_first_offset, list(self.batches))

    def __eq__(self, other):
        return isinstance(other, ProducerStateEntry) and self._fields() == other._fields()

    def __repr__(self):
        return ("ProducerStateEntry(producer_id={}, producer_epoch={}, coordinator_epoch={}, "
                "last_timestamp={}, current_txn_first_offset={}, batches={})".format(
                    *self._fields()))


class ProducerAppendInfo:
    """The checks and changes of one append for one producer (Kafka's
    ``ProducerAppendInfo``): each batch is validated against the stored entry (``current``,
    never changed here) and what this append already holds (``updated``). The state changes
    only when ``ProducerStateManager.update`` takes it in."""

    def __init__(self, producer_id, current, origin):
        self.producer_id = producer_id
        self.current = current
        self.origin = origin
        self.updated = ProducerStateEntry(producer_id, current.producer_epoch,
                                          current.coordinator_epoch, current.last_timestamp,
                                          current.current_txn_first_offset)
        #: first offsets of the transactions this append begins
        self.started_transactions = []

    def _refuse(self, error, message):
        """Raise ``error(message)``, or only log it for a replicated append (its leader
        accepted it; Kafka warns and applies it)."""
        if self.origin == REPLICATION:
            log.warning("%s", message)
        else:
            raise error(message)

    def _check_producer_epoch(self, epoch, offset):
        current = self.updated.producer_epoch
        if epoch < current:
            self._refuse(InvalidProducerEpochError,
                         f"epoch of producer {self.producer_id} at offset {offset} is {epoch}, "
                         f"which is smaller than the last seen epoch {current}")

    def _check_sequence(self, epoch, first_seq, offset):
        if epoch != self.updated.producer_epoch:
            if first_seq != 0 and self.updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence number for new epoch of producer {self.producer_id} at "
                    f"offset {offset}: {epoch} (request epoch), {first_seq} (seq. number), "
                    f"{self.updated.producer_epoch} (current producer epoch)")
            return
        if not self.updated.is_empty:
            current_last = self.updated.last_seq
        elif epoch == self.current.producer_epoch:
            current_last = self.current.last_seq
        else:
            current_last = NO_SEQUENCE
        # Any sequence is accepted only when the epoch is unknown (the producer's records
        # are all gone: retention, DeleteRecords); a known epoch with no batch (only a
        # marker left) expects 0.
        in_sequence = first_seq == current_last + 1 or \
            (first_seq == 0 and current_last == _INT32_MAX)
        if not (self.current.producer_epoch == NO_PRODUCER_EPOCH or in_sequence):
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {self.producer_id} at offset "
                f"{offset}: {first_seq} (incoming seq. number), {current_last} (current end "
                f"sequence number)")

    def append_data_batch(self, epoch, first_seq, last_seq, last_timestamp, first_offset,
                          last_offset, transactional):
        """Check and take in a data batch (sequences, offsets, its max timestamp in ms)."""
        self._check_producer_epoch(epoch, first_offset)
        # kafkalog's leader append serves clients and coordinators alike: a batch without
        # sequence numbers is a coordinator's, whose sequences Kafka does not check.
        if self.origin == CLIENT and first_seq != NO_SEQUENCE:
            self._check_sequence(epoch, first_seq, first_offset)
        self.updated.add_batch(epoch, last_seq, last_offset, last_offset - first_offset,
                               last_timestamp)
        current_txn = self.updated.current_txn_first_offset
        if current_txn is not None and not transactional:
            # A replica or a recovered log keeps the transaction open (the batch was written
            # by a leader; failing the load would leave the log unreadable).
            self._refuse(InvalidTxnStateError,
                         f"expected a transactional write from producer {self.producer_id} "
                         f"at offset {first_offset}: its transaction from offset "
                         f"{current_txn} is open")
        elif current_txn is None and transactional:
            self.updated.current_txn_first_offset = first_offset
            self.started_transactions.append(first_offset)

    def append_end_txn_marker(self, control_type, coordinator_epoch, epoch, offset,
                              timestamp):
        """Check and take in an end-transaction marker (``control_type`` ABORT 0 or COMMIT
        1; ``coordinator_epoch`` None when the marker has none). Returns the ``CompletedTxn``
        it ends, or None when the producer had no open transaction."""
        self._check_producer_epoch(epoch, offset)
        if coordinator_epoch is None:
            coordinator_epoch = self.updated.coordinator_epoch
        elif self.updated.coordinator_epoch > coordinator_epoch:
            self._refuse(TransactionCoordinatorFencedError,
                         f"invalid coordinator epoch for producer {self.producer_id} at offset "
                         f"{offset}: {coordinator_epoch} (zombie), "
                         f"{self.updated.coordinator_epoch} (current)")
        first = self.updated.current_txn_first_offset
        # A marker without data changes neither the last stable offset nor the txn index.
        completed = None if first is None else CompletedTxn(
            self.producer_id, first, offset, control_type == ControlType.ABORT)
        self.updated.end_transaction(epoch, coordinator_epoch, timestamp)
        return completed

    def append(self, buf, row, path=None):
        """Check and take in one v2 batch (a ``BATCH_DTYPE`` row over ``buf``); returns the
        ``CompletedTxn`` of a marker ending a transaction, else None."""
        epoch = int(row["producer_epoch"])
        if int(row["attributes"]) & CONTROL_MASK:
            control_type, coordinator_epoch = control_of(buf, row, path)
            if control_type not in (ControlType.ABORT, ControlType.COMMIT):
                return None        # empty (its transaction cleaned away) or not a marker
            return self.append_end_txn_marker(control_type, coordinator_epoch, epoch,
                                              int(row["base_offset"]),
                                              int(row["max_timestamp"]))
        first_seq = int(row["base_sequence"])
        first_offset, last_offset = int(row["base_offset"]), int(row["last_offset"])
        last_seq = NO_SEQUENCE if first_seq < 0 else \
            increment_sequence(first_seq, last_offset - first_offset)
        self.append_data_batch(epoch, first_seq, last_seq, int(row["max_timestamp"]),
                               first_offset, last_offset,
                               bool(int(row["attributes"]) & TRANSACTIONAL_MASK))
        return None


#: What ``ProducerStateManager.prepare_append`` found: the producers' ``ProducerAppendInfo``
#: (by producer id), the transactions completed (in offset order), and the ``BatchMetadata``
#: of the retained batch the append repeats (None when it is new).
PreparedAppend = collections.namedtuple("PreparedAppend", "infos completed duplicate")


class ProducerStateManager:
    """What the log keeps about producers (Kafka's ``ProducerStateManager``).

    ``producers``: producer id -> ``ProducerStateEntry``; ``ongoing``: producer id -> first
    offset of its open transaction; ``unreplicated``: first offset -> (producer id, marker
    offset) of the completed transactions whose marker is not yet below the high watermark.
    """

    def __init__(self, directory):
        self.directory = directory
        self.producers = {}
        self.ongoing = {}
        self.unreplicated = {}

    def clear(self):
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()

    def last_entry(self, producer_id):
        """The producer's ``ProducerStateEntry``, or None."""
        return self.producers.get(producer_id)

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
                entry = ProducerStateEntry.from_snapshot(
                    ProducerSnapshotEntry(*(int(x) for x in fields)))
                self.producers[entry.producer_id] = entry
                if entry.current_txn_first_offset is not None:
                    self.ongoing[entry.producer_id] = entry.current_txn_first_offset
            return offset
        return None

    # ------------------------------------------------------------------------------ appends
    def prepare_update(self, producer_id, origin):
        """A ``ProducerAppendInfo`` for the producer's next append from ``origin``."""
        current = self.producers.get(producer_id)
        return ProducerAppendInfo(producer_id, current if current is not None else
                                  ProducerStateEntry(producer_id), origin)

    def prepare_append(self, buf, batches, origin=CLIENT, path=None):
        """Check an append's v2 batches (``BATCH_DTYPE`` rows over ``buf``, offsets assigned)
        as Kafka's leader does; returns a ``PreparedAppend`` (nothing changes until
        ``commit``). Raises InvalidProducerEpochError, OutOfOrderSequenceError,
        InvalidTxnStateError or TransactionCoordinatorFencedError; a batch repeating one of
        its producer's retained batches makes the whole append a duplicate."""
        infos = {}
        completed = []
        for row in batches[(batches["magic"] == 2) & (batches["producer_id"] >= 0)]:
            pid = int(row["producer_id"])
            if origin == CLIENT and int(row["base_sequence"]) >= 0 and \
                    not int(row["attributes"]) & CONTROL_MASK:
                entry = self.producers.get(pid)
                if entry is not None:
                    first_seq = int(row["base_sequence"])
                    duplicate = entry.find_duplicate_batch(
                        int(row["producer_epoch"]), first_seq, increment_sequence(
                            first_seq, int(row["last_offset"] - row["base_offset"])))
                    if duplicate is not None:
                        return PreparedAppend({}, [], duplicate)
            info = infos.get(pid)
            if info is None:
                info = infos[pid] = self.prepare_update(pid, origin)
            txn = info.append(buf, row, path)
            if txn is not None:
                completed.append(txn)
        return PreparedAppend(infos, completed, None)

    def commit(self, prepared, txn_index=None):
        """Take in a written append: its producers' updates, then each completed transaction
        (an aborted one appended to ``txn_index`` when given, with its last stable offset)."""
        for info in prepared.infos.values():
            self.update(info)
        for txn in prepared.completed:
            self._complete(txn, txn_index)

    def apply_batches(self, buf, batches, path=None, txn_index=None):
        """Apply the batches (``BATCH_DTYPE`` rows over ``buf``) one by one in offset order,
        unchecked, as Kafka's recovery and load do: the loop by which recovery, load and
        replicated appends teach the state. Each aborted transaction completed on the way is
        appended to ``txn_index`` when given."""
        for row in batches[(batches["magic"] == 2) & (batches["producer_id"] >= 0)]:
            info = self.prepare_update(int(row["producer_id"]), REPLICATION)
            txn = info.append(buf, row, path)
            self.update(info)
            if txn is not None:
                self._complete(txn, txn_index)

    def _complete(self, txn, txn_index):
        if txn.is_aborted and txn_index is not None:
            txn_index.append(self.aborted_txn(txn))
        self.complete_txn(txn)

    def update(self, info):
        """Take in a ``ProducerAppendInfo`` (Kafka's ``update``)."""
        pid = info.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            self.producers[pid] = info.updated
        else:
            entry.merge(info.updated)
        # Only a transaction still open at the end of the append is ongoing (one begun and
        # ended within it is only completed).
        first = info.updated.current_txn_first_offset
        if first is not None and first in info.started_transactions:
            self.ongoing[pid] = first

    def complete_txn(self, txn):
        """Mark a transaction completed (after its aborted-txn entry is written): it stays
        unstable until the high watermark passes its marker (made so before it stops being
        ongoing: a reader's thread between the two would find it in neither)."""
        self.unreplicated[txn.first_offset] = (txn.producer_id, txn.last_offset)
        if self.ongoing.get(txn.producer_id) == txn.first_offset:
            del self.ongoing[txn.producer_id]

    def on_high_watermark_updated(self, high_watermark):
        """Forget the completed transactions whose marker is below ``high_watermark``."""
        if self.unreplicated:
            for first, (_, marker) in list(self.unreplicated.items()):
                if marker < high_watermark:
                    del self.unreplicated[first]

    def remove_expired_producers(self, now_ms, expiration_ms):
        """Forget producers idle longer than ``expiration_ms`` with no open transaction."""
        for pid, entry in list(self.producers.items()):
            if entry.current_txn_first_offset is None and \
                    now_ms - entry.last_timestamp >= expiration_ms:
                del self.producers[pid]

    # ------------------------------------------------------------------------------ offsets
    def last_stable_offset(self, completed):
        """The LSO to record with a completed transaction: the first offset of the earliest
        other ongoing transaction, else just past the marker."""
        others = [first for pid, first in self.ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def aborted_txn(self, completed):
        return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                          self.last_stable_offset(completed))

    def first_undecided_offset(self):
        """The first offset of the earliest open transaction, or None."""
        # one call: a reader's thread may run this while the writer's completes a transaction
        return min(self.ongoing.values(), default=None)

    def first_unstable_offset(self):
        """The first offset of the earliest transaction that is open or whose marker is not
        below the high watermark yet, or None."""
        first = self.first_undecided_offset()
        earliest = min(self.unreplicated, default=None)
        if earliest is not None:
            first = earliest if first is None else min(first, earliest)
        return first

    def last_records(self):
        """Producer id -> (offset of its last data batch, -1 when only a marker is known; its
        epoch): the batches compaction keeps of each producer (Kafka's
        ``lastRecordsOfActiveProducers``)."""
        return {pid: (entry.last_data_offset, entry.producer_epoch)
                for pid, entry in self.producers.items()}

    # ------------------------------------------------------------------------------ snapshots
    def take_snapshot(self, offset, unless_present=False):
        """Write ``<offset>.snapshot`` with every producer's state (done at roll and close),
        in the order Kafka writes them (its producer map's iteration order). ``unless_present``
        (at close): not at offset 0 nor when one is there already, as Kafka snapshots only past
        its last snapshot offset (0 at first): an idle partition's close writes nothing."""
        path = snapshot_path(self.directory, offset)
        if unless_present and (offset == 0 or os.path.exists(path)):
            return
        write_snapshot(path,
                       java_hash_map_order([e.to_snapshot() for e in self.producers.values()]))

    def delete_snapshot(self, offset):
        """Remove ``<offset>.snapshot`` when there is one (its segment was replaced)."""
        try:
            os.remove(snapshot_path(self.directory, offset))
        except FileNotFoundError:
            pass

    def close_snapshot(self, log_end, segments):
        """The snapshot a clean close takes at ``log_end`` (``take_snapshot(log_end, True)``),
        after deleting the snapshots that the next load would delete as strays
        (``stray_snapshot_offsets``: a previous close's, now below a later segment's base),
        so that it finds none."""
        self.remove_stray_snapshots([s.base_offset for s in segments] + [log_end])
        self.take_snapshot(log_end, True)

    def remove_stray_snapshots(self, segment_base_offsets):
        """Delete the snapshots ``stray_snapshot_offsets`` names."""
        offsets = [offset for offset, _ in list_snapshots(self.directory)]
        for offset in stray_snapshot_offsets(offsets, segment_base_offsets):
            self.delete_snapshot(offset)

    def delete_snapshots_above(self, offset):
        for snap_offset, path in list_snapshots(self.directory):
            if snap_offset > offset:
                os.remove(path)

    def delete_snapshots_below(self, offset):
        for snap_offset, path in list_snapshots(self.directory):
            if snap_offset < offset:
                os.remove(path)
