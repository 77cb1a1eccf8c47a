"""``kafkalog dump``: the DUMP_JSON document (``../shared/docs/DUMP_JSON.md``) and a
kafka-dump-log style listing, both streamed.

A ``.log`` file is read in bounded chunks of whole batches (64 KiB growing to 256 KiB; more only
for one batch larger than that): each chunk is walked, its CRCs checked, its records decoded
and rendered before the next one is read, so the first lines come at once and memory does not
grow with the size of a segment or a partition. ``iter_json`` writes the document piece by
piece; joined, the pieces are the document ``dump_partition`` returns.

Damage is reported where it is met and the rest is still dumped: a batch whose CRC fails or
whose records cannot be decoded (its size field is intact, so the walk goes on after it), bytes
at the end of a ``.log`` that are not a whole batch (kafka-dump-log's "Found N invalid bytes at
the end of"), a batch header that makes no sense (the walk cannot find the next batch: the
segment's listing stops there with the count of bytes left), an index, ``.txnindex``,
``.snapshot`` or checkpoint that cannot be read. Every such problem goes into the
``DumpReport`` given to the iterators and into the document's ``problems``.

``dump`` never creates, resizes or rewrites a file: indexes are opened read-only.
"""
from __future__ import annotations

import binascii
import hashlib
import json
import os
import re
import stat
import struct
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import numpy as np

from kafkalog import codecs, storage
from kafkalog._kernels import span_bytes, walk_batches
from kafkalog._layout import BATCH_DTYPE, LOG_OVERHEAD, WALK_CORRUPT, WALK_END
from kafkalog.checkpoint import read_leader_epoch_checkpoint
from kafkalog.errors import InternalRecordError, InvalidConfigError, KafkaLogError
from kafkalog.files import (
    INDEX_SUFFIX, INDEX_SUFFIXES, LEADER_EPOCH_CHECKPOINT, LOG_SUFFIX, SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, file_path, kraft_snapshot_files, offsets_of,
    parse_file_name, parse_kraft_snapshot_name, partition_dirs, topic_partition_or_none,
)
from kafkalog.internal.decode import (
    DECODERS, decode_control, decode_record, decoder_for_topic,
)
from kafkalog.index import TXN_ENTRY_DTYPE, OffsetIndex, TimeIndex, TransactionIndex
from kafkalog.producer_state import read_snapshot
from kafkalog.records import (
    COMPRESSION_MASK, CONTROL_MASK, DELETE_HORIZON_MASK, TRANSACTIONAL_MASK, NO_SEQUENCE,
    ControlType, RecordTable, TimestampType, decode_batches, increment_sequence,
    parse_control_record, timestamp_type_of,
)

if TYPE_CHECKING:
    from kafkalog._typing import StrPath

RECORD_MODES = ("full", "digest", "none")
DECODER_CHOICES = ("auto", "none") + DECODERS
PAYLOAD_FORMATS = ("text", "hex", "base64")

_FIRST_CHUNK = 64 * 1024        # the first lines come after reading this much
_MAX_CHUNK = 256 * 1024        # chunks grow to this (one larger batch is read whole)
_INDEX_CHUNK = 65536            # index entries rendered at a time

# BATCH_DTYPE's fields in order: ``rows.tolist()`` tuples are unpacked by position.
_BATCH_FIELDS = ("position", "base_offset", "last_offset", "max_timestamp", "base_timestamp",
                 "producer_id", "size", "record_count", "partition_leader_epoch",
                 "base_sequence", "crc", "attributes", "producer_epoch", "magic", "crc_valid")
assert BATCH_DTYPE.names == _BATCH_FIELDS

# kafka-dump-log's names of the timestamp types (Kafka's TimestampType.toString).
_TIMESTAMP_LABELS = {"CREATE_TIME": "CreateTime", "LOG_APPEND_TIME": "LogAppendTime",
                     "NO_TIMESTAMP_TYPE": "NoTimestampType"}


class DumpOptions:
    """What a dump shows.

    Parameters
    ----------
    records : {"full", "digest", "none"}
        Every record; only ``record_count`` and ``records_sha256`` per segment; or neither
        (records are then not decoded, batch headers only).
    max_bytes : int or None
        Read at most this many bytes of each ``.log`` file, as kafka-dump-log's
        ``--max-bytes`` (a batch that does not end within them is not shown); None reads all.
    start_offset, end_offset : int or None
        Only batches holding offsets in ``[start_offset, end_offset)`` and only their records in
        that range; segments wholly outside it are skipped. None leaves that side open.
    payload : {"text", "hex", "base64"}
        How the text listing shows keys and values: printable text with every other byte
        escaped (``\\n``, ``\\xNN``, ``\\\\``), hex, or base64. The JSON document always uses
        base64.
    decoder : {"auto", "none", "offsets", "transaction-log", "cluster-metadata"}
        How keys and values of Kafka's internal topics are decoded (kafka-dump-log's
        ``--offsets-decoder``, ``--transaction-log-decoder``, ``--cluster-metadata-decoder``):
        "auto" decodes ``__consumer_offsets``, ``__transaction_state`` and
        ``__cluster_metadata`` by the partition directory's topic, "none" never decodes. The
        text listing then prints kafka-dump-log's ``key: ... payload: ...`` strings, the JSON
        document adds ``"decoded"`` to each data record (``kafkalog.internal.decode``).
    """
    __slots__ = ("records", "max_bytes", "start_offset", "end_offset", "payload", "decoder")

    def __init__(self, records: str = "full", max_bytes: int | None = None,
                 start_offset: int | None = None, end_offset: int | None = None,
                 payload: str = "text", decoder: str = "auto") -> None:
        if decoder not in DECODER_CHOICES:
            raise InvalidConfigError(f"decoder must be one of {DECODER_CHOICES}")
        self.decoder = decoder
        if records not in RECORD_MODES:
            raise InvalidConfigError(f"records mode must be one of {RECORD_MODES}")
        if payload not in PAYLOAD_FORMATS:
            raise InvalidConfigError(f"payload format must be one of {PAYLOAD_FORMATS}")
        if max_bytes is not None and max_bytes < 0:
            raise InvalidConfigError(f"max bytes must not be negative, not {max_bytes}")
        if start_offset is not None and end_offset is not None and end_offset < start_offset:
            raise InvalidConfigError(f"end offset {end_offset} is below start offset "
                                     f"{start_offset}")
        self.records = records
        self.max_bytes = max_bytes
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.payload = payload

    @property
    def has_range(self) -> bool:
        return self.start_offset is not None or self.end_offset is not None

    def limits(self) -> dict[str, int] | None:
        """The limits set, for the JSON document (None when the dump is complete)."""
        out = {k: getattr(self, k) for k in ("max_bytes", "start_offset", "end_offset")
               if getattr(self, k) is not None}
        return out or None


class DumpReport:
    """The damage a dump met, in the order met.

    ``problems`` is a list of ``{"file", "position", "message"}``: the file's path, the byte
    position in it (None when the whole file is at fault) and what is wrong.
    """

    def __init__(self) -> None:
        self.problems: list[dict[str, Any]] = []

    def add(self, path: StrPath, position: int | None, message: str) -> dict[str, Any]:
        problem = {"file": os.fspath(path), "position": position, "message": message}
        self.problems.append(problem)
        return problem

    @property
    def damaged(self) -> bool:
        return bool(self.problems)


def _options(options, records_mode=None):
    if options is None:
        return DumpOptions(records=records_mode or "full")
    return options


# ----------------------------------------------------------------------------------------------
# Walking a .log file in chunks

class _Chunk:
    """Whole batches of one read, with their records.

    ``rows``: ``BATCH_DTYPE`` with file positions; ``bases``: each batch's first offset (for
    a legacy compressed wrapper, its first inner record's); ``table``: their records (``batch``
    indexes ``rows``), or None when records were not decoded; ``starts``: the record range of
    batch i is ``starts[i]:starts[i + 1]``; ``errors``: batch index -> why its records could not
    be decoded; ``controls``: record index -> ``_control`` of each control record.
    """
    __slots__ = ("rows", "bases", "table", "starts", "errors", "controls", "_cols", "_b64")

    def __init__(self, rows, bases, table, errors):
        self.rows = rows
        self.bases = bases
        self.table = table
        self.errors = errors
        self.starts = (np.searchsorted(table.batch, np.arange(len(rows) + 1)).tolist()
                       if table is not None else None)
        self.controls = {}
        self._cols = None
        self._b64 = None

    def columns(self):
        """The records as Python lists (one kernel call per column)."""
        if self._cols is None:
            self._cols = _Columns(self.table)
        return self._cols

    def b64(self):
        """(keys, values) in base64, None for null."""
        if self._b64 is None:
            cols = self.columns()
            self._b64 = (_b64_list(cols.keys), _b64_list(cols.values))
        return self._b64


class _Columns:
    __slots__ = ("offsets", "timestamps", "sizes", "key_lens", "value_lens", "header_counts",
                 "sequences", "legacy_crcs", "keys", "values", "headers")

    def __init__(self, table):
        r = table.records
        self.offsets = r["offset"].tolist()
        self.timestamps = r["timestamp"].tolist()
        self.sizes = r["size"].tolist()
        self.key_lens = r["key_len"].tolist()
        self.value_lens = r["value_len"].tolist()
        self.header_counts = r["header_count"].tolist()
        self.sequences = table.sequence.tolist()
        self.legacy_crcs = table.legacy_crc.tolist()
        data = table.data if len(table.data) else b"\0"
        self.keys = span_bytes(data, np.ascontiguousarray(r["key_pos"]),
                               np.ascontiguousarray(r["key_len"]))
        self.values = span_bytes(data, np.ascontiguousarray(r["value_pos"]),
                                 np.ascontiguousarray(r["value_len"]))
        self.headers = {int(i): table.headers_of(int(i))
                        for i in np.flatnonzero(r["header_count"])}


def _b64(data):
    return None if data is None else binascii.b2a_base64(data, newline=False).decode("ascii")


def _b64_list(items):
    b2a = binascii.b2a_base64
    return [b2a(x, newline=False).decode() if x is not None else None for x in items]


class _SegmentScan:
    """One ``.log`` file walked in chunks (``chunks()``), and what the walk found.

    After ``chunks()`` is exhausted: ``error`` (a structural error that stopped the walk, or
    None), ``invalid_bytes`` (bytes after the last whole batch that were not dumped because
    they are damaged or torn), ``next_offset``, ``record_count``, ``records_sha256``.
    """

    def __init__(self, path, options, report):
        self.path = os.fspath(path)
        self.name = os.path.basename(self.path)
        parsed = parse_file_name(self.name)
        self.base_offset = parsed[0] if parsed else 0
        self.options = options
        self.report = report
        try:
            self.size = storage.size_of(self.path)
        except OSError as e:            # removed meanwhile (a .deleted rename)
            report.add(self.path, None, f"cannot read the segment: {e}")
            self.size = 0
        self.end = self.size if options.max_bytes is None else min(self.size,
                                                                    options.max_bytes)
        self.error = None
        self.invalid_bytes = 0
        self.next_offset = self.base_offset
        self.record_count = 0
        self._sha = hashlib.sha256() if options.records != "none" else None

    @property
    def records_sha256(self):
        return self._sha.hexdigest() if self._sha is not None else None

    def chunks(self):
        """Yield a ``_Chunk`` per read, until the end, a structural error or the end offset."""
        want = _FIRST_CHUNK
        pos = 0
        if self.end == 0:
            return
        try:
            f = storage.open_file(self.path)
        except OSError as e:
            self.report.add(self.path, None, f"cannot read the segment: {e}")
            return
        with f:
            while pos < self.end:
                f.seek(pos)
                buf = f.read(min(want, self.end - pos))
                if not buf:                        # the file shrank meanwhile
                    break
                at_end = pos + len(buf) >= self.end
                batches, status, stop, message = walk_batches(buf, validate_crc=True)
                if len(batches):
                    chunk, past_end = self._chunk(buf, pos, batches)
                    if chunk is not None:
                        yield chunk
                    if past_end:
                        return
                if status == WALK_CORRUPT:
                    # The size field cannot be trusted: no way to find the next batch.
                    self.error = message
                    self.invalid_bytes = self.end - (pos + stop)
                    self.report.add(self.path, pos + stop,
                                    f"{message}; {self.invalid_bytes} bytes from here on "
                                    f"were not dumped")
                    return
                if status == WALK_END:
                    pos += stop
                    want = min(want * 2, _MAX_CHUNK)
                    continue
                if not at_end and len(batches):
                    pos += stop
                    want = min(want * 2, _MAX_CHUNK)
                    continue
                if not at_end:
                    # No whole batch in the read: one larger than it, or a size field that
                    # runs past the end (then it is the tail: no need to read it).
                    declared = struct.unpack_from(">i", buf, stop + 8)[0]
                    if pos + stop + LOG_OVERHEAD + declared <= self.end:
                        want = max(want * 2, declared + LOG_OVERHEAD)
                        continue
                pos += stop                        # a tail that is not a whole batch
                if self.end == self.size:          # not merely cut by --max-bytes
                    self.invalid_bytes = self.end - pos
                    self.report.add(self.path, pos,
                                    f"{self.invalid_bytes} invalid bytes at the end")
                return

    def _chunk(self, buf, pos, batches):
        """(the chunk of these walked batches or None, whether the end offset is passed)."""
        opts = self.options
        n = len(batches)
        keep = np.ones(n, dtype=bool)
        if opts.start_offset is not None:
            keep &= batches["last_offset"] >= opts.start_offset
        past_end = (opts.end_offset is not None
                    and bool((batches["last_offset"] >= opts.end_offset - 1).any()))
        magic = batches["magic"]
        wrappers = (magic < 2) & ((batches["attributes"] & COMPRESSION_MASK) != 0)
        decode = keep if opts.records != "none" else keep & wrappers
        table, errors = (_decode_chunk(buf, batches, np.flatnonzero(decode), self.path)
                         if decode.any() else (None, {}))
        bases = batches["base_offset"].copy()
        if table is not None and wrappers.any():
            # A legacy wrapper's own offset is its last inner record's.
            firsts = np.searchsorted(table.batch, np.arange(n))
            has = firsts < len(table)
            has[has] = table.batch[firsts[has]] == np.arange(n)[has]
            fix = wrappers & has
            bases[fix] = table.records["offset"][firsts[fix]]
        if opts.end_offset is not None:
            keep &= bases < opts.end_offset
        if not keep.any():
            return None, past_end
        rows = batches[keep]
        rows["position"] += pos
        bases = bases[keep]
        if not keep.all():
            remap = np.cumsum(keep) - 1
            errors = {int(remap[i]): e for i, e in errors.items() if keep[i]}
        if table is not None:
            mask = keep[table.batch]
            if opts.has_range:
                offsets = table.records["offset"]
                if opts.start_offset is not None:
                    mask &= offsets >= opts.start_offset
                if opts.end_offset is not None:
                    mask &= offsets < opts.end_offset
            if not mask.all():
                table = table.slice(mask)
            if not keep.all():
                table.batch = (np.cumsum(keep) - 1)[table.batch].astype(np.int32)
        if opts.records == "none":
            counts = np.where(rows["magic"] == 2, rows["record_count"], 1)
            if table is not None:   # legacy wrappers: their decoded records count
                in_wrappers = np.bincount(table.batch, minlength=len(rows))
                counts = np.where(wrappers[keep], in_wrappers, counts)
            self.record_count += int(counts.sum())
            table = None
        else:
            self.record_count += len(table)
        chunk = _Chunk(rows, bases, table, errors)
        self.next_offset = int(rows["last_offset"][-1]) + 1
        if table is not None:
            self._read_controls(chunk)
        for i in np.flatnonzero(rows["crc_valid"] == 0):
            r = rows[i]
            self.report.add(self.path, int(r["position"]),
                            f"batch (offsets {int(bases[i])}..{int(r['last_offset'])}) failed "
                            f"its CRC check (stored crc {int(r['crc'])})")
        for i, e in errors.items():
            self.report.add(self.path, int(rows["position"][i]),
                            f"records of batch (offsets {int(bases[i])}.."
                            f"{int(rows['last_offset'][i])}) cannot be decoded: {e}")
        if self._sha is not None and len(chunk.table):
            self._sha.update(_sha_lines(chunk))
        return chunk, past_end

    def _read_controls(self, chunk):
        rows = chunk.rows
        control = (rows["magic"] == 2) & ((rows["attributes"] & CONTROL_MASK) != 0)
        if not control.any():
            return
        cols = chunk.columns()
        for i in np.flatnonzero(control).tolist():
            for j in range(chunk.starts[i], chunk.starts[i + 1]):
                c = chunk.controls[j] = _control(cols.keys[j], cols.values[j])
                if c[3] is not None:
                    self.report.add(self.path, int(rows["position"][i]),
                                    f"control record at offset {cols.offsets[j]} cannot be "
                                    f"read: {c[3]}")


def _decode_chunk(buf, batches, which, path):
    """(records of ``batches[which]`` with ``batch`` indexing ``batches``, {batch index: why its
    records cannot be decoded})."""
    try:
        table = decode_batches(buf, batches[which], path)
        table.batch = which[table.batch].astype(np.int32)
        return table, {}
    except KafkaLogError:
        pass
    # Batch by batch, to find the damaged ones and keep the others.
    tables, errors = [], {}
    for i in which.tolist():
        try:
            t = decode_batches(buf, batches[i:i + 1], path)
        except KafkaLogError as e:
            # The batch's position is reported beside the reason; the one in the message
            # would be in the chunk, not in the file.
            errors[i] = getattr(e, "reason", None) or _BATCH_AT.sub("", str(e))
            continue
        t.batch[:] = i
        tables.append(t)
    return RecordTable.concat(tables), errors


_BATCH_AT = re.compile(r" \(batch at position \d+[^)]*\)")


def _sha_lines(chunk):
    """The DUMP_JSON digest lines of a chunk's records, UTF-8."""
    cols = chunk.columns()
    keys, values = chunk.b64()
    counts = cols.header_counts
    lines = []
    for i, (o, t, k, v, c) in enumerate(zip(cols.offsets, cols.timestamps, keys, values,
                                            counts)):
        line = f"{o}\t{t}\t{'-' if k is None else k}\t{'-' if v is None else v}\t{c}"
        if c:
            for hk, hv in cols.headers[i]:
                line += f"\t{hk}\t{'-' if hv is None else _b64(hv)}"
        lines.append(line)
    lines.append("")
    return "\n".join(lines).encode("utf-8")


def _batch_dict(row, base_offset):
    """The DUMP_JSON fields of one batch (``row`` a ``BATCH_DTYPE`` tuple), without records."""
    (position, header_base, last_offset, max_timestamp, base_timestamp, producer_id, size,
     record_count, leader_epoch, base_sequence, crc, attributes, producer_epoch, magic,
     crc_valid) = row
    codec = attributes & COMPRESSION_MASK
    d = {
        "base_offset": base_offset,
        "last_offset": last_offset,
        "position": position,
        "size_in_bytes": size,
        "magic": magic,
        "crc": crc,
        "crc_valid": crc_valid == 1,
        "compression": codecs.CODEC_NAMES.get(codec, str(codec)),
        "timestamp_type": timestamp_type_of(magic, attributes).name,
        "max_timestamp": max_timestamp,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "base_sequence": base_sequence,
        "last_sequence": (NO_SEQUENCE if magic < 2 or base_sequence == NO_SEQUENCE else
                          increment_sequence(base_sequence, last_offset - header_base)),
        "is_transactional": magic == 2 and bool(attributes & TRANSACTIONAL_MASK),
        "is_control": magic == 2 and bool(attributes & CONTROL_MASK),
        "partition_leader_epoch": leader_epoch,
        "record_count_header": record_count if magic == 2 else None,
    }
    if magic == 2 and attributes & DELETE_HORIZON_MASK:
        d["delete_horizon_ms"] = base_timestamp
    return d


def _control(key, value):
    """(type name, type id, coordinator epoch or None, error or None) of a control record."""
    try:
        kind, epoch = parse_control_record(key, value)
    except KafkaLogError as e:
        return "UNKNOWN", -1, None, getattr(e, "reason", None) or str(e)
    if kind in (ControlType.ABORT, ControlType.COMMIT) and epoch is None:
        return kind.name, int(kind), None, "end transaction marker value is too short"
    if isinstance(kind, ControlType):
        return kind.name, int(kind), epoch, None
    return str(kind), int(kind), epoch, None


# ----------------------------------------------------------------------------------------------
# Indexes, transaction indexes, snapshots, the leader-epoch checkpoint

def _read_index(cls, path, base_offset):
    """(head dict, first column, second column, extra fields) of an offset or time index."""
    index = cls(path, base_offset, writable=False)
    try:
        valid = index.valid_entries()
        head = {"file": os.path.basename(path), "file_size": index.length,
                "entries_count": index.entries, "zero_tail_entries": index.entries - valid}
        a, b = index.entries_array()
        extra = {}
        if cls is TimeIndex:
            extra["last_entry"] = [int(index.last_entry.timestamp),
                                   int(index.last_entry.offset)]
    finally:
        index.close_handler()
    return head, a[:valid], b[:valid], extra


def _index_or_problem(cls, path, base_offset, report):
    """``_read_index``'s result, None when there is no file, or a dict with ``error`` when it
    cannot be read (reported). A partial entry at the end is reported and left out (Kafka's
    sanity check refuses such a file; its readers ignore the partial entry)."""
    if not storage.exists(path):
        return None
    try:
        read = _read_index(cls, path, base_offset)
    except (KafkaLogError, OSError, ValueError) as e:
        report.add(path, None, f"cannot read the index: {e}")
        return {"file": os.path.basename(path), "file_size": _size_or_none(path),
                "error": str(e)}
    head = read[0]
    partial = head["file_size"] % cls.entry_size
    if partial:
        head["trailing_bytes"] = partial
        report.add(path, head["file_size"] - partial,
                   f"{partial} trailing bytes are not a whole {cls.entry_size}-byte entry")
    return read


def _size_or_none(path):
    try:
        return storage.size_of(path)
    except OSError:
        return None


def _txn_entry_dicts(entries):
    return [{"version": int(e["version"]), "producer_id": int(e["producer_id"]),
             "first_offset": int(e["first_offset"]), "last_offset": int(e["last_offset"]),
             "last_stable_offset": int(e["last_stable_offset"])} for e in entries]


def _txn_index(path, base_offset, report):
    """The ``txn_index`` entry; a damaged file is reported and the whole entries before the
    damage listed."""
    if not storage.exists(path):
        return None
    d = {"file": os.path.basename(path), "file_size": _size_or_none(path)}
    try:
        d["entries"] = _txn_entry_dicts(TransactionIndex(path, base_offset).entries_array())
    except (KafkaLogError, OSError) as e:
        report.add(path, None, str(e))
        d["entries"] = _txn_entries_before_damage(path)
        d["error"] = str(e)
    return d


def _txn_entries_before_damage(path):
    # TransactionIndex refuses the whole file; the entries before the damage still tell what
    # was aborted.
    try:
        data = storage.read_file(path)
    except (OSError, KafkaLogError):
        return []
    whole = len(data) - len(data) % TXN_ENTRY_DTYPE.itemsize
    entries = np.frombuffer(data[:whole], TXN_ENTRY_DTYPE)
    bad = np.flatnonzero(entries["version"] != 0)
    return _txn_entry_dicts(entries[:bad[0]] if len(bad) else entries)


def dump_snapshot(path: StrPath) -> list[dict[str, Any]]:
    """The ``producer_snapshots[].entries`` of a ``.snapshot`` file; raises
    CorruptSnapshotError for a damaged one."""
    out = []
    for e in read_snapshot(path):
        last_seq, delta = int(e["last_sequence"]), int(e["offset_delta"])
        first_txn = int(e["current_txn_first_offset"])
        out.append({
            "producer_id": int(e["producer_id"]), "producer_epoch": int(e["producer_epoch"]),
            "coordinator_epoch": int(e["coordinator_epoch"]),
            "last_timestamp": int(e["timestamp"]),
            "first_seq": _decrement_sequence(last_seq, delta) if last_seq >= 0 else last_seq,
            "last_seq": last_seq, "last_data_offset": int(e["last_offset"]),
            "last_offset_delta": delta,
            "current_txn_first_offset": first_txn if first_txn >= 0 else None,
        })
    return out


def _decrement_sequence(sequence, decrement):
    if sequence < decrement:
        return 2**31 - 1 - (decrement - sequence) + 1
    return sequence - decrement


def _snapshot(path, report):
    """The ``producer_snapshots[]`` entry; a damaged file is reported, with no entries."""
    d = {"file": os.path.basename(path)}
    try:
        d["entries"] = dump_snapshot(path)
    except (KafkaLogError, OSError) as e:
        report.add(path, None, str(e))
        d["entries"] = []
        d["error"] = str(e)
    return d


def _leader_epochs(path, report):
    if not storage.exists(path):
        return None
    try:
        return [{"epoch": e, "start_offset": o} for e, o in read_leader_epoch_checkpoint(path)]
    except (KafkaLogError, OSError, ValueError) as e:
        report.add(path, None, f"cannot read the leader-epoch checkpoint: {e}")
        return None


def _file_sizes(path, names):
    """Name and size of every regular file; a file that vanishes meanwhile (a ``.deleted``
    segment removed by a running log) is left out."""
    if storage.is_remote(path):
        wanted = set(names)
        return [{"name": e.name, "size": e.size} for e in storage.list_dir(path)
                if e.is_file and e.name in wanted]
    out = []
    for n in names:
        try:
            st = os.stat(os.path.join(path, n))
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.append({"name": n, "size": st.st_size})
    return out


# ----------------------------------------------------------------------------------------------
# What a path names

def _partition_dirs(path):
    """The partition directories a dump of ``path`` covers (a directory that is none, e.g. an
    empty one, is dumped as itself)."""
    return partition_dirs(path, named=True) or [storage.abspath(path)]


KRAFT_SNAPSHOT = "kraft-snapshot"


def _file_kind(path):
    """(kind, base offset) of a single file dump's path; raises KafkaLogError for others."""
    name = os.path.basename(path)
    parsed = parse_file_name(name)
    kind = parsed[1] if parsed is not None and not parsed[2] else None
    if name == LEADER_EPOCH_CHECKPOINT:
        kind = name
    elif parse_kraft_snapshot_name(name) is not None:
        kind = KRAFT_SNAPSHOT
    elif kind not in (LOG_SUFFIX, SNAPSHOT_SUFFIX) + INDEX_SUFFIXES:
        raise KafkaLogError(f"{path}: not a partition directory or a Kafka segment, index, "
                            f"snapshot, KRaft snapshot or checkpoint file")
    if not storage.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    return kind, parsed[0] if parsed else None


def _segments_in_range(bases, options):
    """The base offsets of the segments that can hold offsets in the options' range."""
    out = []
    for i, base in enumerate(bases):
        if options.end_offset is not None and base >= options.end_offset:
            break
        nxt = bases[i + 1] if i + 1 < len(bases) else None
        if options.start_offset is not None and nxt is not None and nxt <= options.start_offset:
            continue
        out.append(base)
    return out


# ----------------------------------------------------------------------------------------------
# JSON, streamed

_dumps = json.dumps


def iter_json(path: StrPath, options: DumpOptions | None = None,
              report: DumpReport | None = None,
              storage_options: dict[str, Any] | None = None,
              rsm_keys: Mapping[str, Any] | None = None) -> Iterator[str]:
    """Yield the ``dump --json`` output of ``path`` in pieces of text.

    ``path`` is a partition directory, a log dir (one document per partition directory) or a
    single ``.log``/``.index``/``.timeindex``/``.txnindex``/``.snapshot``/checkpoint file. Each
    document is one line: joined, the pieces are JSON Lines. Problems go to ``report`` (a
    ``DumpReport``) as they are met, and into each document's ``problems``.

    Raises KafkaLogError for a path that is none of those, OSError for one that cannot be read.
    """
    options = _options(options)
    report = DumpReport() if report is None else report
    path = storage.configure(os.fspath(path), storage_options, rsm_keys)
    if storage.isdir(path):
        for d in _partition_dirs(path):
            yield from _partition_json(d, options, report)
            yield "\n"
        return
    yield from _file_json(path, options, report)
    yield "\n"


def _partition_json(path, options, report):
    path = storage.abspath(path)
    first_problem = len(report.problems)
    name = os.path.basename(path)
    topic, partition = topic_partition_or_none(name) or (name, None)
    names = sorted(storage.listdir(path))
    head = {"dir": name, "topic": topic, "partition": partition,
            "records_mode": options.records, "files": _file_sizes(path, names)}
    if options.limits():
        head["limits"] = options.limits()
    yield _dumps(head)[:-1] + ', "segments": ['
    bases = _segments_in_range(offsets_of(names, LOG_SUFFIX), options)
    for i, base in enumerate(bases):
        if i:
            yield ", "
        yield from _segment_json(file_path(path, base, LOG_SUFFIX), options, report)
    kraft = kraft_snapshot_files(path)
    if kraft:       # KRaft snapshots (__cluster_metadata), each like a segment
        yield '], "kraft_snapshots": ['
        for i, (_, checkpoint) in enumerate(kraft):
            if i:
                yield ", "
            yield from _segment_json(checkpoint, options, report, indexes=False)
    snapshots = [_snapshot(file_path(path, o, SNAPSHOT_SUFFIX), report)
                 for o in offsets_of(names, SNAPSHOT_SUFFIX)]
    epochs = _leader_epochs(os.path.join(path, LEADER_EPOCH_CHECKPOINT), report)
    yield (f'], "producer_snapshots": {_dumps(snapshots)}, "leader_epoch_checkpoint": '
           f'{_dumps(epochs)}, "problems": {_dumps(report.problems[first_problem:])}}}')


def _file_json(path, options, report):
    kind, base_offset = _file_kind(path)
    name = os.path.basename(path)
    first_problem = len(report.problems)
    yield "{" + f'"file": {_dumps(name)}, '
    if kind in (LOG_SUFFIX, KRAFT_SNAPSHOT):
        yield '"segment": '
        yield from _segment_json(path, options, report, indexes=kind == LOG_SUFFIX)
    elif kind == INDEX_SUFFIX:
        yield '"offset_index": '
        yield from _index_json(_index_or_problem(OffsetIndex, path, base_offset, report))
    elif kind == TIME_INDEX_SUFFIX:
        yield '"time_index": '
        yield from _index_json(_index_or_problem(TimeIndex, path, base_offset, report))
    elif kind == TXN_INDEX_SUFFIX:
        yield '"txn_index": ' + _dumps(_txn_index(path, base_offset, report))
    elif kind == SNAPSHOT_SUFFIX:
        snap = _snapshot(path, report)
        yield '"entries": ' + _dumps(snap["entries"])
        if "error" in snap:
            yield ', "error": ' + _dumps(snap["error"])
    else:
        yield '"leader_epoch_checkpoint": ' + _dumps(_leader_epochs(path, report))
    yield f', "problems": {_dumps(report.problems[first_problem:])}}}'


def _segment_json(log_path, options, report, indexes=True):
    scan = _SegmentScan(log_path, options, report)
    decoder = _decoder_of(log_path, options)
    yield (f'{{"base_offset": {scan.base_offset}, "log_file": {_dumps(scan.name)}, '
           f'"log_size": {scan.size}, "batches": [')
    first = True
    for chunk in scan.chunks():
        piece = _chunk_json(chunk, options.records == "full", decoder, report, scan.path)
        yield piece if first else ", " + piece
        first = False
    tail = {"batch_iteration_error": scan.error, "next_offset": scan.next_offset,
            "record_count": scan.record_count, "records_sha256": scan.records_sha256,
            "invalid_bytes_at_end": scan.invalid_bytes}
    if scan.end < scan.size:
        tail["bytes_read_limit"] = scan.end
    yield "], " + _dumps(tail)[1:-1]
    if not indexes:
        yield "}"
        return
    directory, base = os.path.dirname(log_path), scan.base_offset
    yield ', "offset_index": '
    yield from _index_json(_index_or_problem(
        OffsetIndex, file_path(directory, base, INDEX_SUFFIX), base, report))
    yield ', "time_index": '
    yield from _index_json(_index_or_problem(
        TimeIndex, file_path(directory, base, TIME_INDEX_SUFFIX), base, report))
    yield ', "txn_index": ' + _dumps(
        _txn_index(file_path(directory, base, TXN_INDEX_SUFFIX), base, report))
    yield "}"


def _chunk_json(chunk, with_records, decoder=None, report=None, path=None):
    """The JSON of a chunk's batches, comma-separated."""
    pieces = []
    rows = chunk.rows.tolist()
    bases = chunk.bases.tolist()
    if with_records:
        cols = chunk.columns()
        keys, values = chunk.b64()
    for i, row in enumerate(rows):
        d = _batch_dict(row, bases[i])
        if i in chunk.errors:
            d["decode_error"] = chunk.errors[i]
        if not with_records:
            pieces.append(_dumps(d))
            continue
        magic, is_control = d["magic"], d["is_control"]
        recs = []
        for j in range(chunk.starts[i], chunk.starts[i + 1]):
            k, v = keys[j], values[j]
            r = (f'{{"offset": {cols.offsets[j]}, "timestamp": {cols.timestamps[j]}, '
                 f'"size_in_bytes": {cols.sizes[j]}, ')
            if magic == 2:
                r += f'"sequence": {cols.sequences[j]}, '
            else:
                ts_type = TimestampType(int(chunk.table.timestamp_type[j])).name
                r += f'"legacy_crc": {cols.legacy_crcs[j]}, "legacy_timestamp_type": "{ts_type}", '
            r += (f'"key_b64": {"null" if k is None else chr(34) + k + chr(34)}, '
                  f'"value_b64": {"null" if v is None else chr(34) + v + chr(34)}, ')
            if cols.header_counts[j]:
                r += '"headers": ' + _dumps([{"key": hk, "value_b64": _b64(hv)}
                                             for hk, hv in cols.headers[j]])
            else:
                r += '"headers": []'
            if is_control:
                name, _, epoch, error = chunk.controls[j]
                control = {"type": name, "coordinator_epoch": epoch}
                if error:
                    control["error"] = error
                if decoder is not None and (kraft := _kraft_control(
                        cols.keys[j], cols.values[j])) is not None:
                    control["data"] = kraft[0]
                r += ', "control": ' + _dumps(control)
            elif decoder is not None:
                decoded = _decoded(decoder, cols.keys[j], cols.values[j], report, path,
                                   cols.offsets[j])
                r += ', "decoded": ' + (_dumps(decoded.decoded) if decoded is not None else
                                        "null")
            recs.append(r + "}")
        pieces.append(_dumps(d)[:-1] + ', "records": [' + ", ".join(recs) + "]}")
    return ", ".join(pieces)


def _index_json(read):
    """Pieces of an ``offset_index`` / ``time_index`` value (``_index_or_problem``'s result)."""
    if read is None or isinstance(read, dict):
        yield _dumps(read)
        return
    head, a, b, extra = read
    yield _dumps(head)[:-1] + ', "entries": ['
    for start in range(0, len(a), _INDEX_CHUNK):
        piece = ", ".join(f"[{x}, {y}]" for x, y in zip(a[start:start + _INDEX_CHUNK].tolist(),
                                                        b[start:start + _INDEX_CHUNK].tolist()))
        yield piece if start == 0 else ", " + piece
    yield "]" + "".join(f", {_dumps(k)}: {_dumps(v)}" for k, v in extra.items()) + "}"


# ----------------------------------------------------------------------------------------------
# The documents as dicts (the streamed JSON, parsed)

def dump_partition(path: StrPath, records_mode: str = "full", options: DumpOptions | None = None,
                   report: DumpReport | None = None) -> dict[str, Any]:
    """The DUMP_JSON document of a partition directory, as a dict."""
    options = _options(options, records_mode)
    report = DumpReport() if report is None else report
    return json.loads("".join(_partition_json(os.fspath(path), options, report)))


def dump_segment(log_path: StrPath, records_mode: str = "full",
                 options: DumpOptions | None = None,
                 report: DumpReport | None = None) -> dict[str, Any]:
    """The ``segments[]`` entry of one ``.log`` file and its index files, as a dict."""
    options = _options(options, records_mode)
    report = DumpReport() if report is None else report
    return json.loads("".join(_segment_json(os.fspath(log_path), options, report)))


def dump_path(path: StrPath, records_mode: str = "full", options: DumpOptions | None = None,
              report: DumpReport | None = None, storage_options: dict[str, Any] | None = None,
              rsm_keys: Mapping[str, Any] | None = None
              ) -> dict[str, Any] | list[dict[str, Any]]:
    """The document of a partition directory or of one segment, index, snapshot or checkpoint
    file, as a dict; for a log dir, a list of its partitions' documents. ``path`` may be an
    fsspec URL (``s3://...``), with the filesystem's ``storage_options``, or a tiered-storage
    prefix or segment object (``rsm_keys`` as ``Log.open`` takes them)."""
    options = _options(options, records_mode)
    path = storage.configure(os.fspath(path), storage_options, rsm_keys)
    docs = [json.loads(line) for line in
            "".join(iter_json(path, options, report)).splitlines()]
    if storage.isdir(path) and _partition_dirs(path) != [storage.abspath(path)]:
        return docs
    return docs[0]


# ----------------------------------------------------------------------------------------------
# Text, streamed: kafka-dump-log --deep-iteration --print-data-log, plus the damage found

def iter_text(path: StrPath, options: DumpOptions | None = None,
              report: DumpReport | None = None,
              storage_options: dict[str, Any] | None = None,
              rsm_keys: Mapping[str, Any] | None = None) -> Iterator[str]:
    """Yield a readable listing of ``path`` (as ``iter_json`` takes) in pieces of text, each
    one or more whole lines ending in a newline.

    Batches and records are printed as kafka-dump-log prints them; keys and values as
    ``options.payload`` says (never raw bytes). Damage is printed where it is met (lines
    starting with "Found") and added to ``report``.
    """
    options = _options(options)
    report = DumpReport() if report is None else report
    path = storage.configure(os.fspath(path), storage_options, rsm_keys)
    if storage.isdir(path):
        for d in _partition_dirs(path):
            yield from _partition_text(d, options, report)
        return
    yield from _file_text(path, options, report)


def _lines(lines):
    return "\n".join(lines) + "\n" if lines else ""


def _partition_text(path, options, report):
    path = storage.abspath(path)
    name = os.path.basename(path)
    tp = topic_partition_or_none(name)
    yield (f"Partition directory {name} (topic {tp[0]}, partition {tp[1]})\n" if tp else
           f"Partition directory {name}\n")
    names = sorted(storage.listdir(path))
    for base in _segments_in_range(offsets_of(names, LOG_SUFFIX), options):
        yield from _segment_text(file_path(path, base, LOG_SUFFIX), options, report)
    for _, checkpoint in kraft_snapshot_files(path):      # KRaft snapshots dump like segments
        yield from _segment_text(checkpoint, options, report, indexes=False)
    for o in offsets_of(names, SNAPSHOT_SUFFIX):
        yield _lines(_snapshot_lines(file_path(path, o, SNAPSHOT_SUFFIX), report))
    checkpoint = os.path.join(path, LEADER_EPOCH_CHECKPOINT)
    if storage.exists(checkpoint):
        yield _lines(_epoch_lines(checkpoint, report))


def _file_text(path, options, report):
    kind, base_offset = _file_kind(path)
    if kind in (LOG_SUFFIX, KRAFT_SNAPSHOT):
        yield from _segment_text(path, options, report, indexes=False)
    elif kind == INDEX_SUFFIX:
        yield from _index_text(path, _index_or_problem(OffsetIndex, path, base_offset, report),
                               "offset", "position")
    elif kind == TIME_INDEX_SUFFIX:
        yield from _index_text(path, _index_or_problem(TimeIndex, path, base_offset, report),
                               "timestamp", "offset")
    elif kind == TXN_INDEX_SUFFIX:
        yield _lines(_txn_lines(path, _txn_index(path, base_offset, report)))
    elif kind == SNAPSHOT_SUFFIX:
        yield _lines(_snapshot_lines(path, report))
    else:
        yield _lines(_epoch_lines(path, report))


def _segment_text(log_path, options, report, indexes=True):
    scan = _SegmentScan(log_path, options, report)
    yield f"Dumping {log_path}\nLog starting offset: {scan.base_offset}\n"
    payload = _PAYLOAD_RENDERERS[options.payload]
    decoder = _decoder_of(log_path, options)
    for chunk in scan.chunks():
        yield _lines(_chunk_text(chunk, options.records == "full", payload, scan.name,
                                 decoder, report, scan.path))
    lines = []
    if scan.error is not None:
        lines.append(f"Found a corrupt batch header at position {scan.end - scan.invalid_bytes}"
                     f" of {scan.name}: {scan.error}; the remaining {scan.invalid_bytes} bytes "
                     f"were not dumped")
    elif scan.invalid_bytes:
        lines.append(f"Found {scan.invalid_bytes} invalid bytes at the end of {scan.name}")
    summary = f"Next offset: {scan.next_offset}  records: {scan.record_count}"
    if scan.records_sha256 is not None:
        summary += f"  sha256: {scan.records_sha256}"
    lines.append(summary)
    yield _lines(lines)
    if indexes:
        directory, base = os.path.dirname(log_path), scan.base_offset
        path = file_path(directory, base, INDEX_SUFFIX)
        yield from _index_text(path, _index_or_problem(OffsetIndex, path, base, report),
                               "offset", "position")
        path = file_path(directory, base, TIME_INDEX_SUFFIX)
        yield from _index_text(path, _index_or_problem(TimeIndex, path, base, report),
                               "timestamp", "offset")
        path = file_path(directory, base, TXN_INDEX_SUFFIX)
        yield _lines(_txn_lines(path, _txn_index(path, base, report)))


def _optional_long(value):
    # What kafka-dump-log prints for Java's OptionalLong.
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _decoder_of(log_path, options):
    """The internal-topic decoder for a segment's records, or None."""
    if options.decoder != "auto":
        return None if options.decoder == "none" else options.decoder
    tp = topic_partition_or_none(os.path.basename(os.path.dirname(storage.abspath(log_path))))
    return decoder_for_topic(tp[0]) if tp else None


def _decoded(decoder, key, value, report, path, offset):
    """``decode_record``'s result, or None (reported) for a record it cannot read."""
    try:
        return decode_record(decoder, key, value)
    except InternalRecordError as e:
        if report is not None:
            report.add(path, None, f"record at offset {offset} cannot be decoded with the "
                                   f"{decoder} decoder: {e}")
        return None


def _chunk_text(chunk, with_records, payload, log_name, decoder=None, report=None, path=None):
    out = []
    rows = chunk.rows.tolist()
    bases = chunk.bases.tolist()
    if with_records:
        cols = chunk.columns()
        keys, values = payload(cols.keys), payload(cols.values)
    for i, row in enumerate(rows):
        d = _batch_dict(row, bases[i])
        label = _TIMESTAMP_LABELS[d["timestamp_type"]]
        magic = d["magic"]
        valid = "true" if d["crc_valid"] else "false"
        if magic >= 2:
            line = (f"baseOffset: {d['base_offset']} lastOffset: {d['last_offset']} "
                    f"count: {d['record_count_header']} baseSequence: {d['base_sequence']} "
                    f"lastSequence: {d['last_sequence']} producerId: {d['producer_id']} "
                    f"producerEpoch: {d['producer_epoch']} "
                    f"partitionLeaderEpoch: {d['partition_leader_epoch']} "
                    f"isTransactional: {'true' if d['is_transactional'] else 'false'} "
                    f"isControl: {'true' if d['is_control'] else 'false'} "
                    f"deleteHorizonMs: {_optional_long(d.get('delete_horizon_ms'))}")
        else:
            line = f"offset: {d['last_offset']}"
        out.append(f"{line} position: {d['position']} {label}: {d['max_timestamp']} "
                   f"size: {d['size_in_bytes']} magic: {magic} "
                   f"compresscodec: {d['compression']} crc: {d['crc']} isvalid: {valid}")
        if not d["crc_valid"]:
            out.append(f"Found an invalid batch at position {d['position']} of {log_name}: "
                       f"its stored crc {d['crc']} does not match its contents")
        if i in chunk.errors:
            out.append(f"Found an undecodable batch at position {d['position']} of "
                       f"{log_name}: {chunk.errors[i]}")
        if not with_records:
            continue
        is_control = d["is_control"]
        for j in range(chunk.starts[i], chunk.starts[i + 1]):
            line = (f"| offset: {cols.offsets[j]} {label}: {cols.timestamps[j]} "
                    f"keySize: {cols.key_lens[j]} valueSize: {cols.value_lens[j]}")
            if magic >= 2:
                header_keys = ",".join(_escape(hk) for hk, _ in cols.headers[j]) \
                    if cols.header_counts[j] else ""
                line += f" sequence: {cols.sequences[j]} headerKeys: [{header_keys}]"
            elif d["compression"] == "none":
                line += f" crc: {cols.legacy_crcs[j]} isvalid: {valid}"
            else:
                line += f" crc: {cols.legacy_crcs[j]}"
            if is_control:
                name, type_id, epoch, error = chunk.controls[j]
                if error is not None:
                    line += f" controlType: unreadable ({_escape(error)})"
                elif name in ("ABORT", "COMMIT"):
                    line += f" endTxnMarker: {name} coordinatorEpoch: {epoch}"
                elif (kraft := _kraft_control(cols.keys[j], cols.values[j])) is not None:
                    line += kraft[1]
                elif type_id in _CONTROL_NAMES:
                    line += f" controlType: {name}({type_id})"
                else:
                    line += f" controlType: UNKNOWN({type_id})"
            else:
                k, v = keys[j], values[j]
                decoded = None if decoder is None else _decoded(
                    decoder, cols.keys[j], cols.values[j], report, path, cols.offsets[j])
                if decoded is not None:     # kafka-dump-log's decoded strings
                    k, v = decoded.key_text, decoded.payload_text
                if k is not None:
                    line += " key: " + k
                if v is not None:
                    line += " payload: " + v
            out.append(line)
    return out


_CONTROL_NAMES = {int(t) for t in ControlType}


def _kraft_control(key, value):
    """``decode_control``'s (JSON, text) of a KRaft control record; None for others and for
    one that cannot be read (then printed by its type only)."""
    try:
        return decode_control(key, value)
    except InternalRecordError:
        return None


def _index_text(path, read, first, second):
    if read is None:
        return
    name = os.path.basename(path)
    if isinstance(read, dict):
        yield f"Dumping {path}\nFound an unreadable index {name}: {read['error']}\n"
        return
    head, a, b, _ = read
    yield (f"Dumping {path} ({head['entries_count']} entries, {head['zero_tail_entries']} in an "
           f"all-zero tail)\n")
    for start in range(0, len(a), _INDEX_CHUNK):
        yield _lines([f"{first}: {x} {second}: {y}" for x, y in
                      zip(a[start:start + _INDEX_CHUNK].tolist(),
                          b[start:start + _INDEX_CHUNK].tolist())])
    if head.get("trailing_bytes"):
        yield (f"Found {head['trailing_bytes']} invalid bytes at the end of {name}: not a whole "
               f"entry\n")


def _txn_lines(path, txn):
    if txn is None:
        return []
    lines = [f"Dumping {path}"]
    for e in txn["entries"]:
        lines.append(f"version: {e['version']} producerId: {e['producer_id']} "
                     f"firstOffset: {e['first_offset']} lastOffset: {e['last_offset']} "
                     f"lastStableOffset: {e['last_stable_offset']}")
    if "error" in txn:
        lines.append(f"Found a damaged transaction index {txn['file']}: {txn['error']}")
    return lines


def _snapshot_lines(path, report):
    snap = _snapshot(path, report)
    lines = [f"Dumping {path}"]
    for e in snap["entries"]:
        # As kafka-dump-log prints a producer snapshot entry.
        lines.append(f"producerId: {e['producer_id']} producerEpoch: {e['producer_epoch']} "
                     f"coordinatorEpoch: {e['coordinator_epoch']} "
                     f"currentTxnFirstOffset: {_optional_long(e['current_txn_first_offset'])} "
                     f"lastTimestamp: {e['last_timestamp']} firstSequence: {e['first_seq']} "
                     f"lastSequence: {e['last_seq']} lastOffset: {e['last_data_offset']} "
                     f"offsetDelta: {e['last_offset_delta']} timestamp: {e['last_timestamp']}")
    if "error" in snap:
        lines.append(f"Found a damaged producer snapshot {snap['file']}: {snap['error']}")
    return lines


def _epoch_lines(path, report):
    epochs = _leader_epochs(path, report)
    lines = [f"Dumping {path}"]
    if epochs is None:
        lines.append(f"Found a damaged leader-epoch checkpoint {os.path.basename(path)}: "
                     f"{report.problems[-1]['message']}")
        return lines
    lines.extend(f"epoch: {e['epoch']} startOffset: {e['start_offset']}" for e in epochs)
    return lines


# Keys and values in text: printable text, hex or base64; never raw bytes.

# Bytes that stand for themselves (printable ASCII except the escape character).
_PLAIN = bytes(b for b in range(0x20, 0x7f) if b != 0x5c)
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def _escape(data):
    """``data`` (bytes or str) as printable text: UTF-8 that prints is kept, every other byte
    is ``\\xNN``, other unprintable characters ``\\n``/``\\uNNNN``, the backslash ``\\\\``."""
    if isinstance(data, str):
        if data.isascii() and data.isprintable() and "\\" not in data:
            return data
        text = data
    else:
        if not data.translate(None, _PLAIN):
            return data.decode("ascii")
        text = data.decode("utf-8", "surrogateescape")
    out = []
    for ch in text:
        if ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:
            o = ord(ch)
            if 0xDC80 <= o <= 0xDCFF:          # a byte that is not UTF-8 (surrogateescape)
                out.append(f"\\x{o - 0xDC00:02x}")
            elif o < 0x100:
                out.append(f"\\x{o:02x}")
            elif o < 0x10000:
                out.append(f"\\u{o:04x}")
            else:
                out.append(f"\\U{o:08x}")
    return "".join(out)


def _escape_all(items):
    """``_escape`` of each of ``items`` (None stays None); two C calls when all are plain."""
    present = [x for x in items if x is not None]
    joined = b"\n".join(present)
    if present and joined.translate(None, _PLAIN) == b"\n" * (len(present) - 1):
        texts = iter(joined.decode("ascii").split("\n"))
        return [next(texts) if x is not None else None for x in items]
    return [_escape(x) if x is not None else None for x in items]


# Keys and values of many records at once, as --hex / --base64 / the default show them.
_PAYLOAD_RENDERERS = {
    "text": _escape_all,
    "hex": lambda items: [x.hex() if x is not None else None for x in items],
    "base64": _b64_list,
}
