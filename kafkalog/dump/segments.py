"""``kafkalog dump``'s reading of a ``.log`` file: the segment walker's ``DUMP`` policy over
bounded chunks of whole batches, each chunk's records decoded, and the damage found.

A ``.log`` file is read in bounded chunks of whole batches (64 KiB growing to 256 KiB; more only
for one batch larger than that): each chunk is walked, its CRCs checked, its records decoded
and rendered (``document``, ``listing``) before the next one is read, so the first lines come at
once and memory does not grow with the size of a segment or a partition.

Damage is reported where it is met and the rest is still dumped: a batch whose CRC fails or
whose records cannot be decoded (its size field is intact, so the walk goes on after it), bytes
at the end of a ``.log`` that are not a whole batch (kafka-dump-log's "Found N invalid bytes at
the end of"), a batch header that makes no sense (the walk cannot find the next batch: the
segment's listing stops there with the count of bytes left). Every such problem goes into the
``DumpReport`` given to the iterators and into the document's ``problems``.
"""
from __future__ import annotations

import binascii
import hashlib
import os
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from kafkalog import codecs, progress, storage
from kafkalog._kernels import span_bytes
from kafkalog._layout import BATCH_DTYPE
from kafkalog.errors import InternalRecordError, InvalidConfigError, KafkaLogError
from kafkalog.control_records import ControlType, parse_control_record
from kafkalog.files import (
    LOG_SUFFIX, next_log_offset, offsets_of, parse_file_name, topic_partition_or_none,
)
from kafkalog.internal.decode import DECODERS, decode_control, decode_record, decoder_for_topic
from kafkalog.records import (
    COMPRESSION_MASK, CONTROL_MASK, DELETE_HORIZON_MASK, NO_SEQUENCE, TRANSACTIONAL_MASK,
    RecordTable, decode_batches, increment_sequence, timestamp_type_of,
)
from kafkalog.segment_walker import DUMP, FileWalk, Outcome

if TYPE_CHECKING:
    from kafkalog._typing import StrPath


RECORD_MODES = ("full", "digest", "none")
DECODER_CHOICES = ("auto", "none") + DECODERS
PAYLOAD_FORMATS = ("text", "hex", "base64")

_FIRST_CHUNK = 64 * 1024        # the first lines come after reading this much
_MAX_CHUNK = 256 * 1024        # chunks grow to this (one larger batch is read whole)
INDEX_CHUNK = 65536            # index entries rendered at a time

# BATCH_DTYPE's fields in order: ``rows.tolist()`` tuples are unpacked by position.
_BATCH_FIELDS = ("position", "base_offset", "last_offset", "max_timestamp", "base_timestamp",
                 "producer_id", "size", "record_count", "partition_leader_epoch",
                 "base_sequence", "crc", "attributes", "producer_epoch", "magic", "crc_valid")
assert BATCH_DTYPE.names == _BATCH_FIELDS


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


def with_defaults(options, records_mode=None):
    if options is None:
        return DumpOptions(records=records_mode or "full")
    return options


# ----------------------------------------------------------------------------------------------
# Walking a .log file in chunks

class Chunk:
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
            self._b64 = (b64_list(cols.keys), b64_list(cols.values))
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


def b64(data):
    return None if data is None else binascii.b2a_base64(data, newline=False).decode("ascii")


def b64_list(items):
    b2a = binascii.b2a_base64
    return [b2a(x, newline=False).decode() if x is not None else None for x in items]


class SegmentScan:
    """One ``.log`` file walked in chunks (``chunks()``) by the segment walker, and what the
    walk found.

    After ``chunks()`` is exhausted: ``error`` (a structural error that stopped the walk, or
    None), ``invalid_bytes`` (bytes after the last whole batch that were not dumped because
    they are damaged or torn), ``next_offset``, ``record_count``, ``records_sha256``.
    """

    def __init__(self, path, options, report, log_offsets=None):
        self.path = os.fspath(path)
        self.name = os.path.basename(self.path)
        parsed = parse_file_name(self.name)
        self.base_offset = parsed[0] if parsed else 0
        # a segment's batches start at the base offset its name carries and end below the
        # next segment's (``log_offsets``: its directory's sorted .log offsets, else listed)
        self._after = parsed[0] - 1 if parsed else None
        self._before = None
        if parsed:
            if log_offsets is None:
                try:
                    log_offsets = offsets_of(storage.listdir(os.path.dirname(self.path)),
                                             LOG_SUFFIX)
                except OSError:
                    log_offsets = []
            self._before = next_log_offset(log_offsets, parsed[0])
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
        """Yield a ``Chunk`` per read, until the end, a structural error or the end offset."""
        if self.end == 0:
            return
        try:
            f = storage.open_file(self.path)
        except OSError as e:
            self.report.add(self.path, None, f"cannot read the segment: {e}")
            return
        with f:
            def read(position, n):
                f.seek(position)
                return f.read(n)
            walk = FileWalk(read, self.end, self.size, policy=DUMP, path=self.path,
                            first=_FIRST_CHUNK, most=_MAX_CHUNK,
                            after=self._after, before=self._before)
            read_to = 0
            for pos, buf, batches in walk:
                progress.advance(pos + len(buf) - read_to)    # stretches may overlap
                read_to = max(read_to, pos + len(buf))
                chunk, past_end = self._chunk(buf, pos, batches)
                if chunk is not None:
                    yield chunk
                if past_end:
                    return
        for event in walk.events:
            if event.outcome is Outcome.CRC_FAILURE:
                continue            # reported with its batch's offsets (``_chunk``)
            if event.outcome is Outcome.OUT_OF_ORDER:     # shown, and the walk went on
                self.report.add(self.path, event.start, event.message)
                continue
            self.invalid_bytes = event.end - event.start
            if event.cut:           # kafka-dump-log's "Found N invalid bytes at the end"
                self.report.add(self.path, event.start,
                                f"{self.invalid_bytes} invalid bytes at the end")
            else:                   # the size field cannot be trusted: nothing after is found
                self.error = event.reason
                self.report.add(self.path, event.start,
                                f"{event.reason}; {self.invalid_bytes} bytes from here on "
                                f"were not dumped")

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
        chunk = Chunk(rows, bases, table, errors)
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
                line += f"\t{hk}\t{'-' if hv is None else b64(hv)}"
        lines.append(line)
    lines.append("")
    return "\n".join(lines).encode("utf-8")


def batch_dict(row, base_offset):
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


def decoder_of(log_path, options):
    """The internal-topic decoder for a segment's records, or None."""
    if options.decoder != "auto":
        return None if options.decoder == "none" else options.decoder
    tp = topic_partition_or_none(os.path.basename(os.path.dirname(storage.abspath(log_path))))
    return decoder_for_topic(tp[0]) if tp else None


def decode_internal(decoder, key, value, report, path, offset):
    """``decode_record``'s result, or None (reported) for a record it cannot read."""
    try:
        return decode_record(decoder, key, value)
    except InternalRecordError as e:
        if report is not None:
            report.add(path, None, f"record at offset {offset} cannot be decoded with the "
                                   f"{decoder} decoder: {e}")
        return None


def kraft_control(key, value):
    """``decode_control``'s (JSON, text) of a KRaft control record; None for others and for
    one that cannot be read (then printed by its type only)."""
    try:
        return decode_control(key, value)
    except InternalRecordError:
        return None

