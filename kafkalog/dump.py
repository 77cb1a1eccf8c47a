"""The ``kafkalog dump`` document (``../shared/docs/DUMP_JSON.md``) and its text rendering.

``dump`` never creates, resizes or rewrites a file: indexes are opened read-only.
"""
import base64
import hashlib
import os
import stat

import numpy as np

from kafkalog import codecs
from kafkalog.checkpoint import read_leader_epoch_checkpoint
from kafkalog.errors import KafkaLogError
from kafkalog.files import (
    INDEX_SUFFIX, INDEX_SUFFIXES, LEADER_EPOCH_CHECKPOINT, LOG_SUFFIX, SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, file_name, file_path, offset_from_file_name,
    offsets_of, parse_file_name, topic_partition_or_none,
)
from kafkalog.index import OffsetIndex, TimeIndex, TransactionIndex
from kafkalog.producer_state import read_snapshot
from kafkalog.records import (
    COMPRESSION_MASK, CONTROL_MASK, DELETE_HORIZON_MASK, TRANSACTIONAL_MASK, NO_SEQUENCE,
    TimestampType, timestamp_type_of, decode_batches, increment_sequence,
    RecordTable, open_buffer, parse_control_record,
)
from kafkalog._kernels import walk_batches
from kafkalog._layout import WALK_CORRUPT

RECORD_MODES = ("full", "digest", "none")


def _b64(data):
    return None if data is None else base64.b64encode(data).decode("ascii")


def dump_partition(path, records_mode="full"):
    """The DUMP_JSON document of a partition directory, as a dict."""
    if records_mode not in RECORD_MODES:
        raise ValueError(f"records mode must be one of {RECORD_MODES}")
    path = os.path.abspath(path)
    name = os.path.basename(path)
    topic, partition = topic_partition_or_none(name) or (name, None)
    names = sorted(os.listdir(path))
    doc = {
        "dir": name, "topic": topic, "partition": partition, "records_mode": records_mode,
        "files": _file_sizes(path, names),
    }
    doc["segments"] = [dump_segment(file_path(path, base, LOG_SUFFIX), records_mode)
                       for base in offsets_of(names, LOG_SUFFIX)]
    doc["producer_snapshots"] = [
        {"file": file_name(o, SNAPSHOT_SUFFIX),
         "entries": dump_snapshot(file_path(path, o, SNAPSHOT_SUFFIX))}
        for o in offsets_of(names, SNAPSHOT_SUFFIX)]
    checkpoint = os.path.join(path, LEADER_EPOCH_CHECKPOINT)
    doc["leader_epoch_checkpoint"] = (
        [{"epoch": e, "start_offset": o} for e, o in read_leader_epoch_checkpoint(checkpoint)]
        if os.path.exists(checkpoint) else None)
    return doc


def _file_sizes(path, names):
    """Name and size of every regular file; a file that vanishes meanwhile (a ``.deleted``
    segment removed by a running log) is left out."""
    out = []
    for n in names:
        try:
            st = os.stat(os.path.join(path, n))
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.append({"name": n, "size": st.st_size})
    return out


def dump_segment(log_path, records_mode="full"):
    """The ``segments[]`` entry for one ``.log`` file and its index files."""
    base_offset = offset_from_file_name(os.path.basename(log_path))
    directory = os.path.dirname(log_path)
    buf = open_buffer(log_path)
    batches, status, stop, message = walk_batches(buf, validate_crc=True)
    error = message if status == WALK_CORRUPT else None
    table, batches, decode_error = _decode(buf, batches, log_path,
                                           need_records=records_mode != "none")
    error = decode_error or error
    seg = {
        "base_offset": base_offset,
        "log_file": os.path.basename(log_path),
        "log_size": len(buf),
        "batches": _batches(batches, table, records_mode == "full"),
        "batch_iteration_error": error,
        "next_offset": int(batches["last_offset"][-1]) + 1 if len(batches) else base_offset,
        "record_count": _record_count(batches, table),
        "records_sha256": records_sha256(table) if table is not None else None,
    }
    seg["offset_index"] = dump_offset_index(file_path(directory, base_offset, INDEX_SUFFIX),
                                            base_offset)
    seg["time_index"] = dump_time_index(file_path(directory, base_offset, TIME_INDEX_SUFFIX),
                                        base_offset)
    seg["txn_index"] = dump_txn_index(file_path(directory, base_offset, TXN_INDEX_SUFFIX),
                                      base_offset)
    return seg


def _decode(buf, batches, path, need_records):
    """Decode the batches' records; a batch that fails to decode ends the listing there."""
    if not need_records and not ((batches["magic"] < 2)
                                 & (batches["attributes"] & COMPRESSION_MASK != 0)).any():
        return None, batches, None
    try:
        return decode_batches(buf, batches, path), batches, None
    except KafkaLogError:
        pass
    tables = []
    for i in range(len(batches)):
        try:
            t = decode_batches(buf, batches[i:i + 1], path)
        except KafkaLogError as e:
            return _merge(tables), batches[:i], str(e)
        t.batch[:] = i
        tables.append(t)
    return _merge(tables), batches, None


def _merge(tables):
    return RecordTable.concat(tables)


def _record_count(batches, table):
    if table is not None:
        return len(table)
    counts = np.where(batches["magic"] == 2, batches["record_count"], 1)
    return int(counts.sum())


def _batches(batches, table, with_records):
    out = []
    starts = np.searchsorted(table.batch, np.arange(len(batches) + 1)) if table is not None \
        else None
    for i, b in enumerate(batches):
        magic = int(b["magic"])
        attributes = int(b["attributes"])
        base_offset = int(b["base_offset"])
        if table is not None and magic < 2 and attributes & COMPRESSION_MASK \
                and starts[i + 1] > starts[i]:
            base_offset = int(table.records["offset"][starts[i]])
        base_sequence = int(b["base_sequence"])
        last_sequence = NO_SEQUENCE if magic < 2 or base_sequence == NO_SEQUENCE else \
            increment_sequence(base_sequence, int(b["last_offset"]) - int(b["base_offset"]))
        d = {
            "base_offset": base_offset,
            "last_offset": int(b["last_offset"]),
            "position": int(b["position"]),
            "size_in_bytes": int(b["size"]),
            "magic": magic,
            "crc": int(b["crc"]),
            "crc_valid": bool(b["crc_valid"] == 1),
            "compression": codecs.CODEC_NAMES.get(attributes & COMPRESSION_MASK,
                                                  str(attributes & COMPRESSION_MASK)),
            "timestamp_type": timestamp_type_of(magic, attributes).name,
            "max_timestamp": int(b["max_timestamp"]),
            "producer_id": int(b["producer_id"]),
            "producer_epoch": int(b["producer_epoch"]),
            "base_sequence": base_sequence,
            "last_sequence": last_sequence,
            "is_transactional": magic == 2 and bool(attributes & TRANSACTIONAL_MASK),
            "is_control": magic == 2 and bool(attributes & CONTROL_MASK),
            "partition_leader_epoch": int(b["partition_leader_epoch"]),
            "record_count_header": int(b["record_count"]) if magic == 2 else None,
        }
        if magic == 2 and attributes & DELETE_HORIZON_MASK:
            d["delete_horizon_ms"] = int(b["base_timestamp"])
        if with_records:
            d["records"] = [_record(table, j, magic, d["is_control"])
                            for j in range(starts[i], starts[i + 1])]
        out.append(d)
    return out


def _record(table, i, magic, is_control):
    r = table.records[i]
    key, value = table.key(i), table.value(i)
    d = {"offset": int(r["offset"]), "timestamp": int(r["timestamp"]),
         "size_in_bytes": int(r["size"])}
    if magic == 2:
        d["sequence"] = int(table.sequence[i])
    else:
        d["legacy_crc"] = int(table.legacy_crc[i])
        d["legacy_timestamp_type"] = TimestampType(int(table.timestamp_type[i])).name
    d["key_b64"] = _b64(key)
    d["value_b64"] = _b64(value)
    d["headers"] = [{"key": k, "value_b64": _b64(v)} for k, v in table.headers_of(i)]
    if is_control:
        kind, epoch = parse_control_record(key, value)
        d["control"] = {"type": kind.name if hasattr(kind, "name") else str(kind),
                        "coordinator_epoch": epoch}
    return d


def _b64_or_dash(data):
    return "-" if data is None else base64.b64encode(data).decode("ascii")


def records_sha256(table):
    """SHA-256 over one line per record (DUMP_JSON.md), as a hex string."""
    h = hashlib.sha256()
    offsets = table.records["offset"].tolist()
    timestamps = table.records["timestamp"].tolist()
    counts = table.records["header_count"].tolist()
    for i in range(len(table)):
        parts = [str(offsets[i]), str(timestamps[i]), _b64_or_dash(table.key(i)),
                 _b64_or_dash(table.value(i)), str(counts[i])]
        if counts[i]:
            for k, v in table.headers_of(i):
                parts.append(k)
                parts.append(_b64_or_dash(v))
        h.update(("\t".join(parts) + "\n").encode("utf-8"))
    return h.hexdigest()


def _index_common(index, path):
    valid = index.valid_entries()
    return {"file": os.path.basename(path), "file_size": index.length,
            "entries_count": index.entries, "zero_tail_entries": index.entries - valid}, valid


def dump_offset_index(path, base_offset):
    if not os.path.exists(path):
        return None
    index = OffsetIndex(path, base_offset, writable=False)
    try:
        d, valid = _index_common(index, path)
        offsets, positions = index.entries_array()
        d["entries"] = [[int(o), int(p)] for o, p in zip(offsets[:valid], positions[:valid])]
    finally:
        index.close_handler()
    return d


def dump_time_index(path, base_offset):
    if not os.path.exists(path):
        return None
    index = TimeIndex(path, base_offset, writable=False)
    try:
        d, valid = _index_common(index, path)
        timestamps, offsets = index.entries_array()
        d["entries"] = [[int(t), int(o)] for t, o in zip(timestamps[:valid], offsets[:valid])]
        d["last_entry"] = [int(index.last_entry.timestamp), int(index.last_entry.offset)]
    finally:
        index.close_handler()
    return d


def dump_txn_index(path, base_offset):
    if not os.path.exists(path):
        return None
    entries = TransactionIndex(path, base_offset).entries_array()
    return {"file": os.path.basename(path), "file_size": os.path.getsize(path),
            "entries": [{"version": int(e["version"]), "producer_id": int(e["producer_id"]),
                         "first_offset": int(e["first_offset"]),
                         "last_offset": int(e["last_offset"]),
                         "last_stable_offset": int(e["last_stable_offset"])} for e in entries]}


def _decrement_sequence(sequence, decrement):
    if sequence < decrement:
        return 2**31 - 1 - (decrement - sequence) + 1
    return sequence - decrement


def dump_snapshot(path):
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


def dump_path(path, records_mode="full"):
    """The document for a partition directory, or for one segment, index or snapshot file."""
    if os.path.isdir(path):
        return dump_partition(path, records_mode)
    name = os.path.basename(path)
    if name == LEADER_EPOCH_CHECKPOINT:
        return {"file": name, "leader_epoch_checkpoint": [
            {"epoch": e, "start_offset": o} for e, o in read_leader_epoch_checkpoint(path)]}
    parsed = parse_file_name(name)
    kind = parsed[1] if parsed is not None and not parsed[2] else None
    if kind not in (LOG_SUFFIX, SNAPSHOT_SUFFIX) + INDEX_SUFFIXES:
        raise ValueError(f"{path}: not a partition directory or a Kafka segment, index, "
                         f"snapshot or checkpoint file")
    base_offset = parsed[0]
    if kind == LOG_SUFFIX:
        return {"file": name, "segment": dump_segment(path, records_mode)}
    if kind == INDEX_SUFFIX:
        return {"file": name, "offset_index": dump_offset_index(path, base_offset)}
    if kind == TIME_INDEX_SUFFIX:
        return {"file": name, "time_index": dump_time_index(path, base_offset)}
    if kind == TXN_INDEX_SUFFIX:
        return {"file": name, "txn_index": dump_txn_index(path, base_offset)}
    return {"file": name, "entries": dump_snapshot(path)}


# ----------------------------------------------------------------------------------------------
# Text rendering, in the manner of kafka-dump-log.sh --deep-iteration --print-data-log

def _text(data_b64):
    if data_b64 is None:
        return "null"
    return base64.b64decode(data_b64).decode("utf-8", "replace")


def render_text(doc):
    """Lines of a readable listing of a dump document."""
    if "segments" in doc:
        yield f"Partition directory {doc['dir']} (topic {doc['topic']}, partition " \
              f"{doc['partition']})"
        for seg in doc["segments"]:
            yield from _render_segment(seg)
        for snap in doc["producer_snapshots"]:
            yield f"Dumping {snap['file']}"
            for e in snap["entries"]:
                yield _fields(e)
        if doc["leader_epoch_checkpoint"] is not None:
            yield "Dumping leader-epoch-checkpoint"
            for e in doc["leader_epoch_checkpoint"]:
                yield f"epoch: {e['epoch']} startOffset: {e['start_offset']}"
        return
    if "segment" in doc:
        yield from _render_segment(doc["segment"], indexes=False)
    elif doc.get("offset_index") is not None:
        yield from _render_index(doc["offset_index"], "offset", "position")
    elif doc.get("time_index") is not None:
        yield from _render_index(doc["time_index"], "timestamp", "offset")
    elif doc.get("txn_index") is not None:
        yield f"Dumping {doc['file']}"
        for e in doc["txn_index"]["entries"]:
            yield _fields(e)
    elif "leader_epoch_checkpoint" in doc:
        yield f"Dumping {doc['file']}"
        for e in doc["leader_epoch_checkpoint"]:
            yield f"epoch: {e['epoch']} startOffset: {e['start_offset']}"
    else:
        yield f"Dumping {doc['file']}"
        for e in doc.get("entries", []):
            yield _fields(e)


def _fields(d):
    return " ".join(f"{k}: {v}" for k, v in d.items())


def _render_segment(seg, indexes=True):
    yield f"Dumping {seg['log_file']}"
    yield f"Log starting offset: {seg['base_offset']}"
    for b in seg["batches"]:
        ts_label = "LogAppendTime" if b["timestamp_type"] == "LOG_APPEND_TIME" else "CreateTime"
        yield (f"baseOffset: {b['base_offset']} lastOffset: {b['last_offset']} "
               f"count: {b['record_count_header'] if b['record_count_header'] is not None else len(b.get('records', []))} "
               f"baseSequence: {b['base_sequence']} lastSequence: {b['last_sequence']} "
               f"producerId: {b['producer_id']} producerEpoch: {b['producer_epoch']} "
               f"partitionLeaderEpoch: {b['partition_leader_epoch']} "
               f"isTransactional: {str(b['is_transactional']).lower()} "
               f"isControl: {str(b['is_control']).lower()} "
               f"deleteHorizonMs: {b.get('delete_horizon_ms', 'none')} "
               f"position: {b['position']} {ts_label}: {b['max_timestamp']} "
               f"size: {b['size_in_bytes']} magic: {b['magic']} "
               f"compresscodec: {b['compression']} crc: {b['crc']} "
               f"isvalid: {str(b['crc_valid']).lower()}")
        for r in b.get("records", []):
            line = f"| offset: {r['offset']} {ts_label}: {r['timestamp']} " \
                   f"keySize: {_size(r['key_b64'])} valueSize: {_size(r['value_b64'])}"
            if "sequence" in r:
                line += f" sequence: {r['sequence']}"
            line += f" headerKeys: [{','.join(h['key'] for h in r['headers'])}]"
            if "control" in r:
                c = r["control"]
                line += f" endTxnMarker: {c['type']} coordinatorEpoch: {c['coordinator_epoch']}"
            else:
                line += f" key: {_text(r['key_b64'])} payload: {_text(r['value_b64'])}"
            yield line
    if seg["batch_iteration_error"]:
        yield f"Found an error while iterating: {seg['batch_iteration_error']}"
    yield (f"Next offset: {seg['next_offset']}  records: {seg['record_count']}  "
           f"sha256: {seg['records_sha256']}")
    if indexes:
        if seg["offset_index"] is not None:
            yield from _render_index(seg["offset_index"], "offset", "position")
        if seg["time_index"] is not None:
            yield from _render_index(seg["time_index"], "timestamp", "offset")
        if seg["txn_index"] is not None:
            yield f"Dumping {seg['txn_index']['file']}"
            for e in seg["txn_index"]["entries"]:
                yield _fields(e)


def _size(data_b64):
    return -1 if data_b64 is None else len(base64.b64decode(data_b64))


def _render_index(d, first, second):
    yield f"Dumping {d['file']} ({d['entries_count']} entries, {d['zero_tail_entries']} in " \
          f"an all-zero tail)"
    for a, b in d["entries"]:
        yield f"{first}: {a} {second}: {b}"
