"""Reading a planned task on an executor: walk its byte range with the kernels (CRCs checked),
decode records columnar, filter them, and build ``pyarrow.RecordBatch`` es without a Python
object per field."""
from __future__ import annotations

import functools
import logging
import os
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np

from kafkalog import storage
from kafkalog._kernels import decode_v2_offsets, gather_spans
from kafkalog._layout import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, WALK_END
from kafkalog.errors import (
    CorruptRecordError, FileShrunkError, KafkaLogError, ObjectChangedError, OffsetOutOfRangeError,
)
from kafkalog.files import LOG_SUFFIX, file_path
from kafkalog.isolation import AbortedTxnFilter
from kafkalog.log07.format import LOG07_FORMAT, message_table, walk_all
from kafkalog.records import COMPRESSION_MASK, CONTROL_MASK, decode_batches, open_buffer
from kafkalog.scan.schema import arrow_schema
from kafkalog.segment_walker import ITERATE, ITERATE_LENIENT, walk_segment

if TYPE_CHECKING:
    import pyarrow

log = logging.getLogger(__name__)

# Log bytes decoded into one Arrow batch: its columns stay in the CPU caches while they are
# built and its buffers come from reused memory, and Spark starts on one while the next is made.
_CHUNK_BYTES = 4 * 1024 * 1024

#: The columns built from the records' heads alone (``decode_v2_offsets``): a task that reads
#: no other decodes no key, value or header of a plain data batch.
HEAD_COLUMNS = frozenset({"topic", "partition", "offset", "timestamp"})


@functools.lru_cache(maxsize=None)
def _log_kernels_once():
    """Say once per worker process which kernels it runs (a worker that imported an unbuilt
    source tree runs the slow pure-Python ones)."""
    import kafkalog._kernels as kernels
    log.info("kafkalog executor (pid %d) runs the %s kernels (%s)", os.getpid(),
             "compiled" if kernels.COMPILED else "pure-Python", kernels.KERNELS_FILE)


def read_task(task: dict[str, Any], columns: Sequence[str] | None = None,
              rsm_keys: Mapping[str, Any] | None = None) -> Iterator[pyarrow.RecordBatch]:
    """Yield ``pyarrow.RecordBatch`` es of one planned task (at most about ``_CHUNK_BYTES`` of
    log each): the records of its byte range in ``[start_offset, end_offset)`` that a consumer
    sees, and that the pushed filters keep (``ts_lo``/``ts_hi``: timestamps in ms,
    ``offset_in``: offsets; absent or None when not filtered).

    ``columns``: the Kafka source's columns to build, in that order (``schema.COLUMNS``);
    None: the task's ``columns`` when it has them, else all of them (``headers`` with the
    task's ``include_headers``). Only those are built: without ``key``, ``value`` and
    ``headers`` no key, value or header byte is copied (an uncompressed batch's records are
    decoded in place).

    A remote segment (``dir`` an fsspec URL) is read with the task's ``storage_options``
    (None: the filesystem's defaults, for S3 the AWS_* environment of this process), fetching
    only the blocks of ``[start_pos, end_pos)`` by ranged GETs (``storage_backend.BLOCK_SIZE``
    aligned), never the whole object. A tiered segment's is read with the keys of the call
    that planned it, or with ``rsm_keys`` (as ``Log.open`` takes them) where it is read in
    another process than the one that planned it."""
    import pyarrow as pa
    _log_kernels_once()
    if columns is None:
        columns = task.get("columns")
    schema = arrow_schema(task["include_headers"], columns)
    builders = [_BUILDERS[name] for name in schema.names]
    if task.get("format") == LOG07_FORMAT:
        for table in _log07_tables(task):
            yield pa.RecordBatch.from_arrays([build(pa, _Rows(table), task)
                                              for build in builders], schema=schema)
        return
    path = file_path(task["dir"], task["segment"], LOG_SUFFIX)
    walked = _walk_task(task, path, rsm_keys)
    if walked is None:
        return
    buf, batches = walked
    state = _TaskState(task)
    batches = batches[state.batch_mask(batches)]
    if len(batches) == 0:
        return
    heads_only = HEAD_COLUMNS.issuperset(schema.names)
    sizes = np.cumsum(batches["size"].astype(np.int64))
    start = 0
    while start < len(batches):
        stop_at = int(np.searchsorted(sizes, (sizes[start - 1] if start else 0) + _CHUNK_BYTES,
                                      side="right"))
        stop_at = max(stop_at, start + 1)
        chunk = batches[start:stop_at]
        start = stop_at
        rows = _decode_chunk(buf, chunk, path, heads_only)
        keep = state.mask(chunk, rows)
        if keep is not None:
            if not keep.any():
                continue
            rows = rows.slice(keep)
        columns_made = [build(pa, rows, task) for build in builders]
        _check_unchanged(buf, chunk, path)
        yield pa.RecordBatch.from_arrays(columns_made, schema=schema)
        del rows, columns_made


def _check_unchanged(buf, chunk, path):
    """Raise FileShrunkError unless every batch of ``chunk`` still starts in the mapping
    ``buf`` as walked (its base offset and CRC): a writer that cut the file and appended
    again (``truncate_to``, then appends) puts other batches at the same positions, and a
    chunk decoded before and copied out after would pair one batch's offsets with
    another's values. After the columns are copied: what they hold was read before."""
    if isinstance(buf, bytes) or not hasattr(buf, "faulted"):
        return                      # a copy (the twins' mapping, a fetched range) is fixed
    data = np.frombuffer(buf, dtype=np.uint8)
    positions = chunk["position"]
    base = data[positions[:, None] + np.arange(8)].view(">i8").ravel()
    crc_at = positions + np.where(chunk["magic"] < 2, LOG_OVERHEAD, HEADER_SIZE_UP_TO_MAGIC)
    crc = data[crc_at[:, None] + np.arange(4)].view(">u4").ravel()
    if not ((base == chunk["base_offset"]) & (crc == chunk["crc"])).all():
        try:
            now: int | None = os.stat(path).st_size
        except OSError:
            now = None
        raise FileShrunkError(path, len(buf), now)


#: How far ``read_tasks`` fetches remote tasks' bytes ahead of the one read: tasks, and bytes
#: (well under the process's cache of remote buffers, so none is dropped before it is read).
PREFETCH_TASKS = 64
PREFETCH_BYTES = 64 * 1024 * 1024


def read_tasks(tasks: Sequence[dict[str, Any]], columns: Sequence[str] | None = None,
               rsm_keys: Mapping[str, Any] | None = None) -> Iterator[pyarrow.RecordBatch]:
    """``read_task`` of each task in turn, the byte ranges of the remote tasks after the one
    read fetched meanwhile (ranged GETs, up to ``PREFETCH_TASKS`` tasks or
    ``PREFETCH_BYTES`` ahead, concurrently): a read of many small remote partitions waits
    for a store's latency once per window, not once per task. A failed fetch is left to
    ``read_task``, which fetches again and raises."""
    remote = [i for i, t in enumerate(tasks)
              if t.get("format") != LOG07_FORMAT and storage.is_remote(t["dir"])]
    if len(remote) < 2:
        for task in tasks:
            yield from read_task(task, columns, rsm_keys)
        return
    import concurrent.futures
    pool = concurrent.futures.ThreadPoolExecutor(PREFETCH_TASKS,
                                                 thread_name_prefix="kafkalog-prefetch")
    pending: dict[int, Any] = {}
    queued = 0                                     # the next of ``remote`` to fetch
    try:
        for i, task in enumerate(tasks):
            for j in [j for j in pending if j < i]:
                del pending[j]
            ahead = sum(_span(tasks[j]) for j in pending)
            while queued < len(remote) and len(pending) < PREFETCH_TASKS and \
                    (not pending or ahead < PREFETCH_BYTES):
                j = remote[queued]
                queued += 1
                if j < i:
                    continue
                pending[j] = pool.submit(_fetch_quietly, tasks[j], rsm_keys)
                ahead += _span(tasks[j])
            if i in pending:
                pending.pop(i).result()
            yield from read_task(task, columns, rsm_keys)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _span(task):
    end = task["end_pos"] if task["end_pos"] is not None else task.get("segment_size") or 0
    return max(end - task["start_pos"], 0)


def _fetch_quietly(task, rsm_keys):
    try:
        _task_buffer(task, file_path(task["dir"], task["segment"], LOG_SUFFIX), rsm_keys)
    except Exception:                   # read_task meets it again, and raises it typed
        pass


class _Rows:
    """The records of a decoded chunk as the filters and column builders read them: their
    ``offsets`` and ``timestamps`` (ms, as a consumer sees them), and the ``RecordTable``
    they come from (``table``), or None where only the records' heads were decoded."""
    __slots__ = ("table", "offsets", "timestamps")

    def __init__(self, table, offsets=None, timestamps=None):
        self.table = table
        self.offsets = table.records["offset"] if table is not None else offsets
        self.timestamps = table.records["timestamp"] if table is not None else timestamps

    def __len__(self):
        return len(self.offsets)

    def slice(self, keep):
        if self.table is not None:
            return _Rows(self.table.slice(keep))
        return _Rows(None, self.offsets[keep], self.timestamps[keep])


def _decode_chunk(buf, chunk, path, heads_only):
    """The ``_Rows`` of walked ``chunk``: with ``heads_only``, when it holds plain data batches
    (v2, uncompressed, no control batch), their records' heads (``decode_v2_offsets``: no key,
    value or header is looked at); else every record decoded (``decode_batches``)."""
    if not heads_only or not (chunk["magic"] == 2).all() or \
            (chunk["attributes"] & (COMPRESSION_MASK | CONTROL_MASK)).any():
        return _Rows(decode_batches(buf, chunk, path))
    try:
        offsets, timestamps = decode_v2_offsets(buf, chunk)
    except CorruptRecordError as e:
        raise CorruptRecordError(e.reason, position=e.position, path=path,
                                 base_offset=int(chunk["base_offset"][e.region])) from None
    return _Rows(None, offsets, timestamps)


def _walk_task(task, path, rsm_keys=None):
    """(buffer, ``BATCH_DTYPE`` rows) of the batches in the task's byte range, walked by the
    segment walker (CRCs checked with ``validate_crc``), or None when its segment was deleted
    after planning and ``failOnDataLoss`` is off."""
    try:
        buf, end = _task_buffer(task, path, rsm_keys)
    except (FileNotFoundError, ObjectChangedError) as e:
        # a local file gone, a remote object gone (planned with its size: no listing here)
        deleted = isinstance(e, FileNotFoundError) and not isinstance(e, KafkaLogError) or \
            isinstance(e, ObjectChangedError) and isinstance(e.__cause__, FileNotFoundError)
        if not deleted:
            raise
        _deleted_after_planning(task, e)
        return None
    # Kafka's own iterator stops silently at a torn tail; anything else is data loss (with
    # failOnDataLoss=false, a WARNING and the batches before it, or a batch out of order
    # skipped). A segment's batches start at its base offset and increase.
    walk = walk_segment(buf, task["start_pos"], end, validate_crc=task["validate_crc"],
                        path=path, after=task["segment"] - 1,
                        before=task.get("segment_end"),
                        policy=ITERATE if task["fail_on_data_loss"] else ITERATE_LENIENT)
    if walk.error is not None:
        raise _skippable(walk.error)
    return buf, walk.batches


# Data loss fails the whole read (every partition of it), as in Spark's Kafka source; the
# error says which option reads the rest.
_SKIP_IT = ("; to skip damaged data and read the rest, set failOnDataLoss=false (in Python "
            "fail_on_data_loss=False)")


def _skippable(error):
    """``error`` of data loss that ``failOnDataLoss=false`` would skip, its message naming that
    option (its type and attributes kept)."""
    error.args = (f"{error}{_SKIP_IT}",)
    return error


def _deleted_after_planning(task, error):
    """A task's segment was deleted after planning (retention, a compacted log's swap): its
    offsets are gone, which Spark's Kafka source reports as data loss (raised, or with
    failOnDataLoss=false a WARNING)."""
    lost = (f"{task['topic']}-{task['partition']}: segment {task['segment']} was "
            f"deleted after planning, offsets [{task['start_offset']}, "
            f"{task['end_offset']}) are no longer in the log")
    if task["fail_on_data_loss"]:
        raise _skippable(OffsetOutOfRangeError(lost)) from error
    log.warning("%s (failOnDataLoss=false: skipped)", lost)


def _task_buffer(task, path, rsm_keys=None):
    """(buffer of the task's ``.log``, end of its byte range): the mapping of a local file;
    for a remote one its ``storage.range_buffer`` with the blocks of [start_pos, end) fetched
    (the object's size as planned, ``segment_size``, else asked for)."""
    if not storage.is_remote(path):
        buf = open_buffer(path)
        end = len(buf) if task["end_pos"] is None else min(task["end_pos"], len(buf))
        return buf, end
    path = storage.locate(path, task.get("storage_options"), rsm_keys).root
    size = task.get("segment_size")
    if size is None:
        size = storage.size_of(path)
    end = size if task["end_pos"] is None else min(task["end_pos"], size)
    return storage.range_buffer(path, size).ensure(task["start_pos"], end), end


def _log07_tables(task):
    """``RecordTable`` s of a Kafka 0.7 task's messages in its offset range, a chunk of
    entries at a time: its file walked from ``start_pos`` to ``end_pos`` (entry boundaries)
    with 0.7's checks; an invalid entry inside is data loss, as in ``_walk_task``."""
    path = os.path.join(task["dir"], task["file"])
    lo, hi = task["start_offset"], task["end_offset"]
    offset_in = task.get("offset_in")
    if task.get("ts_lo") is not None or task.get("ts_hi") is not None:
        return                       # no 0.7 message has a timestamp: none passes a bound
    try:
        buf = open_buffer(path)
    except FileNotFoundError as e:
        _deleted_after_planning(task, e)
        return
    try:
        end = len(buf) if task["end_pos"] is None else min(task["end_pos"], len(buf))
        for entries, status, stop, message in walk_all(buf, task["start_pos"], end,
                                                       task["validate_crc"]):
            table = message_table(buf, entries, task["segment"], task["validate_crc"], path)
            offsets = table.records["offset"]
            keep = (offsets >= lo) & (offsets < hi)
            if offset_in is not None:
                keep &= np.isin(offsets, np.asarray(offset_in, np.int64))
            if keep.any():
                yield table if keep.all() else table.slice(keep)
            if status != WALK_END:
                lost = (f"{task['topic']}-{task['partition']}: {path} at position {stop}: "
                        f"{message or 'a message runs past the end of the file'}")
                if task["fail_on_data_loss"]:
                    raise _skippable(CorruptRecordError(lost, stop, path))
                log.warning("%s (failOnDataLoss=false: the rest of the file skipped)", lost)
    finally:
        if hasattr(buf, "close"):
            buf.close()


class _TaskState:
    """Which records of a task are returned: its offset range, no control records, for
    read_committed none of an aborted transaction's, and those the pushed filters keep."""

    def __init__(self, task):
        self.start_offset = task["start_offset"]
        self.end_offset = task["end_offset"]
        self.aborted = AbortedTxnFilter(task["aborted"]) if task["committed"] else None
        self.ts_lo = task.get("ts_lo")
        self.ts_hi = task.get("ts_hi")
        offset_in = task.get("offset_in")
        self.offset_in = None if offset_in is None else np.asarray(offset_in, np.int64)

    def batch_mask(self, batches):
        """The batches that may hold a record returned: some offset in range, a max
        timestamp not below ``ts_lo``, not an aborted transaction's. Control batches in range
        are kept: they are decoded (and their keys checked) as a consumer parses them."""
        keep = batches["last_offset"] >= self.start_offset
        if self.aborted is not None:
            # over every batch in order: the filter follows the markers (control batches)
            keep &= ~self.aborted.aborted_mask(batches)
        v2 = batches["magic"] == 2
        # A legacy compressed wrapper carries its last inner offset only: its first is known
        # once decoded, so it is kept whenever its last offset is in range.
        if self.end_offset is not None:
            keep &= ~v2 | (batches["base_offset"] < self.end_offset)
        control = (batches["attributes"] & CONTROL_MASK) != 0
        if self.ts_lo is not None:
            # a v2 batch's max timestamp bounds its records' (Kafka's LogValidator sets it)
            keep &= ~v2 | control | (batches["max_timestamp"] >= self.ts_lo)
        if self.offset_in is not None:
            first = np.searchsorted(self.offset_in, batches["base_offset"], side="left")
            after_last = np.searchsorted(self.offset_in, batches["last_offset"], side="right")
            keep &= control | ~v2 | (after_last > first)
        return keep

    def mask(self, batches, rows):
        """The records of ``rows`` (decoded from ``batches``, all passed by ``batch_mask``)
        to return, or None for all of them."""
        n = len(rows)
        if n == 0:
            return None
        offsets = rows.offsets
        keep = None
        control = (batches["attributes"] & CONTROL_MASK) != 0
        if control.any():           # consumers never see control records
            keep = ~control[rows.table.batch]
        if offsets[0] < self.start_offset:
            keep = _and(keep, offsets >= self.start_offset)
        if self.end_offset is not None and offsets[-1] >= self.end_offset:
            keep = _and(keep, offsets < self.end_offset)
        if self.ts_lo is not None or self.ts_hi is not None:
            ts = rows.timestamps
            if self.ts_lo is not None:
                keep = _and(keep, ts >= self.ts_lo)
            if self.ts_hi is not None:
                keep = _and(keep, ts < self.ts_hi)
        if self.offset_in is not None:
            keep = _and(keep, np.isin(offsets, self.offset_in))
        return keep


def _and(keep, more):
    return more if keep is None else keep & more


def _binary(pa, type_, data, positions, lengths):
    offsets, values, valid = gather_spans(data, positions, lengths)
    n = len(positions)
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(offsets),
                                            pa.py_buffer(values)],
                                 null_count=int(n - valid.sum()))


def _fixed(pa, type_, values):
    """An Arrow array over a contiguous numpy array's memory (no copy, no nulls)."""
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def _key(pa, rows, task):
    table = rows.table
    recs = table.records
    return _binary(pa, pa.binary(), table.data, recs["key_pos"].copy(), recs["key_len"].copy())


def _value(pa, rows, task):
    table = rows.table
    recs = table.records
    return _binary(pa, pa.binary(), table.data, recs["value_pos"].copy(),
                   recs["value_len"].copy())


def _topic(pa, rows, task):
    raw = task["topic"].encode("utf-8")
    n = len(rows)
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(raw * n)])


def _partition(pa, rows, task):
    return _fixed(pa, pa.int32(), np.full(len(rows), task["partition"], np.int32))


def _offset(pa, rows, task):
    return _fixed(pa, pa.int64(), np.ascontiguousarray(rows.offsets))


def _timestamp(pa, rows, task):
    if task.get("format") == LOG07_FORMAT:
        return pa.nulls(len(rows), pa.timestamp("us", "UTC"))     # 0.7 had no timestamps
    return _fixed(pa, pa.timestamp("us", "UTC"), rows.timestamps * 1000)


def _timestamp_type(pa, rows, task):
    # Kafka's TimestampType id, as Spark's source reports it: -1 for magic 0 records
    return _fixed(pa, pa.int32(), rows.table.timestamp_type.astype(np.int32))


def _headers(pa, rows, task):
    table = rows.table
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


#: How each column of ``schema.COLUMNS`` is built from a decoded chunk's ``_Rows``.
_BUILDERS = {"key": _key, "value": _value, "topic": _topic, "partition": _partition,
             "offset": _offset, "timestamp": _timestamp, "timestampType": _timestamp_type,
             "headers": _headers}
