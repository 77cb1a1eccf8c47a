"""``kafkalog verify`` and ``kafkalog recover``: Kafka's checks and Kafka's recovery, offline."""
import os
import re

import numpy as np

from kafkalog import checkpoint
from kafkalog._kernels import walk_batches
from kafkalog._layout import WALK_CORRUPT, WALK_PARTIAL
from kafkalog.errors import CorruptIndexError, KafkaLogError
from kafkalog.index import OffsetIndex, TimeIndex, TransactionIndex
from kafkalog.log import Log, LOG_START_OFFSET_CHECKPOINT, parse_topic_partition
from kafkalog.producer_state import CorruptSnapshotError, list_snapshots, read_snapshot
from kafkalog.records import open_buffer

_LOG_NAME = re.compile(r"^(\d{20})\.log$")


def partition_dirs(path):
    """The partition directories named by ``path``: itself, or those inside a log dir."""
    path = os.path.abspath(os.fspath(path))
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: no such directory")
    if any(_LOG_NAME.match(n) for n in os.listdir(path)):
        return [path]
    found = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isdir(full) and any(_LOG_NAME.match(n) for n in os.listdir(full)):
            found.append(full)
    if not found:
        raise KafkaLogError(f"{path}: neither a partition directory nor a log dir holding any")
    return found


def verify_partition(path):
    """Check every batch (structure, CRC, offsets), index and snapshot of a partition.

    Returns ``{"dir", "ok", "segments": [...], "problems": [...]}``; each problem is a string
    naming the file and position.
    """
    names = sorted(os.listdir(path))
    logs = [n for n in names if _LOG_NAME.match(n)]
    report = {"dir": path, "segments": [], "problems": []}
    previous_last = None
    for name in logs:
        seg = _verify_segment(path, name, previous_last)
        report["segments"].append(seg)
        report["problems"].extend(seg["problems"])
        if seg["last_offset"] is not None:
            previous_last = seg["last_offset"]
    for offset, snap in list_snapshots(path):
        try:
            read_snapshot(snap)
        except CorruptSnapshotError as e:
            report["problems"].append(str(e))
    epochs = os.path.join(path, "leader-epoch-checkpoint")
    if os.path.exists(epochs):
        try:
            checkpoint.read_leader_epoch_checkpoint(epochs)
        except KafkaLogError as e:
            report["problems"].append(str(e))
    report["ok"] = not report["problems"]
    return report


def _verify_segment(directory, name, previous_last):
    base = int(name[:20])
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
    stem = os.path.join(directory, f"{base:020d}")
    starts = set(batches["position"].tolist())
    by_position = {int(p): (int(b), int(l)) for p, b, l in
                   zip(batches["position"], batches["base_offset"], batches["last_offset"])}
    last_offset = int(batches["last_offset"][-1]) if len(batches) else base
    if not os.path.exists(stem + ".index"):
        problems.append(f"{stem}.index: missing (Kafka rebuilds it by recovering the segment)")
    else:
        idx = OffsetIndex(stem + ".index", base, writable=False)
        try:
            zero_tail = idx.entries - idx.valid_entries()
            if zero_tail:
                problems.append(f"{idx.path}: {zero_tail} all-zero entries at the end (left at "
                                f"its preallocated size: not closed cleanly)")
            idx._truncate_to_entries(idx.valid_entries())
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
    if os.path.exists(stem + ".timeindex"):
        try:
            with TimeIndex.reading(stem + ".timeindex", base) as tidx:
                problems += _check_time_index(tidx, batches, last_offset)
        except CorruptIndexError as e:
            problems.append(str(e))
    try:
        TransactionIndex(stem + ".txnindex", base).sanity_check()
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


def plan_recovery(path):
    """What recovery would do to a partition, without changing it: per segment the bytes it
    would cut, and the segments after the first cut that would be deleted."""
    names = sorted(n for n in os.listdir(path) if _LOG_NAME.match(n))
    plan = {"dir": path, "segments": [], "log_end_offset": None}
    cut = False
    for name in names:
        buf = open_buffer(os.path.join(path, name))
        if cut:
            plan["segments"].append({"file": name, "action": "delete", "bytes": len(buf)})
            continue
        batches, status, stop, message = walk_batches(buf, validate_crc=True,
                                                      stop_on_invalid=True)
        valid = int(batches["position"][-1] + batches["size"][-1]) if len(batches) else 0
        truncated = len(buf) - valid
        if truncated and message is None:
            message = "an incomplete batch at the end of the file (a torn write)" \
                if status == WALK_PARTIAL else "bytes after the last valid batch"
        plan["segments"].append({"file": name, "action": "truncate" if truncated else "keep",
                                 "truncated_bytes": truncated, "valid_bytes": valid,
                                 "reason": message})
        if len(batches):
            plan["log_end_offset"] = int(batches["last_offset"][-1]) + 1
        elif plan["log_end_offset"] is None:
            plan["log_end_offset"] = int(name[:20])
        if truncated:
            cut = True
    return plan


def recover_partition(path):
    """Kafka's recovery of a partition (from offset 0, as after an unclean shutdown);
    returns the plan it carried out and the offsets afterwards."""
    plan = plan_recovery(path)
    log_dir = os.path.dirname(path)
    start = 0
    try:
        key = parse_topic_partition(os.path.basename(path))
        cp = os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT)
        if os.path.exists(cp):
            start = checkpoint.read_offset_checkpoint(cp).get(key, 0)
    except KafkaLogError:
        pass
    log = Log.open(path, recovery_point=0, clean_shutdown=False, log_start_offset=start)
    try:
        plan["log_end_offset"] = log.log_end_offset
        plan["log_start_offset"] = log.log_start_offset
    finally:
        log.close()
    return plan
