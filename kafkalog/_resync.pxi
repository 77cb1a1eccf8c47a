# Included by _core.pyx: Resynchronisation after damage: the next intact batch.
# ----------------------------------------------------------------------------------------------
# Resync scan
#
# Kafka stops reading a segment at its first bad batch. To salvage what follows a damaged
# region, scan forward one byte at a time for a position where a whole batch with a valid CRC
# begins. The cheap header checks run without the GIL; only a candidate that passes them has
# its CRC computed (CRC32C over [21, end) for magic 2, CRC32 over [16, end) for magic 0/1), so
# a false resync needs a 32-bit CRC to match by chance. In random bytes about one position in
# a few thousand passes the header checks, and its CRC covers the size it declares: to keep a
# large damaged region from costing a CRC over megabytes at each such position, a candidate
# declaring more than RESYNC_CHAIN_SIZE bytes must also be followed by what could be the next
# batch header (or the end of the range).

cdef enum:
    RESYNC_CHAIN_SIZE = 1 << 20


cdef inline bint _chained(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """Whether ``pos`` is the end of the range, or could start a batch (or its torn tail)."""
    if end - pos < HEADER_UP_TO_MAGIC:
        return True
    return p[pos + B_MAGIC] <= 2 and kl_i32(p + pos + B_LENGTH) >= V0_MIN_SIZE


cdef inline Py_ssize_t _next_candidate(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                                       bint legacy) noexcept nogil:
    """First position in [pos, end) where a batch header is plausible, or -1."""
    cdef Py_ssize_t room = LOG_OVERHEAD + (V0_MIN_SIZE if legacy else V2_MIN_SIZE)
    cdef int32_t size
    cdef int8_t magic
    cdef bint plausible
    while end - pos >= room:
        plausible = False
        magic = <int8_t>p[pos + B_MAGIC]
        if magic == 2:
            size = kl_i32(p + pos + B_LENGTH)
            if (size >= V2_MIN_SIZE and <Py_ssize_t>size <= end - pos - LOG_OVERHEAD
                    and kl_i64(p + pos + B_BASE_OFFSET) >= 0
                    and (kl_i16(p + pos + B_ATTRIBUTES) & 0x07) <= 4
                    and kl_i32(p + pos + B_LAST_OFFSET_DELTA) >= 0
                    and kl_i32(p + pos + B_RECORD_COUNT) >= 0):
                plausible = True
        elif legacy and (magic == 0 or magic == 1):
            size = kl_i32(p + pos + B_LENGTH)
            if (size >= (V1_MIN_SIZE if magic == 1 else V0_MIN_SIZE)
                    and <Py_ssize_t>size <= end - pos - LOG_OVERHEAD
                    and kl_i64(p + pos + B_BASE_OFFSET) >= 0
                    and (p[pos + L_ATTRIBUTES] & 0x07) <= 3):
                plausible = True
        if plausible and (size <= RESYNC_CHAIN_SIZE
                          or _chained(p, pos + LOG_OVERHEAD + size, end)):
            return pos
        pos += 1
    return -1


def next_valid_batch(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t end=-1,
                     bint legacy=True):
    """The first position in ``buf[start:end]`` where a whole batch with a valid CRC begins.

    A candidate has magic 2 (or, with ``legacy``, 0/1), a size that fits before ``end``, sane
    header fields (non-negative base offset, last offset delta and record count, a known
    compression codec) and a stored CRC that matches its bytes; one declaring more than 1 MiB
    must also end at ``end`` or where another batch header (magic 0-2, size >= 14) could
    start.

    Returns
    -------
    (position, size)
        Position of the batch in ``buf`` and its size in bytes (log overhead included), or
        ``(-1, 0)`` when no intact batch starts in the range.
    """
    cdef Py_ssize_t length = buf.shape[0]
    if end < 0 or end > length:
        end = length
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside the buffer [0, {end}]")
    cdef const unsigned char *p = &buf[0] if length > 0 else NULL
    cdef Py_ssize_t pos = start, size
    cdef uint32_t computed
    if length == 0:
        return (-1, 0)
    view = memoryview(buf)
    while True:
        with nogil:
            pos = _next_candidate(p, pos, end, legacy)
        if pos < 0:
            check_mapped(p)
            return (-1, 0)
        size = kl_i32(p + pos + B_LENGTH) + LOG_OVERHEAD
        if p[pos + B_MAGIC] == 2:
            computed = _crc32c_span(view, p, pos + B_ATTRIBUTES, pos + size)
            if computed == kl_u32(p + pos + B_CRC):
                check_mapped(p)
                return (pos, size)
        else:
            computed = zlib.crc32(view[pos + L_MAGIC:pos + size])
            if computed == kl_u32(p + pos + L_CRC):
                check_mapped(p)
                return (pos, size)
        pos += 1
