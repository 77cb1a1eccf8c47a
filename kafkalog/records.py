"""Record batches and records: views over Kafka's bytes and columnar decoding (``builder``
builds them).

Reading walks a buffer (usually an mmap'd ``.log`` file) with the segment walker and decodes
records with ``decode_v2_records`` / ``decode_legacy_records`` into a columnar ``RecordTable``;
``Record`` objects are only made when asked for. Formats: record batch v2 and legacy message
sets v0/v1, including compressed wrapper messages (see FORMAT.md).
"""
from __future__ import annotations

import contextlib
import enum
import os
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence, Union

import numpy as np
import numpy.typing as npt

from kafkalog import codecs, storage
from kafkalog.files import LOG_SUFFIX, next_log_offset, offsets_of, parse_file_name
from kafkalog._kernels import (
    BatchView, batch_records, batch_views, check_batches, decode_legacy_records,
    decode_v2_records, make_records, span_bytes, table_records,
)
from kafkalog._layout import (  # noqa: F401  (the masks and NO_* are this module's API too)
    BATCH_DTYPE, COMPRESSION_MASK, CONTROL_MASK, DELETE_HORIZON_MASK, HEADER_DTYPE,
    NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, RECORD_DTYPE, TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK, V2_HEADER_SIZE,
)
# ControlType and parse_control_record are part of this module's API (kept importable from here)
from kafkalog.control_records import (  # noqa: F401
    ControlType, check_control_keys, parse_control_record,
)
from kafkalog.errors import (
    CorruptRecordError, KafkaLogError, LogNotFoundError, NotASegmentFileError,
    OffsetsOutOfOrderError, UnknownCodecError,
)
from kafkalog.segment_walker import ITERATE, ITERATE_STRICT, check_is_segment, walk_segment
from kafkalog.storage_local import cut_under

if TYPE_CHECKING:
    from kafkalog._core import Record
    from kafkalog._typing import StrPath
    import mmap

    #: What ``iter_batches`` reads: a path, or a buffer of batches (bytes, an mmap, ...).
    BufferOrPath = Union[StrPath, bytes, bytearray, memoryview, mmap.mmap]

class TimestampType(enum.IntEnum):
    """Kafka's timestamp types (the values are Kafka's and Spark's ``timestampType``)."""
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @classmethod
    def of(cls, value: TimestampType | int | str) -> TimestampType:
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                raise ValueError(f"unknown timestamp type {value!r}") from None
        return cls(value)


TYPE_OBJECTS = (TimestampType.NO_TIMESTAMP_TYPE, TimestampType.CREATE_TIME,
                TimestampType.LOG_APPEND_TIME)


def timestamp_type_of(magic: int, attributes: int) -> TimestampType:
    if magic == 0:
        return TimestampType.NO_TIMESTAMP_TYPE
    return (TimestampType.LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_MASK
            else TimestampType.CREATE_TIME)


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's sequence arithmetic: wraps from Int.MAX_VALUE to 0."""
    if sequence > 2**31 - 1 - increment:
        return increment - (2**31 - 1 - sequence) - 1
    return sequence + increment


class RecordBatch(BatchView):
    """A view over one batch (v2) or one legacy entry (v0/v1, possibly a compressed wrapper).

    Made by ``iter_batches``; holds the buffer it came from and one row of the walk
    (``RecordBatch(buffer, row, path=None, crc_valid=-1)``, the kernel's ``BatchView``, which
    also has ``is_valid()``). ``position`` is the batch's byte position in that buffer.
    """
    __slots__ = ()

    def _check_header(self) -> None:
        """Raise CorruptRecordError unless the header fields a count or sequence is derived
        from agree with each other (``check_batches``); checked once."""
        if not self._checked:
            n_valid, reason, position = check_batches(self._buffer, self._row.reshape(1), False)
            if n_valid == 0:
                _raise_invalid(self._row, reason, position, self._path)
            self._checked = True

    def _get(self, field):
        return int(self._row[field])

    position = property(lambda self: self._get("position"))
    magic = property(lambda self: self._get("magic"))
    crc = property(lambda self: self._get("crc"))
    attributes = property(lambda self: self._get("attributes"))
    max_timestamp = property(lambda self: self._get("max_timestamp"))
    base_timestamp = property(lambda self: self._get("base_timestamp"))
    producer_id = property(lambda self: self._get("producer_id"))
    producer_epoch = property(lambda self: self._get("producer_epoch"))
    base_sequence = property(lambda self: self._get("base_sequence"))
    partition_leader_epoch = property(lambda self: self._get("partition_leader_epoch"))
    size_in_bytes = property(lambda self: self._get("size"))
    last_offset = property(lambda self: self._get("last_offset"))

    @property
    def record_count(self) -> int:
        """Records declared by a v2 header; for legacy entries, the records inside."""
        if self.magic == 2:
            self._check_header()
            return self._get("record_count")
        return len(self.table())

    @property
    def base_offset(self) -> int:
        """First offset; for a legacy compressed wrapper, its first inner record's offset."""
        if self.magic < 2 and self.compression != "none":
            table = self.table()
            return int(table.records["offset"][0]) if len(table) else self.last_offset
        return self._get("base_offset")

    @property
    def compression(self) -> str:
        return codecs.CODEC_NAMES.get(self.attributes & COMPRESSION_MASK,
                                      str(self.attributes & COMPRESSION_MASK))

    @property
    def timestamp_type(self) -> TimestampType:
        return timestamp_type_of(self.magic, self.attributes)

    @property
    def is_transactional(self) -> bool:
        return self.magic == 2 and bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return self.magic == 2 and bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic == 2 and bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_sequence(self) -> int:
        if self.magic < 2:
            return NO_SEQUENCE
        self._check_header()
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset - self._get("base_offset"))

    def ensure_valid(self) -> None:
        """Raise CorruptRecordError unless the batch's CRC is valid."""
        if not self.is_valid():
            raise CorruptRecordError(f"record is corrupt (stored crc = {self.crc})",
                                     position=self.position)

    def table(self) -> RecordTable:
        """The batch's records, columnar (``RecordTable``); decoded once."""
        if self._table is None:
            self._table = decode_batches(self._buffer, self._row.reshape(1), self._path)
        return self._table

    def __iter__(self) -> Iterator[Record]:
        if self._table is None:
            # The common batch (v2, uncompressed) in one kernel call: decoded into a reused
            # table, Records made as the loop asks, without the columnar table's numpy work.
            records = batch_records(self._buffer, self._row, TYPE_OBJECTS)
            if records is not None:
                return records
        return iter(self.table())

    def __len__(self) -> int:
        return self.record_count

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self._get('base_offset')}, "
                f"last_offset={self.last_offset}, magic={self.magic}, "
                f"position={self.position}, size={self.size_in_bytes})")


def open_buffer(buffer_or_path: BufferOrPath) -> Any:
    """A read-only buffer of a path (``storage.open_buffer``: a local file mapped, an fsspec
    URL fetched whole by concurrent ranged GETs, an empty file b"") or the buffer itself."""
    if isinstance(buffer_or_path, (str, os.PathLike)):
        return storage.open_buffer(os.fspath(buffer_or_path))
    return buffer_or_path


def iter_batches(buffer_or_path: BufferOrPath, validate_crc: bool = True,
                 strict: bool = False, storage_options: dict[str, Any] | None = None,
                 rsm_keys: Mapping[str, Any] | None = None) -> Iterator[RecordBatch]:
    """Yield a ``RecordBatch`` for every batch of a ``.log`` file or a buffer of batches.

    Every batch's CRC is checked, as Kafka's consumer does with ``check.crcs=true``: a batch
    that fails raises CorruptRecordError (path, position, base offset) after the batches
    before it and before any of its records; ``validate_crc=False`` skips the check, for speed
    on trusted data. Stops silently at a partial tail, like Kafka's file iterator, unless
    ``strict`` (for buffers that must hold whole batches only, such as data to append); raises
    CorruptRecordError (after yielding the batches before it) at a structural error.
    A path may be an fsspec URL (``s3://bucket/dir/topic-0/00000000000000000000.log``), with
    the filesystem's ``storage_options``, or a tiered-storage segment's ``.log`` object as
    Aiven's RemoteStorageManager writes it (decoded; ``rsm_keys`` as ``Log.open`` takes them).
    """
    # The kernel's iterator makes each RecordBatch; the file is opened and walked when the
    # iteration starts, and a walk's error is raised after the last batch.
    return batch_views(RecordBatch, lambda: _walked(buffer_or_path, validate_crc, strict,
                                                    storage_options, rsm_keys))


def _walked(buffer_or_path, validate_crc, strict, storage_options, rsm_keys):
    """``iter_batches``' start: (buffer, walked rows, path, the walk's raise_for_outcome)."""
    if isinstance(buffer_or_path, (str, os.PathLike)):
        located = storage.locate(os.fspath(buffer_or_path), storage_options, rsm_keys).root
        if located != os.fspath(buffer_or_path):        # a URL or a tiered-storage view
            buffer_or_path = located                    # (else errors name the path given)
    path = buffer_or_path if isinstance(buffer_or_path, (str, os.PathLike)) else None
    try:        # a reader's wrong path, typed (internal readers see the OS's errors)
        buf = open_buffer(buffer_or_path)
    except FileNotFoundError as e:
        if isinstance(e, KafkaLogError):
            raise
        raise LogNotFoundError(f"{path}: no such file, where a segment file is expected") \
            from None
    except IsADirectoryError:
        raise NotASegmentFileError(f"{path}: a directory, where a segment file is expected "
                                   "(open a directory with Log.open)") from None
    check_is_segment(path, buf)
    # A segment's batches start at the base offset its name carries, increase, and end below
    # the next segment's base: that one is looked up (its directory listed) only when a batch
    # is out of order, so that the batch named is the damaged one.
    parsed = parse_file_name(os.path.basename(os.fspath(path))) if path is not None else None
    bounds = {"after": parsed[0] - 1} if parsed is not None else {}
    policy = ITERATE_STRICT if strict else ITERATE
    walk = walk_segment(buf, policy=policy, validate_crc=validate_crc, path=path, **bounds)
    if isinstance(walk.error, OffsetsOutOfOrderError) and parsed is not None:
        with contextlib.suppress(OSError):
            names = storage.listdir(os.path.dirname(os.fspath(path)))
            bounds["before"] = next_log_offset(offsets_of(names, LOG_SUFFIX), parsed[0])
            walk = walk_segment(buf, policy=policy, validate_crc=validate_crc, path=path,
                                **bounds)
    return buf, walk.batches, path, walk.raise_for_outcome


class RecordTable:
    """Records of one or more batches, columnar.

    Attributes
    ----------
    data : bytes-like
        The buffer that ``key_pos`` / ``value_pos`` / header positions index into.
    records : ndarray of ``RECORD_DTYPE``
        One row per record, in offset order; ``timestamp`` is what a consumer sees
        (the batch max timestamp under LogAppendTime, -1 for magic 0).
    headers : ndarray of ``HEADER_DTYPE``
    batch : ndarray of int32
        For each record, the index of its batch in the batch array that was decoded.
    sequence : ndarray of int64
        Producer sequence of each record (-1 when none).
    legacy_crc : ndarray of int64
        CRC32 of each legacy record (-1 for v2).
    timestamp_type : ndarray of int8
        ``TimestampType`` of each record.
    """
    __slots__ = ("data", "records", "headers", "batch", "sequence", "legacy_crc",
                 "timestamp_type")

    def __init__(self, data: Any, records: np.ndarray, headers: np.ndarray,
                 batch: npt.NDArray[np.int32], sequence: npt.NDArray[np.int64],
                 legacy_crc: npt.NDArray[np.int64], timestamp_type: npt.NDArray[np.int8]
                 ) -> None:
        # A bytearray resized later would leave the positions pointing past its end (values
        # read as b""): a view of it is held, so its owner's resize raises BufferError.
        self.data = memoryview(data) if isinstance(data, bytearray) else data
        self.records = records
        self.headers = headers
        self.batch = batch
        self.sequence = sequence
        self.legacy_crc = legacy_crc
        self.timestamp_type = timestamp_type

    def __len__(self) -> int:
        return len(self.records)

    def _bytes(self, pos, length):
        return None if length < 0 else bytes(self.data[pos:pos + length])

    def keys(self) -> list[bytes | None]:
        """Every record's key (bytes or None), as a list, made in one kernel call."""
        return span_bytes(self.data, self.records["key_pos"].copy(),
                          self.records["key_len"].copy())

    def key(self, i: int) -> bytes | None:
        r = self.records[i]
        return self._bytes(int(r["key_pos"]), int(r["key_len"]))

    def value(self, i: int) -> bytes | None:
        r = self.records[i]
        return self._bytes(int(r["value_pos"]), int(r["value_len"]))

    def headers_of(self, i: int) -> tuple[tuple[str, bytes | None], ...]:
        r = self.records[i]
        start, count = int(r["header_start"]), int(r["header_count"])
        out = []
        for h in self.headers[start:start + count]:
            key = bytes(self.data[h["key_pos"]:h["key_pos"] + h["key_len"]])
            out.append((key.decode("utf-8", "replace"),
                        self._bytes(int(h["value_pos"]), int(h["value_len"]))))
        return tuple(out)

    def record(self, i: int) -> Record:
        return make_records(self.data, self.records[i:i + 1], self.headers,
                            self.timestamp_type[i:i + 1], TYPE_OBJECTS)[0]

    def to_records(self) -> list[Record]:
        """A list of ``Record``, in offset order (made by the ``make_records`` kernel)."""
        return make_records(self.data, self.records, self.headers, self.timestamp_type,
                            TYPE_OBJECTS)

    def __iter__(self) -> Iterator[Record]:
        """The ``Record`` of each row in offset order, each made when the loop reaches it
        (``table_records``): cheaper than ``to_records`` in a loop that drops them."""
        return table_records(self.data, self.records, self.headers, self.timestamp_type,
                             TYPE_OBJECTS)

    def slice(self, mask_or_slice: slice | npt.NDArray[np.bool_] | npt.NDArray[np.intp]
              ) -> RecordTable:
        """A table of the selected rows (same data and header buffers)."""
        return RecordTable(self.data, self.records[mask_or_slice], self.headers,
                           self.batch[mask_or_slice], self.sequence[mask_or_slice],
                           self.legacy_crc[mask_or_slice], self.timestamp_type[mask_or_slice])

    @staticmethod
    def concat(tables: Sequence[RecordTable]) -> RecordTable:
        """One table of several decoded from the same batch array (``batch`` keeps indexing
        it); copies their data into one buffer."""
        tables = [t for t in tables if len(t)]
        if not tables:
            return empty_table()
        if len(tables) == 1:
            return tables[0]
        datas, recs, heads, batches = [], [], [], []
        data_off = head_off = 0
        for t in tables:
            r = t.records.copy()
            h = t.headers.copy()
            r["key_pos"] += data_off
            r["value_pos"] += data_off
            r["header_start"] += head_off
            h["key_pos"] += data_off
            h["value_pos"] += data_off
            datas.append(bytes(t.data))
            recs.append(r)
            heads.append(h)
            batches.append(t.batch)
            data_off += len(t.data)
            head_off += len(t.headers)
        return RecordTable(b"".join(datas), np.concatenate(recs), np.concatenate(heads),
                           np.concatenate(batches),
                           np.concatenate([t.sequence for t in tables]),
                           np.concatenate([t.legacy_crc for t in tables]),
                           np.concatenate([t.timestamp_type for t in tables]))


def empty_table() -> RecordTable:
    return RecordTable(b"", np.empty(0, RECORD_DTYPE), np.empty(0, HEADER_DTYPE),
                       np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0, np.int64),
                       np.empty(0, np.int8))


def decode_batches(buf: Any, batches: np.ndarray, path: StrPath | None = None
                   ) -> RecordTable:
    """Decode every record of the walked ``batches`` (``BATCH_DTYPE`` rows) of ``buf``.

    Uncompressed v2 batches are decoded in place (the table's data is ``buf`` itself: no copy);
    when any batch is compressed or legacy, record bytes are gathered into one new buffer.

    Raises CorruptRecordError (with the file position of the batch at fault), or the codec
    errors of ``codecs.decompress``.
    """
    batches = np.asarray(batches, dtype=BATCH_DTYPE)
    if len(batches) == 0:
        return empty_table()
    try:
        return _decode_batches(buf, batches, path)
    except CorruptRecordError as e:    # bytes that changed under a mapping are not damage
        raise cut_under(buf) or e


def _decode_batches(buf, batches, path):
    # The header fields the decode trusts (record count, lastOffsetDelta, codec, sequence,
    # legacy key/value sizes), checked in one kernel pass over the batch rows.
    n_valid, reason, position = check_batches(buf, batches, False)
    if n_valid < len(batches):
        _raise_invalid(batches[n_valid], reason, position, path)
    attributes = batches["attributes"]
    v2 = batches["magic"] == 2
    if v2.all() and not (attributes & COMPRESSION_MASK).any():
        table = _decode_v2_in_place(buf, batches, path)
    else:
        pieces = []                   # (kind, bytes, batch index)
        for i, row in enumerate(batches):
            pieces.append(_piece(buf, row, i, path))
        table = _decode_pieces(pieces, batches, path)
    control = v2 & ((attributes & CONTROL_MASK) != 0)
    if control.any():
        check_control_keys(table, batches, control, path)
    return table


#: Compressed batches are decompressed and checked this many on-disk bytes at a time.
VALIDATE_CHUNK_BYTES = 4 * 1024 * 1024


def validate_batches(buf: Any, batches: np.ndarray, path: StrPath | None = None
                     ) -> tuple[int, str | None]:
    """How many of the walked ``batches`` (``BATCH_DTYPE`` rows of ``buf``, CRCs checked) are
    structurally valid before the first that is not, and why that one is not.

    A batch is valid when ``decode_batches`` decodes it: every header field it trusts agrees
    with the bytes (``check_batches``: codec, lastOffsetDelta, record count, sequence, producer
    id/epoch; every record of an uncompressed batch: varints, lengths, header counts, offset
    deltas, timestamps), a compressed payload decompresses to such records (or for a legacy
    wrapper, to a valid inner message set), and a control batch's records carry a control key.
    Recovery cuts the log at the first invalid batch, as at a bad CRC, so that reading a
    recovered log never meets one.

    Returns
    -------
    (n_valid, reason)
        ``n_valid`` = ``len(batches)`` and ``reason`` None when all are valid.
    """
    batches = np.asarray(batches, dtype=BATCH_DTYPE)
    n_valid, reason, _ = check_batches(buf, batches, True)
    head = batches[:n_valid]
    if not (head["attributes"] & (COMPRESSION_MASK | CONTROL_MASK)).any():
        return n_valid, reason      # plain data batches (the common case): no more to check
    v2 = head["magic"] == 2
    deep = np.flatnonzero(((head["attributes"] & COMPRESSION_MASK) != 0) |
                          (v2 & ((head["attributes"] & CONTROL_MASK) != 0)))   # control keys
    if len(deep) == 0:
        return n_valid, reason
    sizes = head["size"][deep].astype(np.int64)
    chunk_of = (np.cumsum(sizes) - sizes) // VALIDATE_CHUNK_BYTES
    for chunk in np.split(deep, np.flatnonzero(np.diff(chunk_of)) + 1):
        try:
            decode_batches(buf, head[chunk], path)
            continue
        except KafkaLogError:
            pass
        for i in chunk.tolist():          # find the first batch of the chunk at fault
            try:
                decode_batches(buf, head[i:i + 1], path)
            except KafkaLogError as e:
                return i, f"{getattr(e, 'reason', None) or e}"
    return n_valid, reason


def _raise_invalid(row, reason, position, path):
    """Raise the typed error for a batch that ``check_batches`` refused."""
    base = int(row["base_offset"])
    if reason == _UNKNOWN_CODEC:
        raise UnknownCodecError(f"unknown compression codec "
                                f"{int(row['attributes']) & COMPRESSION_MASK}",
                                position=int(row["position"]), path=path, base_offset=base)
    raise CorruptRecordError(reason, position=position, path=path, base_offset=base)


_UNKNOWN_CODEC = "unknown compression codec in the batch attributes"


def _decode_v2_in_place(buf, batches, path):
    starts = batches["position"] + V2_HEADER_SIZE
    ends = batches["position"] + batches["size"].astype(np.int64)
    counts = batches["record_count"].astype(np.int64)
    try:
        records, headers = decode_v2_records(buf, starts, ends, batches["base_offset"].copy(),
                                             batches["base_timestamp"].copy(), counts,
                                             batches["last_offset"].copy())
    except CorruptRecordError as e:
        raise CorruptRecordError(e.reason, position=e.position, path=path,
                                 base_offset=int(batches["base_offset"][e.region])) from None
    batch_index = np.repeat(np.arange(len(batches), dtype=np.int32), counts)
    return _finish_v2(buf, records, headers, batches, batch_index)


def _finish_v2(data, records, headers, batches, batch_index):
    # Per-batch facts are spread to records only where a batch needs it: the common case
    # (CreateTime, no producer id) costs two fills, not a gather of whole batch rows.
    n = len(records)
    # per-batch record counts (an empty batch, kept by Kafka's cleaner for a producer, has 0)
    counts = np.bincount(batch_index, minlength=len(batches))
    log_append = (batches["attributes"] & TIMESTAMP_TYPE_MASK) != 0
    ts_type = np.full(n, TimestampType.CREATE_TIME, np.int8)
    if log_append.any():
        per_record = np.repeat(log_append, counts)
        records["timestamp"] = np.where(per_record, np.repeat(batches["max_timestamp"], counts),
                                        records["timestamp"])
        ts_type[per_record] = TimestampType.LOG_APPEND_TIME
    base_seq = batches["base_sequence"].astype(np.int64)
    if (base_seq >= 0).any():
        seq_base = np.repeat(base_seq, counts)
        seq = seq_base + records["offset"] - np.repeat(batches["base_offset"], counts)
        seq = np.where(seq > 2**31 - 1, seq - 2**31, seq)      # Kafka wraps at Int.MAX_VALUE
        sequence = np.where(seq_base >= 0, seq, NO_SEQUENCE)
    else:
        sequence = np.full(n, NO_SEQUENCE, np.int64)
    return RecordTable(data, records, headers, batch_index, sequence,
                       np.full(n, -1, np.int64), ts_type)


def _piece(buf, row, index, path):
    """(kind, payload, batch index, bound): the record bytes of one batch, decompressed, or
    for LZ4 the compressed frame and the bound of its decompressed size (decoded later
    straight into the run's buffer)."""
    pos, size = int(row["position"]), int(row["size"])
    codec = int(row["attributes"]) & COMPRESSION_MASK
    if row["magic"] == 2:
        payload = memoryview(buf)[pos + V2_HEADER_SIZE:pos + size]
        if codec != codecs.NONE:
            planned = codecs.decompress_plan(codec, payload)
            if planned is not None and planned[0] <= codecs.MAX_DECOMPRESSED_BYTES:
                return ("v2", payload, index, (codec,) + planned)
            payload = _decompress(codec, payload, pos, path, int(row["base_offset"]))
        return ("v2", payload, index, None)
    if codec == codecs.NONE:
        return ("legacy", memoryview(buf)[pos:pos + size], index, None)
    # A legacy wrapper: its value is a compressed inner message set.
    wrapper = decode_legacy_records(buf, row.reshape(1))[0]
    if wrapper["value_len"] < 0:
        raise CorruptRecordError("compressed legacy wrapper has a null value", position=pos,
                                 path=path)
    value = memoryview(buf)[wrapper["value_pos"]:wrapper["value_pos"] + wrapper["value_len"]]
    return ("wrapper", _decompress(codec, value, pos, path, int(row["last_offset"])), index,
            None)


def _decompress(codec, payload, position, path, base_offset):
    try:
        return codecs.decompress(codec, payload)
    except KafkaLogError as e:
        raise _located(e, position, path, base_offset) from None


def _located(e, position, path, base_offset):
    """``e`` (a codec's error) again, with where the batch is."""
    if isinstance(e, CorruptRecordError):
        return CorruptRecordError(e.reason, position=position, path=path,
                                  base_offset=base_offset)
    exc = type(e)(f"{e} (batch at position {position}{', ' + str(path) if path else ''})")
    exc.position, exc.path, exc.base_offset = position, path, base_offset
    return exc


def _decode_pieces(pieces, batches, path):
    tables = []
    i = 0
    while i < len(pieces):
        kind = pieces[i][0]
        j = i
        while j < len(pieces) and pieces[j][0] == kind and kind != "wrapper":
            j += 1
        if kind == "v2":
            tables.append(_decode_v2_run(pieces[i:j], batches, path))
        elif kind == "legacy":
            tables.append(_decode_legacy_run(pieces[i:j], batches))
        else:
            tables.append(_decode_wrapper(pieces[i], batches, path))
            j = i + 1
        i = j
    return RecordTable.concat(tables)


def _decode_v2_run(pieces, batches, path):
    # One numpy buffer (large allocations get transparent huge pages: few page faults) that
    # LZ4 frames decompress straight into and the other payloads are copied into.
    sizes = [len(p[1]) if p[3] is None else p[3][1] for p in pieces]
    arena = np.empty(sum(sizes), dtype=np.uint8)
    lengths = np.empty(len(pieces), dtype=np.int64)
    at = 0
    with memoryview(arena) as view:
        for i, (_, payload, index, bound) in enumerate(pieces):
            if bound is None:
                n = len(payload)
                view[at:at + n] = payload
            else:
                position = int(batches["position"][index])
                try:
                    n = codecs.decompress_into(bound[0], payload, view[at:at + bound[1]],
                                               bound[2])
                except KafkaLogError as e:
                    raise _located(e, position, path,
                                   int(batches["base_offset"][index])) from None
            lengths[i] = n
            at += n
    data = arena[:at]
    ends = np.cumsum(lengths)
    starts = ends - lengths
    index = np.array([p[2] for p in pieces], dtype=np.int64)
    rows = batches[index]
    counts = rows["record_count"].astype(np.int64)
    try:
        records, headers = decode_v2_records(data, starts, ends, rows["base_offset"].copy(),
                                             rows["base_timestamp"].copy(), counts,
                                             rows["last_offset"].copy())
    except CorruptRecordError as e:
        position = int(rows["position"][e.region])
        raise CorruptRecordError(e.reason, position=position, path=path,
                                 base_offset=int(rows["base_offset"][e.region])) from None
    batch_index = np.repeat(index.astype(np.int32), counts)
    return _finish_v2(data, records, headers, batches, batch_index)


def _legacy_table(data, entries, batch_index, ts_type):
    records = decode_legacy_records(data, entries)
    n = len(records)
    return RecordTable(data, records, np.empty(0, HEADER_DTYPE),
                       np.full(n, batch_index, np.int32) if np.isscalar(batch_index)
                       else batch_index,
                       np.full(n, NO_SEQUENCE, np.int64), entries["crc"].astype(np.int64),
                       ts_type)


def _decode_legacy_run(pieces, batches):
    data = b"".join([p[1] for p in pieces])
    index = np.array([p[2] for p in pieces], dtype=np.int32)
    entries = batches[index].copy()
    sizes = entries["size"].astype(np.int64)
    entries["position"] = np.cumsum(sizes) - sizes
    ts_type = np.array([timestamp_type_of(int(m), int(a)) for m, a in
                        zip(entries["magic"], entries["attributes"])], dtype=np.int8)
    return _legacy_table(data, entries, index, ts_type)


def _decode_wrapper(piece, batches, path):
    _, data, index, _ = piece
    wrapper = batches[index]
    pos = int(wrapper["position"])
    wrapper_offset = int(wrapper["last_offset"])
    inner, reason = _wrapper_entries(data, wrapper)
    if reason is not None:
        raise CorruptRecordError(f"invalid inner message set in compressed wrapper: {reason}",
                                 position=pos, path=path, base_offset=wrapper_offset)
    if wrapper["magic"] == 1:
        # v1 inner offsets are relative: the wrapper carries the offset of the last one.
        inner["base_offset"] = wrapper_offset - int(inner["base_offset"][-1]) + inner["base_offset"]
        inner["last_offset"] = inner["base_offset"]
    wrapper_type = timestamp_type_of(int(wrapper["magic"]), int(wrapper["attributes"]))
    if wrapper_type == TimestampType.LOG_APPEND_TIME:
        inner["base_timestamp"] = wrapper["max_timestamp"]
    ts_type = np.full(len(inner), int(wrapper_type), np.int8)
    try:
        return _legacy_table(data, inner, index, ts_type)
    except CorruptRecordError as e:
        raise CorruptRecordError(f"invalid inner message set in compressed wrapper: "
                                 f"{e.reason}", position=pos, path=path,
                                 base_offset=wrapper_offset) from None


def _wrapper_entries(data, wrapper):
    """(inner entries, None), or (None, why the inner message set of a legacy compressed
    wrapper is invalid). Kafka's ``DeepRecordsIterator`` rules: a non-empty set of whole,
    CRC-valid, uncompressed messages of the wrapper's magic, offsets increasing; in v1 the
    relative offsets end at most at the wrapper's offset (the absolute base is not negative),
    in v0 the absolute ones end at most at it."""
    walk = walk_segment(data, policy=ITERATE_STRICT)
    if walk.error is not None:
        return None, walk.events[-1].reason
    inner = walk.batches
    if len(inner) == 0:
        return None, "no inner records"
    if (inner["magic"] != wrapper["magic"]).any():
        return None, (f"inner message magic {int(inner['magic'][inner['magic'] != wrapper['magic']][0])} "
                      f"does not match the wrapper's {int(wrapper['magic'])}")
    if (inner["attributes"] & COMPRESSION_MASK).any():
        return None, "an inner message is compressed"
    offsets = inner["base_offset"]
    if (offsets[1:] <= offsets[:-1]).any():
        return None, "inner offsets do not increase"
    wrapper_offset, first, last = int(wrapper["last_offset"]), int(offsets[0]), int(offsets[-1])
    if wrapper["magic"] == 1 and (first < 0 or last > wrapper_offset):
        return None, (f"relative offsets {first}-{last} do not fit the wrapper offset "
                      f"{wrapper_offset}")
    if wrapper["magic"] == 0 and (first < 0 or last > wrapper_offset):
        return None, (f"inner offsets {first}-{last} do not fit the wrapper offset "
                      f"{wrapper_offset}")
    return inner.copy(), None
