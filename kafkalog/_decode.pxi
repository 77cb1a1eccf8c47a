# Included by _core.pyx: Record decoding into columnar arrays.
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
