"""``kafkalog verify``: Kafka's checks of a partition, offline."""
import os

import numpy as np

from kafkalog import checkpoint
from kafkalog._kernels import walk_batches
from kafkalog._layout import WALK_CORRUPT, WALK_PARTIAL
from kafkalog.errors import CorruptIndexError, CorruptSnapshotError, KafkaLogError
from kafkalog.files import (
    INDEX_SUFFIX, LEADER_EPOCH_CHECKPOINT, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
    file_name, file_path, holds_segments, offsets_of,
)
from kafkalog.index import OffsetIndex, TimeIndex, TransactionIndex
from kafkalog.log import Log
from kafkalog.producer_state import list_snapshots, read_snapshot
from kafkalog.records import open_buffer


def partition_dirs(path):
    """The partition directories named by ``path``: itself, or those inside a log dir."""
    path = os.path.abspath(os.fspath(path))
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: no such directory")
    if holds_segments(path):
        return [path]
    found = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isdir(full) and holds_segments(full):
            found.append(full)
    if not found:
        raise KafkaLogError(f"{path}: neither a partition directory nor a log dir holding any")
    return found


def verify_partition(path):
    """Check every batch (structure, CRC, offsets), index and snapshot of a partition.

    Returns ``{"dir", "ok", "offsets", "segments": [...], "problems": [...]}``; each problem
    is a string naming the file and position. ``offsets`` is what the engine's read-only view
    of the partition says (log start and end offsets, high watermark, last stable offset),
    or None when it cannot be opened.
    """
    report = {"dir": path, "offsets": None, "segments": [], "problems": []}
    previous_last = None
    for base in offsets_of(os.listdir(path), LOG_SUFFIX):
        seg = _verify_segment(path, file_name(base, LOG_SUFFIX), base, previous_last)
        report["segments"].append(seg)
        report["problems"].extend(seg["problems"])
        if seg["last_offset"] is not None:
            previous_last = seg["last_offset"]
    for offset, snap in list_snapshots(path):
        try:
            read_snapshot(snap)
        except CorruptSnapshotError as e:
            report["problems"].append(str(e))
    epochs = os.path.join(path, LEADER_EPOCH_CHECKPOINT)
    if os.path.exists(epochs):
        try:
            checkpoint.read_leader_epoch_checkpoint(epochs)
        except KafkaLogError as e:
            report["problems"].append(str(e))
    saved = checkpoint.LogDirCheckpoints(os.path.dirname(path))
    report["problems"].extend(saved.problems)
    try:
        with Log.open(path, read_only=True) as view:
            report["offsets"] = view.offsets()._asdict()
    except (KafkaLogError, OSError) as e:
        report["problems"].append(f"{path}: cannot be opened read-only: {e}")
    report["ok"] = not report["problems"]
    return report


def _verify_segment(directory, name, base, previous_last):
    log_path = os.path.join(directory, name)
    buf = open_buffer(log_path)
    batches, status, stop, message = walk_batches(buf, validate_crc=True)
    problems = []
    where = f"{log_path}"
    if status == WALK_CORRUPT:
        problems.append(f"{where}: corrupt batch at position {stop}: {message}")
    elif status == WALK_PARTIAL:
        problems.append(f"{where}: incomplete batch at position {stop} "
                        f"({len(buf) - stop} bytes at the end of the file, a torn write)")
    for row in batches[batches["crc_valid"] == 0]:
        problems.append(f"{where}: batch at position {int(row['position'])} (offsets "
                        f"{int(row['base_offset'])}-{int(row['last_offset'])}) fails its CRC "
                        f"check (stored {int(row['crc'])})")
    if len(batches):
        if batches["base_offset"][0] < base:
            problems.append(f"{where}: first offset {int(batches['base_offset'][0])} is below "
                            f"the segment's base offset {base}")
        if previous_last is not None and batches["base_offset"][0] <= previous_last:
            problems.append(f"{where}: first offset {int(batches['base_offset'][0])} does not "
                            f"follow the previous segment's last offset {previous_last}")
        backwards = np.nonzero(batches["base_offset"][1:] <= batches["last_offset"][:-1])[0]
        for i in backwards[:5]:
            problems.append(f"{where}: offsets go backwards at position "
                            f"{int(batches['position'][i + 1])}")
        if (batches["last_offset"] - base > 2**31 - 1).any():
            problems.append(f"{where}: offsets do not fit relative to base offset {base}")
    problems += _verify_indexes(directory, base, batches)
    return {"file": name, "size": len(buf), "batches": int(len(batches)),
            "valid_bytes": int(batches["position"][-1] + batches["size"][-1]) if len(batches)
            else 0,
            "last_offset": int(batches["last_offset"][-1]) if len(batches) else None,
            "crc_errors": int((batches["crc_valid"] == 0).sum()), "problems": problems}


def _verify_indexes(directory, base, batches):
    problems = []
    starts = set(batches["position"].tolist())
    by_position = {int(p): (int(b), int(l)) for p, b, l in
                   zip(batches["position"], batches["base_offset"], batches["last_offset"])}
    last_offset = int(batches["last_offset"][-1]) if len(batches) else base
    index_path = file_path(directory, base, INDEX_SUFFIX)
    if not os.path.exists(index_path):
        problems.append(f"{index_path}: missing (Kafka rebuilds it by recovering the segment)")
    else:
        idx = OffsetIndex(index_path, base, writable=False)
        try:
            zero_tail = idx.drop_zero_tail()
            if zero_tail:
                problems.append(f"{idx.path}: {zero_tail} all-zero entries at the end (left at "
                                f"its preallocated size: not closed cleanly)")
            idx.sanity_check()
            offsets, positions = idx.entries_array()
            for o, p in zip(offsets.tolist(), positions.tolist()):
                if p not in starts or not by_position[p][0] <= o:
                    problems.append(f"{idx.path}: entry ({o}, {p}) does not point at the batch "
                                    f"holding offset {o}")
                    break
            if len(offsets) and offsets[-1] > last_offset:
                problems.append(f"{idx.path}: last entry {int(offsets[-1])} is past the "
                                f"segment's last offset {last_offset}")
        except CorruptIndexError as e:
            problems.append(str(e))
        finally:
            idx.close_handler()
    time_index_path = file_path(directory, base, TIME_INDEX_SUFFIX)
    if os.path.exists(time_index_path):
        try:
            with TimeIndex.reading(time_index_path, base) as tidx:
                problems += _check_time_index(tidx, batches, last_offset)
        except CorruptIndexError as e:
            problems.append(str(e))
    try:
        TransactionIndex(file_path(directory, base, TXN_INDEX_SUFFIX), base).sanity_check()
    except CorruptIndexError as e:
        problems.append(str(e))
    return problems


def _check_time_index(tidx, batches, last_offset):
    """Kafka's sanity check, and entries that point past the segment's data."""
    tidx.sanity_check()
    problems = []
    ts, offs = tidx.entries_array()
    if len(offs) and offs[-1] > last_offset:
        problems.append(f"{tidx.path}: last entry points at offset {int(offs[-1])}, "
                        f"past the segment's last offset {last_offset}")
    if len(ts) and len(batches) and ts[-1] > batches["max_timestamp"].max():
        problems.append(f"{tidx.path}: timestamp {int(ts[-1])} is later than any "
                        f"batch in the segment")
    return problems
