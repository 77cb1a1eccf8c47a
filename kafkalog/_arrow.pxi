# Included by _core.pyx: Gathering spans into Arrow-style columns.
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
    check_mapped(p)
    return offsets, data, valid
