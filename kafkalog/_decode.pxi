# Included by _core.pyx: Record decoding into columnar arrays.
# ----------------------------------------------------------------------------------------------
# Record decode

cdef inline int _varint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end,
                        int max_bytes, int64_t *value) noexcept nogil:
    """Zig-zag varint of at most ``max_bytes`` bytes (5 for int32, 10 for int64), bounded by end.

    Like Kafka's ``ByteUtils.readVarint``/``readVarlong``, the last allowed byte may only carry
    the bits left of the 32 / 64 (4 / 1): a longer value is an illegal varint, not a wrap."""
    cdef uint64_t raw = 0
    cdef int shift = 0
    cdef int i = 0
    cdef unsigned char b
    if pos[0] < end and not (p[pos[0]] & 0x80):
        # one byte: most lengths, deltas and counts of a batch (the loop's checks cannot fail)
        b = p[pos[0]]
        pos[0] += 1
        value[0] = <int64_t>(b >> 1) ^ -(<int64_t>(b & 1))
        return R_OK
    if pos[0] + 1 < end and not (p[pos[0] + 1] & 0x80):
        # two bytes: record lengths and the deltas of a batch of more than 63 records
        raw = (<uint64_t>(p[pos[0]] & 0x7F)) | ((<uint64_t>p[pos[0] + 1]) << 7)
        pos[0] += 2
        value[0] = <int64_t>(raw >> 1) ^ -(<int64_t>(raw & 1))
        return R_OK
    while True:
        if pos[0] >= end or i >= max_bytes:
            return R_VARINT
        b = p[pos[0]]
        pos[0] += 1
        i += 1
        if not (b & 0x80):
            if i == max_bytes and (b >> (4 if max_bytes == 5 else 1)) != 0:
                return R_VARINT
            raw |= (<uint64_t>b) << shift
            break
        raw |= (<uint64_t>(b & 0x7F)) << shift
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


cdef inline int _record_head(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end,
                             int64_t base_offset, int64_t max_delta, int64_t base_timestamp,
                             int64_t *prev_delta, Py_ssize_t *body_end, int8_t *attributes,
                             int64_t *offset, int64_t *timestamp) noexcept nogil:
    """The head of the record at ``pos[0]``: its length (the record's end into ``body_end``),
    attributes, timestampDelta and offsetDelta (``pos[0]`` left after it), checked: the
    length fits [pos, end), offset deltas increase (``prev_delta`` carries the last one) and
    stay at most ``max_delta`` (the batch's lastOffsetDelta; compaction may leave lastOffset
    above the last record's, never below), the timestamp does not overflow int64."""
    cdef int64_t length, ts_delta, off_delta
    if _varint(p, pos, end, 5, &length) != R_OK:
        return R_VARINT
    if length < MIN_RECORD_SIZE - 1 or length > end - pos[0]:
        return R_LENGTH
    body_end[0] = pos[0] + length
    attributes[0] = <int8_t>p[pos[0]]
    pos[0] += 1
    if _varint(p, pos, body_end[0], 10, &ts_delta) != R_OK:
        return R_VARINT
    if _varint(p, pos, body_end[0], 5, &off_delta) != R_OK:
        return R_VARINT
    if off_delta <= prev_delta[0]:
        return R_OFFSET_ORDER
    if off_delta > max_delta or base_offset > INT64_MAX - off_delta:
        return R_OFFSET_RANGE
    prev_delta[0] = off_delta
    offset[0] = base_offset + off_delta
    if (ts_delta > 0 and base_timestamp > INT64_MAX - ts_delta) or \
            (ts_delta < 0 and base_timestamp < INT64_MIN - ts_delta):
        return R_TIMESTAMP
    timestamp[0] = base_timestamp + ts_delta
    return R_OK


cdef int _decode_region(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                        int64_t base_offset, int64_t max_delta, int64_t base_timestamp,
                        Py_ssize_t count, RecordInfo *out, HeaderTable *headers,
                        Py_ssize_t *err_pos) noexcept nogil:
    """Decode ``count`` records of one batch from [pos, end) into ``out`` (headers appended to
    ``headers``); with ``out`` NULL only validate. Every field is checked against the bytes it
    covers: the head (``_record_head``), key and value lengths, header counts, the record
    count (no bytes left over)."""
    cdef Py_ssize_t i, h, body_end, rec_start
    cdef int64_t header_count
    cdef int64_t prev_delta = -1
    cdef int rc
    cdef RecordInfo scratch
    cdef HeaderInfo header_scratch
    cdef RecordInfo *r = &scratch
    cdef HeaderInfo *hd = &header_scratch
    for i in range(count):
        rec_start = pos
        err_pos[0] = pos
        if out != NULL:
            r = out + i
        rc = _record_head(p, &pos, end, base_offset, max_delta, base_timestamp, &prev_delta,
                          &body_end, &r.attributes, &r.offset, &r.timestamp)
        if rc != R_OK:
            return rc
        rc = _span(p, &pos, body_end, &r.key_pos, &r.key_len)
        if rc != R_OK:
            return rc
        rc = _span(p, &pos, body_end, &r.value_pos, &r.value_len)
        if rc != R_OK:
            return rc
        if _varint(p, &pos, body_end, 5, &header_count) != R_OK:
            return R_VARINT
        # a header takes at least two bytes (key length, value length)
        if header_count < 0 or header_count > (body_end - pos) // 2:
            return R_HEADER_COUNT
        r.header_start = headers.count if headers != NULL else 0
        r.header_count = <int32_t>header_count
        for h in range(header_count):
            if headers != NULL:
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


cdef int _head_region(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                      int64_t base_offset, int64_t max_delta, int64_t base_timestamp,
                      Py_ssize_t count, int64_t *offsets, int64_t *timestamps,
                      Py_ssize_t *err_pos) noexcept nogil:
    """The offsets and timestamps of ``count`` records of one batch from [pos, end): each
    record's head (``_record_head``), then a hop to its end over key, value and headers; the
    records must fill the region."""
    cdef Py_ssize_t i, body_end
    cdef int64_t prev_delta = -1
    cdef int8_t attributes
    cdef int rc
    for i in range(count):
        err_pos[0] = pos
        rc = _record_head(p, &pos, end, base_offset, max_delta, base_timestamp, &prev_delta,
                          &body_end, &attributes, offsets + i, timestamps + i)
        if rc != R_OK:
            return rc
        pos = body_end
    err_pos[0] = pos
    if pos != end:
        return R_REMAINING
    return R_OK


cdef inline int64_t _max_delta(int64_t base_offset, int64_t last_offset) noexcept nogil:
    """The largest record offset delta a batch's [base_offset, last_offset] allows (-1: none;
    at most Int.MAX_VALUE, the most a 5-byte varint may carry), without int64 overflow."""
    cdef uint64_t diff
    if last_offset < base_offset:
        return -1
    diff = <uint64_t>last_offset - <uint64_t>base_offset
    return <int64_t>diff if diff < <uint64_t>INT32_MAX else INT32_MAX


def decode_v2_records(const unsigned char[::1] buf, const int64_t[::1] starts,
                      const int64_t[::1] ends, const int64_t[::1] base_offsets,
                      const int64_t[::1] base_timestamps, const int64_t[::1] counts,
                      const int64_t[::1] last_offsets=None):
    """Decode the records of v2 batches whose (decompressed) record bytes are ``buf[start:end]``.

    One region per batch: its record bytes, base offset, base timestamp and declared record
    count, and (optional) its last offset: record offsets must increase and stay in
    [base offset, last offset] (without it, any increasing offsets that fit are accepted).

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
    cdef bint has_last = last_offsets is not None
    if has_last and last_offsets.shape[0] != n_regions:
        raise ValueError("region arrays differ in length")
    cdef int64_t[::1] max_deltas = np.empty(n_regions, dtype=np.int64)
    cdef Py_ssize_t i, total = 0
    for i in range(n_regions):
        if not (0 <= starts[i] <= ends[i] <= length):
            raise ValueError(f"region {i} [{starts[i]}, {ends[i]}) outside the buffer")
        if counts[i] < 0 or counts[i] * MIN_RECORD_SIZE > ends[i] - starts[i]:
            exc = CorruptRecordError(f"{_RECORD_ERRORS[R_COUNT]} ({counts[i]} records in "
                                     f"{ends[i] - starts[i]} bytes)", position=starts[i])
            exc.region = i
            raise exc
        max_deltas[i] = _max_delta(base_offsets[i], last_offsets[i]) if has_last \
            else INT32_MAX
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
            rc = _decode_region(p, starts[i], ends[i], base_offsets[i], max_deltas[i],
                                base_timestamps[i], counts[i], out + row, &table, &err_pos)
            if rc != R_OK:
                break
            row += counts[i]
    try:
        check_mapped(p)
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


cdef inline int _check_v2_header(const unsigned char *b, int32_t size) noexcept nogil:
    """Check the header fields of the v2 batch at ``b`` (``size`` bytes in all) that readers
    trust: codec, baseOffset (Kafka's offsets are never negative), lastOffsetDelta, record
    count, sequence, producer id/epoch."""
    cdef int16_t attributes = kl_i16(b + B_ATTRIBUTES)
    cdef int32_t delta = kl_i32(b + B_LAST_OFFSET_DELTA)
    cdef int32_t count = kl_i32(b + B_RECORD_COUNT)
    cdef int64_t producer_id = kl_i64(b + B_PRODUCER_ID)
    if (attributes & 0x07) > 4:
        return R_CODEC
    if kl_i64(b + B_BASE_OFFSET) < 0:
        return R_NEGATIVE_OFFSET
    if delta < 0:
        return R_LAST_OFFSET_DELTA
    if kl_i64(b + B_BASE_OFFSET) > INT64_MAX - 1 - delta:     # the next offset must fit too
        return R_OFFSET_OVERFLOW
    if count < 0 or count - 1 > delta:
        return R_COUNT_OFFSETS
    if (attributes & 0x07) == 0 and <int64_t>count * MIN_RECORD_SIZE > size - B_RECORDS:
        return R_COUNT
    if kl_i32(b + B_BASE_SEQUENCE) < -1:
        return R_SEQUENCE
    if producer_id < -1 or kl_i16(b + B_PRODUCER_EPOCH) < -1:
        return R_PRODUCER
    if (attributes & 0x10) and producer_id < 0:
        return R_TXN_PRODUCER
    return R_OK


cdef inline int _legacy_spans(const unsigned char *p, const BatchInfo *b,
                              RecordInfo *r) noexcept nogil:
    """Key and value spans of a legacy entry; they must fill it exactly (Kafka's LegacyRecord
    size is exactly its fields). A negative length is a null, as Kafka reads it."""
    cdef Py_ssize_t pos = b.position + L_TIMESTAMP + (8 if b.magic == 1 else 0)
    cdef Py_ssize_t end = b.position + b.size
    cdef int32_t klen, vlen
    if (b.attributes & 0x07) > 4:
        return R_CODEC
    if b.base_offset < 0:
        return R_NEGATIVE_OFFSET
    if b.base_offset == INT64_MAX:
        return R_OFFSET_OVERFLOW
    klen = kl_i32(p + pos)
    pos += 4
    if klen > end - pos - 4:
        return R_LEGACY_SPAN
    r.key_pos = pos
    r.key_len = klen if klen >= 0 else -1
    if klen > 0:
        pos += klen
    vlen = kl_i32(p + pos)
    pos += 4
    if vlen > end - pos:
        return R_LEGACY_SPAN
    r.value_pos = pos
    r.value_len = vlen if vlen >= 0 else -1
    if vlen > 0:
        pos += vlen
    if pos != end:
        return R_LEGACY_SIZE
    if vlen < 0 and (b.attributes & 0x07) != 0:
        return R_WRAPPER_NULL
    return R_OK


cdef inline int _check_batch(const unsigned char *p, const BatchInfo *b, bint records,
                             Py_ssize_t *err_pos) noexcept nogil:
    cdef RecordInfo scratch
    cdef int rc
    cdef const unsigned char *h = p + b.position
    err_pos[0] = b.position
    if b.magic != 2:
        return _legacy_spans(p, b, &scratch)
    rc = _check_v2_header(h, b.size)
    if rc != R_OK or not records or (kl_i16(h + B_ATTRIBUTES) & 0x07) != 0:
        return rc
    return _decode_region(p, b.position + B_RECORDS, b.position + b.size, kl_i64(h),
                          kl_i32(h + B_LAST_OFFSET_DELTA), kl_i64(h + B_BASE_TIMESTAMP),
                          kl_i32(h + B_RECORD_COUNT), NULL, NULL, err_pos)


cdef int _check_rows(const unsigned char[::1] buf, cnp.ndarray arr) except -1:
    """Check that the rows of a contiguous ``BATCH_DTYPE`` array are walked batches in ``buf``."""
    cdef const BatchInfo *b = <const BatchInfo *>cnp.PyArray_DATA(arr)
    cdef Py_ssize_t i, n = arr.shape[0], length = buf.shape[0]
    for i in range(n):
        if not 0 <= b[i].magic <= 2 or b[i].position < 0 or \
                b[i].position + b[i].size > length or \
                b[i].size < LOG_OVERHEAD + (V2_MIN_SIZE if b[i].magic == 2 else
                                            V1_MIN_SIZE if b[i].magic == 1 else V0_MIN_SIZE):
            raise ValueError(f"entry {i} is not a walked batch inside the buffer")
    return 0


def check_batches(const unsigned char[::1] buf, batches, bint records=True):
    """Check the structure of walked batches (``BATCH_DTYPE`` rows of ``buf``) beyond their
    CRC: every header field readers trust (codec, lastOffsetDelta, record count, sequence,
    producer id/epoch), and with ``records`` every record of an uncompressed v2 batch (as
    ``decode_v2_records`` decodes it) and the key and value of a legacy entry.

    Returns
    -------
    (n_valid, reason, position)
        ``n_valid``: how many batches pass before the first that fails (``len(batches)`` when
        all do); ``reason``: why that one fails, else None; ``position``: the buffer position
        of the fault (the batch, or the record at fault), else -1. Compressed payloads are
        not looked into (``records.validate_batches`` decompresses them).
    """
    cdef cnp.ndarray arr = np.ascontiguousarray(batches, dtype=BATCH_DTYPE)
    cdef Py_ssize_t n = arr.shape[0], i
    _check_rows(buf, arr)
    cdef const BatchInfo *b = <const BatchInfo *>cnp.PyArray_DATA(arr)
    cdef const unsigned char *p = &buf[0] if buf.shape[0] > 0 else NULL
    cdef int rc = R_OK
    cdef Py_ssize_t err_pos = -1
    with nogil:
        for i in range(n):
            rc = _check_batch(p, b + i, records, &err_pos)
            if rc != R_OK:
                break
    check_mapped(p)
    if rc == R_OK:
        return n, None, -1
    return i, _RECORD_ERRORS[rc], err_pos


def decode_v2_offsets(const unsigned char[::1] buf, batches):
    """The offsets and timestamps of every record of walked uncompressed v2 batches
    (``BATCH_DTYPE`` rows of ``buf``), for a reader that wants nothing else of a record: each
    batch's header checked as ``check_batches`` checks it, and each record's length,
    timestampDelta and offsetDelta as ``decode_v2_records`` checks them; keys, values and
    headers are hopped over, neither read nor checked (the batch's CRC covers their bytes).
    Timestamps are what a consumer sees (the batch's
    max timestamp under LogAppendTime). Control batches are decoded as any other (their keys
    unchecked).

    Returns ``(offsets, timestamps)``, int64 arrays, one row per record in batch order.
    Raises CorruptRecordError (``position``: of the batch or record at fault, ``region``: the
    index of its batch); ValueError for a row that is not an uncompressed v2 batch in ``buf``.
    """
    cdef cnp.ndarray arr = np.ascontiguousarray(batches, dtype=BATCH_DTYPE)
    cdef Py_ssize_t n = arr.shape[0], i, total = 0
    cdef int32_t count
    _check_rows(buf, arr)
    cdef const BatchInfo *b = <const BatchInfo *>cnp.PyArray_DATA(arr)
    for i in range(n):
        if b[i].magic != 2 or (b[i].attributes & 0x07) != 0:
            raise ValueError(f"entry {i} is not an uncompressed v2 batch")
        count = kl_i32(&buf[b[i].position + B_RECORD_COUNT])
        # a count the bytes cannot hold fails the header check before any row is written
        if 0 < count <= (b[i].size - B_RECORDS) // MIN_RECORD_SIZE:
            total += count
    offsets = np.empty(total, dtype=np.int64)
    timestamps = np.empty(total, dtype=np.int64)
    cdef int64_t *o = <int64_t *>cnp.PyArray_DATA(offsets)
    cdef int64_t *t = <int64_t *>cnp.PyArray_DATA(timestamps)
    cdef const unsigned char *p = &buf[0] if buf.shape[0] > 0 else NULL
    cdef const unsigned char *h
    cdef int rc = R_OK
    cdef Py_ssize_t err_pos = -1, row = 0, j
    with nogil:
        for i in range(n):
            h = p + b[i].position
            err_pos = b[i].position
            rc = _check_v2_header(h, b[i].size)
            if rc != R_OK:
                break
            count = kl_i32(h + B_RECORD_COUNT)
            rc = _head_region(p, b[i].position + B_RECORDS, b[i].position + b[i].size,
                              kl_i64(h), kl_i32(h + B_LAST_OFFSET_DELTA),
                              kl_i64(h + B_BASE_TIMESTAMP), count, o + row, t + row, &err_pos)
            if rc != R_OK:
                break
            if kl_i16(h + B_ATTRIBUTES) & 0x08:        # LogAppendTime
                for j in range(count):
                    t[row + j] = kl_i64(h + B_MAX_TIMESTAMP)
            row += count
    check_mapped(p)
    if rc != R_OK:
        exc = CorruptRecordError(_RECORD_ERRORS[rc], position=err_pos)
        exc.region = i
        raise exc
    return offsets, timestamps


def decode_legacy_records(const unsigned char[::1] buf, batches):
    """Key and value spans of walked legacy entries (``BATCH_DTYPE`` rows with magic 0/1).

    Returns a ``RECORD_DTYPE`` array: offset and timestamp as stored, size = the entry's size.
    Raises CorruptRecordError (``position``: the entry's) when a key or value length does not
    fit its entry, the codec is unknown or a compressed wrapper's value is null.
    """
    cdef Py_ssize_t n = len(batches)
    cdef cnp.ndarray arr = np.ascontiguousarray(batches, dtype=BATCH_DTYPE)
    cdef const BatchInfo *b = <const BatchInfo *>cnp.PyArray_DATA(arr)
    records = np.empty(n, dtype=RECORD_DTYPE)
    cdef RecordInfo *out = <RecordInfo *>cnp.PyArray_DATA(records)
    cdef Py_ssize_t length = buf.shape[0]
    cdef const unsigned char *p = &buf[0] if length > 0 else NULL
    cdef Py_ssize_t i
    cdef int rc = R_OK
    for i in range(n):
        if b[i].magic > 1 or b[i].magic < 0 or b[i].position < 0 or \
                b[i].position + b[i].size > length or \
                b[i].size < LOG_OVERHEAD + (V1_MIN_SIZE if b[i].magic == 1 else V0_MIN_SIZE):
            raise ValueError(f"entry {i} is not a legacy entry inside the buffer")
    with nogil:
        for i in range(n):
            out[i].offset = b[i].base_offset
            out[i].timestamp = b[i].base_timestamp
            out[i].size = b[i].size
            out[i].attributes = <int8_t>b[i].attributes
            out[i].header_start = 0
            out[i].header_count = 0
            rc = _legacy_spans(p, b + i, out + i)
            if rc != R_OK:
                break
    check_mapped(p)
    if rc != R_OK:
        raise CorruptRecordError(_RECORD_ERRORS[rc], position=b[i].position,
                                 base_offset=b[i].base_offset)
    return records
