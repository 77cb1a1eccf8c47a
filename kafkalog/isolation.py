"""read_committed: which batches belong to aborted transactions.

One filter for every reader (``Log.records``, the Spark reader, the cleaner). It follows
Kafka's consumer (``CompletedFetch.abortedProducerIds``): the aborted transactions of a range
come from the transaction indexes as (producer id, first offset); walking batches in offset
order, a producer enters "aborted" when a batch at or past its transaction's first offset is
reached, its transactional data batches are dropped while it is there, and its next control
batch (the ABORT marker) takes it out. A range may start inside a transaction (its first offset
is then already passed at the first batch) or after it (its marker's offset, the entry's last
offset, is then below the batch: it is over and ignored), so one list serves every task of a
partition.

``fetched_batches`` is the consumer's side of a read (Kafka's ``CompletedFetch``): the batches of
each ``FetchDataInfo`` with control records and aborted transactions left out, made into record
tables (``fetched_tables``) or Record objects (``fetched_records``).
"""
import numpy as np

from kafkalog.errors import InvalidConfigError, with_closest
from kafkalog.files import LOG_SUFFIX, file_path
from kafkalog._kernels import fetch_records
from kafkalog.records import (
    TYPE_OBJECTS, CONTROL_MASK, TRANSACTIONAL_MASK, RecordBatch, decode_batches,
)
from kafkalog.segment_walker import walk_segment

ISOLATIONS = ("log_end", "high_watermark", "committed")


def unknown_isolation(isolation: object) -> InvalidConfigError:
    """The error of an ``isolation`` that is none of ``ISOLATIONS`` (``Log.read``,
    ``Log.records``, ``Log.tables``), naming the closest one."""
    named = with_closest(str(isolation), ISOLATIONS, quote="'")
    return InvalidConfigError(f"isolation must be log_end, high_watermark or committed, "
                              f"not {named}")


class AbortedTxnFilter:
    """Marks the data batches of aborted transactions, batch by batch in offset order.

    ``aborted``: ``AbortedTxn`` entries (or ``(producer_id, first_offset, last_offset, ...)``
    tuples) that may affect the batches to come; more may be added with ``add`` as a read goes on. Feed
    every batch of the range, in order, to ``aborted_mask`` (several calls continue where
    the last stopped).
    """

    def __init__(self, aborted=()):
        self._pending = []       # (first offset, producer id, last offset) not yet reached
        self._seen = set()
        self._active = set()     # producer ids inside an aborted transaction
        self.add(aborted)

    def add(self, aborted):
        for txn in aborted or ():
            key = (int(txn[0]), int(txn[1]))
            if key not in self._seen:
                self._seen.add(key)
                self._pending.append((key[1], key[0], int(txn[2])))
        self._pending.sort(reverse=True)           # the next to reach is popped from the end

    def aborted_mask(self, batches):
        """A bool array over ``batches`` (``BATCH_DTYPE`` rows): True for data batches of
        aborted transactions. Control batches are never marked."""
        out = np.zeros(len(batches), dtype=bool)
        if not self._pending and not self._active:
            return out
        attributes = batches["attributes"]
        pids = batches["producer_id"]
        base = batches["base_offset"]
        last = batches["last_offset"]
        for i in range(len(batches)):
            while self._pending and self._pending[-1][0] <= last[i]:
                _, pid, marker = self._pending.pop()
                if marker >= base[i]:
                    self._active.add(pid)
            if not self._active:
                if not self._pending:
                    break
                continue
            pid = int(pids[i])
            if attributes[i] & CONTROL_MASK:
                self._active.discard(pid)      # the marker ends that producer's transaction
            elif attributes[i] & TRANSACTIONAL_MASK and pid in self._active:
                out[i] = True
        return out


def fetched_batches(read, reading, local, offset, end, isolation, include_control,
                    max_bytes, validate_crc):
    """The consumer's side of each read of [offset, end) of ``local`` (the log's ``LocalLog``),
    read with ``read(offset, max_bytes, isolation)`` (``Log.read``) and walked inside ``reading()``
    (the log's guard that turns a read cut by ``close()`` into LogClosedError): yields
    ``(data, batches, wanted, fetch_offset)``, the read's bytes, their walked batches (CRCs
    checked), a bool mask of the batches whose records are returned (control batches and
    aborted transactions left out) and the offset the read started at. A bad batch raises
    after the batches before it were yielded."""
    aborted = AbortedTxnFilter() if isolation == "committed" else None
    after = None         # the last offset read: the next read's batches start above it
    while offset < end:
        info = read(offset, max_bytes, isolation)
        if not info.records:
            break
        data = info.records
        meta = info.fetch_offset_metadata
        # Offsets increase from the segment's base and across reads: a batch whose base
        # offset (not covered by its CRC) is damaged raises OffsetsOutOfOrderError.
        # Below the next segment's base: a batch claiming a later segment's offsets is the
        # one named, not the batch after it.
        floor = meta.segment_base_offset - 1
        nxt = local.segments.higher(meta.segment_base_offset)
        with reading():
            walk = walk_segment(data, validate_crc=validate_crc,
                                position_base=meta.relative_position_in_segment,
                                path=file_path(local.directory, meta.segment_base_offset,
                                               LOG_SUFFIX),
                                after=floor if after is None else max(after, floor),
                                before=None if nxt is None else nxt.base_offset)
        batches = walk.batches
        if len(batches):
            wanted = np.ones(len(batches), dtype=bool) if include_control else \
                (batches["attributes"] & CONTROL_MASK) == 0
            if aborted is not None:
                aborted.add(info.aborted_transactions)
                wanted &= ~aborted.aborted_mask(batches)
            yield data, batches, wanted, offset
        # the batches before a bad one are returned, none of its records
        if walk.error is not None and local.loaded_tail is not None:
            # a read-only view's bytes that a writer cut or rewrote meanwhile (past a cut, a
            # mapped page reads as zeros) are no damage: reopen
            local.check_view_after_walk_error(meta.segment_base_offset)
        walk.raise_for_outcome()
        if len(batches) == 0:
            break
        after = int(batches["last_offset"][-1])
        offset = after + 1
        # Nothing here holds the read's copy into the next read (nor does fetched_records),
        # so that the allocator gives the next read the same memory, mapped and in cache (a
        # pass over bench-0 with 1 MiB reads faulted in 2,880 fresh pages otherwise).
        info = data = walk = None


def fetched_tables(read, reading, local, offset, end, isolation, include_control,
                   max_bytes, validate_crc):
    """The ``RecordTable`` chunks of [offset, end): each read's wanted records
    (``fetched_batches``), decoded inside ``reading()``."""
    for data, batches, wanted, start in fetched_batches(read, reading, local, offset, end,
                                                        isolation, include_control, max_bytes,
                                                        validate_crc):
        with reading():
            table = decode_batches(data, batches)
        keep = (table.records["offset"] >= start) & (table.records["offset"] < end) & \
            wanted[table.batch]
        if keep.all():
            yield table            # the common case: no copy of its columns
        elif keep.any():
            yield table.slice(keep)


def fetched_records(read, reading, local, offset, end, isolation, include_control,
                    max_bytes, validate_crc):
    """The records of [offset, end) as iterators of ``Record``, one per read (chain them):
    the kernel's ``fetch_records`` over the wanted batches, a plain v2 batch decoded into its
    reused scratch table (its Records made as the loop goes), any other batch through its
    ``RecordBatch`` table, and a batch that crosses ``offset`` or ``end`` through its wanted
    rows. A batch's records are decoded and checked before the first is returned (the read's
    bytes are a copy: no file is read meanwhile)."""
    for data, batches, wanted, start in fetched_batches(read, reading, local, offset, end,
                                                        isolation, include_control, max_bytes,
                                                        validate_crc):
        inside = (batches["base_offset"] >= start) & (batches["last_offset"] < end)

        def other(i, data=data, batches=batches, inside=inside, start=start):
            if inside[i]:           # compressed, legacy or bad: its table (or its error)
                return iter(RecordBatch(data, batches[i]).table())
            table = decode_batches(data, batches[i:i + 1])
            offsets = table.records["offset"]
            return iter(table.slice((offsets >= start) & (offsets < end)))
        rows = np.flatnonzero(wanted)
        yield fetch_records(data, batches, rows, inside[rows], TYPE_OBJECTS, other)
        data = other = None         # (see fetched_batches)
