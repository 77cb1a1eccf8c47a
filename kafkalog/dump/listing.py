"""``kafkalog dump``: a kafka-dump-log style listing (``--deep-iteration --print-data-log``),
streamed, with the damage found printed where it is met ("Found ..." lines).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from kafkalog import storage
from kafkalog._text import counted
from kafkalog.files import (
    INDEX_SUFFIX, LEADER_EPOCH_CHECKPOINT, LOG07_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, file_path, offsets_of, topic_partition_or_none,
)
from kafkalog.index import OffsetIndex, TimeIndex
from kafkalog.log_dirs import is_log07_dir, kraft_snapshot_files
from kafkalog.dump import log07
from kafkalog.control_records import ControlType
from kafkalog.dump.partition import (
    KRAFT_SNAPSHOT, file_kind, index_or_problem, leader_epochs, located_dirs,
    partitions_pieces, segments_in_range, snapshot_doc, txn_index,
)
from kafkalog.dump.segments import (
    DumpOptions, DumpReport, INDEX_CHUNK, SegmentScan, b64_list, batch_dict, decode_internal,
    decoder_of, kraft_control, with_defaults,
)

if TYPE_CHECKING:
    from kafkalog._typing import StrPath


# kafka-dump-log's names of the timestamp types (Kafka's TimestampType.toString).
_TIMESTAMP_LABELS = {"CREATE_TIME": "CreateTime", "LOG_APPEND_TIME": "LogAppendTime",
                     "NO_TIMESTAMP_TYPE": "NoTimestampType"}


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
    options = with_defaults(options)
    report = DumpReport() if report is None else report
    path, listing = located_dirs(path, storage_options, rsm_keys)
    if listing is not None:
        yield from partitions_pieces(listing, lambda d, r: _partition_text(d, options, r),
                                     report)
        return
    yield from _file_text(path, options, report)


def _lines(lines):
    return "\n".join(lines) + "\n" if lines else ""


def _partition_text(path, options, report):
    path = storage.abspath(path)
    if is_log07_dir(path):
        yield from log07.partition_text(path, options, report,
                                        _PAYLOAD_RENDERERS[options.payload])
        return
    name = os.path.basename(path)
    tp = topic_partition_or_none(name)
    yield (f"Partition directory {name} (topic {tp[0]}, partition {tp[1]})\n" if tp else
           f"Partition directory {name}\n")
    names = sorted(storage.listdir(path))
    logs = offsets_of(names, LOG_SUFFIX)
    for base in segments_in_range(logs, options):
        yield from _segment_text(file_path(path, base, LOG_SUFFIX), options, report,
                                 log_offsets=logs)
    for _, checkpoint in kraft_snapshot_files(path):      # KRaft snapshots dump like segments
        yield from _segment_text(checkpoint, options, report, indexes=False)
    for o in offsets_of(names, SNAPSHOT_SUFFIX):
        yield _lines(_snapshot_lines(file_path(path, o, SNAPSHOT_SUFFIX), report))
    checkpoint = os.path.join(path, LEADER_EPOCH_CHECKPOINT)
    if storage.exists(checkpoint):
        yield _lines(_epoch_lines(checkpoint, report))


def _file_text(path, options, report):
    kind, base_offset = file_kind(path)
    if kind in (LOG_SUFFIX, KRAFT_SNAPSHOT):
        yield from _segment_text(path, options, report, indexes=False)
    elif kind == LOG07_SUFFIX:
        yield from log07.segment_text(path, base_offset, options, report,
                                      _PAYLOAD_RENDERERS[options.payload])
    elif kind == INDEX_SUFFIX:
        yield from _index_text(path, index_or_problem(OffsetIndex, path, base_offset, report),
                               "offset", "position")
    elif kind == TIME_INDEX_SUFFIX:
        yield from _index_text(path, index_or_problem(TimeIndex, path, base_offset, report),
                               "timestamp", "offset")
    elif kind == TXN_INDEX_SUFFIX:
        yield _lines(_txn_lines(path, txn_index(path, base_offset, report)))
    elif kind == SNAPSHOT_SUFFIX:
        yield _lines(_snapshot_lines(path, report))
    else:
        yield _lines(_epoch_lines(path, report))


def _segment_text(log_path, options, report, indexes=True, log_offsets=None):
    scan = SegmentScan(log_path, options, report, log_offsets)
    yield f"Dumping {log_path}\nLog starting offset: {scan.base_offset}\n"
    payload = _PAYLOAD_RENDERERS[options.payload]
    decoder = decoder_of(log_path, options)
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
        yield from _index_text(path, index_or_problem(OffsetIndex, path, base, report),
                               "offset", "position")
        path = file_path(directory, base, TIME_INDEX_SUFFIX)
        yield from _index_text(path, index_or_problem(TimeIndex, path, base, report),
                               "timestamp", "offset")
        path = file_path(directory, base, TXN_INDEX_SUFFIX)
        yield _lines(_txn_lines(path, txn_index(path, base, report)))


def _optional_long(value):
    # What kafka-dump-log prints for Java's OptionalLong.
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _chunk_text(chunk, with_records, payload, log_name, decoder=None, report=None, path=None):
    out = []
    rows = chunk.rows.tolist()
    bases = chunk.bases.tolist()
    if with_records:
        cols = chunk.columns()
        keys, values = payload(cols.keys), payload(cols.values)
    for i, row in enumerate(rows):
        d = batch_dict(row, bases[i])
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
                elif (kraft := kraft_control(cols.keys[j], cols.values[j])) is not None:
                    line += kraft[1]
                elif type_id in _CONTROL_NAMES:
                    line += f" controlType: {name}({type_id})"
                else:
                    line += f" controlType: UNKNOWN({type_id})"
            else:
                k, v = keys[j], values[j]
                decoded = None if decoder is None else decode_internal(
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


def _index_text(path, read, first, second):
    if read is None:
        return
    name = os.path.basename(path)
    if isinstance(read, dict):
        yield f"Dumping {path}\nFound an unreadable index {name}: {read['error']}\n"
        return
    head, a, b, _ = read
    yield (f"Dumping {path} ({counted(head['entries_count'], 'entry')}, "
           f"{head['zero_tail_entries']} in an all-zero tail)\n")
    for start in range(0, len(a), INDEX_CHUNK):
        yield _lines([f"{first}: {x} {second}: {y}" for x, y in
                      zip(a[start:start + INDEX_CHUNK].tolist(),
                          b[start:start + INDEX_CHUNK].tolist())])
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
    snap = snapshot_doc(path, report)
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
    epochs = leader_epochs(path, report)
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
    "base64": b64_list,
}
