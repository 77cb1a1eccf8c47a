"""Kafka partition directories as Spark DataFrames, with the schema of Spark's Kafka source.

Two entry points: ``kafkalog.spark.read(spark, paths, **options)`` (tasks run through
``mapInArrow``) and the Python data source ``spark.read.format("kafkalog")`` (after
``kafkalog.spark.register(spark)``); both plan on the driver and read on executors.

Planning (driver) uses directory listings and index files only: segment names and sizes,
``.index`` / ``.timeindex`` entries, ``.txnindex`` entries and producer snapshot names. A
partition's byte range is split into tasks at offset-index entries (batch starts), so every
batch belongs to exactly one task. Reading (executors) walks the task's byte range with the
Cython kernels, checks CRCs and emits ``pyarrow.RecordBatch`` es built from columnar record
tables, never one Python object per field.

Replicas: when several paths hold the same topic-partition (copies from several brokers), the
replica whose newest segment starts at the highest offset (then: the most bytes, then the first
path given) is read for every offset it holds; offsets below its first segment are read from the
next replica that holds them, and so on down. Each offset is read once.
"""
import json
import logging
import os
import re

import numpy as np

from kafkalog._kernels import gather_spans, walk_batches
from kafkalog._layout import WALK_CORRUPT, WALK_INVALID
from kafkalog.checkpoint import read_offset_checkpoint
from kafkalog.errors import CorruptRecordError, KafkaLogError, OffsetOutOfRangeError
from kafkalog.index import OffsetIndex, TimeIndex, TransactionIndex
from kafkalog.producer_state import CorruptSnapshotError, list_snapshots, read_snapshot
from kafkalog.records import CONTROL_MASK, TRANSACTIONAL_MASK, decode_batches, open_buffer

log = logging.getLogger(__name__)

_PARTITION_DIR = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)$")
_LOG_FILE = re.compile(r"^(\d{20})\.log$")
EARLIEST, LATEST = -2, -1
DEFAULT_MAX_BYTES_PER_TASK = 128 * 1024 * 1024
_CHUNK_BYTES = 32 * 1024 * 1024

_OPTION_NAMES = {
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp", "includeheaders", "minpartitions", "failondataloss",
    "kafka.isolation.level", "validatecrc", "maxrecordsperpartition", "maxbytespertask",
    "path", "paths",
}


def kafka_schema(include_headers=False):
    """The schema of Spark's Kafka source (a ``pyspark.sql.types.StructType``)."""
    from pyspark.sql.types import (
        ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
        TimestampType,
    )
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


def arrow_schema(include_headers=False):
    import pyarrow as pa
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()),
              pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
              pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("us", "UTC")),
              pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.struct(
            [pa.field("key", pa.string()), pa.field("value", pa.binary())]))))
    return pa.schema(fields)


# ----------------------------------------------------------------------------------------------
# Options

class Options:
    """Spark's Kafka option names (case-insensitive) and kafkalog's own."""

    def __init__(self, options):
        self._raw = {str(k).lower(): v for k, v in options.items() if v is not None}
        unknown = sorted(k for k in self._raw if k not in _OPTION_NAMES
                         and not k.startswith("kafka."))
        if unknown:
            raise ValueError(f"unknown option(s) {', '.join(unknown)}")

    def get(self, name, default=None):
        return self._raw.get(name.lower(), default)

    def flag(self, name, default):
        v = self.get(name)
        if v is None:
            return default
        if isinstance(v, bool):
            return v
        if str(v).lower() in ("true", "false"):
            return str(v).lower() == "true"
        raise ValueError(f"option {name} must be true or false, not {v!r}")

    def integer(self, name, default=None):
        v = self.get(name)
        if v is None:
            return default
        try:
            return int(v)
        except (TypeError, ValueError):
            raise ValueError(f"option {name} must be an integer, not {v!r}") from None

    def json(self, name):
        v = self.get(name)
        if v is None or isinstance(v, dict):
            return v
        try:
            return json.loads(v)
        except ValueError:
            raise ValueError(f"option {name} is not valid JSON: {v!r}") from None

    @property
    def include_headers(self):
        return self.flag("includeHeaders", False)

    @property
    def read_committed(self):
        level = str(self.get("kafka.isolation.level", "read_uncommitted")).lower()
        if level not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"kafka.isolation.level must be read_committed or "
                             f"read_uncommitted, not {level!r}")
        return level == "read_committed"


# ----------------------------------------------------------------------------------------------
# Discovery

class Replica:
    """One copy of a topic-partition: its directory and segment list (names and sizes)."""

    def __init__(self, path, order):
        self.path = path
        self.order = order
        bases = []
        for name in os.listdir(path):
            m = _LOG_FILE.match(name)
            if m:
                bases.append(int(m.group(1)))
        self.bases = sorted(bases)
        self.sizes = [os.path.getsize(self._log(b)) for b in self.bases]
        snapshots = [o for o, _ in list_snapshots(path)]
        # A producer snapshot named after the log end offset is written at every clean close.
        self.end_hint = max(snapshots) if snapshots and self.bases and \
            max(snapshots) >= self.bases[-1] else None
        self.log_start = self.bases[0] if self.bases else None
        checkpoint = os.path.join(os.path.dirname(path), "log-start-offset-checkpoint")
        if os.path.exists(checkpoint) and self.bases:
            try:
                name = os.path.basename(path)
                m = _PARTITION_DIR.match(name)
                key = (m.group("topic"), int(m.group("partition")))
                self.log_start = max(self.log_start,
                                     read_offset_checkpoint(checkpoint).get(key, 0))
            except (KafkaLogError, OSError, ValueError):
                pass

    def _log(self, base):
        return os.path.join(self.path, f"{base:020d}.log")

    def preference(self):
        return (self.bases[-1] if self.bases else -1, sum(self.sizes), -self.order)

    def log_end_offset(self):
        """The offset after the last batch: the snapshot hint, else the last segment's tail
        (its batch headers from the last offset-index entry on)."""
        if self.end_hint is not None:
            return self.end_hint
        if not self.bases:
            return None
        base = self.bases[-1]
        start = 0
        index_path = os.path.join(self.path, f"{base:020d}.index")
        if os.path.exists(index_path):
            with OffsetIndex.reading(index_path, base) as idx:
                if idx.entries:
                    start = idx.entry(idx.entries - 1).position
        buf = open_buffer(self._log(base))
        batches = walk_batches(buf, min(start, len(buf)), validate_crc=False)[0]
        return int(batches["last_offset"][-1]) + 1 if len(batches) else base


def discover(paths):
    """{(topic, partition): [Replica, ...]} for every partition directory under ``paths``."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found = {}
    order = 0
    for root in paths:
        root = os.path.abspath(os.fspath(root))
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{root}: no such directory")
        for directory, subdirs, files in os.walk(root):
            subdirs.sort()
            m = _PARTITION_DIR.match(os.path.basename(directory))
            if m and any(_LOG_FILE.match(f) for f in files):
                key = (m.group("topic"), int(m.group("partition")))
                found.setdefault(key, []).append(Replica(directory, order))
                order += 1
                subdirs[:] = []
    return found


def _select_topics(found, opts):
    subscribe = opts.get("subscribe")
    pattern = opts.get("subscribePattern")
    assign = opts.json("assign")
    chosen = [o for o in (subscribe, pattern, assign) if o is not None]
    if len(chosen) > 1:
        raise ValueError("only one of subscribe, subscribePattern and assign may be given")
    if subscribe is not None:
        topics = {t.strip() for t in str(subscribe).split(",") if t.strip()}
        return {k: v for k, v in found.items() if k[0] in topics}
    if pattern is not None:
        regex = re.compile(pattern)
        return {k: v for k, v in found.items() if regex.fullmatch(k[0])}
    if assign is not None:
        wanted = {(t, int(p)) for t, ps in assign.items() for p in ps}
        return {k: v for k, v in found.items() if k in wanted}
    return found


# ----------------------------------------------------------------------------------------------
# Planning

def _per_partition(spec, key, default):
    """Value for ``key`` from a Spark JSON offsets spec {"topic": {"0": n}}."""
    topic, partition = key
    if spec is None:
        return default
    return spec.get(topic, {}).get(str(partition), default)


def _resolve_timestamp(replica, timestamp):
    """(segment index, start position) from which the first record with timestamp >=
    ``timestamp`` can be found, by the time and offset indexes only; None if no segment can
    hold one. All records before the position have smaller timestamps."""
    for i, base in enumerate(replica.bases):
        tpath = os.path.join(replica.path, f"{base:020d}.timeindex")
        if not os.path.exists(tpath):
            return i, 0
        with TimeIndex.reading(tpath, base) as t:
            if t.entries and t.last_entry.timestamp < timestamp and i + 1 < len(replica.bases):
                continue                   # every record of this segment is earlier
            before = t.lookup(timestamp - 1)
        if before.timestamp < 0:
            return i, 0
        ipath = os.path.join(replica.path, f"{base:020d}.index")
        if not os.path.exists(ipath):
            return i, 0
        with OffsetIndex.reading(ipath, base) as idx:
            return i, idx.lookup(before.offset).position
    return None


def _index_entries(replica, base):
    ipath = os.path.join(replica.path, f"{base:020d}.index")
    if not os.path.exists(ipath):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    with OffsetIndex.reading(ipath, base) as idx:
        return idx.entries_array()


def _aborted_txns(replicas):
    seen = set()
    for r in replicas:
        for base in r.bases:
            path = os.path.join(r.path, f"{base:020d}.txnindex")
            if os.path.exists(path):
                for a in TransactionIndex(path, base).all_aborted_txns():
                    seen.add((a.producer_id, a.first_offset, a.last_offset))
    return sorted(seen, key=lambda t: (t[1], t[0]))


def _last_stable_offset(replica, end):
    if replica.end_hint is None:
        return end
    path = os.path.join(replica.path, f"{replica.end_hint:020d}.snapshot")
    try:
        entries = read_snapshot(path)
    except (CorruptSnapshotError, OSError):
        return end
    open_txns = entries["current_txn_first_offset"][entries["current_txn_first_offset"] >= 0]
    lso = int(open_txns.min()) if len(open_txns) else replica.end_hint
    return lso if end is None else min(end, lso)


def plan(paths, options=None):
    """The read tasks for ``paths`` (JSON-able dicts), planned from listings and indexes."""
    opts = options if isinstance(options, Options) else Options(options or {})
    found = _select_topics(discover(paths), opts)
    fail_on_data_loss = opts.flag("failOnDataLoss", True)
    committed = opts.read_committed
    starting = opts.json("startingOffsets") if str(opts.get("startingOffsets", "earliest")) \
        .strip().startswith("{") else str(opts.get("startingOffsets", "earliest")).lower()
    ending = opts.json("endingOffsets") if str(opts.get("endingOffsets", "latest")) \
        .strip().startswith("{") else str(opts.get("endingOffsets", "latest")).lower()
    if starting not in ("earliest", "latest") and not isinstance(starting, dict):
        raise ValueError(f"startingOffsets must be earliest, latest or JSON, not {starting!r}")
    if ending not in ("latest",) and not isinstance(ending, dict):
        raise ValueError(f"endingOffsets must be latest or JSON, not {ending!r}")
    start_ts_all = opts.integer("startingTimestamp")
    end_ts_all = opts.integer("endingTimestamp")
    start_ts_spec = opts.json("startingOffsetsByTimestamp")
    end_ts_spec = opts.json("endingOffsetsByTimestamp")
    max_records = opts.integer("maxRecordsPerPartition")
    max_bytes = opts.integer("maxBytesPerTask", DEFAULT_MAX_BYTES_PER_TASK)
    min_partitions = opts.integer("minPartitions")
    tasks = []
    for key in sorted(found):
        replicas = sorted(found[key], key=lambda r: r.preference(), reverse=True)
        tasks.extend(_plan_partition(key, replicas, starting, ending, start_ts_all,
                                     end_ts_all, start_ts_spec, end_ts_spec,
                                     fail_on_data_loss, committed, opts))
    total = sum(t["end_pos"] - t["start_pos"] for t in tasks if t["end_pos"] is not None)
    target = max_bytes
    if min_partitions and tasks:
        target = max(1, min(max_bytes, total // max(min_partitions, 1) or 1))
    tasks = [piece for t in tasks for piece in _split(t, target, max_records)]
    common = {"validate_crc": opts.flag("validateCrc", True),
              "fail_on_data_loss": fail_on_data_loss, "committed": committed,
              "include_headers": opts.include_headers}
    for t in tasks:
        t.update(common)
    return tasks


def _plan_partition(key, replicas, starting, ending, start_ts_all, end_ts_all, start_ts_spec,
                    end_ts_spec, fail_on_data_loss, committed, opts):
    primary = replicas[0]
    earliest = min(r.log_start for r in replicas if r.log_start is not None)
    # The offset range asked for.
    if isinstance(starting, dict):
        start = _per_partition(starting, key, EARLIEST)
    else:
        start = EARLIEST if starting == "earliest" else LATEST
    end = _per_partition(ending, key, LATEST) if isinstance(ending, dict) else LATEST
    if start == EARLIEST:
        start = earliest
    elif start == LATEST:
        start = primary.log_end_offset()
    elif start < earliest:
        if fail_on_data_loss:
            raise OffsetOutOfRangeError(
                f"startingOffsets {start} for {key[0]}-{key[1]} is below the earliest "
                f"available offset {earliest} (set failOnDataLoss=false to start there)")
        start = earliest
    if end == EARLIEST:
        raise ValueError("endingOffsets cannot be earliest (-2)")
    end = None if end == LATEST else end
    if committed:
        end = _last_stable_offset(primary, end)
    start_ts = start_ts_all if start_ts_all is not None else \
        _per_partition(start_ts_spec, key, None)
    end_ts = end_ts_all if end_ts_all is not None else _per_partition(end_ts_spec, key, None)
    aborted = _aborted_txns(replicas) if committed else []
    # Which replica serves which offsets: the preferred one from its first segment on,
    # the next one below that, and so on.
    ranges = []
    covered_from = None
    for r in replicas:
        if not r.bases:
            continue
        if covered_from is None:
            ranges.append((r, r.log_start, None))
            covered_from = r.log_start
        elif r.log_start < covered_from:
            ranges.append((r, r.log_start, covered_from))
            covered_from = r.log_start
    ranges.reverse()          # adjacent by construction: each ends where the next begins
    tasks = []
    for replica, lo, hi in ranges:
        lo = max(lo, start)
        if end is not None:
            hi = end if hi is None else min(hi, end)
        if hi is not None and lo >= hi:
            continue
        tasks.extend(_segment_tasks(key, replica, lo, hi, start_ts, end_ts, aborted))
    return tasks


def _segment_tasks(key, replica, lo, hi, start_ts, end_ts, aborted):
    """Tasks covering offsets [lo, hi) of one replica (hi None: to the end)."""
    first_segment, first_position = 0, None
    if start_ts is not None:
        resolved = _resolve_timestamp(replica, start_ts)
        if resolved is None:
            return []
        first_segment, first_position = resolved
    end_segment = len(replica.bases) - 1
    if end_ts is not None:
        resolved = _resolve_timestamp(replica, end_ts)
        if resolved is not None:
            end_segment = resolved[0]
    tasks = []
    for i, base in enumerate(replica.bases):
        nxt = replica.bases[i + 1] if i + 1 < len(replica.bases) else None
        if i < first_segment or i > end_segment:
            continue
        if nxt is not None and nxt <= lo:
            continue
        if hi is not None and base >= hi:
            break
        offsets, positions = _index_entries(replica, base)
        size = replica.sizes[i]
        start_pos = 0
        if lo > base and len(offsets):
            slot = np.searchsorted(offsets, lo, side="right") - 1
            start_pos = int(positions[slot]) if slot >= 0 else 0
        if i == first_segment and first_position is not None:
            start_pos = max(start_pos, first_position) if lo > base else first_position
        end_pos = size
        if hi is not None and len(offsets):
            k = np.searchsorted(offsets, hi, side="left")    # first entry with offset >= hi
            if k + 1 < len(offsets):
                end_pos = int(positions[k + 1])
        if start_pos >= end_pos:
            continue
        inner = positions[(positions > start_pos) & (positions < end_pos)]
        inner_offsets = offsets[(positions > start_pos) & (positions < end_pos)]
        tasks.append({
            "topic": key[0], "partition": key[1], "dir": replica.path, "segment": base,
            "start_pos": start_pos, "end_pos": end_pos, "start_offset": lo, "end_offset": hi,
            "start_timestamp": start_ts if i == first_segment else None,
            "end_timestamp": end_ts if i == end_segment else None,
            "split_positions": inner.tolist(), "split_offsets": inner_offsets.tolist(),
            "aborted": aborted,
        })
    return tasks


def _split(task, target_bytes, max_records):
    """Cut a task at offset-index entries so no piece exceeds ``target_bytes`` or (by offset
    span) ``max_records``; a piece that resolves a timestamp stays whole."""
    positions = task.pop("split_positions")
    offsets = task.pop("split_offsets")
    if task["start_timestamp"] is not None or task["end_timestamp"] is not None:
        return [task]
    pieces = []
    start, start_offset = task["start_pos"], task["start_offset"]
    for pos, off in zip(positions, offsets):
        too_big = pos - start >= target_bytes
        too_many = max_records is not None and off - start_offset >= max_records
        if too_big or too_many:
            pieces.append(dict(task, start_pos=start, end_pos=pos))
            start, start_offset = pos, off
    pieces.append(dict(task, start_pos=start))
    return pieces


# ----------------------------------------------------------------------------------------------
# Reading (executors)

def read_task(task):
    """Yield ``pyarrow.RecordBatch`` es of one planned task."""
    import pyarrow as pa
    path = os.path.join(task["dir"], f"{task['segment']:020d}.log")
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
    """Record filters of a task: offset bounds, timestamp resolution, read_committed."""

    def __init__(self, task):
        self.start_offset = task["start_offset"]
        self.end_offset = task["end_offset"]
        self.start_ts = task["start_timestamp"]
        self.end_ts = task["end_timestamp"]
        self.committed = task["committed"]
        self.aborted = [tuple(a) for a in task["aborted"]]
        self.started = self.start_ts is None
        self.done = False

    def mask(self, batches, table):
        recs = table.records
        offsets = recs["offset"]
        keep = offsets >= self.start_offset
        if self.end_offset is not None:
            keep &= offsets < self.end_offset
        attrs = batches["attributes"][table.batch]
        keep &= (attrs & CONTROL_MASK) == 0          # consumers never see control records
        if self.committed and self.aborted:
            keep &= ~self._aborted_mask(batches, table, attrs)
        if not self.started:
            hit = np.nonzero(keep & (recs["timestamp"] >= self.start_ts))[0]
            if len(hit) == 0:
                return np.zeros(len(recs), dtype=bool)
            keep[:hit[0]] = False
            self.started = True
        if self.end_ts is not None:
            hit = np.nonzero(keep & (recs["timestamp"] >= self.end_ts))[0]
            if len(hit):
                keep[hit[0]:] = False
                self.done = True
        if self.end_offset is not None and len(offsets) and offsets[-1] >= self.end_offset:
            self.done = True
        return keep

    def _aborted_mask(self, batches, table, attrs):
        pids = batches["producer_id"][table.batch]
        offsets = table.records["offset"]
        transactional = (attrs & TRANSACTIONAL_MASK) != 0
        out = np.zeros(len(offsets), dtype=bool)
        for pid, first, last in self.aborted:
            out |= transactional & (pids == pid) & (offsets >= first) & (offsets <= last)
        return out


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
        pa.array(np.maximum(table.timestamp_type, 0).astype(np.int32)),
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


# ----------------------------------------------------------------------------------------------
# Spark glue

def _read_tasks_arrow(iterator):
    for batch in iterator:
        for task_json in batch.column(0).to_pylist():
            yield from read_task(json.loads(task_json))


def read(spark, paths, **options):
    """A DataFrame of the records under ``paths`` (partition dirs, log dirs, or folders of
    them), with the schema of Spark's Kafka source. Options use Spark's Kafka names."""
    opts = Options(options)
    tasks = plan(paths, opts)
    schema = kafka_schema(opts.include_headers)
    payload = [(json.dumps(t),) for t in tasks]
    rdd = spark.sparkContext.parallelize(payload, max(1, len(payload)))
    frame = spark.createDataFrame(rdd, "task string")
    return frame.mapInArrow(_read_tasks_arrow, schema)


def _datasource_classes():
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class TaskPartition(InputPartition):
        def __init__(self, task_json):
            super().__init__(task_json)
            self.task_json = task_json

    class KafkaLogReader(DataSourceReader):
        def __init__(self, options):
            self.options = options

        def partitions(self):
            opts = dict(self.options)
            paths = _paths_option(opts)
            return [TaskPartition(json.dumps(t)) for t in plan(paths, Options(opts))]

        def read(self, partition):
            yield from read_task(json.loads(partition.task_json))

    class KafkaLogDataSource(DataSource):
        """``spark.read.format("kafkalog").load(path)``."""

        @classmethod
        def name(cls):
            return "kafkalog"

        def schema(self):
            return kafka_schema(Options(dict(self.options)).include_headers)

        def reader(self, schema):
            return KafkaLogReader(self.options)

    return KafkaLogDataSource


def _paths_option(opts):
    paths = opts.pop("path", None) or opts.pop("paths", None)
    opts.pop("paths", None)
    if not paths:
        raise ValueError("give a path: spark.read.format('kafkalog').load(path)")
    if isinstance(paths, str):
        if paths.startswith("["):
            return json.loads(paths)
        return [p for p in paths.split(",") if p]
    return list(paths)


def register(spark):
    """Register the ``kafkalog`` data source with a SparkSession."""
    spark.dataSource.register(_datasource_classes())
