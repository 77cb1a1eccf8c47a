"""The leader epoch cache of a partition and its ``leader-epoch-checkpoint`` file, as Kafka's
LeaderEpochFileCache keeps them: (epoch, start offset) pairs, each epoch's first offset."""
import bisect
import collections
import os
import threading

from kafkalog.checkpoint import read_leader_epoch_checkpoint, write_leader_epoch_checkpoint
from kafkalog import storage
from kafkalog._kernels import walk_batches
from kafkalog.files import LEADER_EPOCH_CHECKPOINT

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

EpochEntry = collections.namedtuple("EpochEntry", "epoch start_offset")


class LeaderEpochCache:
    """Epochs in increasing order of both epoch and start offset; every change is written to
    the checkpoint file (atomically) when the cache has one."""

    def __init__(self, path=None, entries=()):
        self.path = None if path is None else os.fspath(path)
        self._entries = [EpochEntry(*e) for e in entries]
        self._lock = threading.RLock()
        #: called after every change (a log's armed appender holds the latest epoch)
        self.on_change = None

    @classmethod
    def load(cls, directory, create=True, read_only=False):
        """The cache of a partition directory, from its checkpoint file (when missing and
        ``create``, written at the first change: an empty cache has nothing to lose, and a new
        partition costs no fsync for it); ``read_only``: changes stay in memory, never
        written."""
        path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)
        if storage.exists(path):
            return cls(None if read_only else path, read_leader_epoch_checkpoint(path))
        return cls(path if create else None)

    @property
    def entries(self):
        return list(self._entries)

    def latest_epoch(self):
        return self._entries[-1].epoch if self._entries else None

    def latest_entry(self):
        return self._entries[-1] if self._entries else None

    def _changed(self):
        if self.on_change is not None:
            self.on_change()
        if self.path is not None:
            write_leader_epoch_checkpoint(self.path, [tuple(e) for e in self._entries])

    def assign(self, epoch, start_offset):
        """Record that ``epoch`` starts at ``start_offset``; later entries that would no
        longer increase are dropped. Returns True when the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid epoch entry ({epoch}, {start_offset})")
        with self._lock:
            latest = self.latest_entry()
            if latest is not None and latest.epoch == epoch and \
                    start_offset >= latest.start_offset:
                return False
            self._entries = [e for e in self._entries
                             if e.epoch < epoch and e.start_offset < start_offset]
            self._entries.append(EpochEntry(epoch, start_offset))
            self._changed()
            return True

    def assign_from_append(self, epoch, first_offset, data, batches, n_batches):
        """The cache update of an append whose largest partition leader epoch is ``epoch``
        (``batches``: its walked batches, or None to walk ``data`` when needed), as Kafka's
        append does when the epoch is newer than the cache's latest."""
        entries = self._entries        # (latest_epoch() inline: once per append)
        if entries and epoch <= entries[-1].epoch:
            return
        if n_batches == 1:      # the epoch is the batch's, without walking it again
            self.assign(epoch, first_offset)
            return
        if batches is None:
            batches = walk_batches(data, validate_crc=False)[0]
        self.assign_from_batches(batches)

    def assign_from_batches(self, batches):
        """Assign the epochs of appended v2 batches (``BATCH_DTYPE`` rows) newer than the
        latest, at each such batch's base offset, as Kafka's append does."""
        changed = False
        for row in batches[(batches["magic"] == 2) & (batches["partition_leader_epoch"] >= 0)]:
            epoch = int(row["partition_leader_epoch"])
            latest = self.latest_epoch()
            if latest is None or epoch > latest:
                changed |= self.assign(epoch, int(row["base_offset"]))
        return changed

    def truncate_from_end(self, end_offset):
        """Drop the entries that start at or after ``end_offset`` (the log was truncated)."""
        with self._lock:
            if end_offset >= 0 and self._entries and self._entries[-1].start_offset >= end_offset:
                self._entries = [e for e in self._entries if e.start_offset < end_offset]
                self._changed()

    def truncate_from_start(self, start_offset):
        """The log start offset moved to ``start_offset``: entries before it go, and the one
        covering it now starts there."""
        with self._lock:
            starts = [e.start_offset for e in self._entries]
            i = bisect.bisect_right(starts, start_offset) - 1
            if i < 0:
                return
            covering = self._entries[i]
            if i == 0 and covering.start_offset == start_offset:
                return
            self._entries = [EpochEntry(covering.epoch, start_offset)] + self._entries[i + 1:]
            self._changed()

    def end_offset_for(self, requested_epoch, log_end_offset):
        """Kafka's OffsetsForLeaderEpoch answer: (epoch, end offset) — the largest epoch <= the
        requested one and the start offset of the next epoch (the log end offset for the
        latest epoch); (-1, -1) when unknown."""
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._entries:
                return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
            if self._entries[-1].epoch == requested_epoch:
                return (requested_epoch, log_end_offset)
            epochs = [e.epoch for e in self._entries]
            higher = bisect.bisect_right(epochs, requested_epoch)
            if higher >= len(epochs):
                return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
            floor = higher - 1
            if floor < 0:
                return (requested_epoch, self._entries[higher].start_offset)
            return (self._entries[floor].epoch, self._entries[higher].start_offset)

    def clear(self):
        with self._lock:
            self._entries = []
            self._changed()

    def __repr__(self):
        return f"LeaderEpochCache({self._entries})"
