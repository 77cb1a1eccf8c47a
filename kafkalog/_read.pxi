# Included by _core.pyx: The reads users call, one kernel call each: Kafka's LogSegment.read
# and FileRecords.searchForTimestamp.
# ----------------------------------------------------------------------------------------------
# Segment reads

# find_timestamp status (mirrored by _read_py.FIND_TS_*).
cdef enum:
    TS_FOUND = 0     # (TS_FOUND, timestamp, offset)
    TS_NONE = 1      # no such record up to the end of the batches (or bytes that are no batch)
    TS_MORE = 2      # the batch at ``stop`` runs past ``end``: fetch more, call again from it
    TS_DECODE = 3    # the candidate batch at ``stop`` is compressed, legacy, LogAppendTime or
                     # control, or its records are damaged: decode it in Python

FIND_TS_FOUND = TS_FOUND
FIND_TS_NONE = TS_NONE
FIND_TS_MORE = TS_MORE
FIND_TS_DECODE = TS_DECODE

# The attributes of a batch whose record timestamps are its own (uncompressed, CreateTime, data).
cdef enum:
    A_NOT_PLAIN = 0x07 | 0x08 | 0x20


cdef inline bint _plausible(const unsigned char *p, Py_ssize_t length, Py_ssize_t pos,
                            int64_t base_offset, int64_t offset) noexcept nogil:
    """Whether a batch (or legacy entry) that may hold ``offset`` starts at ``pos``."""
    cdef int32_t size
    cdef int64_t base
    if pos < 0 or pos + HEADER_UP_TO_MAGIC > length:
        return False
    base = kl_i64(p + pos)
    size = kl_i32(p + pos + B_LENGTH)
    return (p[pos + B_MAGIC] <= 2 and size >= V0_MIN_SIZE
            and size <= length - pos - LOG_OVERHEAD and base_offset <= base <= offset)


def batch_header_plausible(buf, Py_ssize_t position, int64_t base_offset, int64_t offset):
    """Whether a batch (or legacy entry) that may hold ``offset`` starts at ``position``: its
    header fits ``buf``, its size is possible, its magic known, its base offset in
    [base_offset, offset]. One read of 17 bytes; catches an offset index entry that points
    into the middle of a batch, or past the end of the file."""
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return _plausible(<const unsigned char *>view.buf, view.len, position, base_offset,
                          offset)
    finally:
        PyBuffer_Release(&view)
        check_mapped(view.buf)          # (an address only: nothing is read)


def segment_read(IndexView index, buf, int64_t offset, Py_ssize_t starting_position,
                 Py_ssize_t max_size, Py_ssize_t max_position, bint min_one_message):
    """Kafka's ``LogSegment.read`` over a local segment's mapping ``buf``, in one call: the
    offset index floor entry of ``offset`` (``index``; None: scan from the start), its batch
    header checked, the hop from there to the first batch whose last offset >= ``offset``,
    and the bytes to return.

    Returns
    -------
    (position, size, records, first_entry_incomplete, index_lies)
        ``position``: the batch's byte position, -1 when no batch holds ``offset`` (then
        ``records`` is None); ``size``: its bytes; ``records``: a copy of at most
        ``max_size`` bytes from it (the whole first batch with ``min_one_message``), none at
        or past ``max_position``; ``index_lies``: the index entry pointed where no batch
        holding its offset starts (the scan started at ``starting_position`` instead).
    """
    cdef Py_buffer view
    cdef Py_ssize_t start = starting_position, position, size = 0, adjusted, fetch
    cdef int64_t key = 0, entry_position = 0
    cdef bint lies = False
    cdef const unsigned char *ip
    cdef Py_ssize_t slot
    if index is not None:
        if index.kind != OFFSET_KEY:
            raise ValueError("segment_read takes an offset index's view")
        index.check()
        ip = index.buf
        slot = _search(ip, index.entries, OFFSET_KEY, offset - index.base_offset, False)
        if slot >= 0:
            key = index.base_offset + _entry_value(ip, slot, OFFSET_KEY)
            entry_position = _entry_value(ip, slot, OFFSET_VALUE)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if start < 0:
            raise ValueError(f"starting position {start} is negative")
        if start > view.len:
            start = view.len
        if index is not None and entry_position > starting_position:
            if _plausible(<const unsigned char *>view.buf, view.len, entry_position,
                          index.base_offset, key):
                start = entry_position
            else:
                lies = True
        position = _batch_from(<const unsigned char *>view.buf, start, view.len, offset, &size)
        if position < 0:
            return (-1, 0, None, False, lies)
        adjusted = max_size if not min_one_message or max_size > size else size
        if adjusted == 0:
            return (position, size, b"", False, lies)
        fetch = max_position - position
        if fetch > adjusted:
            fetch = adjusted
        if fetch > view.len - position:
            fetch = view.len - position
        if fetch < 0:
            fetch = 0
        return (position, size,
                PyBytes_FromStringAndSize(<const char *>view.buf + position, fetch),
                adjusted < size, lies)
    finally:
        PyBuffer_Release(&view)
        check_mapped(view.buf)          # (an address only: nothing is read)


cdef int _first_at_or_after(const unsigned char *p, Py_ssize_t pos, int32_t size,
                            int64_t timestamp, int64_t starting_offset,
                            int64_t *found_ts, int64_t *found_offset) except -2:
    """The first record of the uncompressed v2 batch at ``pos`` with timestamp >=
    ``timestamp`` and offset >= ``starting_offset``: 1 (and its timestamp and offset), 0 when
    there is none, -1 when the batch's header or records fail their checks."""
    cdef const unsigned char *h = p + pos
    cdef int32_t count = kl_i32(h + B_RECORD_COUNT)
    cdef Py_ssize_t err_pos = 0, i
    cdef RecordInfo *rows
    cdef int rc
    if _check_v2_header(h, size) != R_OK:
        return -1
    rows = <RecordInfo *>malloc((count if count > 0 else 1) * sizeof(RecordInfo))
    if rows == NULL:
        raise MemoryError()
    try:
        rc = _decode_region(p, pos + B_RECORDS, pos + size, kl_i64(h),
                            _max_delta(kl_i64(h), kl_i64(h) + kl_i32(h + B_LAST_OFFSET_DELTA)),
                            kl_i64(h + B_BASE_TIMESTAMP), count, rows, NULL, &err_pos)
        if rc != R_OK:
            return -1
        for i in range(count):
            if rows[i].timestamp >= timestamp and rows[i].offset >= starting_offset:
                found_ts[0] = rows[i].timestamp
                found_offset[0] = rows[i].offset
                return 1
        return 0
    finally:
        free(rows)


def find_timestamp(buf, Py_ssize_t start, Py_ssize_t end, int64_t timestamp,
                   int64_t starting_offset):
    """Kafka's ``FileRecords.searchForTimestamp`` from the batch at ``start`` (normally
    where the time and offset indexes put it) to ``end``: the first record with timestamp
    >= ``timestamp`` and offset >= ``starting_offset``. Only batch headers are read until one
    has a max timestamp that late; its records are decoded (an uncompressed CreateTime data
    batch here; any other is left to the caller). Bytes past ``end`` are never touched (a
    remote buffer holds only what was fetched).

    Returns
    -------
    (status, first, second)
        ``(FIND_TS_FOUND, timestamp, offset)``; ``(FIND_TS_NONE, stop, 0)``;
        ``(FIND_TS_MORE, stop, 0)``: the batch at ``stop`` runs past ``end``;
        ``(FIND_TS_DECODE, stop, size)``: the batch of ``size`` bytes at ``stop`` may hold
        the record and must be decoded by the caller (then call again after it).
    """
    cdef Py_buffer view
    cdef const unsigned char *p
    cdef Py_ssize_t pos = start
    cdef int32_t size
    cdef int8_t magic
    cdef int64_t last, max_ts, found_ts = 0, found_offset = 0
    cdef int rc
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char *>view.buf
        if end < 0 or end > view.len:
            end = view.len
        if start < 0 or start > end:
            raise ValueError(f"start {start} outside the buffer [0, {end}]")
        while True:
            if end - pos <= HEADER_UP_TO_MAGIC:
                return (TS_NONE if end == pos else TS_MORE, pos, 0)
            size = kl_i32(p + pos + B_LENGTH)
            if size < V0_MIN_SIZE:
                return (TS_NONE, pos, 0)
            if <Py_ssize_t>size > end - pos - LOG_OVERHEAD:
                return (TS_MORE, pos, 0)
            magic = <int8_t>p[pos + B_MAGIC]
            if magic == 2:
                if size < V2_MIN_SIZE:
                    return (TS_NONE, pos, 0)
                last = kl_i64(p + pos) + kl_i32(p + pos + B_LAST_OFFSET_DELTA)
                max_ts = kl_i64(p + pos + B_MAX_TIMESTAMP)
            elif magic == 1 or magic == 0:
                if magic == 1 and size < V1_MIN_SIZE:
                    return (TS_NONE, pos, 0)
                last = kl_i64(p + pos)
                max_ts = kl_i64(p + pos + L_TIMESTAMP) if magic == 1 else -1
            else:
                return (TS_NONE, pos, 0)
            if max_ts >= timestamp and last >= starting_offset:
                if magic != 2 or kl_i16(p + pos + B_ATTRIBUTES) & A_NOT_PLAIN:
                    return (TS_DECODE, pos, size + LOG_OVERHEAD)
                rc = _first_at_or_after(p, pos, size + LOG_OVERHEAD, timestamp,
                                        starting_offset, &found_ts, &found_offset)
                if rc == 1:
                    return (TS_FOUND, found_ts, found_offset)
                if rc < 0:
                    return (TS_DECODE, pos, size + LOG_OVERHEAD)
            pos += LOG_OVERHEAD + size
    finally:
        PyBuffer_Release(&view)
        check_mapped(view.buf)          # (an address only: nothing is read)
