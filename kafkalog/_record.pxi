# Included by _core.pyx: Record objects made from decoded columns.
# ----------------------------------------------------------------------------------------------
# Record objects

from cpython.object cimport PyTypeObject

cdef extern from *:
    """
    #include <structmember.h>
    /* Expose an object field of a cdef class as a plain member (a slot): CPython (3.11+)
       specializes reading a member to a load (LOAD_ATTR_SLOT), where a property costs a call
       through the descriptor. READONLY: the descriptor refuses set and delete (a deleted
       member is NULL, which the C code reading fields must never meet; loads are specialized
       all the same); the type's __setattr__ sets fields. The PyMemberDef lives as long as the
       type (never freed). */
    static int kl_add_slot(PyTypeObject *type, const char *name, Py_ssize_t offset,
                           const char *doc) {
        PyMemberDef *def = (PyMemberDef *)PyMem_Calloc(1, sizeof(PyMemberDef));
        PyObject *descr;
        int rc;
        if (def == NULL) { PyErr_NoMemory(); return -1; }
        def->name = name;
        def->type = T_OBJECT_EX;
        def->offset = offset;
        def->flags = READONLY;
        def->doc = doc;
        descr = PyDescr_NewMember(type, def);
        if (descr == NULL) return -1;
        rc = PyDict_SetItemString(type->tp_dict, name, descr);
        Py_DECREF(descr);
        PyType_Modified(type);
        return rc;
    }
    """
    int kl_add_slot(PyTypeObject *type, const char *name, Py_ssize_t offset,
                    const char *doc) except -1

cdef extern from *:
    """
    /* Objects rewritten in place when the caller's reference (borrowed here) is their only
       one, so no one can see them change: a Record an iterator made and its user dropped,
       with its int and bytes (CPython's zip reuses its result tuple on the same rule). A loop
       that drops each record before asking for the next then allocates and frees nothing per
       record, where it made and freed five objects (a third of its time). */
    static int kl_only_reference(PyObject *o) {
        return Py_REFCNT(o) == 1;
    }

    /* The next item of iterator ``it`` (a new reference), ``end`` (new) once it is exhausted,
       or NULL with the error it raised; ``*running`` set meanwhile (as a generator's
       gi_running), cleared on every way out. */
    static PyObject *kl_next_running(PyObject *it, PyObject *end, int *running) {
        PyObject *r;
        *running = 1;
        r = (*Py_TYPE(it)->tp_iternext)(it);
        *running = 0;
        if (r != NULL) return r;
        if (PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_StopIteration)) return NULL;
            PyErr_Clear();
        }
        Py_INCREF(end);
        return end;
    }

    /* A new reference to an int of v: `spare` itself, rewritten, when it is an int of as many
       30-bit digits (CPython 3.11's layout; other versions always get a new int). Never for
       a value of CPython's shared small ints. */
    static PyObject *kl_int_reusing(PyObject *spare, int64_t v) {
    #if PY_VERSION_HEX < 0x030C0000 && PyLong_SHIFT == 30 && !defined(PYPY_VERSION)
        if (Py_REFCNT(spare) == 1 && PyLong_CheckExact(spare)) {
            if (Py_SIZE(spare) == 2 && v >= ((int64_t)1 << 30) && v < ((int64_t)1 << 60)) {
                ((PyLongObject *)spare)->ob_digit[0] = (digit)(v & PyLong_MASK);
                ((PyLongObject *)spare)->ob_digit[1] = (digit)(v >> PyLong_SHIFT);
                Py_INCREF(spare);
                return spare;
            }
            if (Py_SIZE(spare) == 1 && v > 256 && v < ((int64_t)1 << 30)) {
                ((PyLongObject *)spare)->ob_digit[0] = (digit)v;
                Py_INCREF(spare);
                return spare;
            }
        }
    #endif
        return PyLong_FromLongLong(v);
    }

    /* A new reference to bytes of p[0:n]: `spare` itself, rewritten (and its cached hash
       reset), when it is bytes of length n. */
    static PyObject *kl_bytes_reusing(PyObject *spare, const char *p, Py_ssize_t n) {
    #if PY_VERSION_HEX < 0x030C0000 && !defined(PYPY_VERSION)
        if (Py_REFCNT(spare) == 1 && PyBytes_CheckExact(spare) && Py_SIZE(spare) == n) {
            memcpy(PyBytes_AS_STRING(spare), p, (size_t)n);
    _Py_COMP_DIAG_PUSH
    _Py_COMP_DIAG_IGNORE_DEPR_DECLS
            ((PyBytesObject *)spare)->ob_shash = -1;     /* (deprecated to read, not gone) */
    _Py_COMP_DIAG_POP
            Py_INCREF(spare);
            return spare;
        }
    #endif
        return PyBytes_FromStringAndSize(p, n);
    }
    """
    bint kl_only_reference(PyObject *o)
    object kl_next_running(object it, object end, bint *running)
    object kl_int_reusing(PyObject *spare, int64_t v)
    object kl_bytes_reusing(PyObject *spare, const char *p, Py_ssize_t n)
    # Where Cython puts the fields of Record (its struct name is Cython's, fixed by the module
    # and class names: a rename fails to compile rather than misbehave).
    Py_ssize_t _AT_OFFSET "offsetof(struct __pyx_obj_8kafkalog_5_core_Record, offset_)"
    Py_ssize_t _AT_TIMESTAMP "offsetof(struct __pyx_obj_8kafkalog_5_core_Record, timestamp_)"
    Py_ssize_t _AT_TYPE "offsetof(struct __pyx_obj_8kafkalog_5_core_Record, timestamp_type_)"
    Py_ssize_t _AT_KEY "offsetof(struct __pyx_obj_8kafkalog_5_core_Record, key_)"
    Py_ssize_t _AT_VALUE "offsetof(struct __pyx_obj_8kafkalog_5_core_Record, value_)"
    Py_ssize_t _AT_HEADERS "offsetof(struct __pyx_obj_8kafkalog_5_core_Record, headers_)"


# Not tracked by the cycle collector: a Record refers only to its field values, so it cannot
# be part of a reference cycle unless a field is set to something that refers back to it;
# tracking a million decoded records would make every collection walk them all.
@cython.no_gc
@cython.freelist(1024)
cdef class Record:
    """One record: ``offset``, ``timestamp`` (ms), ``timestamp_type``, ``key``, ``value``
    (bytes or None) and ``headers`` (tuple of ``(str, bytes | None)``).

    Construct one for appends as ``Record(key=..., value=..., timestamp=None, headers=())``.
    Decoded records get their fields in one pass over a decoded batch, in C; the fields are
    plain members (as the twin's ``__slots__``), which the interpreter reads without a call:
    in a loop that reads every record's fields that beats building them on first access.
    """
    # Exposed under the names without "_" by kl_add_slot below, read-only members: never
    # NULL (no deletion, even through the descriptor); __setattr__ sets them.
    cdef object offset_
    cdef object timestamp_
    cdef object timestamp_type_
    cdef object key_
    cdef object value_
    cdef object headers_

    def __init__(self, key=None, value=None, timestamp=None, headers=(), offset=None,
                 timestamp_type=0):
        headers = tuple(headers)
        self.key_ = key
        self.value_ = value
        self.headers_ = headers
        self.timestamp_ = timestamp
        self.offset_ = offset
        self.timestamp_type_ = timestamp_type

    def __setattr__(self, name, value):
        if name == "key":
            self.key_ = value
        elif name == "value":
            self.value_ = value
        elif name == "offset":
            self.offset_ = value
        elif name == "timestamp":
            self.timestamp_ = value
        elif name == "headers":
            self.headers_ = value
        elif name == "timestamp_type":
            self.timestamp_type_ = value
        else:
            raise AttributeError(f"'Record' object has no attribute {name!r}")

    def __delattr__(self, name):
        raise AttributeError(f"Record attribute {name!r} cannot be deleted")

    def _fields(self):
        return (self.offset_, self.timestamp_, self.timestamp_type_, self.key_, self.value_,
                self.headers_)

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return self._fields() == (<Record>other)._fields()

    def __hash__(self):
        return hash((self.offset_, self.timestamp_, self.key_, self.value_))

    def __reduce__(self):
        return (Record, (self.key_, self.value_, self.timestamp_, self.headers_, self.offset_,
                         self.timestamp_type_))

    def __repr__(self):
        return (f"Record(offset={self.offset_}, timestamp={self.timestamp_}, "
                f"key={self.key_!r}, value={self.value_!r:.60}, headers={self.headers_!r:.60})")


kl_add_slot(<PyTypeObject *>Record, "offset", _AT_OFFSET, "offset (None until assigned)")
kl_add_slot(<PyTypeObject *>Record, "timestamp", _AT_TIMESTAMP, "timestamp (ms) or None")
kl_add_slot(<PyTypeObject *>Record, "timestamp_type", _AT_TYPE, "TimestampType (or its int)")
kl_add_slot(<PyTypeObject *>Record, "key", _AT_KEY, "key bytes or None")
kl_add_slot(<PyTypeObject *>Record, "value", _AT_VALUE, "value bytes or None")
kl_add_slot(<PyTypeObject *>Record, "headers", _AT_HEADERS, "tuple of (str, bytes | None)")


cdef inline object _span_obj(const unsigned char *p, int64_t pos, int32_t length,
                             PyObject *spare=<PyObject *>None):
    if length < 0:
        return None
    return kl_bytes_reusing(spare, <const char *>(p + pos), length)


cdef object _headers_of(const unsigned char *p, const HeaderInfo *h, Py_ssize_t count):
    cdef Py_ssize_t i
    out = []
    for i in range(count):
        out.append((_span_obj(p, h[i].key_pos, h[i].key_len).decode("utf-8", "replace"),
                    _span_obj(p, h[i].value_pos, h[i].value_len)))
    return tuple(out)


cdef class _RecordMaker:
    """Makes the Records of an iterator, one per call: the Record made two calls ago is made
    again in place (offset, timestamp, key and value too) when the iterator holds its only
    reference, as in a loop that drops each record before asking for the next.

    ``_running`` is set while a ``next`` runs, as a generator's ``gi_running``: a record's
    allocations can run the garbage collector, and so finalizers and ``gc.callbacks`` that
    may advance the same iterator (or another thread they let run), which would find the
    rows, headers and spare records midway; they get "already executing" instead."""
    cdef bint _running
    cdef int64_t _last_ts
    cdef object _ts                   # the int of _last_ts, once made
    cdef Record _before               # the Record made before _last
    cdef Record _last

    @cython.final
    cdef inline Record _make(self, const unsigned char *p, const RecordInfo *r,
                             bint batch_timestamp, object timestamp_type,
                             const HeaderInfo *headers):
        """A Record of one decoded row (spans index ``p``; header rows from ``headers``),
        with the timestamp of the row, or with ``_ts`` (``batch_timestamp``)."""
        cdef Record rec
        if kl_only_reference(<PyObject *>self._before):
            rec = self._before
        else:
            rec = Record.__new__(Record)
        if not batch_timestamp and (r.timestamp != self._last_ts or self._ts is None):
            # (records of one producer batch often share a ms: they share its int)
            self._ts = kl_int_reusing(<PyObject *>rec.timestamp_, r.timestamp)
            self._last_ts = r.timestamp
        rec.timestamp_ = self._ts
        rec.offset_ = kl_int_reusing(<PyObject *>rec.offset_, r.offset)
        rec.timestamp_type_ = timestamp_type
        rec.key_ = _span_obj(p, r.key_pos, r.key_len, <PyObject *>rec.key_)
        rec.value_ = _span_obj(p, r.value_pos, r.value_len, <PyObject *>rec.value_)
        rec.headers_ = _headers_of(p, headers + r.header_start, r.header_count) \
            if r.header_count else ()
        self._before = self._last
        self._last = rec
        return rec

    @cython.final
    cdef inline void _drop_spares(self) noexcept:
        self._before = self._last = None


cdef int _check_spans(const RecordInfo *r, Py_ssize_t n, Py_ssize_t length,
                      const HeaderInfo *h, Py_ssize_t n_headers) except -1:
    cdef Py_ssize_t i, j
    for i in range(n):
        if (r[i].key_len > 0 and (r[i].key_pos < 0 or r[i].key_pos + r[i].key_len > length)) or \
                (r[i].value_len > 0 and (r[i].value_pos < 0 or
                                         r[i].value_pos + r[i].value_len > length)):
            raise ValueError(f"record {i} lies outside the buffer")
        if r[i].header_count:
            if r[i].header_count < 0 or r[i].header_start < 0 or \
                    r[i].header_start + r[i].header_count > n_headers:
                raise ValueError(f"record {i} has headers outside the header rows")
            for j in range(r[i].header_start, r[i].header_start + r[i].header_count):
                if h[j].key_len < 0 or h[j].key_pos < 0 or h[j].key_pos + h[j].key_len > length \
                        or (h[j].value_len > 0 and (h[j].value_pos < 0 or
                                                    h[j].value_pos + h[j].value_len > length)):
                    raise ValueError(f"record {i} has a header outside the buffer")
    return 0


@cython.final
cdef class _TableRecords(_RecordMaker):
    """Iterator over the rows of a decoded table as ``Record`` objects, each made when asked
    for: in a loop that drops them, the memory of the last few records (and their keys and
    values) is reused while hot, where a list of a table's records holds them all (the cost
    of ``Log.records()`` was mostly those cache misses)."""
    cdef Py_buffer _view
    cdef bint _held
    cdef object _arrays               # the record and header rows and types, kept alive
    cdef const RecordInfo *_rows
    cdef const HeaderInfo *_headers
    cdef const int8_t *_types
    cdef Py_ssize_t _i
    cdef Py_ssize_t _n
    cdef object _none                 # the type_objects
    cdef object _create
    cdef object _append

    def __cinit__(self):
        self._held = False
        self._i = 0
        self._n = 0

    cdef void _finish(self) noexcept:
        if self._held:
            PyBuffer_Release(&self._view)
            self._held = False
        self._arrays = None
        self._n = 0
        self._drop_spares()

    def __dealloc__(self):
        if self._held:
            PyBuffer_Release(&self._view)

    def __iter__(self):
        return self

    def __next__(self):
        if self._running:
            raise ValueError("record iterator already executing")
        self._running = True
        try:
            return self._next()
        finally:
            self._running = False

    cdef object _next(self):
        cdef const RecordInfo *r
        if self._i >= self._n:
            self._finish()
            raise StopIteration
        r = self._rows + self._i
        kind = self._types[self._i]
        self._i += 1
        rec = self._make(<const unsigned char *>self._view.buf, r, False,
                         self._create if kind == 0 else
                         (self._append if kind == 1 else self._none), self._headers)
        check_mapped(self._view.buf)        # not a record of bytes lost meanwhile
        return rec


def table_records(data, records, headers, timestamp_types, type_objects):
    """An iterator of ``Record`` for rows of a ``RECORD_DTYPE`` array whose positions index
    ``data`` (``headers``: the ``HEADER_DTYPE`` rows ``header_start`` / ``header_count``
    point into), each made when the iterator reaches it.

    ``timestamp_types`` holds each record's type (-1, 0, 1) and ``type_objects`` the three
    values to use for them. Keys, values and headers are copied out of ``data``.
    """
    cdef cnp.ndarray arr = np.ascontiguousarray(records, dtype=RECORD_DTYPE)
    cdef cnp.ndarray harr = np.ascontiguousarray(headers, dtype=HEADER_DTYPE)
    cdef cnp.ndarray tarr = np.ascontiguousarray(timestamp_types, dtype=np.int8)
    cdef Py_ssize_t n = arr.shape[0]
    if tarr.shape[0] != n:
        raise ValueError("timestamp_types and records differ in length")
    cdef _TableRecords it = _TableRecords.__new__(_TableRecords)
    PyObject_GetBuffer(data, &it._view, PyBUF_SIMPLE)
    it._held = True
    it._rows = <const RecordInfo *>cnp.PyArray_DATA(arr)
    it._headers = <const HeaderInfo *>cnp.PyArray_DATA(harr)
    _check_spans(it._rows, n, it._view.len, it._headers, harr.shape[0])
    it._types = <const int8_t *>cnp.PyArray_DATA(tarr)
    it._arrays = (arr, harr, tarr)
    it._none, it._create, it._append = type_objects[0], type_objects[1], type_objects[2]
    it._n = n
    return it


def make_records(data, records, headers, timestamp_types, type_objects):
    """``table_records`` as a list."""
    return list(table_records(data, records, headers, timestamp_types, type_objects))


# ----------------------------------------------------------------------------------------------
# One batch's records, for ``for r in batch`` (the loop users write)

cdef extern from "numpy/arrayscalars.h":
    ctypedef struct PyVoidScalarObject:
        char *obval
        cnp.PyArray_Descr *descr

cdef object _np_void = np.void
cdef object _BATCH_DESCR = np.dtype(BATCH_DTYPE)

# The scratch table a batch is decoded into, kept for the next batch (taken while in use, so
# a nested or concurrent iteration allocates its own).
cdef RecordInfo *_scratch = NULL
cdef Py_ssize_t _scratch_capacity = 0


cdef object _batch_info(object row, const BatchInfo **info):
    """Set ``info`` to the BatchInfo of a walked row (a numpy void of BATCH_DTYPE, read in
    place, or anything that converts to one); returns what must stay alive meanwhile."""
    cdef cnp.ndarray arr
    if type(row) is _np_void and \
            <object>(<PyVoidScalarObject *>row).descr is _BATCH_DESCR:
        info[0] = <const BatchInfo *>(<PyVoidScalarObject *>row).obval
        return row
    arr = np.ascontiguousarray(row, dtype=BATCH_DTYPE).reshape(-1)
    if arr.shape[0] != 1:
        raise ValueError("one walked batch row expected")
    info[0] = <const BatchInfo *>cnp.PyArray_DATA(arr)
    return arr


@cython.final
cdef class _BatchRecords(_RecordMaker):
    """Iterator over the records of one batch, or of several batches of a buffer in turn,
    each decoded into a scratch table when the iteration reaches it: each ``Record`` is made
    when asked for, so in a loop that drops them the same few objects' memory is reused
    while hot. A batch the kernel does not decode itself (``_load``) is handed to
    ``_fallback``, whose iterator is followed. Holds a view of the buffer until exhausted or
    dropped."""
    cdef Py_buffer _view
    cdef bint _held
    cdef RecordInfo *_rows
    cdef Py_ssize_t _capacity
    cdef HeaderTable _headers
    cdef Py_ssize_t _i
    cdef Py_ssize_t _n
    cdef bint _log_append
    cdef object _kind
    cdef object _create
    cdef object _append
    # the batches still to come (fetch_records): their rows, the kernel's or the fallback's
    cdef object _arrays
    cdef const BatchInfo *_batches
    cdef const int64_t *_order
    cdef const uint8_t *_whole
    cdef Py_ssize_t _k
    cdef Py_ssize_t _n_batches
    cdef object _fallback
    cdef object _sub

    def __cinit__(self):
        self._held = False
        self._rows = NULL
        self._capacity = 0
        self._headers.rows = NULL
        self._headers.count = 0
        self._headers.capacity = 0
        self._i = 0
        self._n = 0
        self._k = 0
        self._n_batches = 0

    cdef void _finish(self) noexcept:
        """Release the buffer and give the scratch table back (or free it)."""
        global _scratch, _scratch_capacity
        if self._held:
            PyBuffer_Release(&self._view)
            self._held = False
        free(self._headers.rows)
        self._headers.rows = NULL
        if _scratch == NULL:
            _scratch = self._rows
            _scratch_capacity = self._capacity
        else:
            free(self._rows)
        self._rows = NULL
        self._capacity = 0
        self._n = 0
        self._n_batches = 0
        self._arrays = None
        self._fallback = None
        self._sub = None
        self._drop_spares()

    def __dealloc__(self):
        self._finish()

    cdef int _load(self, const BatchInfo *b) except -1:
        """Decode batch ``b`` into the scratch table and point the iteration at its records:
        1, or 0 (nothing loaded) when it is not an uncompressed v2 batch whose header and
        records all check out (header fields, every record, control record keys, as
        ``decode_batches`` checks them)."""
        global _scratch, _scratch_capacity
        self._i = 0
        self._n = 0
        if b.magic != 2 or b.position < 0 or b.size < LOG_OVERHEAD + V2_MIN_SIZE or \
                b.position + b.size > self._view.len:
            return 0
        cdef const unsigned char *p = <const unsigned char *>self._view.buf
        cdef const unsigned char *h = p + b.position
        if isinstance(self._view.obj, FileMapping) and (
                kl_i64(h) != b.base_offset or kl_u32(h + B_CRC) != b.crc or
                (kl_crc_hw and b.crc_valid > 0 and
                 _crc32c_at(h + B_ATTRIBUTES, b.size - B_ATTRIBUTES) != b.crc)):
            # Not the batch walked: a writer cut the file since (its bytes past the new end
            # read as zeros in the mapping's last page, without a fault) and maybe appended
            # other batches at the same place. (The batch is decoded long after the walk.)
            raise (<FileMapping>self._view.obj)._shrunk()
        cdef int16_t attributes = kl_i16(h + B_ATTRIBUTES)
        if (attributes & 0x07) != 0 or _check_v2_header(h, b.size) != R_OK:
            return 0
        cdef Py_ssize_t count = kl_i32(h + B_RECORD_COUNT), i
        if self._rows == NULL:
            self._rows = _scratch
            self._capacity = _scratch_capacity
            _scratch = NULL
            _scratch_capacity = 0
        if self._capacity < count:
            free(self._rows)
            self._capacity = 0
            self._rows = <RecordInfo *>malloc(max(count, 256) * sizeof(RecordInfo))
            if self._rows == NULL:
                raise MemoryError()
            self._capacity = max(count, 256)
        self._headers.count = 0
        cdef Py_ssize_t err_pos = 0
        if _decode_region(p, b.position + B_RECORDS, b.position + b.size, kl_i64(h),
                          kl_i32(h + B_LAST_OFFSET_DELTA), kl_i64(h + B_BASE_TIMESTAMP),
                          count, self._rows, &self._headers, &err_pos) != R_OK:
            return 0
        if attributes & 0x20:             # control records carry a (version, type) key
            for i in range(count):
                if self._rows[i].key_len < 4:
                    return 0
        if attributes & 0x08:             # LogAppendTime: every record has the max timestamp
            self._log_append = True
            self._last_ts = kl_i64(h + B_MAX_TIMESTAMP)
            self._ts = self._last_ts
            self._kind = self._append
        else:
            self._log_append = False
            self._kind = self._create
        self._n = count
        return 1

    cdef int _advance(self) except -1:
        """Move to the next of the batches to come: 1 (its records loaded, or ``_sub`` set
        to the fallback's iterator), or 0 when there is none."""
        cdef int64_t index
        if self._k >= self._n_batches:
            return 0
        index = self._order[self._k]
        self._k += 1
        if not (self._whole[self._k - 1] and self._load(self._batches + index)):
            self._sub = iter(self._fallback(index))
        return 1

    def __iter__(self):
        return self

    def __next__(self):
        if self._running:
            raise ValueError("record iterator already executing")
        self._running = True
        try:
            return self._next()
        finally:
            self._running = False

    cdef object _next(self):
        cdef const RecordInfo *r
        while self._i >= self._n:
            if self._sub is not None:
                made = next(self._sub, None)
                if made is not None:
                    return made
                self._sub = None
            if not self._advance():
                self._finish()
                raise StopIteration
        r = self._rows + self._i
        self._i += 1
        rec = self._make(<const unsigned char *>self._view.buf, r, self._log_append,
                         self._kind, self._headers.rows)
        check_mapped(self._view.buf)        # not a record of bytes lost meanwhile
        return rec


cdef _BatchRecords _batch_records_of(buf, type_objects):
    cdef _BatchRecords it = _BatchRecords.__new__(_BatchRecords)
    PyObject_GetBuffer(buf, &it._view, PyBUF_SIMPLE)
    it._held = True
    it._create, it._append = type_objects[1], type_objects[2]
    return it


def batch_records(buf, row, type_objects):
    """The records of one walked batch (a ``BATCH_DTYPE`` row of ``buf``): an iterator of
    ``Record``, or None when the batch is not an uncompressed v2 batch whose header and
    records all check out (the caller then takes the general path, ``decode_batches``, which
    also raises the located error for a bad one).

    The whole batch is decoded and checked first, as ``decode_batches`` does it (header
    fields, every record, control record keys), into a scratch table reused from one batch
    to the next; ``type_objects`` as for ``make_records``.
    """
    cdef const BatchInfo *b = NULL
    keep = _batch_info(row, &b)
    cdef _BatchRecords it = _batch_records_of(buf, type_objects)
    if not it._load(b):
        return None
    return it


def fetch_records(buf, batches, rows, whole, type_objects, fallback):
    """The records of the batches ``rows`` (indexes into ``batches``, the ``BATCH_DTYPE``
    walk of ``buf``), in that order, as one iterator of ``Record``: a batch whose ``whole``
    flag is set is made as ``batch_records`` makes it, any other batch, and one that
    ``batch_records`` would refuse, by iterating ``fallback(index)``. Each batch is decoded
    and checked when the iteration reaches it (a consumer's fetch: the Log layer does no
    work per batch).
    """
    cdef cnp.ndarray barr = np.ascontiguousarray(batches, dtype=BATCH_DTYPE)
    cdef cnp.ndarray order = np.ascontiguousarray(rows, dtype=np.int64)
    cdef cnp.ndarray flags = np.ascontiguousarray(whole, dtype=np.uint8)
    cdef Py_ssize_t n = order.shape[0], i
    if flags.shape[0] != n:
        raise ValueError("rows and whole differ in length")
    cdef const int64_t *o = <const int64_t *>cnp.PyArray_DATA(order)
    for i in range(n):
        if o[i] < 0 or o[i] >= barr.shape[0]:
            raise ValueError(f"row {o[i]} is not a batch of the walk")
    cdef _BatchRecords it = _batch_records_of(buf, type_objects)
    it._arrays = (barr, order, flags)
    it._batches = <const BatchInfo *>cnp.PyArray_DATA(barr)
    it._order = o
    it._whole = <const uint8_t *>cnp.PyArray_DATA(flags)
    it._n_batches = n
    it._fallback = fallback
    return it


@cython.final
cdef class _Chained:
    """The iterator ``chained`` returns."""
    cdef object _source
    cdef object _active
    cdef bint _running

    def __iter__(self):
        return self

    def __next__(self):
        if self._running:
            raise ValueError("chained iterator already executing")
        while self._source is not None:
            if self._active is None:
                iterable = kl_next_running(self._source, _END, &self._running)
                if iterable is _END:
                    self._source = None
                    break
                self._running = True
                try:
                    self._active = iter(iterable)
                finally:
                    self._running = False
            item = kl_next_running(self._active, _END, &self._running)
            if item is not _END:
                return item
            self._active = None
        raise StopIteration


cdef object _END = object()


def chained(iterables):
    """``itertools.chain.from_iterable(iterables)`` (``iterables`` an iterator), with a
    generator's rule for a second caller: "already executing" while a ``next`` runs.
    (itertools' chain, re-entered from a finalizer while it takes its next iterable, drops
    the rest of the source.)"""
    cdef _Chained it = _Chained.__new__(_Chained)
    it._source = iterables
    return it


def span_bytes(const unsigned char[::1] buf, const int64_t[::1] positions,
               const int32_t[::1] lengths):
    """A list of ``bytes`` (None where a length is negative) for the spans of ``buf``: the
    keys of many records at once, for dictionaries keyed by them (compaction)."""
    cdef Py_ssize_t n = positions.shape[0], i, length = buf.shape[0]
    if lengths.shape[0] != n:
        raise ValueError("positions and lengths differ in length")
    cdef const unsigned char *p = &buf[0] if length > 0 else NULL
    cdef list out = []
    for i in range(n):
        if lengths[i] < 0:
            out.append(None)
        else:
            if positions[i] < 0 or positions[i] + lengths[i] > length:
                raise ValueError(f"span {i} lies outside the buffer")
            out.append(PyBytes_FromStringAndSize(<const char *>(p + positions[i])
                                                 if lengths[i] else NULL, lengths[i]))
    check_mapped(p)
    return out
