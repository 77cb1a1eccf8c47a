"""Reading a planned task on an executor: walk its byte range with the kernels (CRCs checked),
decode records columnar, filter them, and build ``pyarrow.RecordBatch`` es without a Python
object per field."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from kafkalog._kernels import gather_spans, walk_batches
from kafkalog._layout import WALK_CORRUPT, WALK_INVALID
from kafkalog.errors import CorruptRecordError
from kafkalog.files import LOG_SUFFIX, file_path
from kafkalog.isolation import AbortedTxnFilter
from kafkalog.records import CONTROL_MASK, decode_batches, open_buffer
from kafkalog.spark.schema import arrow_schema

if TYPE_CHECKING:
    import pyarrow

log = logging.getLogger(__name__)

_CHUNK_BYTES = 32 * 1024 * 1024


def read_task(task: dict[str, Any]) -> Iterator[pyarrow.RecordBatch]:
    """Yield ``pyarrow.RecordBatch`` es of one planned task."""
    import pyarrow as pa
    path = file_path(task["dir"], task["segment"], LOG_SUFFIX)
    buf = open_buffer(path)
    end = min(task["end_pos"], len(buf)) if task["end_pos"] is not None else len(buf)
    batches, status, stop, message = walk_batches(buf, task["start_pos"], end,
                                                  validate_crc=task["validate_crc"],
                                                  stop_on_invalid=True)
    # Kafka's own iterator stops silently at a torn tail; anything else is data loss.
    if status in (WALK_CORRUPT, WALK_INVALID):
        error = CorruptRecordError(message, position=stop, path=path)
        if task["fail_on_data_loss"]:
            raise error
        log.warning("stopping at corrupt data (failOnDataLoss=false): %s", error)
    schema = arrow_schema(task["include_headers"])
    state = _TaskState(task)
    start = 0
    sizes = np.cumsum(batches["size"].astype(np.int64))
    while start < len(batches):
        stop_at = int(np.searchsorted(sizes, (sizes[start - 1] if start else 0) + _CHUNK_BYTES,
                                      side="right"))
        stop_at = max(stop_at, start + 1)
        chunk = batches[start:stop_at]
        start = stop_at
        table = decode_batches(buf, chunk, path)
        keep = state.mask(chunk, table)
        if keep.any():
            yield _to_arrow(table.slice(keep), task, schema, pa)
        if state.done:
            break


class _TaskState:
    """Which records of a task are returned: its offset range, no control records, and for
    read_committed none of an aborted transaction's."""

    def __init__(self, task):
        self.start_offset = task["start_offset"]
        self.end_offset = task["end_offset"]
        self.aborted = AbortedTxnFilter(task["aborted"]) if task["committed"] else None
        self.done = False

    def mask(self, batches, table):
        offsets = table.records["offset"]
        keep = offsets >= self.start_offset
        if self.end_offset is not None:
            keep &= offsets < self.end_offset
        # consumers never see control records
        keep &= (batches["attributes"][table.batch] & CONTROL_MASK) == 0
        if self.aborted is not None:
            keep &= ~self.aborted.aborted_mask(batches)[table.batch]
        if self.end_offset is not None and len(offsets) and offsets[-1] >= self.end_offset:
            self.done = True
        return keep


def _binary(pa, type_, data, positions, lengths):
    offsets, values, valid = gather_spans(data, positions, lengths)
    n = len(positions)
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(offsets),
                                            pa.py_buffer(values)],
                                 null_count=int(n - valid.sum()))


def _to_arrow(table, task, schema, pa):
    recs = table.records
    n = len(recs)
    columns = [
        _binary(pa, pa.binary(), table.data, recs["key_pos"].copy(), recs["key_len"].copy()),
        _binary(pa, pa.binary(), table.data, recs["value_pos"].copy(),
                recs["value_len"].copy()),
        _repeated_string(pa, task["topic"], n),
        pa.array(np.full(n, task["partition"], np.int32)),
        pa.array(recs["offset"].copy()),
        pa.array(recs["timestamp"] * 1000, pa.timestamp("us", "UTC")),
        # Kafka's TimestampType id, as Spark's source reports it: -1 for magic 0 records
        pa.array(table.timestamp_type.astype(np.int32)),
    ]
    if task["include_headers"]:
        columns.append(_headers(pa, table))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _repeated_string(pa, text, n):
    raw = text.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(raw * n)])


def _headers(pa, table):
    recs = table.records
    counts = recs["header_count"].astype(np.int64)
    starts = recs["header_start"].astype(np.int64)
    # The header rows of the kept records, in record order.
    index = np.repeat(starts, counts) + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts)
                                                                              - counts, counts))
    heads = table.headers[index] if len(index) else table.headers[:0]
    keys = _binary(pa, pa.string(), table.data, heads["key_pos"].copy(), heads["key_len"].copy())
    values = _binary(pa, pa.binary(), table.data, heads["value_pos"].copy(),
                     heads["value_len"].copy())
    structs = pa.StructArray.from_arrays([keys, values], names=["key", "value"])
    list_offsets = np.zeros(len(recs) + 1, np.int32)
    np.cumsum(counts, out=list_offsets[1:])
    has = counts > 0
    validity = None if has.all() else pa.py_buffer(np.packbits(has, bitorder="little"))
    return pa.ListArray.from_buffers(
        pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])),
        len(recs), [validity, pa.py_buffer(list_offsets)], null_count=int((~has).sum()),
        children=[structs])
