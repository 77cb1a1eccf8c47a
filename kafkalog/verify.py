"""``kafkalog verify``: Kafka's checks of a partition, offline, and deeper ones.

By default every record of every batch is decompressed and decoded (a batch can carry a valid
CRC over records that do not decode: Kafka's recovery only checks the CRC, and consumers fail
later); ``deep=False`` checks structure, CRCs, offsets, indexes and snapshots only.

Each problem is a dict ``{"code", "file", "position", "offset", "message"}``: ``code`` one of
``CODES`` (stable identifiers), ``file`` the path at fault, ``position`` a byte position in it
and ``offset`` the Kafka offset concerned (None when not applicable), ``message`` for people.

A partition a writer holds open (its lock held, or its files changing while verify runs) is
checked as a snapshot, and its report says ``"live": true``: the state a writer leaves while it
works is not damage (the active segment's preallocated index tail, its index entries past the
end read, a batch being written at its end, snapshots and leader epochs above the end read).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from kafkalog import checkpoint, locks, log_dirs, progress, storage, tiered
from kafkalog._layout import WALK_CORRUPT, WALK_END, WALK_INVALID
from kafkalog._text import counted
from kafkalog.errors import (
    CorruptIndexError, CorruptSnapshotError, KafkaLogError, TieredKeyError, TieredStorageError,
)
from kafkalog.files import (
    INDEX_SUFFIX, LEADER_EPOCH_CHECKPOINT, LOG_SUFFIX, PARTITION_METADATA, TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX, file_path, log07_files, offsets_of, parse_file_name,
)
from kafkalog.index import OffsetIndex, TimeIndex, TransactionIndex
from kafkalog.log import Log
from kafkalog.log07 import Log07
from kafkalog.log07.format import decode_entries, walk_all
from kafkalog.producer_state import list_snapshots, read_snapshot
from kafkalog.records import open_buffer
from kafkalog.salvage import DECODE_CHUNK_BYTES, iter_decoded, scan_segment
from kafkalog.segment_walker import Outcome

if TYPE_CHECKING:
    from kafkalog._typing import StrPath

CODES = {
    # the .log files
    "crc_mismatch": "a batch's stored CRC does not match its bytes",
    "corrupt_batch": "bytes where a batch should start are not one (bad size or magic, or a "
                     "negative offset delta)",
    "torn_tail": "the last segment ends inside a batch (a write cut short)",
    "missing_data": "a segment that is not the last ends inside a batch: the rest of the batch "
                    "is missing (not a torn write, which only the last segment can end in)",
    "log_zero_tail": "a segment ends in all-zero bytes (left at its preallocated size with "
                     "log.preallocate: not closed cleanly)",
    "undecodable_records": "a batch's records cannot be decompressed or decoded (deep)",
    "record_count_mismatch": "a batch holds a different number of records than its header "
                             "declares (deep)",
    "record_offset_outside_batch": "a record's offset is outside its batch's offsets (deep)",
    "offsets_not_increasing": "a batch or record offset is not above the one before it "
                              "(within a segment or across segments)",
    "offset_below_segment_base": "a segment holds an offset below the one its name carries",
    "offset_overflow": "an offset is too far above the segment's base to fit the indexes",
    # the indexes
    "index_missing": "a segment has no offset or time index (Kafka rebuilds it by recovery)",
    "index_zero_tail": "an index ends in all-zero entries left at its preallocated size (or "
                       "is all zeros): it was not closed cleanly",
    "corrupt_index": "an index fails Kafka's sanity check",
    "index_out_of_order": "index entries do not increase",
    "index_entry_not_at_batch": "an offset index entry does not point at the start of a batch "
                                "at or below its offset",
    "index_entry_past_end": "an offset index entry is past the segment's last offset",
    "time_index_mismatch": "a time index entry's timestamp is not the largest timestamp of the "
                           "segment up to its offset's batch, or its offset is in no batch",
    # the partition's other files
    "snapshot_above_log_end": "a producer snapshot is above the log end offset",
    "corrupt_snapshot": "a producer snapshot cannot be read",
    "corrupt_checkpoint": "a checkpoint (leader epochs, partition metadata, the log dir's "
                          "offsets) cannot be read",
    "leader_epoch_out_of_order": "leader epoch entries do not increase",
    "leader_epoch_above_log_end": "a leader epoch starts above the log end offset",
    "leader_epoch_mismatch": "a batch's partition leader epoch is not the one the leader epoch "
                             "checkpoint gives for its offset",
    "cannot_open": "the partition cannot be opened, or a file cannot be read",
    # tiered storage (objects in Aiven's RemoteStorageManager format)
    "damaged_object": "a tiered-storage object is damaged (a chunk fails authentication or "
                      "decompression, chunk sizes do not add up to the object, an index object "
                      "is shorter than its manifest says)",
    "tiered_key_needed": "encrypted tiered-storage segments' data key cannot be unwrapped: no "
                         "private key given for their key pair, or a different one (reported "
                         "once per partition and key pair)",
}

# Problems of one code in one file listed before the rest are only counted.
MAX_PER_CODE = 10


def problem(code: str, file: StrPath, message: str, position: int | None = None,
            offset: int | None = None) -> dict[str, Any]:
    """A problem dict (see the module docstring)."""
    assert code in CODES, code
    return {"code": code, "file": os.fspath(file),
            "position": None if position is None else int(position),
            "offset": None if offset is None else int(offset), "message": message}


def render_problem(p: Mapping[str, Any], directory: StrPath | None = None) -> str:
    """One line for people: code, file (relative to ``directory``), position, offset, message."""
    name = p["file"]
    if directory is not None and os.path.dirname(name) == os.fspath(directory):
        name = os.path.basename(name)
    where = "".join([f" position {p['position']}" if p["position"] is not None else "",
                     f" offset {p['offset']}" if p["offset"] is not None else ""])
    return f"{p['code']}: {name}{where}: {p['message']}"


def partition_dirs(path: StrPath, storage_options: dict[str, Any] | None = None,
                   rsm_keys: Mapping[str, Any] | None = None) -> list[str]:
    """The partition directories named by ``path`` (a local path or an fsspec URL): itself,
    or those inside a log dir (or a tiered-storage prefix): ``log_dirs.partition_dirs`` with
    its errors (``LogNotFoundError``, ``PartitionNotFoundError``) when there are none."""
    return [d for d, _ in partition_listing(path, storage_options, rsm_keys).partitions]


def partition_listing(path: StrPath, storage_options: dict[str, Any] | None = None,
                      rsm_keys: Mapping[str, Any] | None = None) -> log_dirs.PartitionListing:
    """``partition_dirs`` with what the listing saw (``log_dirs.partition_listing``): checks
    of the partitions inside ``storage.listed(found.listed)`` ask nothing more of it."""
    with log_dirs.located(path, storage_options, rsm_keys) as location:
        return log_dirs.partition_listing(location.root, required=True, log07=True)


class _Carry:
    """What one segment's checks pass to the next: offsets must increase across segments."""

    def __init__(self):
        self.batch_last = None       # last offset of the last intact batch
        self.record_last = None      # offset of the last record decoded
        self.epochs = []             # (file, rows) of the v2 batches, for the epoch check
        self.keys_needed = set()     # key-pair ids reported as tiered_key_needed


def verify_partition(path: StrPath, deep: bool = True,
                     chunk_bytes: int = DECODE_CHUNK_BYTES,
                     storage_options: dict[str, Any] | None = None,
                     rsm_keys: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Check every batch, record, index, snapshot and checkpoint of a partition.

    With ``deep`` (the default) every record of every batch is decoded, ``chunk_bytes`` of log
    at a time (memory stays bounded); without it records are not read.

    Returns ``{"dir", "ok", "deep", "live", "offsets", "segments": [...], "problems": [...]}``
    (``live``: a writer held the partition or changed its files meanwhile; see the module
    docstring); each
    problem is a dict (see the module docstring), each segment ``{"file", "size", "batches",
    "records" (None unless deep), "valid_bytes", "last_offset", "crc_errors", "problems"}``.
    ``offsets`` is what the engine's read-only view of the partition says (log start and end
    offsets, high watermark, last stable offset), or None when it cannot be opened.
    ``path`` may be an fsspec URL (``s3://...``), with the filesystem's ``storage_options``,
    or a tiered-storage partition prefix (every chunk and index of every segment decoded;
    ``rsm_keys`` as ``Log.open`` takes them). A Kafka 0.7 partition directory (``.kafka``
    files) is checked as 0.7 checked its files (sizes and CRC32s; ``deep``: the messages inside
    compressed wrappers too), its report marked ``"format": "0.7"``. Raises
    ``LogNotFoundError`` for a missing path, ``PartitionNotFoundError`` for a file or a log dir.
    """
    path = storage.abspath(storage.locate(os.fspath(path), storage_options, rsm_keys).root)
    if log_dirs.is_log07_dir(path):
        return _verify_log07(path, deep)
    log_dirs.check_partition_dir(path, read_only=False)   # missing, a file or a log dir
    # within a listing (a bucket's, storage.listed), the files the open read are read once
    with storage.listed({}, keep_read=True):
        _fetch_small_files(path)
        return _verify_partition(path, deep, chunk_bytes)


def _fetch_small_files(path):
    """A listed remote partition's indexes, snapshots and checkpoints fetched at once
    (concurrent ranged GETs, kept by the listing for the open and the checks, smallest first
    while it keeps them), not one round trip after another as each is reached."""
    entries = storage.listed_entries(path)
    if entries is None or storage.is_view(path):
        return
    small, total = [], 0
    for e in sorted(entries, key=lambda e: e.size):
        parsed = parse_file_name(e.name)
        if e.is_file and (e.name in (LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA) or (
                parsed is not None and not parsed[2] and parsed[1] != LOG_SUFFIX)):
            total += e.size
            if total > storage.Listed.KEEP_READ_BYTES:
                break
            small.append(os.path.join(path, e.name))
    try:
        storage.read_files(small)
    except (KafkaLogError, OSError):
        pass                    # each check reads its file again and says what is wrong


def _verify_partition(path, deep, chunk_bytes):
    report: dict[str, Any] = {"dir": path, "deep": bool(deep), "live": False, "offsets": None,
                              "segments": [], "problems": []}
    problems = report["problems"]
    local = not storage.is_remote(path)
    held = local and locks.writer_holds(path)
    files_before = _file_states(path) if local else None
    carry = _Carry()
    try:
        with Log.open(path, read_only=True) as view:
            report["offsets"] = view.offsets()._asdict()
    except TieredKeyError as e:
        problems += _key_needed([e], carry)
    except (KafkaLogError, OSError) as e:
        problems.append(problem("cannot_open", path, f"cannot be opened read-only: {e}"))
    bases = offsets_of(storage.listdir(path), LOG_SUFFIX)
    for base, before in zip(bases, [*bases[1:], None]):
        seg = _verify_segment(path, base, carry, deep, chunk_bytes, before)
        report["segments"].append(seg)
        progress.advance(seg["size"])
    log_end = report["offsets"]["log_end_offset"] if report["offsets"] else None
    others = _verify_snapshots(path, log_end) + _verify_leader_epochs(path, log_end, carry)
    others += _verify_checkpoints(path)
    report["live"] = live = held or (local and _file_states(path) != files_before)
    for seg in report["segments"]:
        last = seg is report["segments"][-1]
        seg["problems"] = _capped([p for p in seg["problems"]
                                   if not live or not _writer_state(p, last, seg)])
        problems.extend(seg["problems"])
    problems.extend(p for p in others if not live or not _writer_state(p, False, None))
    report["ok"] = not problems
    return report


def _file_states(path):
    """(name, size, mtime) of each file of a partition directory: a writer at work changes
    them."""
    try:
        return sorted((e.name, st.st_size, st.st_mtime_ns) for e in os.scandir(path)
                      for st in (e.stat(follow_symlinks=False),))
    except OSError:
        return None


def _key_needed(errors, carry):
    """One ``tiered_key_needed`` problem per key pair the ``errors`` (of ``check_segment`` or
    the open) name that is not reported yet: every segment under that key fails the same way,
    and the cure (the key) is one."""
    out = []
    for e in errors:
        if isinstance(e, TieredKeyError) and e.key_id not in carry.keys_needed:
            carry.keys_needed.add(e.key_id)
            # the message without the object's name, which the problem's file is
            message = str(e).removeprefix(f"{e.object}: ")
            out.append(problem("tiered_key_needed", e.object or "", message))
    return out


def _writer_state(p, last, seg):
    """Whether problem ``p`` is the state a writer holding the partition leaves while it
    works (of the last segment listed when ``last``, ``seg`` its result): not damage in a
    live partition."""
    code = p["code"]
    if code in ("snapshot_above_log_end", "leader_epoch_above_log_end"):
        return True         # written as the log grew past the end read (a roll, an append)
    if not last:
        return False
    if code in ("index_zero_tail", "log_zero_tail", "torn_tail", "index_missing"):
        return True         # preallocated, being written, being created (a roll)
    if code in ("index_entry_past_end", "index_entry_not_at_batch", "time_index_mismatch"):
        # entries of batches appended after the .log was read
        end = seg["last_offset"]
        return p["offset"] is not None and (end is None or p["offset"] > end)
    return False


# ------------------------------------------------------------------------------ segments
def _verify_segment(directory, base, carry, deep, chunk_bytes, before):
    """One segment's result; ``before``: the next segment's base offset (None: the last)."""
    last_segment = before is None
    log_path = file_path(directory, base, LOG_SUFFIX)
    if tiered.is_view(log_path):
        damaged = tiered.check_segment(log_path)
        if damaged:
            return _unreadable(log_path, _key_needed(damaged, carry) + [
                problem("damaged_object", e.object or log_path, str(e))
                for e in damaged if not isinstance(e, TieredKeyError)])
    try:
        buf = open_buffer(log_path)
    except OSError as e:
        return _unreadable(log_path, [problem("cannot_open", log_path, f"cannot be read: {e}")])
    # offsets increase across segments: the walk skips (and reports) a batch out of order
    batches, damages = scan_segment(buf, last_segment=last_segment, after=carry.batch_last,
                                    before=before)
    problems = [problem(d.code, log_path, d.message, d.start, d.offset) for d in damages]
    crc_rows = [d.row for d in damages if d.outcome is Outcome.CRC_FAILURE]
    misplaced = [d.row for d in damages if d.outcome is Outcome.OUT_OF_ORDER]
    flagged = set()
    problems += _check_batch_offsets(log_path, base, batches)
    records = _check_records(buf, log_path, batches, carry, flagged, chunk_bytes, problems) \
        if deep else None
    if len(batches):
        carry.batch_last = int(batches["last_offset"][-1])
        v2 = batches[batches["magic"] == 2]
        if len(v2):
            carry.epochs.append((log_path, v2[["position", "base_offset",
                                               "partition_leader_epoch"]].copy()))
    problems += _verify_indexes(directory, base, _by_position(batches, crc_rows),
                                _by_position(batches, crc_rows + misplaced))
    cuts = [d for d in damages if d.outcome is not Outcome.OUT_OF_ORDER]
    if cuts:             # (recovery does not cut at a batch out of order: it splits)
        valid_bytes = cuts[0].start
    else:
        valid_bytes = int(batches["position"][-1] + batches["size"][-1]) if len(batches) else 0
    return {"file": os.path.basename(log_path), "size": len(buf),
            "batches": len(batches) + len(crc_rows), "records": records,
            "valid_bytes": valid_bytes,
            "last_offset": int(batches["last_offset"][-1]) if len(batches) else None,
            "crc_errors": len(crc_rows), "problems": problems}


def _verify_log07(path, deep):
    """``verify_partition`` of a Kafka 0.7 partition directory: each file up to its first
    invalid entry (0.7's rule: the size fits and the CRC32 matches), each file starting where
    the one before ends."""
    report: dict[str, Any] = {"dir": path, "format": "0.7", "deep": bool(deep), "live": False,
                              "offsets": None, "segments": [], "problems": []}
    problems = report["problems"]
    try:
        with Log07.open(path, read_only=True) as view:
            report["offsets"] = {"log_start_offset": view.log_start_offset,
                                 "log_end_offset": view.log_end_offset}
    except (KafkaLogError, OSError) as e:
        problems.append(problem("cannot_open", path, f"cannot be opened read-only: {e}"))
    files = log07_files(os.listdir(path))
    expected = None
    for i, (base, name) in enumerate(files):
        seg = _verify_log07_file(os.path.join(path, name), base, deep, i == len(files) - 1)
        if expected is not None and base != expected:
            code = "missing_data" if base > expected else "offsets_not_increasing"
            seg["problems"].insert(0, problem(code, os.path.join(path, name),
                                              f"starts at byte offset {base}, where the file "
                                              f"before it ends at {expected}", 0, base))
        expected = base + (seg["size"] or 0)
        report["segments"].append(seg)
        problems.extend(seg["problems"])
    report["ok"] = not problems
    return report


def _verify_log07_file(log_path, base, deep, last):
    try:
        buf = open_buffer(log_path)
    except OSError as e:
        return _unreadable(log_path, [problem("cannot_open", log_path, f"cannot be read: {e}")])
    entries, records, last_offset, problems = 0, 0 if deep else None, None, []
    status, stop, message = WALK_END, 0, None
    try:
        for rows, status, stop, message in walk_all(buf, 0, len(buf), True):
            entries += len(rows)
            if len(rows):
                last_offset = base + int(rows["position"][-1])
            if deep:
                try:
                    records += len(decode_entries(buf, rows, True, log_path).entry)
                except KafkaLogError as e:
                    at = getattr(e, "position", None)
                    problems.append(problem("undecodable_records", log_path,
                                            getattr(e, "reason", str(e)), at,
                                            None if at is None else base + at))
        size = len(buf)
    finally:
        if hasattr(buf, "close"):
            buf.close()
    if status != WALK_END:
        code = {WALK_INVALID: "crc_mismatch", WALK_CORRUPT: "corrupt_batch"}.get(
            status, "torn_tail" if last else "missing_data")
        why = message or "the entry runs past the end of the file"
        problems.append(problem(code, log_path, f"{why}; the {size - stop} bytes from here are "
                                "not valid", stop, base + stop))
    return {"file": os.path.basename(log_path), "size": size, "batches": entries,
            "records": records, "valid_bytes": stop, "last_offset": last_offset,
            "crc_errors": int(status == WALK_INVALID), "problems": _capped(problems)}


def _unreadable(log_path, problems):
    """The result of a segment whose ``.log`` cannot be read."""
    return {"file": os.path.basename(log_path), "size": None, "batches": 0, "records": None,
            "valid_bytes": 0, "last_offset": None, "crc_errors": 0, "problems": problems}


def _check_batch_offsets(path, base, batches):
    if not len(batches):
        return []
    out = []
    bases, lasts = batches["base_offset"], batches["last_offset"]
    positions = batches["position"]
    if bases[0] < base:
        out.append(problem("offset_below_segment_base", path,
                           f"first offset {int(bases[0])} is below the segment's base offset "
                           f"{base}", positions[0], bases[0]))
    for i in np.flatnonzero((batches["magic"] == 2) & (lasts < bases)).tolist():
        out.append(problem("corrupt_batch", path, f"negative last offset delta "
                           f"{int(lasts[i] - bases[i])}", positions[i], bases[i]))
    for i in np.flatnonzero(lasts - base > 2**31 - 1)[:1].tolist():
        out.append(problem("offset_overflow", path,
                           f"offset {int(lasts[i])} does not fit relative to base offset {base}",
                           positions[i], lasts[i]))
    return out


def _check_records(buf, path, batches, carry, flagged, chunk_bytes, problems):
    """Decode every record (deep verify); returns how many there are."""
    count = 0
    for rows, table, failures in iter_decoded(buf, batches, path, chunk_bytes):
        for f in failures:
            problems.append(problem(f.code, path, f.message, rows["position"][f.index],
                                    rows["base_offset"][f.index]))
        offsets = table.records["offset"]
        count += len(offsets)
        if not len(offsets):
            continue
        # Across batches (and chunks and segments) record offsets must increase too: this
        # catches legacy compressed wrappers, whose header carries only their last offset.
        back = np.flatnonzero(offsets[1:] <= offsets[:-1]) + 1
        if carry.record_last is not None and offsets[0] <= carry.record_last:
            back = np.r_[0, back]
        for i in np.unique(table.batch[back]).tolist():
            position = int(rows["position"][i])
            if position not in flagged:
                flagged.add(position)
                problems.append(problem("offsets_not_increasing", path,
                                        "the batch's records do not follow the records before "
                                        "it", position, rows["base_offset"][i]))
        carry.record_last = int(offsets[-1])
    return count


def _capped(problems):
    """At most MAX_PER_CODE problems of one code in one file; the rest counted in one line."""
    seen, out, extra = {}, [], {}
    for p in problems:
        key = (p["code"], p["file"])
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= MAX_PER_CODE:
            out.append(p)
        else:
            extra[key] = extra.get(key, 0) + 1
    for (code, file), n in extra.items():
        out.append(problem(code, file, f"{counted(n, 'more problem')} like the ones above"))
    return out


# ------------------------------------------------------------------------------ indexes
def _by_position(batches, more):
    """``batches`` and the rows ``more`` in file order."""
    if not more:
        return batches
    rows = np.concatenate([batches, np.array(more, dtype=batches.dtype)])
    return rows[np.argsort(rows["position"], kind="stable")]


def _verify_indexes(directory, base, batches, whole):
    """Offset, time and transaction index of a segment against its batches (intact ones and
    those failing their CRC, in file order; ``whole``: with those out of offset order too,
    which the offset index's positions may point at, but whose offsets are not to search)."""
    problems = []
    last_offset = int(batches["last_offset"].max()) if len(batches) else base
    index_path = file_path(directory, base, INDEX_SUFFIX)
    if not storage.exists(index_path):
        problems.append(problem("index_missing", index_path,
                                "missing (Kafka rebuilds it by recovering the segment)"))
    else:
        idx = OffsetIndex(index_path, base, writable=False)
        try:
            problems += _zero_tail(idx)
            idx.sanity_check()
            problems += _check_offset_index(idx, whole, last_offset)
        except CorruptIndexError as e:
            problems.append(problem("corrupt_index", index_path, str(e)))
        finally:
            idx.close_handler()
    time_index_path = file_path(directory, base, TIME_INDEX_SUFFIX)
    if not storage.exists(time_index_path):
        problems.append(problem("index_missing", time_index_path,
                                "missing (Kafka rebuilds it by recovering the segment)"))
    else:
        tidx = TimeIndex(time_index_path, base, writable=False)
        try:
            problems += _zero_tail(tidx)
            tidx.sanity_check()
            problems += _check_time_index(tidx, batches, base, last_offset)
        except CorruptIndexError as e:
            problems.append(problem("corrupt_index", time_index_path, str(e)))
        finally:
            tidx.close_handler()
    txn_path = file_path(directory, base, TXN_INDEX_SUFFIX)
    try:
        TransactionIndex(txn_path, base).sanity_check()
    except CorruptIndexError as e:
        problems.append(problem("corrupt_index", txn_path, str(e)))
    return problems


def _zero_tail(idx):
    """The all-zero entries a crash leaves at the end of a preallocated index (dropped from
    ``idx`` for the checks that follow)."""
    total = idx.entries
    zeros = idx.drop_zero_tail()
    if not zeros:
        return []
    if zeros == total:
        message = f"all {counted(total, 'entry')} are zero (left at its preallocated size: " \
                  f"not closed cleanly)"
    else:
        message = f"{counted(zeros, 'all-zero entry')} at the end (left at its preallocated " \
                  f"size: not closed cleanly)"
    return [problem("index_zero_tail", idx.path, message, (total - zeros) * idx.entry_size)]


def _check_offset_index(idx, batches, last_offset):
    """Every entry (offset, position) must point at the start of a batch whose base offset is
    at most the entry's offset (Kafka writes the largest offset of an append with the position
    of its first batch; recovery writes a batch's last offset) and not past the segment."""
    offsets, positions = idx.entries_array()
    if not len(offsets):
        return []
    path, out = idx.path, []
    size = idx.entry_size
    order = np.flatnonzero((offsets[1:] <= offsets[:-1]) | (positions[1:] <= positions[:-1]))
    for i in order[:1].tolist():
        out.append(problem("index_out_of_order", path,
                           f"entry {i + 1} ({int(offsets[i + 1])}, {int(positions[i + 1])}) "
                           f"does not follow ({int(offsets[i])}, {int(positions[i])})",
                           (i + 1) * size, offsets[i + 1]))
    starts = batches["position"]
    k = np.searchsorted(starts, positions)
    inside = k < len(starts)
    kk = np.where(inside, k, 0)
    at_batch = inside & (starts[kk] == positions) & (batches["base_offset"][kk] <= offsets)
    if len(starts) == 0:
        at_batch[:] = False
    for i in np.flatnonzero(~at_batch).tolist():
        out.append(problem("index_entry_not_at_batch", path,
                           f"entry ({int(offsets[i])}, {int(positions[i])}) does not point at "
                           f"the batch holding offset {int(offsets[i])}", i * size, offsets[i]))
    for i in np.flatnonzero(offsets > last_offset).tolist():
        out.append(problem("index_entry_past_end", path,
                           f"entry ({int(offsets[i])}, {int(positions[i])}) is past the "
                           f"segment's last offset {last_offset}", i * size, offsets[i]))
    return out


def _check_time_index(tidx, batches, base, last_offset):
    """Each entry (timestamp, offset) is what Kafka appends: the largest timestamp of the
    segment so far and the offset it came with; so its timestamp must equal the running
    maximum of the batches' max timestamps up to the batch holding its offset."""
    ts, offs = tidx.entries_array()
    if not len(ts):
        return []
    path, out = tidx.path, []
    size = tidx.entry_size
    order = np.flatnonzero((ts[1:] <= ts[:-1]) | (offs[1:] < offs[:-1]))
    for i in order[:1].tolist():
        out.append(problem("index_out_of_order", path,
                           f"entry {i + 1} ({int(ts[i + 1])}, {int(offs[i + 1])}) does not "
                           f"follow ({int(ts[i])}, {int(offs[i])})", (i + 1) * size,
                           offs[i + 1]))
    n = len(batches)
    # Batches in file order (an entry is written as the batches are): the batch holding an
    # offset is the first whose last offset, or one before it, reaches it. A batch out of
    # order (a damaged base offset) then moves no entry off its batch.
    k = np.searchsorted(np.maximum.accumulate(batches["last_offset"]), offs, "left")
    found = k < n
    kk = np.where(found, k, 0)
    if n:
        found &= (batches["magic"][kk] < 2) | (batches["base_offset"][kk] <= offs)
        running = np.maximum.accumulate(batches["max_timestamp"])[kk]
    else:
        running = np.full(len(ts), -1, np.int64)
    outside = (offs < base) | (offs > last_offset)
    bad = outside | ~found | (running != ts)
    for i in np.flatnonzero(bad)[:MAX_PER_CODE + 1].tolist():
        t, o = int(ts[i]), int(offs[i])
        if outside[i]:
            message = f"entry ({t}, {o}) points outside the segment's offsets " \
                      f"{base}-{last_offset}"
        elif not found[i]:
            message = f"entry ({t}, {o}): offset {o} is in no batch of the segment"
        else:
            message = f"entry ({t}, {o}): the largest timestamp up to offset {o}'s batch is " \
                      f"{int(running[i])}"
        out.append(problem("time_index_mismatch", path, message, i * size, o))
    return out


# ------------------------------------------------------------------------------ other files
def _verify_snapshots(path, log_end):
    out = []
    for offset, snap in list_snapshots(path):
        try:
            read_snapshot(snap)
        except CorruptSnapshotError as e:
            out.append(problem("corrupt_snapshot", snap, str(e), offset=offset))
        except TieredStorageError:
            pass                         # reported with its segment (tiered.check_segment)
        except OSError as e:
            out.append(problem("cannot_open", snap, f"cannot be read: {e}", offset=offset))
        if log_end is not None and offset > log_end:
            # Kafka's loader deletes such snapshots: producer state from a longer log.
            out.append(problem("snapshot_above_log_end", snap,
                               f"snapshot at offset {offset} is above the log end offset "
                               f"{log_end}", offset=offset))
    return out


def _verify_leader_epochs(path, log_end, carry):
    epochs = os.path.join(path, LEADER_EPOCH_CHECKPOINT)
    if not storage.exists(epochs):
        return []
    try:
        entries = checkpoint.read_leader_epoch_checkpoint(epochs)
    except TieredKeyError as e:          # (a tiered view's checkpoint comes from a manifest)
        return _key_needed([e], carry)
    except (KafkaLogError, OSError, ValueError) as e:
        return [problem("corrupt_checkpoint", epochs, str(e))]
    out = []
    for (e0, s0), (e1, s1) in zip(entries, entries[1:]):
        if e1 <= e0 or s1 < s0:
            out.append(problem("leader_epoch_out_of_order", epochs,
                               f"entry (epoch {e1}, start offset {s1}) does not follow (epoch "
                               f"{e0}, start offset {s0})", offset=s1))
    for epoch, start in entries:
        if log_end is not None and start > log_end:
            out.append(problem("leader_epoch_above_log_end", epochs,
                               f"epoch {epoch} starts at offset {start}, above the log end "
                               f"offset {log_end}", offset=start))
    if out or not entries:
        return out
    known_epochs = np.array([e for e, _ in entries], dtype=np.int64)
    known_starts = np.array([s for _, s in entries], dtype=np.int64)
    for file, rows in carry.epochs:
        use = (rows["partition_leader_epoch"] >= 0) & (rows["base_offset"] >= known_starts[0])
        rows = rows[use]
        if not len(rows):
            continue
        j = np.searchsorted(known_starts, rows["base_offset"], "right") - 1
        wrong = np.flatnonzero(known_epochs[j] != rows["partition_leader_epoch"])
        for i in wrong[:MAX_PER_CODE].tolist():
            out.append(problem("leader_epoch_mismatch", file,
                               f"batch at offset {int(rows['base_offset'][i])} has partition "
                               f"leader epoch {int(rows['partition_leader_epoch'][i])}; "
                               f"{LEADER_EPOCH_CHECKPOINT} gives epoch {int(known_epochs[j[i]])}",
                               rows["position"][i], rows["base_offset"][i]))
    return out


def _verify_checkpoints(path):
    """The partition's metadata and the log dir's offset checkpoints must be readable."""
    out = []
    try:
        checkpoint.read_partition_metadata(path)
    except (KafkaLogError, OSError, ValueError) as e:
        out.append(problem("corrupt_checkpoint", os.path.join(path, PARTITION_METADATA), str(e)))
    log_dir = os.path.dirname(path)
    for name in checkpoint.LogDirCheckpoints.NAMES.values():
        file = os.path.join(log_dir, name)
        try:
            checkpoint.read_offset_checkpoint(file)
        except FileNotFoundError:
            pass
        except (KafkaLogError, OSError, ValueError) as e:
            out.append(problem("corrupt_checkpoint", file, str(e)))
    return out
