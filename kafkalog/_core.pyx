# cython: language_level=3
"""Byte-level kernels: batch walking with CRC validation, record decoding, index search.

Each ``def`` here has a pure-Python twin of the same signature in ``_core_py.py``; callers get
one or the other through ``kafkalog._kernels``. The layout of the bytes is described once in
``_layout.py``; the structs filled here are declared in ``_core.pxd``.

Shape of every kernel: a ``def`` wrapper that checks arguments and turns status codes into
``kafkalog.errors`` exceptions, around a ``noexcept nogil`` loop over a pointer and a length.
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memset
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE

cimport numpy as cnp
import numpy as np
import zlib

from crc32c import crc32c as _crc32c

from kafkalog._layout import BATCH_DTYPE, RECORD_DTYPE, HEADER_DTYPE
from kafkalog.errors import CorruptRecordError, RecordTooLargeError

cnp.import_array()

# sizeof of the C structs, so tests can check them against the numpy dtypes in _layout.
STRUCT_SIZES = {"batch": sizeof(BatchInfo), "record": sizeof(RecordInfo),
                "header": sizeof(HeaderInfo)}

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* Big-endian loads through memcpy: no unaligned pointer casts. */
    static inline int64_t kl_i64(const unsigned char *p) {
        uint64_t v; memcpy(&v, p, 8); return (int64_t)__builtin_bswap64(v);
    }
    static inline int32_t kl_i32(const unsigned char *p) {
        uint32_t v; memcpy(&v, p, 4); return (int32_t)__builtin_bswap32(v);
    }
    static inline uint32_t kl_u32(const unsigned char *p) {
        uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v);
    }
    static inline int16_t kl_i16(const unsigned char *p) {
        uint16_t v; memcpy(&v, p, 2); return (int16_t)__builtin_bswap16(v);
    }
    """
    int64_t kl_i64(const unsigned char *p) noexcept nogil
    int32_t kl_i32(const unsigned char *p) noexcept nogil
    uint32_t kl_u32(const unsigned char *p) noexcept nogil
    int16_t kl_i16(const unsigned char *p) noexcept nogil


# Offsets of the v2 batch header fields (see the table in _layout.py).
cdef enum:
    B_BASE_OFFSET = 0
    B_LENGTH = 8
    B_LEADER_EPOCH = 12
    B_MAGIC = 16
    B_CRC = 17
    B_ATTRIBUTES = 21
    B_LAST_OFFSET_DELTA = 23
    B_BASE_TIMESTAMP = 27
    B_MAX_TIMESTAMP = 35
    B_PRODUCER_ID = 43
    B_PRODUCER_EPOCH = 51
    B_BASE_SEQUENCE = 53
    B_RECORD_COUNT = 57
    B_RECORDS = 61

# Legacy entry fields.
cdef enum:
    L_CRC = 12
    L_MAGIC = 16
    L_ATTRIBUTES = 17
    L_TIMESTAMP = 18

cdef enum:
    LOG_OVERHEAD = 12
    HEADER_UP_TO_MAGIC = 17
    V2_MIN_SIZE = 49        # batchLength of an empty v2 batch
    V0_MIN_SIZE = 14
    V1_MIN_SIZE = 22
    MIN_RECORD_SIZE = 7     # length, attributes, ts delta, offset delta, key, value, header count

# Walk status (mirrors _layout.WALK_*).
cdef enum:
    WALK_END = 0
    WALK_PARTIAL = 1
    WALK_CORRUPT = 2
    WALK_INVALID = 3

# Why a walk found corruption.
cdef enum:
    E_NONE = 0
    E_SIZE_BELOW_OVERHEAD = 1
    E_V2_TOO_SMALL = 2
    E_V1_TOO_SMALL = 3
    E_BAD_MAGIC = 4

# Record decode errors.
cdef enum:
    R_OK = 0
    R_VARINT = 1
    R_LENGTH = 2
    R_TRUNCATED = 3
    R_HEADER_COUNT = 4
    R_HEADER_KEY = 5
    R_SIZE_MISMATCH = 6
    R_COUNT = 7
    R_REMAINING = 8
    R_NOMEM = 9

_RECORD_ERRORS = {
    R_VARINT: "varint is too long or runs past the end of the record",
    R_LENGTH: "invalid record length",
    R_TRUNCATED: "a key, value or header runs past the end of the record",
    R_HEADER_COUNT: "invalid negative number of record headers",
    R_HEADER_KEY: "invalid negative header key size",
    R_SIZE_MISMATCH: "record length does not match the bytes its fields use",
    R_COUNT: "record count does not fit the batch",
    R_REMAINING: "incorrect declared batch size, records still remaining",
}


# ----------------------------------------------------------------------------------------------
# Batch walk

cdef inline Py_ssize_t _hop(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                            Py_ssize_t max_batches, int *status, int *err,
                            Py_ssize_t *stop) noexcept nogil:
    """Count the entries in [pos, end) by hopping over their size fields."""
    cdef Py_ssize_t n = 0
    cdef int32_t size
    cdef int8_t magic
    while True:
        if max_batches >= 0 and n >= max_batches:
            status[0] = WALK_END
            break
        if end - pos <= HEADER_UP_TO_MAGIC:
            status[0] = WALK_END if end == pos else WALK_PARTIAL
            break
        size = kl_i32(p + pos + B_LENGTH)
        if size < V0_MIN_SIZE:
            status[0] = WALK_CORRUPT
            err[0] = E_SIZE_BELOW_OVERHEAD
            break
        if <Py_ssize_t>size > end - pos - LOG_OVERHEAD:
            status[0] = WALK_PARTIAL
            break
        magic = <int8_t>p[pos + B_MAGIC]
        if magic == 2:
            if size < V2_MIN_SIZE:
                status[0] = WALK_CORRUPT
                err[0] = E_V2_TOO_SMALL
                break
        elif magic == 1:
            if size < V1_MIN_SIZE:
                status[0] = WALK_CORRUPT
                err[0] = E_V1_TOO_SMALL
                break
        elif magic != 0:
            status[0] = WALK_CORRUPT
            err[0] = E_BAD_MAGIC
            break
        n += 1
        pos += LOG_OVERHEAD + size
    stop[0] = pos
    return n


cdef inline void _fill(const unsigned char *p, Py_ssize_t pos, Py_ssize_t n,
                       BatchInfo *out) noexcept nogil:
    cdef Py_ssize_t i
    cdef const unsigned char *b
    cdef BatchInfo *o
    for i in range(n):
        b = p + pos
        o = out + i
        o.position = pos
        o.size = kl_i32(b + B_LENGTH) + LOG_OVERHEAD
        o.magic = <int8_t>b[B_MAGIC]
        o.crc_valid = -1
        if o.magic == 2:
            o.base_offset = kl_i64(b + B_BASE_OFFSET)
            o.partition_leader_epoch = kl_i32(b + B_LEADER_EPOCH)
            o.crc = kl_u32(b + B_CRC)
            o.attributes = kl_i16(b + B_ATTRIBUTES)
            o.last_offset = o.base_offset + kl_i32(b + B_LAST_OFFSET_DELTA)
            o.base_timestamp = kl_i64(b + B_BASE_TIMESTAMP)
            o.max_timestamp = kl_i64(b + B_MAX_TIMESTAMP)
            o.producer_id = kl_i64(b + B_PRODUCER_ID)
            o.producer_epoch = kl_i16(b + B_PRODUCER_EPOCH)
            o.base_sequence = kl_i32(b + B_BASE_SEQUENCE)
            o.record_count = kl_i32(b + B_RECORD_COUNT)
        else:
            o.base_offset = kl_i64(b + B_BASE_OFFSET)
            o.last_offset = o.base_offset
            o.partition_leader_epoch = -1
            o.crc = kl_u32(b + L_CRC)
            o.attributes = b[L_ATTRIBUTES]
            if o.magic == 1:
                o.base_timestamp = kl_i64(b + L_TIMESTAMP)
            else:
                o.base_timestamp = -1
            o.max_timestamp = o.base_timestamp
            o.producer_id = -1
            o.producer_epoch = -1
            o.base_sequence = -1
            o.record_count = -1
        pos += o.size


def walk_batches(const unsigned char[::1] buf, Py_ssize_t start=0, Py_ssize_t end=-1,
                 bint validate_crc=True, bint stop_on_invalid=False,
                 Py_ssize_t max_batches=-1):
    """Walk the record batches (or legacy entries) in ``buf[start:end]``.

    Returns
    -------
    (batches, status, stop_position, message)
        ``batches``: array of ``BATCH_DTYPE`` (positions are indexes into ``buf``);
        ``status``: one of ``_layout.WALK_*``; ``stop_position``: where the walk stopped;
        ``message``: why, for ``WALK_CORRUPT`` and ``WALK_INVALID``, else None.
        ``crc_valid`` is 1/0, or -1 when ``validate_crc`` is false.
    """
    cdef Py_ssize_t length = buf.shape[0]
    if end < 0 or end > length:
        end = length
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside the buffer [0, {end}]")
    cdef const unsigned char *p = &buf[0] if length > 0 else NULL
    cdef int status = WALK_END
    cdef int err = E_NONE
    cdef Py_ssize_t stop = start
    cdef Py_ssize_t n = 0
    if length > 0:
        with nogil:
            n = _hop(p, start, end, max_batches, &status, &err, &stop)
    batches = np.empty(n, dtype=BATCH_DTYPE)
    cdef BatchInfo *out = <BatchInfo *>cnp.PyArray_DATA(batches)
    if n > 0:
        with nogil:
            _fill(p, start, n, out)
    message = None
    if status == WALK_CORRUPT:
        message = _walk_error(err, p, stop)
    if validate_crc and n > 0:
        n_valid = _check_crcs(buf, out, n, stop_on_invalid)
        if n_valid < n:
            stop = out[n_valid].position
            batches = batches[:n_valid]
            status = WALK_INVALID
            message = "record is corrupt (CRC mismatch)"
    return batches, status, stop, message


cdef object _walk_error(int err, const unsigned char *p, Py_ssize_t pos):
    cdef int32_t size = kl_i32(p + pos + B_LENGTH)
    if err == E_SIZE_BELOW_OVERHEAD:
        return f"record size {size} is smaller than the minimum record overhead ({V0_MIN_SIZE})"
    if err == E_V2_TOO_SMALL:
        return f"batch size {size} is smaller than the v2 batch header ({V2_MIN_SIZE})"
    if err == E_V1_TOO_SMALL:
        return f"record size {size} is smaller than the v1 record overhead ({V1_MIN_SIZE})"
    return f"unknown magic byte {<int8_t>p[pos + B_MAGIC]}"


cdef Py_ssize_t _check_crcs(const unsigned char[::1] buf, BatchInfo *out, Py_ssize_t n,
                            bint stop_on_invalid) except -1:
    """Set crc_valid on every batch; with stop_on_invalid, return the index of the first bad one."""
    cdef Py_ssize_t i, pos, end
    cdef uint32_t computed
    view = memoryview(buf)
    for i in range(n):
        pos = out[i].position
        end = pos + out[i].size
        if out[i].magic == 2:
            computed = _crc32c(view[pos + B_ATTRIBUTES:end])
        else:
            computed = zlib.crc32(view[pos + L_MAGIC:end])
        out[i].crc_valid = computed == out[i].crc
        if stop_on_invalid and not out[i].crc_valid:
            return i
    return n


# ----------------------------------------------------------------------------------------------
# Record decode

cdef inline int _varint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end,
                        int max_bytes, int64_t *value) noexcept nogil:
    """Zig-zag varint of at most ``max_bytes`` bytes (5 for int32, 10 for int64), bounded by end."""
    cdef uint64_t raw = 0
    cdef int shift = 0
    cdef int i = 0
    cdef unsigned char b
    while True:
        if pos[0] >= end or i >= max_bytes:
            return R_VARINT
        b = p[pos[0]]
        pos[0] += 1
        raw |= (<uint64_t>(b & 0x7F)) << shift
        i += 1
        if not (b & 0x80):
            break
        shift += 7
    value[0] = <int64_t>(raw >> 1) ^ -(<int64_t>(raw & 1))
    return R_OK


cdef inline int _span(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end,
                      int64_t *span_pos, int32_t *span_len) noexcept nogil:
    """A varint length (negative = null) followed by that many bytes."""
    cdef int64_t n
    if _varint(p, pos, end, 5, &n) != R_OK:
        return R_VARINT
    if n < 0:
        span_pos[0] = pos[0]
        span_len[0] = -1
        return R_OK
    if n > end - pos[0]:
        return R_TRUNCATED
    span_pos[0] = pos[0]
    span_len[0] = <int32_t>n
    pos[0] += n
    return R_OK


cdef struct HeaderTable:
    HeaderInfo *rows
    Py_ssize_t count
    Py_ssize_t capacity


cdef inline int _push_header(HeaderTable *t) noexcept nogil:
    cdef Py_ssize_t cap
    cdef HeaderInfo *grown
    if t.count == t.capacity:
        cap = t.capacity * 2 if t.capacity > 0 else 64
        grown = <HeaderInfo *>realloc(t.rows, cap * sizeof(HeaderInfo))
        if grown == NULL:
            return R_NOMEM
        t.rows = grown
        t.capacity = cap
    t.count += 1
    return R_OK


cdef int _decode_region(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                        int64_t base_offset, int64_t base_timestamp, Py_ssize_t count,
                        RecordInfo *out, HeaderTable *headers,
                        Py_ssize_t *err_pos) noexcept nogil:
    cdef Py_ssize_t i, h, body_end, rec_start
    cdef int64_t length, ts_delta, off_delta, header_count
    cdef int rc
    cdef RecordInfo *r
    cdef HeaderInfo *hd
    for i in range(count):
        rec_start = pos
        err_pos[0] = pos
        r = out + i
        if _varint(p, &pos, end, 5, &length) != R_OK:
            return R_VARINT
        if length < MIN_RECORD_SIZE - 1 or length > end - pos:
            return R_LENGTH
        body_end = pos + length
        r.attributes = <int8_t>p[pos]
        pos += 1
        if _varint(p, &pos, body_end, 10, &ts_delta) != R_OK:
            return R_VARINT
        if _varint(p, &pos, body_end, 5, &off_delta) != R_OK:
            return R_VARINT
        r.offset = base_offset + off_delta
        r.timestamp = base_timestamp + ts_delta
        rc = _span(p, &pos, body_end, &r.key_pos, &r.key_len)
        if rc != R_OK:
            return rc
        rc = _span(p, &pos, body_end, &r.value_pos, &r.value_len)
        if rc != R_OK:
            return rc
        if _varint(p, &pos, body_end, 5, &header_count) != R_OK:
            return R_VARINT
        if header_count < 0 or header_count > body_end - pos:
            return R_HEADER_COUNT
        r.header_start = headers.count
        r.header_count = <int32_t>header_count
        for h in range(header_count):
            if _push_header(headers) != R_OK:
                return R_NOMEM
            hd = headers.rows + headers.count - 1
            rc = _span(p, &pos, body_end, &hd.key_pos, &hd.key_len)
            if rc != R_OK:
                return rc
            if hd.key_len < 0:
                return R_HEADER_KEY
            rc = _span(p, &pos, body_end, &hd.value_pos, &hd.value_len)
            if rc != R_OK:
                return rc
        if pos != body_end:
            return R_SIZE_MISMATCH
        r.size = <int32_t>(body_end - rec_start)
    err_pos[0] = pos
    if pos != end:
        return R_REMAINING
    return R_OK


def decode_v2_records(const unsigned char[::1] buf, const int64_t[::1] starts,
                      const int64_t[::1] ends, const int64_t[::1] base_offsets,
                      const int64_t[::1] base_timestamps, const int64_t[::1] counts):
    """Decode the records of v2 batches whose (decompressed) record bytes are ``buf[start:end]``.

    One region per batch: its record bytes, base offset, base timestamp and declared record count.

    Returns
    -------
    (records, headers)
        ``records``: ``RECORD_DTYPE`` array, one row per record in region order, positions are
        indexes into ``buf``; ``headers``: ``HEADER_DTYPE`` array that ``header_start`` /
        ``header_count`` point into.

    Raises
    ------
    CorruptRecordError
        With ``position`` = the buffer position of the record at fault and ``region`` = the
        index of its region.
    """
    cdef Py_ssize_t n_regions = starts.shape[0]
    cdef Py_ssize_t length = buf.shape[0]
    if not (ends.shape[0] == base_offsets.shape[0] == base_timestamps.shape[0]
            == counts.shape[0] == n_regions):
        raise ValueError("region arrays differ in length")
    cdef Py_ssize_t i, total = 0
    for i in range(n_regions):
        if not (0 <= starts[i] <= ends[i] <= length):
            raise ValueError(f"region {i} [{starts[i]}, {ends[i]}) outside the buffer")
        if counts[i] < 0 or counts[i] * MIN_RECORD_SIZE > ends[i] - starts[i]:
            exc = CorruptRecordError(f"{_RECORD_ERRORS[R_COUNT]} ({counts[i]} records in "
                                     f"{ends[i] - starts[i]} bytes)", position=starts[i])
            exc.region = i
            raise exc
        total += counts[i]
    records = np.empty(total, dtype=RECORD_DTYPE)
    cdef RecordInfo *out = <RecordInfo *>cnp.PyArray_DATA(records)
    cdef const unsigned char *p = &buf[0] if length > 0 else NULL
    cdef HeaderTable table
    table.rows = NULL
    table.count = 0
    table.capacity = 0
    cdef int rc = R_OK
    cdef Py_ssize_t err_pos = 0
    cdef Py_ssize_t row = 0
    with nogil:
        for i in range(n_regions):
            rc = _decode_region(p, starts[i], ends[i], base_offsets[i], base_timestamps[i],
                                counts[i], out + row, &table, &err_pos)
            if rc != R_OK:
                break
            row += counts[i]
    try:
        if rc == R_NOMEM:
            raise MemoryError()
        if rc != R_OK:
            exc = CorruptRecordError(_RECORD_ERRORS[rc], position=err_pos)
            exc.region = i
            raise exc
        headers = np.empty(table.count, dtype=HEADER_DTYPE)
        if table.count:
            memcpy(cnp.PyArray_DATA(headers), table.rows, table.count * sizeof(HeaderInfo))
    finally:
        free(table.rows)
    return records, headers


def decode_legacy_records(const unsigned char[::1] buf, batches):
    """Key and value spans of walked legacy entries (``BATCH_DTYPE`` rows with magic 0/1).

    Returns a ``RECORD_DTYPE`` array: offset and timestamp as stored, size = the entry's size.
    Raises CorruptRecordError when a key or value length runs past its entry.
    """
    cdef Py_ssize_t n = len(batches)
    cdef cnp.ndarray arr = np.ascontiguousarray(batches, dtype=BATCH_DTYPE)
    cdef const BatchInfo *b = <const BatchInfo *>cnp.PyArray_DATA(arr)
    records = np.empty(n, dtype=RECORD_DTYPE)
    cdef RecordInfo *out = <RecordInfo *>cnp.PyArray_DATA(records)
    cdef Py_ssize_t length = buf.shape[0]
    cdef const unsigned char *p = &buf[0] if length > 0 else NULL
    cdef Py_ssize_t i, pos, end
    cdef int32_t klen, vlen
    cdef Py_ssize_t bad = -1
    for i in range(n):
        if b[i].magic > 1 or b[i].position < 0 or b[i].position + b[i].size > length:
            raise ValueError(f"entry {i} is not a legacy entry inside the buffer")
    with nogil:
        for i in range(n):
            pos = b[i].position
            end = pos + b[i].size
            pos += L_TIMESTAMP + (8 if b[i].magic == 1 else 0)
            out[i].offset = b[i].base_offset
            out[i].timestamp = b[i].base_timestamp
            out[i].size = b[i].size
            out[i].attributes = <int8_t>b[i].attributes
            out[i].header_start = 0
            out[i].header_count = 0
            klen = kl_i32(p + pos)
            pos += 4
            if klen > end - pos - 4:
                bad = i
                break
            out[i].key_pos = pos
            out[i].key_len = klen if klen >= 0 else -1
            if klen > 0:
                pos += klen
            vlen = kl_i32(p + pos)
            pos += 4
            if vlen > end - pos:
                bad = i
                break
            out[i].value_pos = pos
            out[i].value_len = vlen if vlen >= 0 else -1
    if bad >= 0:
        raise CorruptRecordError("legacy record key or value runs past its entry",
                                 position=b[bad].position)
    return records


# ----------------------------------------------------------------------------------------------
# Index search (hot/cold "warm entries" binary search, FORMAT.md)

cdef enum:
    OFFSET_KEY = 0
    OFFSET_VALUE = 1
    TIME_KEY = 2
    TIME_VALUE = 3

cdef inline int _entry_size(int field) noexcept nogil:
    return 8 if field <= OFFSET_VALUE else 12


cdef inline int64_t _entry_value(const unsigned char *p, Py_ssize_t slot, int field) noexcept nogil:
    if field == OFFSET_KEY:
        return kl_i32(p + slot * 8)
    if field == OFFSET_VALUE:
        return kl_i32(p + slot * 8 + 4)
    if field == TIME_KEY:
        return kl_i64(p + slot * 12)
    return kl_i32(p + slot * 12 + 8)


cdef inline Py_ssize_t _binary_search(const unsigned char *p, Py_ssize_t entries, int field,
                                      int64_t target, Py_ssize_t lo, Py_ssize_t hi,
                                      bint upper) noexcept nogil:
    cdef Py_ssize_t mid
    cdef int64_t found
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        found = _entry_value(p, mid, field)
        if found > target:
            hi = mid - 1
        elif found < target:
            lo = mid
        else:
            return mid
    if not upper:
        return lo
    return -1 if lo == entries - 1 else lo + 1


cdef inline Py_ssize_t _search(const unsigned char *p, Py_ssize_t entries, int field,
                               int64_t target, bint upper) noexcept nogil:
    """Largest slot with value <= target (upper: smallest slot with value >= target); -1 if none."""
    if entries == 0:
        return -1
    cdef Py_ssize_t warm = 8192 // _entry_size(field)
    cdef Py_ssize_t first_hot = entries - 1 - warm
    if first_hot < 0:
        first_hot = 0
    if _entry_value(p, first_hot, field) < target:
        return _binary_search(p, entries, field, target, first_hot, entries - 1, upper)
    if _entry_value(p, 0, field) > target:
        return 0 if upper else -1
    return _binary_search(p, entries, field, target, 0, first_hot, upper)


cdef const unsigned char *_index_pointer(const unsigned char[::1] buf, Py_ssize_t entries,
                                         int field) except? NULL:
    if field < OFFSET_KEY or field > TIME_VALUE:
        raise ValueError(f"unknown index field {field}")
    if entries < 0 or entries * _entry_size(field) > buf.shape[0]:
        raise ValueError(f"{entries} entries do not fit a buffer of {buf.shape[0]} bytes")
    return &buf[0] if buf.shape[0] > 0 else NULL


def index_search(const unsigned char[::1] buf, Py_ssize_t entries, int field, int64_t target,
                 bint upper=False):
    """Slot of the largest entry <= ``target`` in ``field`` (``upper``: smallest >= target).

    ``buf`` holds ``entries`` index entries from its start; ``field`` is one of
    ``_layout.OFFSET_KEY``, ``OFFSET_VALUE``, ``TIME_KEY``, ``TIME_VALUE`` (offsets are relative
    to the index's base offset). Returns -1 when there is no such entry.
    """
    cdef const unsigned char *p = _index_pointer(buf, entries, field)
    return _search(p, entries, field, target, upper)


def index_search_many(const unsigned char[::1] buf, Py_ssize_t entries, int field,
                      const int64_t[::1] targets, bint upper=False):
    """``index_search`` for every target; returns an int64 array of slots (-1 = none)."""
    cdef const unsigned char *p = _index_pointer(buf, entries, field)
    cdef Py_ssize_t i, n = targets.shape[0]
    slots = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] out = slots
    with nogil:
        for i in range(n):
            out[i] = _search(p, entries, field, targets[i], upper)
    return slots


def index_entries(const unsigned char[::1] buf, Py_ssize_t entries, int field_kind):
    """All entries as two int64 arrays: (relative offsets, positions) for an offset index
    (``field_kind`` OFFSET_KEY) or (timestamps, relative offsets) for a time index (TIME_KEY)."""
    if field_kind not in (OFFSET_KEY, TIME_KEY):
        raise ValueError(f"field_kind must be OFFSET_KEY or TIME_KEY, not {field_kind}")
    cdef const unsigned char *p = _index_pointer(buf, entries, field_kind)
    keys = np.empty(entries, dtype=np.int64)
    values = np.empty(entries, dtype=np.int64)
    cdef int64_t[::1] k = keys
    cdef int64_t[::1] v = values
    cdef Py_ssize_t i
    with nogil:
        for i in range(entries):
            k[i] = _entry_value(p, i, field_kind)
            v[i] = _entry_value(p, i, field_kind + 1)
    return keys, values


def index_valid_entries(const unsigned char[::1] buf, int entry_size):
    """Entries up to and including the last one that is not all zero.

    A crashed broker leaves the active segment's index at its preallocated size with a zero
    tail; this finds where the written entries end. A trailing partial entry is ignored.
    """
    if entry_size <= 0:
        raise ValueError("entry_size must be positive")
    cdef Py_ssize_t n = buf.shape[0] // entry_size
    cdef Py_ssize_t end = n * entry_size
    cdef const unsigned char *p = &buf[0] if buf.shape[0] > 0 else NULL
    cdef Py_ssize_t i = end
    cdef uint64_t word
    with nogil:
        # Eight bytes at a time while aligned to the end, then byte by byte.
        while i >= 8:
            memcpy(&word, p + i - 8, 8)
            if word != 0:
                break
            i -= 8
        while i > 0 and p[i - 1] == 0:
            i -= 1
    return (i + entry_size - 1) // entry_size


def index_lookup(object buf, Py_ssize_t entries, int field, int64_t target, bint upper=False):
    """``index_search`` plus the entry found: ``(slot, first, second)`` where (first, second)
    is (relative offset, position) for an offset index and (timestamp, relative offset) for a
    time index; ``(-1, 0, 0)`` when there is no such entry.

    Takes the buffer through a bare ``Py_buffer`` rather than a typed memoryview: this is the
    one-lookup-per-call path, where creating a memoryview object would cost more than the search.
    """
    if field < OFFSET_KEY or field > TIME_VALUE:
        raise ValueError(f"unknown index field {field}")
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    cdef const unsigned char *p = <const unsigned char *>view.buf
    cdef Py_ssize_t slot
    cdef int kind = OFFSET_KEY if field <= OFFSET_VALUE else TIME_KEY
    try:
        if entries < 0 or entries * _entry_size(field) > view.len:
            raise ValueError(f"{entries} entries do not fit a buffer of {view.len} bytes")
        slot = _search(p, entries, field, target, upper)
        if slot < 0:
            return (-1, 0, 0)
        return (slot, _entry_value(p, slot, kind), _entry_value(p, slot, kind + 1))
    finally:
        PyBuffer_Release(&view)


# ----------------------------------------------------------------------------------------------
# Segment scans

def find_batch(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t end,
               int64_t target_offset):
    """First batch in ``buf[start:end]`` whose last offset >= ``target_offset``.

    Hops over batch headers only (no CRC, no records), as Kafka's searchForOffsetWithSize.
    Returns ``(position, size)``, or ``(-1, 0)`` when no whole batch qualifies.
    """
    cdef Py_ssize_t length = buf.shape[0]
    if end < 0 or end > length:
        end = length
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside the buffer [0, {end}]")
    cdef const unsigned char *p = &buf[0] if length > 0 else NULL
    cdef Py_ssize_t pos = start
    cdef int32_t size
    cdef int64_t last
    cdef Py_ssize_t found = -1, found_size = 0
    with nogil:
        while end - pos > HEADER_UP_TO_MAGIC:
            size = kl_i32(p + pos + B_LENGTH)
            if size < V0_MIN_SIZE or <Py_ssize_t>size > end - pos - LOG_OVERHEAD:
                break
            if p[pos + B_MAGIC] == 2:
                if size < V2_MIN_SIZE:
                    break
                last = kl_i64(p + pos) + kl_i32(p + pos + B_LAST_OFFSET_DELTA)
            else:
                last = kl_i64(p + pos)
            if last >= target_offset:
                found = pos
                found_size = size + LOG_OVERHEAD
                break
            pos += LOG_OVERHEAD + size
    return (found, found_size)


def index_entries_for(batches, int64_t interval_bytes, int64_t start_position=0):
    """The offset and time index entries Kafka's recovery writes for walked ``batches``.

    An offset index entry (batch last offset, batch position) is written when more than
    ``interval_bytes`` have passed since the previous entry (positions relative to
    ``start_position``); each comes with a time index entry (max timestamp so far, its offset),
    kept only when its timestamp grows. Returns ``(offset_entries, time_entries, max_ts,
    offset_of_max_ts)``: int64 arrays of shape (n, 2) and the final max timestamp / offset
    (-1, -1 when no batch has a timestamp).
    """
    cdef cnp.ndarray arr = np.ascontiguousarray(batches, dtype=BATCH_DTYPE)
    cdef const BatchInfo *b = <const BatchInfo *>cnp.PyArray_DATA(arr)
    cdef Py_ssize_t n = arr.shape[0]
    offset_entries = np.empty((n, 2), dtype=np.int64)
    time_entries = np.empty((n, 2), dtype=np.int64)
    cdef int64_t[:, ::1] oe = offset_entries
    cdef int64_t[:, ::1] te = time_entries
    cdef Py_ssize_t i, n_off = 0, n_time = 0
    cdef int64_t valid_bytes = 0, last_entry = 0
    cdef int64_t max_ts = -1, max_ts_offset = -1, last_time = -1
    with nogil:
        for i in range(n):
            if b[i].max_timestamp > max_ts:
                max_ts = b[i].max_timestamp
                max_ts_offset = b[i].last_offset
            if valid_bytes - last_entry > interval_bytes:
                oe[n_off, 0] = b[i].last_offset
                oe[n_off, 1] = start_position + valid_bytes
                n_off += 1
                if max_ts > last_time:
                    te[n_time, 0] = max_ts
                    te[n_time, 1] = max_ts_offset
                    n_time += 1
                    last_time = max_ts
                last_entry = valid_bytes
            valid_bytes += b[i].size
    return offset_entries[:n_off], time_entries[:n_time], max_ts, max_ts_offset


# ----------------------------------------------------------------------------------------------
# Append preparation

cdef enum:
    A_OK = 0
    A_PARTIAL = 1
    A_TOO_SMALL = 2
    A_MAGIC = 3
    A_TOO_LARGE = 4
    A_CRC = 5
    A_RECORDS = 6
    A_OFFSETS = 7
    A_EMPTY = 8

APPEND_HAS_PRODUCER = 1
APPEND_HAS_COMPRESSED = 2


def prepare_append(unsigned char[::1] buf, int64_t assign_from, int64_t max_batch_size,
                   int64_t log_append_time):
    """Validate the v2 batches of an append in one pass and, when ``assign_from`` >= 0, give
    them offsets from there (rewriting base offsets in ``buf``); with ``log_append_time`` >= 0
    set LogAppendTime (attribute, max timestamp, CRC again).

    Checks: whole batches only, magic 2, size <= ``max_batch_size``, CRC, increasing offsets,
    and (for uncompressed batches) every record's structure.

    Returns ``(batches, first_offset, last_offset, max_timestamp, offset_of_max_timestamp,
    record_count, flags)``; flags has ``APPEND_HAS_PRODUCER`` when a batch carries a producer
    id and ``APPEND_HAS_COMPRESSED`` when a batch's records still need decoding to be checked.
    Raises CorruptRecordError or RecordTooLargeError with the buffer position at fault.
    """
    cdef Py_ssize_t length = buf.shape[0]
    cdef unsigned char *p = &buf[0] if length > 0 else NULL
    cdef Py_ssize_t pos = 0, n = 0, size
    cdef int64_t next_offset = assign_from, base, last = -1, prev_last = -1, first = -1
    cdef int64_t max_ts = -1, off_max = -1, count = 0, ts
    cdef int32_t delta, records
    cdef int16_t attributes
    cdef int flags = 0, status = A_OK
    cdef uint32_t crc
    cdef RecordInfo *scratch = NULL
    cdef HeaderTable table
    cdef Py_ssize_t err_pos = 0
    table.rows = NULL
    table.count = 0
    table.capacity = 0
    view = memoryview(buf)
    try:
        while pos < length:
            if length - pos < LOG_OVERHEAD + V2_MIN_SIZE:
                status = A_PARTIAL if length - pos < HEADER_UP_TO_MAGIC or \
                    kl_i32(p + pos + B_LENGTH) >= V2_MIN_SIZE else A_TOO_SMALL
                break
            size = kl_i32(p + pos + B_LENGTH)
            if size < V2_MIN_SIZE:
                status = A_TOO_SMALL
                break
            if size > length - pos - LOG_OVERHEAD:
                status = A_PARTIAL
                break
            if p[pos + B_MAGIC] != 2:
                status = A_MAGIC
                break
            size += LOG_OVERHEAD
            if size > max_batch_size:
                status = A_TOO_LARGE
                break
            crc = _crc32c(view[pos + B_ATTRIBUTES:pos + size])
            if crc != kl_u32(p + pos + B_CRC):
                status = A_CRC
                break
            attributes = kl_i16(p + pos + B_ATTRIBUTES)
            delta = kl_i32(p + pos + B_LAST_OFFSET_DELTA)
            records = kl_i32(p + pos + B_RECORD_COUNT)
            base = kl_i64(p + pos)
            if delta < 0 or records < 0:
                status = A_RECORDS
                break
            if attributes & 0x07:
                flags |= APPEND_HAS_COMPRESSED
            elif records > 0:
                if records * MIN_RECORD_SIZE > size - B_RECORDS:
                    status = A_RECORDS
                    break
                scratch = <RecordInfo *>realloc(scratch, records * sizeof(RecordInfo))
                if scratch == NULL:
                    raise MemoryError()
                table.count = 0
                if _decode_region(p, pos + B_RECORDS, pos + size, base, 0, records, scratch,
                                  &table, &err_pos) != R_OK:
                    status = A_RECORDS
                    break
            if kl_i64(p + pos + B_PRODUCER_ID) >= 0:
                flags |= APPEND_HAS_PRODUCER
            if next_offset >= 0:
                base = next_offset
                p[pos] = (base >> 56) & 0xFF
                p[pos + 1] = (base >> 48) & 0xFF
                p[pos + 2] = (base >> 40) & 0xFF
                p[pos + 3] = (base >> 32) & 0xFF
                p[pos + 4] = (base >> 24) & 0xFF
                p[pos + 5] = (base >> 16) & 0xFF
                p[pos + 6] = (base >> 8) & 0xFF
                p[pos + 7] = base & 0xFF
                next_offset = base + delta + 1
            last = base + delta
            if n > 0 and base <= prev_last:
                status = A_OFFSETS
                break
            if n == 0:
                first = base
            if log_append_time >= 0:
                _set_log_append_time(p + pos, size, log_append_time, view[pos + B_ATTRIBUTES:pos + size])
            ts = kl_i64(p + pos + B_MAX_TIMESTAMP)
            if ts > max_ts:
                max_ts = ts
                off_max = last
            prev_last = last
            count += records
            n += 1
            pos += size
    finally:
        free(scratch)
        free(table.rows)
    if status != A_OK:
        _raise_append_error(status, p, pos, length, max_batch_size)
    if n == 0:
        raise CorruptRecordError("no record batch to append", position=0)
    return (n, first, last, max_ts, off_max, count, flags)


cdef void _put_u32(unsigned char *p, uint32_t v) noexcept:
    p[0] = (v >> 24) & 0xFF
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF


cdef int _set_log_append_time(unsigned char *b, Py_ssize_t size, int64_t now,
                              object crc_view) except -1:
    cdef int16_t attributes = kl_i16(b + B_ATTRIBUTES) | 0x08
    cdef int i
    b[B_ATTRIBUTES] = (attributes >> 8) & 0xFF
    b[B_ATTRIBUTES + 1] = attributes & 0xFF
    for i in range(8):
        b[B_MAX_TIMESTAMP + i] = (now >> (56 - 8 * i)) & 0xFF
    _put_u32(b + B_CRC, _crc32c(crc_view))
    return 0


cdef int _raise_append_error(int status, const unsigned char *p, Py_ssize_t pos,
                             Py_ssize_t length, int64_t max_batch_size) except -1:
    cdef Py_ssize_t remaining = length - pos
    if status == A_PARTIAL:
        if remaining < HEADER_UP_TO_MAGIC:
            raise CorruptRecordError(f"{remaining} trailing bytes are too few for a batch",
                                     position=pos)
        raise CorruptRecordError(f"batch declares {kl_i32(p + pos + B_LENGTH)} bytes after its "
                                 f"length field but only {remaining - LOG_OVERHEAD} remain",
                                 position=pos)
    if status == A_TOO_SMALL:
        raise CorruptRecordError("batch is smaller than the v2 batch header", position=pos)
    if status == A_MAGIC:
        raise CorruptRecordError(f"only record batch v2 can be appended, not magic "
                                 f"{<int8_t>p[pos + B_MAGIC]}", position=pos)
    if status == A_TOO_LARGE:
        raise RecordTooLargeError(f"batch of {kl_i32(p + pos + B_LENGTH) + LOG_OVERHEAD} bytes "
                                  f"at position {pos} exceeds max.message.bytes {max_batch_size}")
    if status == A_CRC:
        raise CorruptRecordError("record is corrupt (CRC mismatch)", position=pos)
    if status == A_OFFSETS:
        raise CorruptRecordError("batch offsets do not increase", position=pos)
    raise CorruptRecordError("invalid records in batch", position=pos)


# ----------------------------------------------------------------------------------------------
# Gathering spans into Arrow-style columns

def gather_spans(const unsigned char[::1] buf, const int64_t[::1] positions,
                 const int32_t[::1] lengths):
    """Copy the spans ``buf[pos:pos+len]`` end to end, for an Arrow binary column.

    Returns ``(offsets, data, valid)``: int32 offsets (n + 1), the bytes, and a bool array
    that is False where a length is negative (a null).
    """
    cdef Py_ssize_t n = positions.shape[0], i
    cdef Py_ssize_t length = buf.shape[0]
    if lengths.shape[0] != n:
        raise ValueError("positions and lengths differ in length")
    cdef int64_t total = 0
    for i in range(n):
        if lengths[i] > 0:
            if positions[i] < 0 or positions[i] + lengths[i] > length:
                raise ValueError(f"span {i} lies outside the buffer")
            total += lengths[i]
    if total > 2**31 - 1:
        raise ValueError("spans exceed 2 GiB: split the input")
    offsets = np.empty(n + 1, dtype=np.int32)
    valid = np.empty(n, dtype=np.bool_)
    data = np.empty(total, dtype=np.uint8)
    cdef int32_t[::1] o = offsets
    cdef cnp.npy_bool[::1] v = valid
    cdef unsigned char *d = <unsigned char *>cnp.PyArray_DATA(data)
    cdef const unsigned char *p = &buf[0] if length > 0 else NULL
    cdef int64_t at = 0
    with nogil:
        for i in range(n):
            o[i] = <int32_t>at
            if lengths[i] >= 0:
                v[i] = 1
                if lengths[i] > 0:
                    memcpy(d + at, p + positions[i], lengths[i])
                    at += lengths[i]
            else:
                v[i] = 0
        o[n] = <int32_t>at
    return offsets, data, valid


# ----------------------------------------------------------------------------------------------
# Held index views: one lookup per Python call at the cost of a C call

cdef extern from *:
    """
    /* A 2-tuple of a tuple subclass (a namedtuple) without running its Python __new__. */
    static PyObject *kl_pair(PyObject *type, PyObject *a, PyObject *b) {
        PyObject *t = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, 2);
        if (t == NULL) return NULL;
        Py_INCREF(a); PyTuple_SET_ITEM(t, 0, a);
        Py_INCREF(b); PyTuple_SET_ITEM(t, 1, b);
        return t;
    }
    """
    object kl_pair(object type, object a, object b)


cdef class IndexView:
    """Holds a buffer view of an index mapping so that ``lookup`` costs one C call.

    ``kind`` is OFFSET_KEY (an offset index: ``lookup(offset)`` gives (offset, position), or
    (base_offset, 0) when no entry is low enough) or TIME_KEY (a time index: ``lookup(ts)``
    gives (timestamp, offset), or (-1, base_offset)). ``entries`` is kept up to date by the
    owning index; ``release()`` must be called before the mapping is closed or resized.
    """
    cdef Py_buffer _view
    cdef bint _held
    cdef public Py_ssize_t entries
    cdef int64_t _base
    cdef int _kind
    cdef object _result_type
    cdef object _base_obj

    def __cinit__(self, buf, Py_ssize_t entries, int64_t base_offset, int kind, result_type):
        if kind != OFFSET_KEY and kind != TIME_KEY:
            raise ValueError(f"kind must be OFFSET_KEY or TIME_KEY, not {kind}")
        PyObject_GetBuffer(buf, &self._view, PyBUF_SIMPLE)
        self._held = True
        self.entries = entries
        self._base = base_offset
        self._base_obj = base_offset
        self._kind = kind
        self._result_type = result_type

    def release(self):
        if self._held:
            PyBuffer_Release(&self._view)
            self._held = False
        self.entries = 0

    def __dealloc__(self):
        if self._held:
            PyBuffer_Release(&self._view)

    def lookup(self, int64_t target):
        """Largest entry <= ``target`` (see the class docstring)."""
        if not self._held:
            raise ValueError("index view released (the index was closed)")
        cdef Py_ssize_t n = self.entries
        cdef const unsigned char *p = <const unsigned char *>self._view.buf
        cdef Py_ssize_t slot
        if n * _entry_size(self._kind) > self._view.len:
            raise ValueError(f"{n} entries do not fit a buffer of {self._view.len} bytes")
        if self._kind == OFFSET_KEY:
            slot = _search(p, n, OFFSET_KEY, target - self._base, False)
            if slot < 0:
                return kl_pair(self._result_type, self._base_obj, 0)
            return kl_pair(self._result_type, self._base + _entry_value(p, slot, OFFSET_KEY),
                           _entry_value(p, slot, OFFSET_VALUE))
        slot = _search(p, n, TIME_KEY, target, False)
        if slot < 0:
            return kl_pair(self._result_type, -1, self._base_obj)
        return kl_pair(self._result_type, _entry_value(p, slot, TIME_KEY),
                       self._base + _entry_value(p, slot, TIME_VALUE))


def index_lookup_many(const unsigned char[::1] buf, Py_ssize_t entries, int kind,
                      int64_t base_offset, const int64_t[::1] targets):
    """``lookup`` for every target at once: two int64 arrays, (offsets, positions) for an
    offset index (``kind`` OFFSET_KEY) or (timestamps, offsets) for a time index (TIME_KEY),
    with the same not-found values as ``IndexView.lookup``.

    The keys are read once into native integers and searched with a branch-free binary
    search: the answer is the same as the hot/cold search's (entries are increasing).
    """
    if kind != OFFSET_KEY and kind != TIME_KEY:
        raise ValueError(f"kind must be OFFSET_KEY or TIME_KEY, not {kind}")
    cdef const unsigned char *p = _index_pointer(buf, entries, kind)
    cdef Py_ssize_t n = targets.shape[0], i, lo, half, half_step
    keys_arr = np.empty(entries, dtype=np.int64)
    cdef int64_t[::1] keys = keys_arr
    first = np.empty(n, dtype=np.int64)
    second = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] a = first
    cdef int64_t[::1] b = second
    cdef int64_t t, shift = base_offset if kind == OFFSET_KEY else 0
    with nogil:
        for i in range(entries):
            keys[i] = _entry_value(p, i, kind) + shift
        for i in range(n):
            t = targets[i]
            if entries == 0 or keys[0] > t:
                if kind == OFFSET_KEY:
                    a[i] = base_offset
                    b[i] = 0
                else:
                    a[i] = -1
                    b[i] = base_offset
                continue
            # largest slot with keys[slot] <= t
            lo = 0
            half = entries
            while half > 1:
                half_step = half >> 1
                if keys[lo + half_step] <= t:
                    lo = lo + half_step
                half -= half_step
            if kind == OFFSET_KEY:
                a[i] = keys[lo]
                b[i] = _entry_value(p, lo, OFFSET_VALUE)
            else:
                a[i] = keys[lo]
                b[i] = base_offset + _entry_value(p, lo, TIME_VALUE)
    return first, second


# ----------------------------------------------------------------------------------------------
# Record objects

cdef object _UNSET = object()


# Not tracked by the cycle collector: a Record refers only to its buffers and field values, so
# it cannot be part of a reference cycle unless a field is set to something that refers back
# to it; tracking a million decoded records would make every collection walk them all.
@cython.no_gc
@cython.freelist(1024)
cdef class Record:
    """One record: ``offset``, ``timestamp`` (ms), ``timestamp_type``, ``key``, ``value``
    (bytes or None) and ``headers`` (tuple of ``(str, bytes | None)``).

    Construct one for appends as ``Record(key=..., value=..., timestamp=None, headers=())``.
    Records made by decoding keep a reference to the decoded buffer and copy their key, value
    and headers out of it on first access.
    """
    cdef public object timestamp_type
    cdef object _offset_obj         # the offset / timestamp as given (None allowed), or _UNSET
    cdef object _timestamp_obj      # to make the int from the C field on first access
    cdef int64_t _offset
    cdef int64_t _timestamp
    cdef object _key
    cdef object _value
    cdef object _headers
    cdef object _data
    cdef object _header_rows
    cdef int64_t _key_pos
    cdef int64_t _value_pos
    cdef int64_t _header_start
    cdef int32_t _key_len
    cdef int32_t _value_len
    cdef int32_t _header_count

    def __init__(self, key=None, value=None, timestamp=None, headers=(), offset=None,
                 timestamp_type=0):
        self._key = key
        self._value = value
        self._headers = tuple(headers)
        self._timestamp_obj = timestamp
        self._offset_obj = offset
        self.timestamp_type = timestamp_type
        self._data = None

    @property
    def offset(self):
        if self._offset_obj is _UNSET:
            self._offset_obj = self._offset
        return self._offset_obj

    @offset.setter
    def offset(self, value):
        self._offset_obj = value

    @property
    def timestamp(self):
        if self._timestamp_obj is _UNSET:
            self._timestamp_obj = self._timestamp
        return self._timestamp_obj

    @timestamp.setter
    def timestamp(self, value):
        self._timestamp_obj = value

    cdef object _span(self, int64_t pos, int32_t length):
        cdef const unsigned char[::1] view
        if length < 0:
            return None
        view = self._data
        return PyBytes_FromStringAndSize(<const char *>&view[pos] if length else NULL, length)

    @property
    def key(self):
        if self._key is _UNSET:
            self._key = self._span(self._key_pos, self._key_len)
        return self._key

    @key.setter
    def key(self, value):
        self._key = value

    @property
    def value(self):
        if self._value is _UNSET:
            self._value = self._span(self._value_pos, self._value_len)
        return self._value

    @value.setter
    def value(self, value):
        self._value = value

    @property
    def headers(self):
        cdef Py_ssize_t h
        if self._headers is _UNSET:
            rows = self._header_rows[self._header_start:self._header_start + self._header_count]
            self._headers = tuple(
                (self._span(row["key_pos"], row["key_len"]).decode("utf-8", "replace"),
                 self._span(row["value_pos"], row["value_len"])) for row in rows)
        return self._headers

    @headers.setter
    def headers(self, value):
        self._headers = tuple(value)

    def _fields(self):
        return (self.offset, self.timestamp, self.timestamp_type, self.key, self.value,
                self.headers)

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return self._fields() == (<Record>other)._fields()

    def __hash__(self):
        return hash((self.offset, self.timestamp, self.key, self.value))

    def __reduce__(self):
        return (Record, (self.key, self.value, self.timestamp, self.headers, self.offset,
                         self.timestamp_type))

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r:.60}, headers={self.headers!r:.60})")


def make_records(data, records, headers, timestamp_types, type_objects):
    """``Record`` objects for rows of a ``RECORD_DTYPE`` array whose positions index ``data``.

    ``timestamp_types`` holds each record's type (-1, 0, 1) and ``type_objects`` the three
    values to use for them. Keys, values and headers are copied from ``data`` on first access.
    """
    cdef cnp.ndarray arr = np.ascontiguousarray(records, dtype=RECORD_DTYPE)
    cdef const RecordInfo *r = <const RecordInfo *>cnp.PyArray_DATA(arr)
    cdef const int8_t[::1] types = np.ascontiguousarray(timestamp_types, dtype=np.int8)
    cdef Py_ssize_t n = arr.shape[0], i
    if types.shape[0] != n:
        raise ValueError("timestamp_types and records differ in length")
    cdef const unsigned char[::1] check = data      # the buffer must hold every span
    cdef Py_ssize_t length = check.shape[0]
    for i in range(n):
        if (r[i].key_len > 0 and r[i].key_pos + r[i].key_len > length) or \
                (r[i].value_len > 0 and r[i].value_pos + r[i].value_len > length):
            raise ValueError(f"record {i} lies outside the buffer")
    cdef object t_none = type_objects[0], t_create = type_objects[1], t_append = type_objects[2]
    cdef list out = []
    cdef Record rec
    empty = ()
    for i in range(n):
        rec = Record.__new__(Record)
        rec._offset = r[i].offset
        rec._offset_obj = _UNSET
        rec._timestamp = r[i].timestamp
        rec._timestamp_obj = _UNSET
        rec.timestamp_type = t_create if types[i] == 0 else (t_append if types[i] == 1
                                                             else t_none)
        rec._data = data
        rec._key = _UNSET
        rec._value = _UNSET
        rec._key_pos = r[i].key_pos
        rec._key_len = r[i].key_len
        rec._value_pos = r[i].value_pos
        rec._value_len = r[i].value_len
        if r[i].header_count:
            rec._headers = _UNSET
            rec._header_rows = headers
            rec._header_start = r[i].header_start
            rec._header_count = r[i].header_count
        else:
            rec._headers = empty
        out.append(rec)
    return out


def span_bytes(const unsigned char[::1] buf, const int64_t[::1] positions,
               const int32_t[::1] lengths):
    """A list of ``bytes`` (None where a length is negative) for the spans of ``buf``: the
    keys of many records at once, for dictionaries keyed by them (compaction)."""
    cdef Py_ssize_t n = positions.shape[0], i, length = buf.shape[0]
    if lengths.shape[0] != n:
        raise ValueError("positions and lengths differ in length")
    cdef const unsigned char *p = &buf[0] if length > 0 else NULL
    cdef list out = []
    for i in range(n):
        if lengths[i] < 0:
            out.append(None)
        else:
            if positions[i] < 0 or positions[i] + lengths[i] > length:
                raise ValueError(f"span {i} lies outside the buffer")
            out.append(PyBytes_FromStringAndSize(<const char *>(p + positions[i])
                                                 if lengths[i] else NULL, lengths[i]))
    return out
