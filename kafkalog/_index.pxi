# Included by _core.pyx: Index search: the hot/cold "warm entries" binary search.
# ----------------------------------------------------------------------------------------------
# Index search (hot/cold "warm entries" binary search, FORMAT.md)

cdef enum:
    OFFSET_KEY = 0
    OFFSET_VALUE = 1
    TIME_KEY = 2
    TIME_VALUE = 3

cdef inline int _entry_size(int field) noexcept nogil:
    return 8 if field <= OFFSET_VALUE else 12


cdef inline int64_t _entry_value(const unsigned char *p, Py_ssize_t slot, int field) noexcept nogil:
    if field == OFFSET_KEY:
        return kl_i32(p + slot * 8)
    if field == OFFSET_VALUE:
        return kl_i32(p + slot * 8 + 4)
    if field == TIME_KEY:
        return kl_i64(p + slot * 12)
    return kl_i32(p + slot * 12 + 8)


cdef enum:
    _GUESS_WINDOW = 8


cdef inline Py_ssize_t _binary_search(const unsigned char *p, Py_ssize_t entries, int field,
                                      int64_t target, Py_ssize_t lo, Py_ssize_t hi,
                                      bint upper) noexcept nogil:
    cdef Py_ssize_t mid, guess, a, b
    cdef int64_t found, first, last
    cdef double span
    cdef bint above
    # Keys grow about linearly (an entry every index.interval.bytes): the slot interpolated
    # between the ends and a window around it usually bound the answer, so ~5 probes replace
    # ~log2(n) dependent ones. Only narrows [lo, hi]: the answer is the same for sorted keys.
    # In doubles: the int64 difference of two time-index keys can overflow, and a guess
    # outside [lo, hi] would read outside the index (a damaged index has any keys).
    if hi - lo > 4 * _GUESS_WINDOW:
        first = _entry_value(p, lo, field)
        last = _entry_value(p, hi, field)
        span = <double>last - <double>first
        if first < target < last and span > 0:
            guess = lo + <Py_ssize_t>((<double>target - <double>first) / span
                                      * <double>(hi - lo))
            a = guess - _GUESS_WINDOW
            b = guess + _GUESS_WINDOW
            if a > lo and _entry_value(p, a, field) <= target:
                lo = a
            if b < hi and _entry_value(p, b, field) > target:
                hi = b - 1
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        found = _entry_value(p, mid, field)
        if found == target:       # rare for most targets: predicted well
            return mid
        # selects, not branches: a random target mispredicts half of the branches
        above = found > target
        hi = mid - 1 if above else hi
        lo = lo if above else mid
    # the loop can end on a key equal to the target that it never probed (the range's
    # first): that is the smallest key >= target
    if not upper or _entry_value(p, lo, field) == target:
        return lo
    return -1 if lo == entries - 1 else lo + 1


cdef inline Py_ssize_t _search(const unsigned char *p, Py_ssize_t entries, int field,
                               int64_t target, bint upper) noexcept nogil:
    """Largest slot with value <= target (upper: smallest slot with value >= target); -1 if none."""
    if entries == 0:
        return -1
    cdef Py_ssize_t warm = 8192 // _entry_size(field)
    cdef Py_ssize_t first_hot = entries - 1 - warm
    if first_hot < 0:
        first_hot = 0
    if _entry_value(p, first_hot, field) < target:
        return _binary_search(p, entries, field, target, first_hot, entries - 1, upper)
    if _entry_value(p, 0, field) > target:
        return 0 if upper else -1
    return _binary_search(p, entries, field, target, 0, first_hot, upper)


cdef const unsigned char *_index_pointer(const unsigned char[::1] buf, Py_ssize_t entries,
                                         int field) except? NULL:
    if field < OFFSET_KEY or field > TIME_VALUE:
        raise ValueError(f"unknown index field {field}")
    if entries < 0 or entries * _entry_size(field) > buf.shape[0]:
        raise ValueError(f"{entries} entries do not fit a buffer of {buf.shape[0]} bytes")
    return &buf[0] if buf.shape[0] > 0 else NULL


def index_search(const unsigned char[::1] buf, Py_ssize_t entries, int field, int64_t target,
                 bint upper=False):
    """Slot of the largest entry <= ``target`` in ``field`` (``upper``: smallest >= target).

    ``buf`` holds ``entries`` index entries from its start; ``field`` is one of
    ``_layout.OFFSET_KEY``, ``OFFSET_VALUE``, ``TIME_KEY``, ``TIME_VALUE`` (offsets are relative
    to the index's base offset). Returns -1 when there is no such entry.
    """
    cdef const unsigned char *p = _index_pointer(buf, entries, field)
    return _search(p, entries, field, target, upper)


def index_search_many(const unsigned char[::1] buf, Py_ssize_t entries, int field,
                      const int64_t[::1] targets, bint upper=False):
    """``index_search`` for every target; returns an int64 array of slots (-1 = none)."""
    cdef const unsigned char *p = _index_pointer(buf, entries, field)
    cdef Py_ssize_t i, n = targets.shape[0]
    slots = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] out = slots
    with nogil:
        for i in range(n):
            out[i] = _search(p, entries, field, targets[i], upper)
    return slots


def index_entries(const unsigned char[::1] buf, Py_ssize_t entries, int field_kind):
    """All entries as two int64 arrays: (relative offsets, positions) for an offset index
    (``field_kind`` OFFSET_KEY) or (timestamps, relative offsets) for a time index (TIME_KEY)."""
    if field_kind not in (OFFSET_KEY, TIME_KEY):
        raise ValueError(f"field_kind must be OFFSET_KEY or TIME_KEY, not {field_kind}")
    cdef const unsigned char *p = _index_pointer(buf, entries, field_kind)
    keys = np.empty(entries, dtype=np.int64)
    values = np.empty(entries, dtype=np.int64)
    cdef int64_t[::1] k = keys
    cdef int64_t[::1] v = values
    cdef Py_ssize_t i
    with nogil:
        for i in range(entries):
            k[i] = _entry_value(p, i, field_kind)
            v[i] = _entry_value(p, i, field_kind + 1)
    return keys, values


def index_valid_entries(const unsigned char[::1] buf, int entry_size):
    """Entries up to and including the last one that is not all zero.

    A crashed broker leaves the active segment's index at its preallocated size with a zero
    tail; this finds where the written entries end. A trailing partial entry is ignored.
    """
    if entry_size <= 0:
        raise ValueError("entry_size must be positive")
    cdef Py_ssize_t n = buf.shape[0] // entry_size
    cdef Py_ssize_t end = n * entry_size
    cdef const unsigned char *p = &buf[0] if buf.shape[0] > 0 else NULL
    cdef Py_ssize_t i = end
    cdef uint64_t word
    with nogil:
        # Eight bytes at a time while aligned to the end, then byte by byte.
        while i >= 8:
            memcpy(&word, p + i - 8, 8)
            if word != 0:
                break
            i -= 8
        while i > 0 and p[i - 1] == 0:
            i -= 1
    return (i + entry_size - 1) // entry_size


def index_lookup(object buf, Py_ssize_t entries, int field, int64_t target, bint upper=False):
    """``index_search`` plus the entry found: ``(slot, first, second)`` where (first, second)
    is (relative offset, position) for an offset index and (timestamp, relative offset) for a
    time index; ``(-1, 0, 0)`` when there is no such entry.

    Takes the buffer through a bare ``Py_buffer`` rather than a typed memoryview: this is the
    one-lookup-per-call path, where creating a memoryview object would cost more than the search.
    """
    if field < OFFSET_KEY or field > TIME_VALUE:
        raise ValueError(f"unknown index field {field}")
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    cdef const unsigned char *p = <const unsigned char *>view.buf
    cdef Py_ssize_t slot
    cdef int kind = OFFSET_KEY if field <= OFFSET_VALUE else TIME_KEY
    try:
        if entries < 0 or entries * _entry_size(field) > view.len:
            raise ValueError(f"{entries} entries do not fit a buffer of {view.len} bytes")
        slot = _search(p, entries, field, target, upper)
        if slot < 0:
            return (-1, 0, 0)
        return (slot, _entry_value(p, slot, kind), _entry_value(p, slot, kind + 1))
    finally:
        PyBuffer_Release(&view)
