# Included by _core.pyx: the walk over Kafka 0.7 entries (``.kafka`` files), with CRC32
# validation.
# ----------------------------------------------------------------------------------------------
# Kafka 0.7 entry (big-endian; the table is in _layout.py):
#
#   at    field        type
#   0     length N     int32   bytes after this field
#   4     magic        int8    0 or 1
#   5     attributes   int8    magic 1 only; bits 0-1: codec of a wrapper
#   5/6   crc          uint32  CRC32 (zlib's polynomial, not CRC32C) of the payload
#   9/10  payload
#
# 0.7 took an entry as valid when its length fits in the file and its CRC matches
# (FileMessageSet.recover); its walk stops at the first entry that is not.

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* CRC32 (IEEE 802.3, reflected 0xEDB88320, zlib's) by slicing-by-8: no link to zlib, and
       no GIL needed. */
    static uint32_t kl_crc32_table[8][256];

    static void kl_crc32_init(void) {
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = n;
            for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            kl_crc32_table[0][n] = c;
        }
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = kl_crc32_table[0][n];
            for (int k = 1; k < 8; k++) {
                c = kl_crc32_table[0][c & 0xff] ^ (c >> 8);
                kl_crc32_table[k][n] = c;
            }
        }
    }

    static uint32_t kl_crc32(const unsigned char *p, size_t n) {
        uint32_t c = 0xFFFFFFFFu;
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        while (n >= 8) {
            uint32_t lo, hi;
            memcpy(&lo, p, 4);
            memcpy(&hi, p + 4, 4);
            lo ^= c;
            c = kl_crc32_table[7][lo & 0xff] ^ kl_crc32_table[6][(lo >> 8) & 0xff] ^
                kl_crc32_table[5][(lo >> 16) & 0xff] ^ kl_crc32_table[4][lo >> 24] ^
                kl_crc32_table[3][hi & 0xff] ^ kl_crc32_table[2][(hi >> 8) & 0xff] ^
                kl_crc32_table[1][(hi >> 16) & 0xff] ^ kl_crc32_table[0][hi >> 24];
            p += 8;
            n -= 8;
        }
    #endif
        while (n--) c = kl_crc32_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        return c ^ 0xFFFFFFFFu;
    }
    """
    void kl_crc32_init() noexcept nogil
    uint32_t kl_crc32(const unsigned char *p, size_t n) noexcept nogil

kl_crc32_init()

cdef enum:
    M07_LENGTH = 4          # the length field in front of every entry
    M07_MAGIC = 4
    M07_ATTRIBUTES = 5
    M07_MIN_SIZE_V0 = 5     # magic, crc
    M07_MIN_SIZE_V1 = 6     # magic, attributes, crc
    M07_CODEC_MASK = 3

# Why a 0.7 walk found corruption.
cdef enum:
    E07_NONE = 0
    E07_SIZE = 1
    E07_V1_SIZE = 2
    E07_MAGIC = 3


cdef inline Py_ssize_t _hop07(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                              Py_ssize_t max_entries, int *status, int *err,
                              Py_ssize_t *stop) noexcept nogil:
    """Count the entries in [pos, end) whose length fits and whose header is well formed."""
    cdef Py_ssize_t n = 0
    cdef int32_t size
    cdef int8_t magic
    while True:
        if max_entries >= 0 and n >= max_entries:
            status[0] = WALK_END
            break
        if end - pos < M07_LENGTH:
            status[0] = WALK_END if end == pos else WALK_PARTIAL
            break
        size = kl_i32(p + pos)
        if size < M07_MIN_SIZE_V0:
            status[0] = WALK_CORRUPT
            err[0] = E07_SIZE
            break
        if <Py_ssize_t>size > end - pos - M07_LENGTH:
            status[0] = WALK_PARTIAL
            break
        magic = <int8_t>p[pos + M07_MAGIC]
        if magic == 1:
            if size < M07_MIN_SIZE_V1:
                status[0] = WALK_CORRUPT
                err[0] = E07_V1_SIZE
                break
        elif magic != 0:
            status[0] = WALK_CORRUPT
            err[0] = E07_MAGIC
            break
        n += 1
        pos += M07_LENGTH + size
    stop[0] = pos
    return n


cdef inline Py_ssize_t _fill07(const unsigned char *p, Py_ssize_t pos, Py_ssize_t n,
                               bint validate_crc, Log07Entry *out) noexcept nogil:
    """Fill ``n`` entries from ``pos``; with ``validate_crc``, stop at the first whose CRC32
    does not match and return its index (else ``n``)."""
    cdef Py_ssize_t i
    cdef Py_ssize_t header
    cdef Log07Entry *o
    for i in range(n):
        o = out + i
        o.position = pos
        o.size = kl_i32(p + pos) + M07_LENGTH
        o.magic = <int8_t>p[pos + M07_MAGIC]
        if o.magic == 1:
            o.attributes = <int8_t>p[pos + M07_ATTRIBUTES]
            header = M07_LENGTH + M07_MIN_SIZE_V1
        else:
            o.attributes = 0
            header = M07_LENGTH + M07_MIN_SIZE_V0
        o.codec = o.attributes & M07_CODEC_MASK
        o.crc = kl_u32(p + pos + header - 4)
        o.payload_position = pos + header
        o.payload_size = o.size - <int32_t>header
        if validate_crc:
            o.crc_valid = kl_crc32(p + o.payload_position, <size_t>o.payload_size) == o.crc
            if not o.crc_valid:
                return i
        else:
            o.crc_valid = -1
        pos += o.size
    return n


def walk_log07(const unsigned char[::1] buf, Py_ssize_t start=0, Py_ssize_t end=-1,
               bint validate_crc=True, Py_ssize_t max_entries=-1):
    """Walk the Kafka 0.7 entries in ``buf[start:end]``.

    Returns
    -------
    (entries, status, stop_position, message)
        ``entries``: array of ``LOG07_ENTRY_DTYPE`` (positions are indexes into ``buf``), the
        valid ones before the first invalid entry; ``status``: one of ``_layout.WALK_*``
        (``WALK_INVALID``: a CRC32 mismatch, only with ``validate_crc``); ``stop_position``:
        where the walk stopped (the first invalid entry, or ``end``); ``message``: why, for
        ``WALK_CORRUPT`` and ``WALK_INVALID``, else None.
    """
    cdef Py_ssize_t length = buf.shape[0]
    if end < 0 or end > length:
        end = length
    if start < 0 or start > end:
        raise ValueError(f"start {start} outside the buffer [0, {end}]")
    cdef const unsigned char *p = &buf[0] if length > 0 else NULL
    cdef int status = WALK_END
    cdef int err = E07_NONE
    cdef Py_ssize_t stop = start
    cdef Py_ssize_t n = 0
    cdef Py_ssize_t n_valid = 0
    cdef uint32_t computed
    if length > 0:
        with nogil:
            n = _hop07(p, start, end, max_entries, &status, &err, &stop)
    entries = np.empty(n, dtype=LOG07_ENTRY_DTYPE)
    cdef Log07Entry *out = <Log07Entry *>cnp.PyArray_DATA(entries)
    if n > 0:
        with nogil:
            n_valid = _fill07(p, start, n, validate_crc, out)
    message = None
    if status == WALK_CORRUPT:
        message = _walk07_error(err, p, stop)
    if n_valid < n:
        stop = out[n_valid].position
        status = WALK_INVALID
        computed = kl_crc32(p + out[n_valid].payload_position, <size_t>out[n_valid].payload_size)
        message = (f"message is corrupt: stored CRC32 {out[n_valid].crc} does not match its "
                   f"payload's {computed}")
        entries = entries[:n_valid]
    check_mapped(p)
    return entries, status, stop, message


cdef object _walk07_error(int err, const unsigned char *p, Py_ssize_t pos):
    cdef int32_t size = kl_i32(p + pos)
    if err == E07_SIZE:
        return f"message size {size} is smaller than the minimum message header ({M07_MIN_SIZE_V0})"
    if err == E07_V1_SIZE:
        return f"message size {size} is smaller than the magic 1 message header ({M07_MIN_SIZE_V1})"
    return f"unknown magic byte {<int8_t>p[pos + M07_MAGIC]}"
