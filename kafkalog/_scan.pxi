# Included by _core.pyx: Segment scans: finding a batch, recovery index entries.
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
