# Included by _core.pyx: Segment scans: finding a batch, recovery index entries.
from cpython.bytes cimport PyBytes_AS_STRING
# ----------------------------------------------------------------------------------------------
# Segment scans

cdef inline Py_ssize_t _batch_from(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                                   int64_t target_offset, Py_ssize_t *size) noexcept nogil:
    """The first batch in [pos, end) whose last offset >= ``target_offset`` (its bytes in
    ``size``), or -1: a hop over batch headers only (no CRC, no records), as Kafka's
    searchForOffsetWithSize."""
    cdef int32_t length
    cdef int64_t last
    while end - pos > HEADER_UP_TO_MAGIC:
        length = kl_i32(p + pos + B_LENGTH)
        if length < V0_MIN_SIZE or <Py_ssize_t>length > end - pos - LOG_OVERHEAD:
            return -1
        if p[pos + B_MAGIC] == 2:
            if length < V2_MIN_SIZE:
                return -1
            last = kl_i64(p + pos) + kl_i32(p + pos + B_LAST_OFFSET_DELTA)
        else:
            last = kl_i64(p + pos)
        if last >= target_offset:
            size[0] = length + LOG_OVERHEAD
            return pos
        pos += LOG_OVERHEAD + length
    return -1


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
    cdef Py_ssize_t found, found_size = 0
    with nogil:
        found = _batch_from(p, start, end, target_offset, &found_size)
    check_mapped(p)
    return (found, found_size)


def index_entries_for(batches, int64_t interval_bytes, int64_t start_position=0,
                      int64_t since_last_entry=0, int64_t max_timestamp=-1,
                      int64_t offset_of_max_timestamp=-1, int64_t last_index_timestamp=-1):
    """The offset and time index entries Kafka's recovery (or append) writes for walked
    ``batches``.

    An offset index entry (batch last offset, batch position) is written when more than
    ``interval_bytes`` have passed since the previous entry (positions relative to
    ``start_position``); each comes with a time index entry (max timestamp so far, its offset),
    kept only when its timestamp grows. An append continues a segment's state: the bytes
    ``since_last_entry``, its ``max_timestamp`` and ``offset_of_max_timestamp``, and its time
    index's ``last_index_timestamp``. Returns ``(offset_entries, time_entries, max_ts,
    offset_of_max_ts, since_last_entry)``: int64 arrays of shape (n, 2), the final max
    timestamp / offset (-1, -1 when no batch has a timestamp) and the bytes after the last
    entry.
    """
    cdef cnp.ndarray arr = np.ascontiguousarray(batches, dtype=BATCH_DTYPE)
    cdef const BatchInfo *b = <const BatchInfo *>cnp.PyArray_DATA(arr)
    cdef Py_ssize_t n = arr.shape[0]
    cdef cnp.ndarray offset_entries = np.empty((n, 2), dtype=np.int64)
    cdef cnp.ndarray time_entries = np.empty((n, 2), dtype=np.int64)
    cdef int64_t *oe = <int64_t *>cnp.PyArray_DATA(offset_entries)
    cdef int64_t *te = <int64_t *>cnp.PyArray_DATA(time_entries)
    cdef Py_ssize_t n_off, n_time
    cdef int64_t max_ts = max_timestamp, max_ts_offset = offset_of_max_timestamp
    cdef int64_t since = since_last_entry
    with nogil:
        _index_entries(b, n, interval_bytes, start_position, oe, te, &n_off, &n_time, &max_ts,
                       &max_ts_offset, &since, last_index_timestamp)
    return offset_entries[:n_off], time_entries[:n_time], max_ts, max_ts_offset, since


cdef inline void _index_entries(const BatchInfo *b, Py_ssize_t n, int64_t interval_bytes,
                                int64_t start_position, int64_t *oe, int64_t *te,
                                Py_ssize_t *n_off, Py_ssize_t *n_time, int64_t *max_ts,
                                int64_t *max_ts_offset, int64_t *since,
                                int64_t last_time) noexcept nogil:
    """The entries of ``index_entries_for`` for ``n`` walked batches: (offset, position)
    pairs into ``oe``, (timestamp, offset) pairs into ``te``, room for ``n`` pairs each;
    ``max_ts``, ``max_ts_offset`` and ``since`` carry the state in and out."""
    cdef Py_ssize_t i, k = 0, m = 0
    cdef int64_t valid_bytes = 0, last_entry = -since[0]
    cdef int64_t ts = max_ts[0], ts_offset = max_ts_offset[0]
    for i in range(n):
        if b[i].max_timestamp > ts:
            ts = b[i].max_timestamp
            ts_offset = b[i].last_offset
        if valid_bytes - last_entry > interval_bytes:
            oe[2 * k] = b[i].last_offset
            oe[2 * k + 1] = start_position + valid_bytes
            k += 1
            if ts > last_time:
                te[2 * m] = ts
                te[2 * m + 1] = ts_offset
                m += 1
                last_time = ts
            last_entry = valid_bytes
        valid_bytes += b[i].size
    n_off[0] = k
    n_time[0] = m
    max_ts[0] = ts
    max_ts_offset[0] = ts_offset
    since[0] = valid_bytes - last_entry


def recovery_summary(batches, int64_t base_offset, int64_t interval_bytes):
    """What recovery checks and writes for a segment's valid walked ``batches`` (positions
    from the start of its ``.log``), in one pass over their headers.

    Returns ``(out_of_range, valid_bytes, offset_index, time_index, max_ts, max_ts_offset,
    last_entry_position, producer_batches, max_leader_epoch)``: the row of the first batch
    whose last offset does not fit ``base_offset`` (below it, or more than 2**31 - 1 above;
    -1 when all fit, else nothing more is computed), the bytes the batches span, the
    ``.index`` and ``.timeindex`` file bytes (the entries of ``index_entries_for`` with
    relative offsets; the time index ends with the (max timestamp, its offset) entry Kafka
    appends at close), the max timestamp and its offset (-1, -1 without one), the position of
    the last offset index entry (0 without one), how many v2 batches carry a producer id and
    the largest v2 partition leader epoch (-1 without one).
    """
    cdef cnp.ndarray arr = np.ascontiguousarray(batches, dtype=BATCH_DTYPE)
    cdef const BatchInfo *b = <const BatchInfo *>cnp.PyArray_DATA(arr)
    cdef Py_ssize_t n = arr.shape[0]
    cdef Py_ssize_t i, n_off, n_time, producers = 0
    cdef int32_t max_epoch = -1
    cdef int64_t max_ts = -1, max_ts_offset = -1, since = 0
    for i in range(n):
        if b[i].last_offset < base_offset or b[i].last_offset - base_offset > INT32_MAX:
            return i, 0, b"", b"", -1, -1, 0, 0, -1
        if b[i].magic == 2:
            if b[i].producer_id >= 0:
                producers += 1
            if b[i].partition_leader_epoch > max_epoch:
                max_epoch = b[i].partition_leader_epoch
    cdef int64_t *scratch = <int64_t *>malloc(4 * (n if n > 0 else 1) * sizeof(int64_t))
    if scratch == NULL:
        raise MemoryError()
    cdef int64_t *oe = scratch
    cdef int64_t *te = scratch + 2 * n
    cdef unsigned char *out
    try:
        with nogil:
            _index_entries(b, n, interval_bytes, 0, oe, te, &n_off, &n_time, &max_ts,
                           &max_ts_offset, &since, -1)
        final = max_ts >= 0 and (n_time == 0 or te[2 * (n_time - 1)] < max_ts)
        offset_index = PyBytes_FromStringAndSize(NULL, n_off * 8)
        out = <unsigned char *>PyBytes_AS_STRING(offset_index)
        for i in range(n_off):
            kl_put_i32(out + 8 * i, <int32_t>(oe[2 * i] - base_offset))
            kl_put_i32(out + 8 * i + 4, <int32_t>oe[2 * i + 1])
        time_index = PyBytes_FromStringAndSize(NULL, (n_time + final) * 12)
        out = <unsigned char *>PyBytes_AS_STRING(time_index)
        for i in range(n_time):
            kl_put_i64(out + 12 * i, te[2 * i])
            kl_put_i32(out + 12 * i + 8, <int32_t>(te[2 * i + 1] - base_offset))
        if final:
            kl_put_i64(out + 12 * n_time, max_ts)
            kl_put_i32(out + 12 * n_time + 8, <int32_t>(max_ts_offset - base_offset))
        valid_bytes = b[n - 1].position + b[n - 1].size if n > 0 else 0
        last_entry = oe[2 * (n_off - 1) + 1] if n_off > 0 else 0
    finally:
        free(scratch)
    return (-1, valid_bytes, offset_index, time_index, max_ts, max_ts_offset, last_entry,
            producers, max_epoch)
