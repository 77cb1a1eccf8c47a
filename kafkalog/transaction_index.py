"""``TransactionIndex`` (``.txnindex``): the aborted transactions whose ABORT marker lies in a
segment."""
from __future__ import annotations

import os
import struct
import threading
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from kafkalog import storage
from kafkalog._layout import TXN_INDEX_ENTRY_SIZE
from kafkalog.errors import CorruptIndexError, InvalidOffsetError
from kafkalog.files import DELETED_SUFFIX

if TYPE_CHECKING:
    from kafkalog._typing import StrPath


class AbortedTxn(NamedTuple):
    """A transaction index entry: the producer and the offsets its aborted transaction spans
    (``last_offset`` is the ABORT marker's)."""
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

TXN_ENTRY_DTYPE = np.dtype([("version", ">i2"), ("producer_id", ">i8"), ("first_offset", ">i8"),
                            ("last_offset", ">i8"), ("last_stable_offset", ">i8")])
assert TXN_ENTRY_DTYPE.itemsize == TXN_INDEX_ENTRY_SIZE
_TXN_VERSION = 0
_TXN_ENTRY = struct.Struct(">hqqqq")

def _merged(entries, learned):
    """``entries`` with the ``learned`` ones they lack (by last offset), in last offset order."""
    have = set(entries["last_offset"].tolist())
    extra = [e for e in learned if e[3] not in have]
    if not extra:
        return entries
    merged = np.concatenate([entries, np.array(extra, TXN_ENTRY_DTYPE)])
    return merged[np.argsort(merged["last_offset"], kind="stable")]


class TxnIndexSearchResult(NamedTuple):
    """The aborted transactions a fetch overlaps, and whether later segments can add none."""
    aborted_transactions: list[AbortedTxn]
    is_complete: bool


class TransactionIndex:
    """The aborted transactions whose ABORT marker lies in this segment (``.txnindex``).

    34-byte entries, append-only, not preallocated; the file is created on the first append.
    """

    def __init__(self, path: StrPath, base_offset: int, read_only: bool = False) -> None:
        self.path = storage.normalize(os.fspath(path))
        self.base_offset = base_offset
        # A read-only log's index is not written: the aborts its load replayed from the .log
        # are kept here, as the writer may not have added their entries yet (it writes the
        # marker first) while the log's last stable offset already passes them.
        self._learned: list[tuple[int, int, int, int, int]] | None = [] if read_only else None
        self._last_offset: int | None = None
        self._lock = threading.RLock()
        # What was last read of the file: a deleted segment's index is read from it once the
        # file is gone (Kafka reads through the channel it keeps open)
        self._entries: np.ndarray | None = None

    def _read(self):
        path = self.path
        try:
            data = storage.read_file(path)
        except FileNotFoundError:
            data = self._moved(path)
            if data is None:      # never written, or its segment was deleted and removed
                return np.empty(0, TXN_ENTRY_DTYPE) if self._entries is None else self._entries
        if len(data) % TXN_INDEX_ENTRY_SIZE:
            raise CorruptIndexError(f"unexpected end of transaction index {self.path}: "
                                    f"{len(data)} bytes is not a whole number of entries")
        entries = np.frombuffer(data, TXN_ENTRY_DTYPE)
        bad = entries["version"] != _TXN_VERSION
        if bad.any():
            raise CorruptIndexError(
                f"unexpected aborted transaction version {int(entries['version'][bad][0])} in "
                f"transaction index {self.path}, current version is {_TXN_VERSION}")
        if self._learned:
            entries = _merged(entries, self._learned)
        self._entries = entries
        return entries

    def _moved(self, path):
        """The file's bytes when it is no longer at ``path`` because a deletion renamed it
        under the read (here, or for a read-only log in a writer's process: to ``.deleted``,
        removed later); None when it is nowhere. Read as "no entries", a read_committed read
        of a segment deleted under it returned its aborted transactions' records."""
        moved = [self.path] if self.path != path else []
        if not storage.is_remote(path):       # (object stores hold no .deleted files)
            moved.append(path + DELETED_SUFFIX)
        for candidate in moved:
            try:
                return storage.read_file(candidate)
            except FileNotFoundError:
                pass
        return None

    def entries_array(self) -> np.ndarray:
        """Every entry, as a numpy array of ``TXN_ENTRY_DTYPE``."""
        return self._read()

    def all_aborted_txns(self) -> list[AbortedTxn]:
        return [AbortedTxn(int(e["producer_id"]), int(e["first_offset"]), int(e["last_offset"]),
                           int(e["last_stable_offset"])) for e in self._read()]

    def append(self, aborted_txn: AbortedTxn) -> None:
        """Add an entry; its last offset must exceed the previous one appended. A read-only
        index keeps it in memory."""
        if self._learned is not None:
            self._learned.append((_TXN_VERSION, *aborted_txn))
            self._entries = None
            return
        with self._lock:
            if self._last_offset is not None and self._last_offset >= aborted_txn.last_offset:
                raise InvalidOffsetError(
                    f"the last offset of appended transactions must increase sequentially, but "
                    f"{aborted_txn.last_offset} is not greater than current last offset "
                    f"{self._last_offset} of index file {self.path}")
            self._last_offset = aborted_txn.last_offset
            self._entries = None
            with open(self.path, "ab") as f:
                f.write(_TXN_ENTRY.pack(_TXN_VERSION, aborted_txn.producer_id,
                                        aborted_txn.first_offset, aborted_txn.last_offset,
                                        aborted_txn.last_stable_offset))

    def collect_aborted_txns(self, fetch_offset: int,
                             upper_bound_offset: int) -> TxnIndexSearchResult:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset).

        ``is_complete`` is True once an entry's last stable offset reaches the upper bound:
        later segments cannot hold more transactions that matter to this fetch.
        """
        entries = self._read()
        if len(entries) == 0:
            return TxnIndexSearchResult([], False)
        complete = np.nonzero(entries["last_stable_offset"] >= upper_bound_offset)[0]
        end = int(complete[0]) + 1 if len(complete) else len(entries)
        chosen = entries[:end]
        mask = ((chosen["last_offset"] >= fetch_offset)
                & (chosen["first_offset"] < upper_bound_offset))
        txns = [AbortedTxn(int(e["producer_id"]), int(e["first_offset"]), int(e["last_offset"]),
                           int(e["last_stable_offset"])) for e in chosen[mask]]
        return TxnIndexSearchResult(txns, len(complete) > 0)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with last offset >= ``offset``."""
        with self._lock:
            entries = self._read()
            cut = np.nonzero(entries["last_offset"] >= offset)[0]
            if len(cut) == 0:
                return
            keep = int(cut[0])
            self._entries = None
            with open(self.path, "r+b") as f:
                f.truncate(keep * TXN_INDEX_ENTRY_SIZE)
            self._last_offset = int(entries["last_offset"][keep - 1]) if keep else None

    def reset(self) -> None:
        with self._lock:
            self._entries = None
            if os.path.exists(self.path):
                with open(self.path, "r+b") as f:
                    f.truncate(0)
            self._last_offset = None

    def sanity_check(self) -> None:
        """Raise CorruptIndexError if an entry's last offset is below the base offset."""
        entries = self._read()
        bad = entries["last_offset"] < self.base_offset
        if bad.any():
            e = entries[bad][0]
            raise CorruptIndexError(
                f"last offset of aborted transaction {tuple(int(x) for x in e)} in index "
                f"{self.path} is less than start offset {self.base_offset}")

    def flush(self) -> None:
        if os.path.exists(self.path):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        pass

    def rename_to(self, path: StrPath) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, path)
        self.path = os.fspath(path)
