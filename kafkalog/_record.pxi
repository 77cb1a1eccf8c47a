# Included by _core.pyx: Record objects made from decoded columns.
# ----------------------------------------------------------------------------------------------
# Record objects

cdef object _UNSET = object()


# Not tracked by the cycle collector: a Record refers only to its buffers and field values, so
# it cannot be part of a reference cycle unless a field is set to something that refers back
# to it; tracking a million decoded records would make every collection walk them all.
@cython.no_gc
@cython.freelist(1024)
cdef class Record:
    """One record: ``offset``, ``timestamp`` (ms), ``timestamp_type``, ``key``, ``value``
    (bytes or None) and ``headers`` (tuple of ``(str, bytes | None)``).

    Construct one for appends as ``Record(key=..., value=..., timestamp=None, headers=())``.
    Records made by decoding keep a reference to the decoded buffer and copy their key, value
    and headers out of it on first access.
    """
    cdef public object timestamp_type
    cdef object _offset_obj         # the offset / timestamp as given (None allowed), or _UNSET
    cdef object _timestamp_obj      # to make the int from the C field on first access
    cdef int64_t _offset
    cdef int64_t _timestamp
    cdef object _key
    cdef object _value
    cdef object _headers
    cdef object _data
    cdef object _header_rows
    cdef int64_t _key_pos
    cdef int64_t _value_pos
    cdef int64_t _header_start
    cdef int32_t _key_len
    cdef int32_t _value_len
    cdef int32_t _header_count

    def __init__(self, key=None, value=None, timestamp=None, headers=(), offset=None,
                 timestamp_type=0):
        self._key = key
        self._value = value
        self._headers = tuple(headers)
        self._timestamp_obj = timestamp
        self._offset_obj = offset
        self.timestamp_type = timestamp_type
        self._data = None

    @property
    def offset(self):
        if self._offset_obj is _UNSET:
            self._offset_obj = self._offset
        return self._offset_obj

    @offset.setter
    def offset(self, value):
        self._offset_obj = value

    @property
    def timestamp(self):
        if self._timestamp_obj is _UNSET:
            self._timestamp_obj = self._timestamp
        return self._timestamp_obj

    @timestamp.setter
    def timestamp(self, value):
        self._timestamp_obj = value

    cdef object _span(self, int64_t pos, int32_t length):
        cdef const unsigned char[::1] view
        if length < 0:
            return None
        view = self._data
        return PyBytes_FromStringAndSize(<const char *>&view[pos] if length else NULL, length)

    @property
    def key(self):
        if self._key is _UNSET:
            self._key = self._span(self._key_pos, self._key_len)
        return self._key

    @key.setter
    def key(self, value):
        self._key = value

    @property
    def value(self):
        if self._value is _UNSET:
            self._value = self._span(self._value_pos, self._value_len)
        return self._value

    @value.setter
    def value(self, value):
        self._value = value

    @property
    def headers(self):
        cdef Py_ssize_t h
        if self._headers is _UNSET:
            rows = self._header_rows[self._header_start:self._header_start + self._header_count]
            self._headers = tuple(
                (self._span(row["key_pos"], row["key_len"]).decode("utf-8", "replace"),
                 self._span(row["value_pos"], row["value_len"])) for row in rows)
        return self._headers

    @headers.setter
    def headers(self, value):
        self._headers = tuple(value)

    def _fields(self):
        return (self.offset, self.timestamp, self.timestamp_type, self.key, self.value,
                self.headers)

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return self._fields() == (<Record>other)._fields()

    def __hash__(self):
        return hash((self.offset, self.timestamp, self.key, self.value))

    def __reduce__(self):
        return (Record, (self.key, self.value, self.timestamp, self.headers, self.offset,
                         self.timestamp_type))

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r:.60}, headers={self.headers!r:.60})")


def make_records(data, records, headers, timestamp_types, type_objects):
    """``Record`` objects for rows of a ``RECORD_DTYPE`` array whose positions index ``data``.

    ``timestamp_types`` holds each record's type (-1, 0, 1) and ``type_objects`` the three
    values to use for them. Keys, values and headers are copied from ``data`` on first access.
    """
    cdef cnp.ndarray arr = np.ascontiguousarray(records, dtype=RECORD_DTYPE)
    cdef const RecordInfo *r = <const RecordInfo *>cnp.PyArray_DATA(arr)
    cdef const int8_t[::1] types = np.ascontiguousarray(timestamp_types, dtype=np.int8)
    cdef Py_ssize_t n = arr.shape[0], i
    if types.shape[0] != n:
        raise ValueError("timestamp_types and records differ in length")
    cdef const unsigned char[::1] check = data      # the buffer must hold every span
    cdef Py_ssize_t length = check.shape[0]
    for i in range(n):
        if (r[i].key_len > 0 and r[i].key_pos + r[i].key_len > length) or \
                (r[i].value_len > 0 and r[i].value_pos + r[i].value_len > length):
            raise ValueError(f"record {i} lies outside the buffer")
    cdef object t_none = type_objects[0], t_create = type_objects[1], t_append = type_objects[2]
    cdef list out = []
    cdef Record rec
    empty = ()
    for i in range(n):
        rec = Record.__new__(Record)
        rec._offset = r[i].offset
        rec._offset_obj = _UNSET
        rec._timestamp = r[i].timestamp
        rec._timestamp_obj = _UNSET
        rec.timestamp_type = t_create if types[i] == 0 else (t_append if types[i] == 1
                                                             else t_none)
        rec._data = data
        rec._key = _UNSET
        rec._value = _UNSET
        rec._key_pos = r[i].key_pos
        rec._key_len = r[i].key_len
        rec._value_pos = r[i].value_pos
        rec._value_len = r[i].value_len
        if r[i].header_count:
            rec._headers = _UNSET
            rec._header_rows = headers
            rec._header_start = r[i].header_start
            rec._header_count = r[i].header_count
        else:
            rec._headers = empty
        out.append(rec)
    return out


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
    return out
