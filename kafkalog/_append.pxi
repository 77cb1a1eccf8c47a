# Included by _core.pyx: Append preparation: one-pass validation and offset assignment; the
# batch builder.
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


ctypedef struct _Prepared:
    Py_ssize_t batches
    int64_t first
    int64_t last
    int64_t max_timestamp
    int64_t offset_of_max_timestamp
    int64_t records
    int flags
    int32_t leader_epoch
    Py_ssize_t error_position


def prepare_append(unsigned char[::1] buf, int64_t assign_from, int64_t max_batch_size,
                   int64_t log_append_time):
    """Validate the v2 batches of an append in one pass and, when ``assign_from`` >= 0, give
    them offsets from there (rewriting base offsets in ``buf``); with ``log_append_time`` >= 0
    set LogAppendTime (attribute, max timestamp, CRC again).

    Checks: whole batches only, magic 2, size <= ``max_batch_size``, CRC, increasing offsets,
    and (for uncompressed batches) every record's structure.

    Returns ``(batches, first_offset, last_offset, max_timestamp, offset_of_max_timestamp,
    record_count, flags, leader_epoch)``; leader_epoch is the largest partition leader epoch
    of the batches (-1 when none has one: the leader-epoch cache looks at the batches again
    only when it is newer than the cache's latest); flags has ``APPEND_HAS_PRODUCER`` when a
    batch carries a producer id and ``APPEND_HAS_COMPRESSED`` when a batch's records still
    need decoding to be checked.
    Raises CorruptRecordError or RecordTooLargeError with the buffer position at fault.
    """
    cdef Py_ssize_t length = buf.shape[0]
    cdef unsigned char *p = &buf[0] if length > 0 else NULL
    cdef _Prepared r
    # (for the crc32c package only: a memoryview per call is a tenth of a small append)
    cdef int status = _prepare(p, length, assign_from, max_batch_size, log_append_time,
                               None if kl_crc_hw else memoryview(buf), &r)
    if status != A_OK:
        _raise_append_error(status, p, r.error_position, length, max_batch_size)
    return (r.batches, r.first, r.last, r.max_timestamp, r.offset_of_max_timestamp, r.records,
            r.flags, r.leader_epoch)


cdef int _prepare(unsigned char *p, Py_ssize_t length, int64_t assign_from,
                  int64_t max_batch_size, int64_t log_append_time, object view,
                  _Prepared *out) except -1:
    """``prepare_append``'s pass over ``length`` bytes at ``p`` (``view``: a memoryview of
    them for the crc32c package, None with the hardware CRC): its summary in ``out``, and
    a status (A_OK, else what ``_raise_append_error`` says, at ``out.error_position``)."""
    cdef Py_ssize_t pos = 0, n = 0, size
    cdef int64_t next_offset = assign_from, base, last = -1, prev_last = -1, first = -1
    cdef int64_t max_ts = -1, off_max = -1, count = 0, ts
    cdef int32_t delta, records, epoch = -1
    cdef int16_t attributes
    cdef int flags = 0, status = A_OK
    cdef uint32_t crc
    cdef Py_ssize_t err_pos = 0
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
        crc = _crc32c_span(view, p, pos + B_ATTRIBUTES, pos + size)
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
            if _decode_region(p, pos + B_RECORDS, pos + size, base, delta, 0, records,
                              NULL, NULL, &err_pos) != R_OK:       # validate only
                status = A_RECORDS
                break
        if kl_i64(p + pos + B_PRODUCER_ID) >= 0:
            flags |= APPEND_HAS_PRODUCER
        if kl_i32(p + pos + B_LEADER_EPOCH) > epoch:
            epoch = kl_i32(p + pos + B_LEADER_EPOCH)
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
            _set_log_append_time(p, pos, size, log_append_time, view)
        ts = kl_i64(p + pos + B_MAX_TIMESTAMP)
        if ts > max_ts:
            max_ts = ts
            off_max = last
        prev_last = last
        count += records
        n += 1
        pos += size
    out.batches = n
    out.first = first
    out.last = last
    out.max_timestamp = max_ts
    out.offset_of_max_timestamp = off_max
    out.records = count
    out.flags = flags
    out.leader_epoch = epoch
    out.error_position = pos
    if status == A_OK and n == 0:
        status = A_EMPTY
    return status


cdef void _put_u32(unsigned char *p, uint32_t v) noexcept:
    p[0] = (v >> 24) & 0xFF
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF


cdef int _set_log_append_time(unsigned char *p, Py_ssize_t pos, Py_ssize_t size, int64_t now,
                              object view) except -1:
    cdef unsigned char *b = p + pos
    cdef int16_t attributes = kl_i16(b + B_ATTRIBUTES) | 0x08
    cdef int i
    b[B_ATTRIBUTES] = (attributes >> 8) & 0xFF
    b[B_ATTRIBUTES + 1] = attributes & 0xFF
    for i in range(8):
        b[B_MAX_TIMESTAMP + i] = (now >> (56 - 8 * i)) & 0xFF
    _put_u32(b + B_CRC, _crc32c_span(view, p, pos + B_ATTRIBUTES, pos + size))
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
    if status == A_EMPTY:
        raise CorruptRecordError("no record batch to append", position=0)
    raise CorruptRecordError("invalid records in batch", position=pos)


# ----------------------------------------------------------------------------------------------
# Batch building: Record objects -> the bytes of one v2 batch (what a producer sends)

cdef struct _Out:
    unsigned char *p
    Py_ssize_t n
    Py_ssize_t cap


cdef int _out_reserve(_Out *o, Py_ssize_t more) except -1:
    cdef Py_ssize_t cap
    cdef unsigned char *grown
    if o.n + more <= o.cap:
        return 0
    cap = max(2 * o.cap, o.n + more)
    grown = <unsigned char *>realloc(o.p, cap)
    if grown == NULL:
        raise MemoryError()
    o.p = grown
    o.cap = cap
    return 0


cdef inline object _bytes_of(object value):
    """A key, value or header value as bytes (None stays None): a buffer's bytes."""
    if value is None or type(value) is bytes:
        return value
    return bytes(memoryview(value))


cdef inline Py_ssize_t _field_size(object b) noexcept:
    """Bytes a length-prefixed field takes (``b``: bytes or None)."""
    cdef Py_ssize_t n
    if b is None:
        return 1
    n = PyBytes_GET_SIZE(b)
    return _varint_size(n) + n


cdef inline unsigned char *_put_field(unsigned char *w, object b) noexcept:
    cdef Py_ssize_t n
    if b is None:
        return w + _put_varint(w, -1)
    n = PyBytes_GET_SIZE(b)
    w += _put_varint(w, n)
    memcpy(w, PyBytes_AS_STRING(b), n)
    return w + n


cdef int _put_record(_Out *o, int64_t offset_delta, int64_t timestamp_delta, object key,
                     object value, object headers) except -1:
    """One record (length, attributes 0, deltas, key, value, headers) at the end of ``o``."""
    cdef Py_ssize_t size, n_headers = len(headers)
    cdef unsigned char *w
    cdef list fields = None
    key = _bytes_of(key)
    value = _bytes_of(value)
    size = 1 + _varint_size(timestamp_delta) + _varint_size(offset_delta) + _field_size(key) + \
        _field_size(value) + _varint_size(n_headers)
    if n_headers:
        fields = []
        for header_key, header_value in headers:
            fields.append(header_key.encode("utf-8") if isinstance(header_key, str)
                          else _bytes_of(header_key))
            fields.append(_bytes_of(header_value))
        for field in fields:
            size += _field_size(field)
    _out_reserve(o, _varint_size(size) + size)
    w = o.p + o.n
    w += _put_varint(w, size)
    w[0] = 0
    w += 1
    w += _put_varint(w, timestamp_delta)
    w += _put_varint(w, offset_delta)
    w = _put_field(w, key)
    w = _put_field(w, value)
    w += _put_varint(w, n_headers)
    if fields is not None:
        for field in fields:
            w = _put_field(w, field)
    o.n = w - o.p
    return 0


cdef Record _as_record(object r):
    if isinstance(r, Record):
        return <Record>r
    if isinstance(r, tuple):
        return Record(*r)
    if isinstance(r, dict):
        return Record(**r)
    raise TypeError(f"expected a Record, a (key, value, ...) tuple or a dict, not {type(r)}")


def as_record(r):
    """``r`` (a Record, a ``(key, value, ...)`` tuple of Record's arguments or a dict of them)
    as a Record."""
    return _as_record(r)


cdef int _encode_v2_batch(_Out *o, list batch, int64_t base_offset, int64_t now,
                          int16_t attributes, int64_t producer_id, int16_t producer_epoch,
                          int32_t base_sequence, int32_t partition_leader_epoch,
                          object delete_horizon_ms, object last_offset, object max_timestamp,
                          object compress) except -1:
    """The v2 batch of ``batch`` (Records) into ``o`` from its start (``o.n`` becomes its
    size), header and CRC32C included: ``build_v2_batch``'s body, on a buffer the caller
    owns (a reused one for ``ActiveSegmentAppender``)."""
    cdef Py_ssize_t n = len(batch), i, size
    cdef Record r
    cdef int64_t base_ts = -1, max_ts = -1, ts, offset = base_offset
    cdef unsigned char *p
    if delete_horizon_ms is not None:
        base_ts = delete_horizon_ms
    elif n:
        r = batch[0]
        base_ts = now if r.timestamp_ is None else r.timestamp_
    o.n = 0
    _out_reserve(o, B_RECORDS + 32 * n + 64)
    o.n = B_RECORDS
    for i in range(n):
        r = batch[i]
        offset = base_offset + i if r.offset_ is None else r.offset_
        ts = now if r.timestamp_ is None else r.timestamp_
        if i == 0 or ts > max_ts:
            max_ts = ts
        _put_record(o, offset - base_offset, ts - base_ts, r.key_, r.value_, r.headers_)
    if last_offset is not None:
        offset = last_offset
    elif n == 0:
        offset = base_offset
    if max_timestamp is not None:
        max_ts = max_timestamp
    if compress is not None:
        body = _bytes_of(compress(PyBytes_FromStringAndSize(<char *>o.p + B_RECORDS,
                                                            o.n - B_RECORDS)))
        size = PyBytes_GET_SIZE(body)
        o.n = B_RECORDS
        _out_reserve(o, size)
        memcpy(o.p + B_RECORDS, PyBytes_AS_STRING(body), size)
        o.n += size
    p = o.p
    kl_put_i64(p + B_BASE_OFFSET, base_offset)
    kl_put_i32(p + B_LENGTH, <int32_t>(o.n - LOG_OVERHEAD))
    kl_put_i32(p + B_LEADER_EPOCH, partition_leader_epoch)
    p[B_MAGIC] = 2
    kl_put_i16(p + B_ATTRIBUTES, attributes)
    kl_put_i32(p + B_LAST_OFFSET_DELTA, <int32_t>(offset - base_offset))
    kl_put_i64(p + B_BASE_TIMESTAMP, base_ts)
    kl_put_i64(p + B_MAX_TIMESTAMP, max_ts)
    kl_put_i64(p + B_PRODUCER_ID, producer_id)
    kl_put_i16(p + B_PRODUCER_EPOCH, producer_epoch)
    kl_put_i32(p + B_BASE_SEQUENCE, base_sequence)
    kl_put_i32(p + B_RECORD_COUNT, <int32_t>n)
    _put_u32(p + B_CRC, _crc32c_span(
        None if kl_crc_hw else PyMemoryView_FromMemory(<char *>p, o.n, PyBUF_READ),
        p, B_ATTRIBUTES, o.n))
    return 0


def build_v2_batch(records, int64_t base_offset, int64_t now, int16_t attributes,
                   int64_t producer_id, int16_t producer_epoch, int32_t base_sequence,
                   int32_t partition_leader_epoch, delete_horizon_ms=None, last_offset=None,
                   max_timestamp=None, compress=None):
    """The bytes of one v2 batch of ``records`` (Records, ``(key, value, ...)`` tuples or
    dicts of Record's arguments), as a bytearray.

    A record's offset is its own ``offset``, else ``base_offset`` + its index; its timestamp
    its own, else ``now`` (ms). The base timestamp is ``delete_horizon_ms`` when given, else
    the first record's; ``last_offset`` and ``max_timestamp`` (when not None) replace the
    values the records give. ``compress`` (bytes -> bytes, None for uncompressed) turns the
    encoded records into the batch's body; ``attributes`` are written as given. The CRC32C
    covers attributes to the end.
    """
    cdef list batch = [_as_record(item) for item in records]
    cdef _Out o
    o.p = NULL
    o.n = o.cap = 0
    try:
        _encode_v2_batch(&o, batch, base_offset, now, attributes, producer_id, producer_epoch,
                         base_sequence, partition_leader_epoch, delete_horizon_ms, last_offset,
                         max_timestamp, compress)
        return PyByteArray_FromStringAndSize(<char *>o.p, o.n)
    finally:
        free(o.p)
