"""``kafkalog dump --json``: the DUMP_JSON document (``docs/dump-json.md``), streamed.

``iter_json`` writes the document piece by piece as the segments are walked; joined, the pieces
are the document ``dump_partition`` returns.
"""
from __future__ import annotations

import itertools
import json
import os
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from kafkalog import storage
from kafkalog.files import (
    INDEX_SUFFIX, LEADER_EPOCH_CHECKPOINT, LOG07_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, file_path, offsets_of, topic_partition_or_none,
)
from kafkalog.index import OffsetIndex, TimeIndex
from kafkalog.log_dirs import is_log07_dir, kraft_snapshot_files
from kafkalog.dump import log07
from kafkalog.records import TimestampType
from kafkalog.dump.partition import (
    KRAFT_SNAPSHOT, dirs_to_dump, file_kind, file_sizes, index_or_problem, leader_epochs,
    located_dirs, partitions_pieces, segments_in_range, snapshot_doc, txn_index,
)
from kafkalog.dump.segments import (
    DumpOptions, DumpReport, INDEX_CHUNK, SegmentScan, b64, batch_dict, decode_internal,
    decoder_of, kraft_control, with_defaults,
)

if TYPE_CHECKING:
    from kafkalog._typing import StrPath


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
    options = with_defaults(options)
    report = DumpReport() if report is None else report
    path, listing = located_dirs(path, storage_options, rsm_keys)
    if listing is not None:
        yield from partitions_pieces(listing, lambda d, r: itertools.chain(
            _partition_json(d, options, r), ("\n",)), report)
        return
    yield from _file_json(path, options, report)
    yield "\n"


def _partition_json(path, options, report):
    path = storage.abspath(path)
    if is_log07_dir(path):
        yield from log07.partition_json(path, options, report)
        return
    first_problem = len(report.problems)
    name = os.path.basename(path)
    topic, partition = topic_partition_or_none(name) or (name, None)
    names = sorted(storage.listdir(path))
    head = {"dir": name, "topic": topic, "partition": partition,
            "records_mode": options.records, "files": file_sizes(path, names)}
    if options.limits():
        head["limits"] = options.limits()
    yield _dumps(head)[:-1] + ', "segments": ['
    logs = offsets_of(names, LOG_SUFFIX)
    for i, base in enumerate(segments_in_range(logs, options)):
        if i:
            yield ", "
        yield from _segment_json(file_path(path, base, LOG_SUFFIX), options, report,
                                 log_offsets=logs)
    kraft = kraft_snapshot_files(path)
    if kraft:       # KRaft snapshots (__cluster_metadata), each like a segment
        yield '], "kraft_snapshots": ['
        for i, (_, checkpoint) in enumerate(kraft):
            if i:
                yield ", "
            yield from _segment_json(checkpoint, options, report, indexes=False)
    snapshots = [snapshot_doc(file_path(path, o, SNAPSHOT_SUFFIX), report)
                 for o in offsets_of(names, SNAPSHOT_SUFFIX)]
    epochs = leader_epochs(os.path.join(path, LEADER_EPOCH_CHECKPOINT), report)
    yield (f'], "producer_snapshots": {_dumps(snapshots)}, "leader_epoch_checkpoint": '
           f'{_dumps(epochs)}, "problems": {_dumps(report.problems[first_problem:])}}}')


def _file_json(path, options, report):
    kind, base_offset = file_kind(path)
    name = os.path.basename(path)
    first_problem = len(report.problems)
    yield "{" + f'"file": {_dumps(name)}, '
    if kind in (LOG_SUFFIX, KRAFT_SNAPSHOT):
        yield '"segment": '
        yield from _segment_json(path, options, report, indexes=kind == LOG_SUFFIX)
    elif kind == LOG07_SUFFIX:
        yield '"format": "0.7", "segment": '
        yield from log07.segment_json(path, base_offset, options, report)
    elif kind == INDEX_SUFFIX:
        yield '"offset_index": '
        yield from _index_json(index_or_problem(OffsetIndex, path, base_offset, report))
    elif kind == TIME_INDEX_SUFFIX:
        yield '"time_index": '
        yield from _index_json(index_or_problem(TimeIndex, path, base_offset, report))
    elif kind == TXN_INDEX_SUFFIX:
        yield '"txn_index": ' + _dumps(txn_index(path, base_offset, report))
    elif kind == SNAPSHOT_SUFFIX:
        snap = snapshot_doc(path, report)
        yield '"entries": ' + _dumps(snap["entries"])
        if "error" in snap:
            yield ', "error": ' + _dumps(snap["error"])
    else:
        yield '"leader_epoch_checkpoint": ' + _dumps(leader_epochs(path, report))
    yield f', "problems": {_dumps(report.problems[first_problem:])}}}'


def _segment_json(log_path, options, report, indexes=True, log_offsets=None):
    scan = SegmentScan(log_path, options, report, log_offsets)
    decoder = decoder_of(log_path, options)
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
    yield from _index_json(index_or_problem(
        OffsetIndex, file_path(directory, base, INDEX_SUFFIX), base, report))
    yield ', "time_index": '
    yield from _index_json(index_or_problem(
        TimeIndex, file_path(directory, base, TIME_INDEX_SUFFIX), base, report))
    yield ', "txn_index": ' + _dumps(
        txn_index(file_path(directory, base, TXN_INDEX_SUFFIX), base, report))
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
        d = batch_dict(row, bases[i])
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
                r += '"headers": ' + _dumps([{"key": hk, "value_b64": b64(hv)}
                                             for hk, hv in cols.headers[j]])
            else:
                r += '"headers": []'
            if is_control:
                name, _, epoch, error = chunk.controls[j]
                control = {"type": name, "coordinator_epoch": epoch}
                if error:
                    control["error"] = error
                if decoder is not None and (kraft := kraft_control(
                        cols.keys[j], cols.values[j])) is not None:
                    control["data"] = kraft[0]
                r += ', "control": ' + _dumps(control)
            elif decoder is not None:
                decoded = decode_internal(decoder, cols.keys[j], cols.values[j], report, path,
                                   cols.offsets[j])
                r += ', "decoded": ' + (_dumps(decoded.decoded) if decoded is not None else
                                        "null")
            recs.append(r + "}")
        pieces.append(_dumps(d)[:-1] + ', "records": [' + ", ".join(recs) + "]}")
    return ", ".join(pieces)


def _index_json(read):
    """Pieces of an ``offset_index`` / ``time_index`` value (``index_or_problem``'s result)."""
    if read is None or isinstance(read, dict):
        yield _dumps(read)
        return
    head, a, b, extra = read
    yield _dumps(head)[:-1] + ', "entries": ['
    for start in range(0, len(a), INDEX_CHUNK):
        piece = ", ".join(f"[{x}, {y}]" for x, y in zip(a[start:start + INDEX_CHUNK].tolist(),
                                                        b[start:start + INDEX_CHUNK].tolist()))
        yield piece if start == 0 else ", " + piece
    yield "]" + "".join(f", {_dumps(k)}: {_dumps(v)}" for k, v in extra.items()) + "}"


# ----------------------------------------------------------------------------------------------
# The documents as dicts (the streamed JSON, parsed)

def dump_partition(path: StrPath, records_mode: str = "full", options: DumpOptions | None = None,
                   report: DumpReport | None = None) -> dict[str, Any]:
    """The DUMP_JSON document of a partition directory, as a dict."""
    options = with_defaults(options, records_mode)
    report = DumpReport() if report is None else report
    return json.loads("".join(_partition_json(os.fspath(path), options, report)))


def dump_segment(log_path: StrPath, records_mode: str = "full",
                 options: DumpOptions | None = None,
                 report: DumpReport | None = None) -> dict[str, Any]:
    """The ``segments[]`` entry of one ``.log`` file and its index files, as a dict."""
    options = with_defaults(options, records_mode)
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
    options = with_defaults(options, records_mode)
    path = storage.locate(os.fspath(path), storage_options, rsm_keys).root
    docs = [json.loads(line) for line in
            "".join(iter_json(path, options, report)).splitlines()]
    if storage.isdir(path) and [d for d, _ in dirs_to_dump(path).partitions] != \
            [storage.abspath(path)]:
        return docs
    return docs[0]

