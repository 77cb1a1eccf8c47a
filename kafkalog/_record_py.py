"""Twin of ``_record.pxi``: Record objects made from decoded columns."""
import numpy as np

from kafkalog._layout import BATCH_DTYPE, RECORD_DTYPE, HEADER_DTYPE, LOG_OVERHEAD
from kafkalog.errors import CorruptRecordError
from kafkalog._common_py import _V2_MIN_SIZE, _V2_HEADER
from kafkalog._decode_py import check_batches, decode_v2_records


_FIELDS = ("offset", "timestamp", "timestamp_type", "key", "value", "headers")


class Record:
    """One record: ``offset``, ``timestamp`` (ms), ``timestamp_type``, ``key``, ``value``
    (bytes or None) and ``headers`` (tuple of ``(str, bytes | None)``).

    Construct one for appends as ``Record(key=..., value=..., timestamp=None, headers=())``;
    a timestamp of None means "now" when the batch is built.
    """
    # Fields are properties over private slots, with no deleter: as the compiled Record's
    # read-only members, they cannot be deleted, even through the descriptor.
    __slots__ = tuple("_" + name for name in _FIELDS)

    def __init__(self, key=None, value=None, timestamp=None, headers=(), offset=None,
                 timestamp_type=0):
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.headers = tuple(headers)
        self.offset = offset
        self.timestamp_type = timestamp_type

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in _FIELDS)

    def __hash__(self):
        return hash((self.offset, self.timestamp, self.key, self.value))

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r:.60}, headers={self.headers!r:.60})")


def _field(name):
    slot = getattr(Record, "_" + name)
    return property(slot.__get__, slot.__set__)


for _name in _FIELDS:
    setattr(Record, _name, _field(_name))


def _check_spans(records, headers, length):
    """See ``_core._check_spans``: every span of ``records`` and their header rows inside a
    buffer of ``length`` bytes, else a ValueError naming the first record that is not."""
    for i, r in enumerate(records):
        for pos, n in ((int(r["key_pos"]), int(r["key_len"])),
                       (int(r["value_pos"]), int(r["value_len"]))):
            if n > 0 and (pos < 0 or pos + n > length):
                raise ValueError(f"record {i} lies outside the buffer")
        first, count = int(r["header_start"]), int(r["header_count"])
        if count:
            if count < 0 or first < 0 or first + count > len(headers):
                raise ValueError(f"record {i} has headers outside the header rows")
            for h in headers[first:first + count]:
                key_pos, key_len = int(h["key_pos"]), int(h["key_len"])
                value_pos, value_len = int(h["value_pos"]), int(h["value_len"])
                if key_len < 0 or key_pos < 0 or key_pos + key_len > length or \
                        (value_len > 0 and (value_pos < 0 or value_pos + value_len > length)):
                    raise ValueError(f"record {i} has a header outside the buffer")


def make_records(data, records, headers, timestamp_types, type_objects):
    """See ``_core.make_records`` (here the fields are copied at once)."""
    data = memoryview(data).cast("B")
    records = np.asarray(records, dtype=RECORD_DTYPE)
    headers = np.asarray(headers, dtype=HEADER_DTYPE)
    if len(timestamp_types) != len(records):
        raise ValueError("timestamp_types and records differ in length")
    _check_spans(records, headers, len(data))

    def span(pos, length):
        return None if length < 0 else bytes(data[pos:pos + length])

    out = []
    for r, t in zip(records, timestamp_types):
        heads = headers[int(r["header_start"]):int(r["header_start"]) + int(r["header_count"])] \
            if r["header_count"] else ()
        out.append(Record(
            key=span(int(r["key_pos"]), int(r["key_len"])),
            value=span(int(r["value_pos"]), int(r["value_len"])),
            timestamp=int(r["timestamp"]),
            headers=tuple((span(int(h["key_pos"]), int(h["key_len"])).decode("utf-8", "replace"),
                           span(int(h["value_pos"]), int(h["value_len"]))) for h in heads),
            offset=int(r["offset"]), timestamp_type=type_objects[int(t) + 1]))
    return out


def table_records(data, records, headers, timestamp_types, type_objects):
    """See ``_core.table_records`` (here the records are made at once)."""
    return iter(make_records(data, records, headers, timestamp_types, type_objects))


def batch_records(buf, row, type_objects):
    """See ``_core.batch_records`` (here through the columnar kernels)."""
    rows = np.asarray(row, dtype=BATCH_DTYPE).reshape(-1)
    if len(rows) != 1:
        raise ValueError("one walked batch row expected")
    pos, size = int(rows["position"][0]), int(rows["size"][0])
    if int(rows["magic"][0]) != 2 or pos < 0 or size < LOG_OVERHEAD + _V2_MIN_SIZE or \
            pos + size > len(buf):
        return None
    (base, _, _, _, _, attributes, delta, base_ts, max_ts, _, _, _,
     count) = _V2_HEADER.unpack_from(buf, pos)
    if attributes & 0x07 or check_batches(buf, rows, False)[0] != 1:
        return None
    try:
        records, headers = decode_v2_records(
            buf, np.array([pos + _V2_HEADER.size], np.int64), np.array([pos + size], np.int64),
            np.array([base], np.int64), np.array([base_ts], np.int64),
            np.array([count], np.int64), np.array([base + delta], np.int64))
    except CorruptRecordError:
        return None
    if attributes & 0x20 and (records["key_len"] < 4).any():
        return None
    kind = 0
    if attributes & 0x08:
        records["timestamp"] = max_ts
        kind = 1
    return iter(make_records(buf, records, headers, np.full(len(records), kind, np.int8),
                             type_objects))


def fetch_records(buf, batches, rows, whole, type_objects, fallback):
    """See ``_core.fetch_records``."""
    batches = np.asarray(batches, dtype=BATCH_DTYPE)
    rows = np.asarray(rows, dtype=np.int64)
    if len(whole) != len(rows):
        raise ValueError("rows and whole differ in length")
    for index in rows.tolist():
        if index < 0 or index >= len(batches):
            raise ValueError(f"row {index} is not a batch of the walk")
    return _fetch_records(buf, batches, rows.tolist(), whole, type_objects, fallback)


def _fetch_records(buf, batches, rows, whole, type_objects, fallback):
    for index, plain in zip(rows, whole):
        made = batch_records(buf, batches[index], type_objects) if plain else None
        yield from (fallback(index) if made is None else made)


def chained(iterables):
    """See ``_core.chained`` (a generator: "already executing" is its own)."""
    for iterable in iterables:
        yield from iterable


def span_bytes(buf, positions, lengths):
    """See ``_core.span_bytes``."""
    buf = memoryview(buf).cast("B")
    if len(lengths) != len(positions):
        raise ValueError("positions and lengths differ in length")
    out = []
    for i, (p, n) in enumerate(zip(positions, lengths)):
        p, n = int(p), int(n)
        if n < 0:
            out.append(None)
            continue
        if p < 0 or p + n > len(buf):
            raise ValueError(f"span {i} lies outside the buffer")
        out.append(bytes(buf[p:p + n]))
    return out
