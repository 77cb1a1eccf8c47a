"""``kafkalog recover``: Kafka's recovery of a partition, offline, and what it would do."""
import os

from kafkalog import checkpoint
from kafkalog._kernels import walk_batches
from kafkalog._layout import WALK_PARTIAL
from kafkalog.files import LOG_SUFFIX, file_name, offsets_of, topic_partition_or_none
from kafkalog.log import Log
from kafkalog.records import open_buffer


def plan_recovery(path):
    """What recovery would do to a partition, without changing it: per segment the bytes it
    would cut, and the segments after the first cut that would be deleted."""
    plan = {"dir": path, "segments": [], "log_end_offset": None}
    cut = False
    for base in offsets_of(os.listdir(path), LOG_SUFFIX):
        name = file_name(base, LOG_SUFFIX)
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
            plan["log_end_offset"] = base
        if truncated:
            cut = True
    return plan


def recover_partition(path):
    """Kafka's recovery of a partition (from offset 0, as after an unclean shutdown);
    returns the plan it carried out and the offsets afterwards."""
    plan = plan_recovery(path)
    saved = checkpoint.LogDirCheckpoints(os.path.dirname(path)).for_partition(
        topic_partition_or_none(os.path.basename(path)))
    log = Log.open(path, recovery_point=0, clean_shutdown=False,
                   log_start_offset=saved.log_start_offset or 0)
    try:
        plan["log_end_offset"] = log.log_end_offset
        plan["log_start_offset"] = log.log_start_offset
    finally:
        log.close()
    return plan
