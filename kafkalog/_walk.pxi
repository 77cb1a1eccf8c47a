# Included by _core.pyx: Batch walk over record batches and legacy entries, with CRC validation.
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
            # wraps like Java's long arithmetic (no C overflow); check_batches rejects it
            o.last_offset = <int64_t>(<uint64_t>o.base_offset +
                                      <uint64_t><int64_t>kl_i32(b + B_LAST_OFFSET_DELTA))
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
    check_mapped(p)
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


cdef inline Py_ssize_t _check_v2_crcs(const unsigned char *p, BatchInfo *out, Py_ssize_t n,
                                      bint stop_on_invalid) noexcept nogil:
    """Set crc_valid on the v2 batches (legacy entries are left at -1) with the SSE4.2 CRC;
    with stop_on_invalid, stop after the first bad one."""
    cdef Py_ssize_t i
    for i in range(n):
        if out[i].magic == 2:
            out[i].crc_valid = _crc32c_at(p + out[i].position + B_ATTRIBUTES,
                                          out[i].size - B_ATTRIBUTES) == out[i].crc
            if stop_on_invalid and not out[i].crc_valid:
                break
    return n


cdef Py_ssize_t _check_crcs(const unsigned char[::1] buf, BatchInfo *out, Py_ssize_t n,
                            bint stop_on_invalid) except -1:
    """Set crc_valid on every batch; with stop_on_invalid, return the index of the first bad one.

    One pass without the GIL when the CPU has SSE4.2; the crc32c package (and zlib for
    legacy entries) for what that pass leaves."""
    cdef Py_ssize_t i, pos, end
    cdef uint32_t computed
    cdef const unsigned char *p = &buf[0]
    if kl_crc_hw:
        with nogil:
            _check_v2_crcs(p, out, n, stop_on_invalid)
    view = None
    for i in range(n):
        if out[i].crc_valid < 0:
            if view is None:
                view = memoryview(buf)
            pos = out[i].position
            end = pos + out[i].size
            if out[i].magic == 2:
                computed = _crc32c_span(view, p, pos + B_ATTRIBUTES, end)
            else:
                computed = zlib.crc32(view[pos + L_MAGIC:end])
            out[i].crc_valid = computed == out[i].crc
        if stop_on_invalid and not out[i].crc_valid:
            return i
    return n
