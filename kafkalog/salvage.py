"""Salvage reads: every intact record of a damaged partition, and where the damage is.

Kafka stops reading a segment at its first bad batch, and its recovery cuts the segment there
(and deletes every later segment). A salvage read skips the damaged region instead: it
resynchronises on the next position where a whole batch with a valid CRC begins (the segment
walker's ``SALVAGE`` policy), keeps every batch after it whose records decode and whose offsets
increase, and lists the gaps. ``write_partition`` copies the intact batches,
bytes unchanged, into a fresh partition directory that Kafka can load. Kafka has no such tool.

``scan_segment`` (the walk with resynchronisation) and ``iter_decoded`` (bounded, per-batch
fault-isolating decoding) are shared with ``kafkalog verify``.
"""
from __future__ import annotations

import collections
import logging
import os
from typing import TYPE_CHECKING, Any, Iterator, Mapping, NamedTuple, Sequence

import numpy as np
import numpy.typing as npt

from kafkalog import checkpoint, codecs, progress, storage
from kafkalog._kernels import decode_v2_records
from kafkalog._layout import V2_HEADER_SIZE
from kafkalog.config import LogConfig
from kafkalog.errors import CorruptRecordError, KafkaLogError
from kafkalog.files import (
    LOG_SUFFIX, PARTITION_METADATA, file_name, file_path, offsets_of, topic_partition_or_none,
)
from kafkalog.log_dirs import is_log07_dir
from kafkalog.records import COMPRESSION_MASK, decode_batches, open_buffer
from kafkalog.segment_walker import SALVAGE, WalkEvent, walk_segment

if TYPE_CHECKING:
    from kafkalog._core import Record
    from kafkalog._typing import StrPath
    from kafkalog.records import RecordTable

log = logging.getLogger(__name__)

# Bytes of log decoded at once: bounds the memory of a pass over a segment of any size.
DECODE_CHUNK_BYTES = 4 * 1024 * 1024
# Bytes copied at once when writing salvaged batches.
_COPY_BYTES = 8 * 1024 * 1024
_MAX_RELATIVE_OFFSET = 2**31 - 1

#: Bytes ``[start, end)`` of a ``.log`` file where no intact batch begins (``code``: the
#: walker's outcome; ``row``: the header of a batch failing its CRC, else None).
Damage = WalkEvent


# A namedtuple, not a typing.NamedTuple: its ``index`` field shadows tuple.index.
BatchFailure = collections.namedtuple("BatchFailure", "index code message")
BatchFailure.__doc__ = """A batch whose records cannot be read: ``index`` into the rows that
were decoded, ``code`` (``"undecodable_records"``, ``"record_count_mismatch"``,
``"offsets_not_increasing"``, ``"record_offset_outside_batch"``) and why."""


class Gap(NamedTuple):
    """A damaged region a salvage read skipped.

    ``file``: the ``.log`` path; ``start``/``end``: byte positions (end exclusive), ``bytes`` =
    end - start; ``offset_before``: last offset of the intact data before the gap (None at the
    start of the partition); ``offset_after``: first offset of the intact data after it (None at
    the end); ``code`` and ``message``: why the bytes were skipped (the codes of ``verify``)."""
    file: str
    start: int
    end: int
    bytes: int
    offset_before: int | None
    offset_after: int | None
    code: str
    message: str


# ------------------------------------------------------------------------------ scanning
def scan_segment(buf: Any, start: int = 0, end: int = -1, legacy: bool = True,
                 last_segment: bool = True, after: int | None = None,
                 before: int | None = None) -> tuple[np.ndarray, list[Damage]]:
    """Walk the batches of ``buf[start:end]``, resynchronising after every damaged region
    (the segment walker's ``SALVAGE`` policy).

    Returns ``(batches, damages)``: the intact batches (whole, CRC valid; ``BATCH_DTYPE``, file
    positions) in file order, and a ``Damage`` for each region without an intact batch.
    ``legacy``: also resynchronise on magic 0/1 entries; ``last_segment``: whether the file
    ends the log (a batch cut at its end is then a torn write, else missing data); ``after``:
    the offset the first batch must start above (a batch at or below it, or not above the
    batch before it, is skipped as ``offsets_not_increasing``); ``before``: the offset every
    batch must end below (the next segment's base offset).
    """
    walk = walk_segment(buf, start, end, policy=SALVAGE, legacy=legacy,
                        last_segment=last_segment, after=after, before=before)
    return walk.batches, walk.events


# ------------------------------------------------------------------------------ decoding
def iter_decoded(buf: Any, batches: np.ndarray, path: StrPath | None = None,
                 chunk_bytes: int = DECODE_CHUNK_BYTES
                 ) -> Iterator[tuple[np.ndarray, RecordTable, list[BatchFailure]]]:
    """Decode every record of the walked ``batches`` of ``buf``, about ``chunk_bytes`` of log
    at a time, isolating the batches that fail.

    Yields ``(rows, table, failures)`` per chunk: ``rows`` the chunk's ``BATCH_DTYPE`` rows,
    ``table`` a ``RecordTable`` of the records of every batch that decoded (its ``batch``
    indexes ``rows``), ``failures`` a list of ``BatchFailure`` (a failed batch has no record
    in the table). A batch fails when its records cannot be decompressed or decoded, when they
    do not match its declared record count, or when their offsets do not increase inside the
    batch or fall outside its offset range.
    """
    batches = np.asarray(batches)
    for rows in _chunks(batches, chunk_bytes):
        try:
            table = decode_batches(buf, rows, path)
            failures = []
        except KafkaLogError:
            table, failures = _decode_each(buf, rows, path)
        bad = _record_offset_failures(rows, table)
        if bad:
            failures += bad
            table = table.slice(~np.isin(table.batch, [f.index for f in bad]))
        failures.sort()
        yield rows, table, failures


def _chunks(batches, chunk_bytes):
    n = len(batches)
    if n == 0:
        return
    ends = np.cumsum(batches["size"], dtype=np.int64)
    i = 0
    while i < n:
        start = int(ends[i]) - int(batches["size"][i])
        j = max(int(np.searchsorted(ends, start + chunk_bytes, "right")), i + 1)
        yield batches[i:j]
        i = j


def _decode_each(buf, rows, path):
    """Decode batch by batch to find the ones at fault; then the others together."""
    good = np.ones(len(rows), dtype=bool)
    failures = []
    for i in range(len(rows)):
        try:
            decode_batches(buf, rows[i:i + 1], path)
        except KafkaLogError as e:
            good[i] = False
            failures.append(_failure(buf, rows[i], i, e))
    index = np.flatnonzero(good)
    table = decode_batches(buf, rows[index], path)
    table.batch = index[table.batch].astype(np.int32)
    return table, failures


# The kernels' reasons for a record count that does not match the records (see _decode.pxi).
_COUNT_REASONS = ("records still remaining", "record count does not fit")


def _failure(buf, row, index, exc):
    reason = getattr(exc, "reason", None) or str(exc)
    count = int(row["record_count"])
    if any(r in reason for r in _COUNT_REASONS):
        return BatchFailure(index, "record_count_mismatch",
                            f"the batch declares {count} records: {reason}")
    if row["magic"] == 2 and isinstance(exc, CorruptRecordError) and _records_end_early(buf, row):
        return BatchFailure(index, "record_count_mismatch",
                            f"the batch declares {count} records but its records end before "
                            f"the last of them")
    return BatchFailure(index, "undecodable_records", reason)


def _records_end_early(buf, row):
    """True when a v2 batch's records are whole but fewer than its header declares."""
    count = int(row["record_count"])
    pos, size = int(row["position"]), int(row["size"])
    payload = bytes(buf[pos + V2_HEADER_SIZE:pos + size])
    codec = int(row["attributes"]) & COMPRESSION_MASK
    if count <= 0:
        return False
    if codec:
        try:
            payload = codecs.decompress(codec, payload)
        except KafkaLogError:
            return False
    one = np.zeros(1, dtype=np.int64)
    try:
        decode_v2_records(payload, one, one + len(payload), one + int(row["base_offset"]),
                          one + int(row["base_timestamp"]), one + count)
    except CorruptRecordError as e:
        return e.position == len(payload)
    return False


def _record_offset_failures(rows, table):
    """Batches whose records' offsets do not increase or fall outside the batch's range."""
    if len(table) == 0:
        return []
    offsets = table.records["offset"]
    index = table.batch
    if (offsets[1:] > offsets[:-1]).all():
        # The common case, in two passes over the records: offsets increase throughout, so
        # only each batch's first and last record can fall outside its range.
        counts = np.bincount(index, minlength=len(rows))
        held = np.flatnonzero(counts)
        ends = np.cumsum(counts[held])
        first, last = offsets[ends - counts[held]], offsets[ends - 1]
        v2 = rows["magic"][held] == 2
        if not ((last > rows["last_offset"][held]) |
                (v2 & (first < rows["base_offset"][held]))).any():
            return []
    outside = offsets > rows["last_offset"][index]
    v2 = rows["magic"][index] == 2
    outside |= v2 & (offsets < rows["base_offset"][index])
    same = index[1:] == index[:-1]
    backwards = same & (offsets[1:] <= offsets[:-1])
    if not outside.any() and not backwards.any():
        return []
    failures = {}
    for i in np.unique(index[1:][backwards]).tolist():
        failures[i] = BatchFailure(i, "offsets_not_increasing",
                                   "record offsets do not increase inside the batch")
    for i in np.unique(index[outside]).tolist():
        failures.setdefault(i, BatchFailure(
            i, "record_offset_outside_batch",
            f"a record's offset is outside the batch's offsets {int(rows['base_offset'][i])}-"
            f"{int(rows['last_offset'][i])}"))
    return list(failures.values())


def first_offsets(rows: np.ndarray, table: RecordTable) -> npt.NDArray[np.int64]:
    """Each row's first offset: its base offset, or for a legacy compressed wrapper (whose
    header carries its last inner offset) the offset of its first record."""
    first = rows["base_offset"].copy()
    wrappers = (rows["magic"] < 2) & ((rows["attributes"] & COMPRESSION_MASK) != 0)
    if wrappers.any() and len(table):
        index = table.batch
        starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
        holders = index[starts]
        mask = wrappers[holders]
        first[holders[mask]] = table.records["offset"][starts[mask]]
    return first


# ------------------------------------------------------------------------------ salvage
class SegmentSalvage:
    """What a salvage read found in one ``.log`` file.

    Attributes
    ----------
    path : str
        The ``.log`` file.
    base_offset : int
        The offset its name carries.
    size : int
        Its size in bytes.
    batches : ndarray of ``BATCH_DTYPE``
        The intact batches (positions in the file), in offset order.
    first_offsets : ndarray of int64
        Each intact batch's first offset (differs from ``base_offset`` only for legacy
        compressed wrappers).
    record_count : int
        Records in the intact batches.
    gaps : list of ``Gap``
        The regions skipped, by position.
    """

    def __init__(self, path: str, base_offset: int, size: int, batches: np.ndarray,
                 first_offsets: npt.NDArray[np.int64], record_count: int,
                 gaps: list[Gap]) -> None:
        self.path = path
        self.base_offset = base_offset
        self.size = size
        self.batches = batches
        self.first_offsets = first_offsets
        self.record_count = record_count
        self.gaps = gaps

    @property
    def first_offset(self) -> int | None:
        """First offset of the intact data, or None."""
        return int(self.first_offsets[0]) if len(self.batches) else None

    @property
    def last_offset(self) -> int | None:
        """Last offset of the intact data, or None."""
        return int(self.batches["last_offset"][-1]) if len(self.batches) else None

    @property
    def intact_bytes(self) -> int:
        return int(self.batches["size"].sum())

    def tables(self, chunk_bytes: int = DECODE_CHUNK_BYTES) -> Iterator[RecordTable]:
        """The records of the intact batches, as ``RecordTable`` s of about ``chunk_bytes`` of
        log each (``batch`` indexes ``self.batches``)."""
        buf = open_buffer(self.path)
        at = 0
        for rows, table, failures in iter_decoded(buf, self.batches, self.path, chunk_bytes):
            if failures:       # the file changed since the salvage read
                raise KafkaLogError(f"{self.path} changed since it was salvaged")
            table.batch = table.batch + np.int32(at)
            at += len(rows)
            yield table

    def records(self) -> Iterator[Record]:
        """Every intact record, as ``Record`` objects, in offset order."""
        for table in self.tables():
            yield from table.to_records()

    def __repr__(self) -> str:
        return (f"SegmentSalvage({self.path!r}, batches={len(self.batches)}, "
                f"records={self.record_count}, gaps={len(self.gaps)})")


def salvage_segment(path: StrPath, previous_last_offset: int | None = None,
                    base_offset: int | None = None,
                    chunk_bytes: int = DECODE_CHUNK_BYTES,
                    next_base_offset: int | None = None) -> SegmentSalvage:
    """Read every intact batch of one ``.log`` file, skipping damaged regions.

    A batch is kept when it is whole, its CRC is valid, its records decode (and match its
    header), and its offsets are above ``previous_last_offset`` and those of the batch kept
    before it, and below ``next_base_offset`` (the next segment's). Returns a ``SegmentSalvage``; each skipped region becomes a ``Gap`` (also logged
    at INFO on ``kafkalog.salvage``; ``write_partition`` logs what it leaves out at WARNING).
    """
    path = os.fspath(path)
    if base_offset is None:
        base_offset = _base_of(path)
    buf = open_buffer(path)
    size = len(buf)
    # a segment with a next one cannot end in a torn write: its cut batch is missing data,
    # as verify and recovery call it
    batches, damages = scan_segment(buf, last_segment=next_base_offset is None,
                                    after=previous_last_offset, before=next_base_offset)
    gaps = [(d.start, d.end, d.code, d.message) for d in damages]
    kept, firsts = [], []
    records = 0
    last = previous_last_offset
    for rows, table, failures in iter_decoded(buf, batches, path, chunk_bytes):
        failed = np.zeros(len(rows), dtype=bool)
        for f in failures:
            failed[f.index] = True
            pos = int(rows["position"][f.index])
            why = f"batch with offsets {int(rows['base_offset'][f.index])}-" \
                  f"{int(rows['last_offset'][f.index])}: {f.message}"
            gaps.append((pos, pos + int(rows["size"][f.index]), f.code, why))
        first = first_offsets(rows, table)
        keep, last = _increasing(rows, first, failed, last, gaps)
        counts = np.bincount(table.batch, minlength=len(rows))
        records += int(counts[keep].sum())
        kept.append(rows[keep])
        firsts.append(first[keep])
    intact = np.concatenate(kept) if kept else batches[:0]
    first = np.concatenate(firsts) if firsts else np.empty(0, np.int64)
    gaps = _gaps_with_offsets(path, sorted(gaps), intact, first)
    progress.advance(size)
    for g in gaps:
        log.info("%s: skipping bytes [%d, %d) (%d bytes) between offsets %s and %s: %s",
                 path, g.start, g.end, g.bytes, g.offset_before, g.offset_after, g.message)
    return SegmentSalvage(path, base_offset, size, intact, first, records, gaps)


def _base_of(path):
    found = offsets_of([os.path.basename(path)], LOG_SUFFIX)
    return found[0] if found else 0


def _increasing(rows, first, failed, last, gaps):
    """Which rows to keep so that offsets increase; rows that break the order become gaps."""
    keep = ~failed
    lasts = rows["last_offset"]
    good = np.flatnonzero(keep)
    if len(good) == 0:
        return keep, last
    f, l_ = first[good], lasts[good]
    if (l_ >= f).all() and (f[1:] > l_[:-1]).all() and (last is None or f[0] > last):
        return keep, int(l_[-1])
    for i in good.tolist():       # damaged data only: one row at a time
        if lasts[i] < first[i] or (last is not None and first[i] <= last):
            keep[i] = False
            pos = int(rows["position"][i])
            why = f"batch with offsets {int(first[i])}-{int(lasts[i])} does not follow " \
                  f"offset {last}"
            gaps.append((pos, pos + int(rows["size"][i]), "offsets_not_increasing", why))
        else:
            last = int(lasts[i])
    return keep, last


def _gaps_with_offsets(path, gaps, intact, first):
    positions = intact["position"]
    out = []
    for start, end, code, message in gaps:
        i = int(np.searchsorted(positions, start, "left"))
        before = int(intact["last_offset"][i - 1]) if i > 0 else None
        j = int(np.searchsorted(positions, end, "left"))
        after = int(first[j]) if j < len(intact) else None
        out.append(Gap(path, start, end, end - start, before, after, code, message))
    return out


class PartitionSalvage:
    """What a salvage read found in a partition directory.

    Attributes
    ----------
    dir : str
    segments : list of ``SegmentSalvage``
        One per ``.log`` file, by base offset.
    gaps : list of ``Gap``
        Every region skipped, in log order; ``offset_before`` / ``offset_after`` reach across
        segments.
    """

    def __init__(self, directory: str, segments: Sequence[SegmentSalvage]) -> None:
        self.dir = directory
        self.segments = segments
        self.gaps = _link_gaps(segments)

    @property
    def record_count(self) -> int:
        return sum(s.record_count for s in self.segments)

    @property
    def batch_count(self) -> int:
        return sum(len(s.batches) for s in self.segments)

    @property
    def first_offset(self) -> int | None:
        return next((s.first_offset for s in self.segments if len(s.batches)), None)

    @property
    def last_offset(self) -> int | None:
        return next((s.last_offset for s in reversed(self.segments) if len(s.batches)), None)

    def tables(self, chunk_bytes: int = DECODE_CHUNK_BYTES) -> Iterator[RecordTable]:
        """The records of every intact batch, as ``RecordTable`` s (``batch`` indexes the
        segment's ``batches``), segment after segment."""
        for s in self.segments:
            yield from s.tables(chunk_bytes)

    def records(self) -> Iterator[Record]:
        """Every intact record, as ``Record`` objects, in offset order."""
        for s in self.segments:
            yield from s.records()

    def __repr__(self) -> str:
        return (f"PartitionSalvage({self.dir!r}, segments={len(self.segments)}, "
                f"records={self.record_count}, gaps={len(self.gaps)})")


def _link_gaps(segments):
    out = []
    lasts = [s.last_offset for s in segments]
    firsts = [s.first_offset for s in segments]
    for k, s in enumerate(segments):
        for g in s.gaps:
            before, after = g.offset_before, g.offset_after
            if before is None:
                before = next((x for x in reversed(lasts[:k]) if x is not None), None)
            if after is None:
                after = next((x for x in firsts[k + 1:] if x is not None), None)
            out.append(g._replace(offset_before=before, offset_after=after))
    return out


def salvage_partition(path: StrPath, chunk_bytes: int = DECODE_CHUNK_BYTES) -> PartitionSalvage:
    """Salvage read of every segment of a partition directory; returns a
    ``PartitionSalvage``. Offsets must increase across segments too: a batch at or below the
    last offset kept in an earlier segment is skipped as a gap. ``path`` may be an fsspec URL
    (``s3://...``; its options as ``storage.locate`` recorded them)."""
    path = str(storage.abspath(storage.normalize(os.fspath(path))))
    if not storage.isdir(path):
        raise KafkaLogError(f"{path}: no such directory")
    if is_log07_dir(path):
        raise KafkaLogError(f"{path}: a Kafka 0.7 partition directory (.kafka files): salvage "
                            "reads Kafka 0.8+ logs; recover cuts a 0.7 log at its first invalid "
                            "message as 0.7 did")
    segments = []
    last = None
    bases = offsets_of(storage.listdir(path), LOG_SUFFIX)
    for base, before in zip(bases, [*bases[1:], None]):
        s = salvage_segment(file_path(path, base, LOG_SUFFIX), last, base, chunk_bytes, before)
        segments.append(s)
        if s.last_offset is not None:
            last = s.last_offset
    return PartitionSalvage(path, segments)


# ------------------------------------------------------------------------------ writing
def write_partition(salvage: PartitionSalvage, out: StrPath,
                    config: LogConfig | Mapping[str, Any] | StrPath | None = None
                    ) -> dict[str, Any]:
    """Write the intact batches of a ``PartitionSalvage`` into a new partition directory.

    Batches are copied whole, bytes unchanged, into ``.log`` files named after their first
    offset (one per source segment, split only if offsets would overflow a segment);
    ``partition.metadata`` is copied. Then the directory is opened as a ``Log`` after an
    unclean shutdown, so recovery writes the indexes, the producer snapshot and the leader
    epoch checkpoint as Kafka's would, and closed. ``out`` must not exist or be empty.
    ``config``: the topic's settings, as ``Log.open`` takes them (a ``LogConfig``, a mapping
    or the path of a ``.properties`` file); the indexes follow its ``index.interval.bytes``.

    The log start offset is the first salvaged offset, or the source's (from its log dir's
    ``log-start-offset-checkpoint``) when that is higher.

    Returns ``{"dir", "segments": [file names], "batches", "records", "bytes",
    "log_start_offset", "log_end_offset"}``. Raises KafkaLogError when nothing is intact or
    ``out`` is not empty.
    """
    from kafkalog.log import Log
    config = LogConfig.of(config)      # a bad config fails before anything is written
    out = os.path.abspath(os.fspath(out))
    first, last = salvage.first_offset, salvage.last_offset
    if first is None or last is None:      # both or neither
        raise KafkaLogError(f"{salvage.dir}: no intact batch to write")
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise KafkaLogError(f"{out} exists and is not an empty directory")
    os.makedirs(out, exist_ok=True)
    names, written = [], 0
    for seg in salvage.segments:
        for lo, hi in _file_groups(seg):
            name = file_name(int(seg.first_offsets[lo]), LOG_SUFFIX)
            written += _copy_batches(seg.path, seg.batches[lo:hi], os.path.join(out, name))
            names.append(name)
    metadata = os.path.join(salvage.dir, PARTITION_METADATA)
    if storage.exists(metadata):            # the source may be in a bucket
        with open(os.path.join(out, PARTITION_METADATA), "wb") as f:
            f.write(storage.read_file(metadata))
    start = max(first, _source_log_start(salvage.dir) or 0)
    start = min(start, last + 1)
    for g in salvage.gaps:
        log.warning("%s: left out of %s: bytes [%d, %d) of %s (%d bytes, between offsets %s "
                    "and %s): %s", salvage.dir, out, g.start, g.end, os.path.basename(g.file),
                    g.bytes, g.offset_before, g.offset_after, g.message)
    log.info("%s: wrote %d salvaged batches (%d bytes) into %s; recovering its indexes",
             salvage.dir, salvage.batch_count, written, out)
    routine = _RoutineLoad(out)
    loader_log = logging.getLogger("kafkalog.loader")
    loader_log.addFilter(routine)
    try:
        with Log.open(out, config, recovery_point=0, log_start_offset=start,
                      clean_shutdown=False, first_dirty_offset=start) as copy:
            log_end = copy.log_end_offset
            log_start = copy.log_start_offset
    finally:
        loader_log.removeFilter(routine)
    if log_end != last + 1:
        raise KafkaLogError(f"{out}: the salvaged copy ends at offset {log_end}, not "
                            f"{last + 1}")
    return {"dir": out, "segments": names, "batches": salvage.batch_count,
            "records": salvage.record_count, "bytes": written,
            "log_start_offset": log_start, "log_end_offset": log_end}


class _RoutineLoad(logging.Filter):
    """The load of a salvaged copy builds every index it lacks: routine work, so the loader's
    WARNINGs about that directory are INFO (they are still in its ``recovery_report``)."""

    def __init__(self, directory):
        super().__init__()
        self.directory = directory

    def filter(self, record):
        if record.args and record.args[0] == self.directory:
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def _file_groups(seg):
    """[lo, hi) row ranges of a segment's intact batches that fit one segment each."""
    n = len(seg.batches)
    lo = 0
    while lo < n:
        limit = int(seg.first_offsets[lo]) + _MAX_RELATIVE_OFFSET
        hi = int(np.searchsorted(seg.batches["last_offset"], limit, "right"))
        hi = max(hi, lo + 1)
        yield lo, hi
        lo = hi


def _copy_batches(src, rows, dst):
    """Copy the bytes of ``rows`` (runs of adjacent batches read together) to a new file."""
    positions = rows["position"]
    ends = positions + rows["size"]
    breaks = np.flatnonzero(positions[1:] != ends[:-1]) + 1
    starts = np.r_[0, breaks]
    stops = np.r_[breaks, len(rows)]
    total = 0
    with storage.open_file(src) as f, open(dst, "wb") as g:
        for a, b in zip(starts.tolist(), stops.tolist()):
            pos, end = int(positions[a]), int(ends[b - 1])
            f.seek(pos)
            while pos < end:
                data = f.read(min(_COPY_BYTES, end - pos))
                if not data:
                    raise KafkaLogError(f"{src} is shorter than when it was salvaged")
                g.write(data)
                pos += len(data)
                total += len(data)
        g.flush()
        os.fsync(g.fileno())
    return total


def _source_log_start(directory):
    key = topic_partition_or_none(os.path.basename(directory))
    if key is None:
        return None
    saved = checkpoint.LogDirCheckpoints(os.path.dirname(directory))
    return saved.for_partition(key).log_start_offset


__all__ = ["Damage", "BatchFailure", "Gap", "SegmentSalvage", "PartitionSalvage",
           "scan_segment", "iter_decoded", "first_offsets", "salvage_segment",
           "salvage_partition", "write_partition", "DECODE_CHUNK_BYTES"]
