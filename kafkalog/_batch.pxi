# Included by _core.pyx: the walked batch ``records.RecordBatch`` builds on, and the iterator
# ``iter_batches`` returns, which makes one per batch in C (Kafka's batch loop: the object a
# loop such as ``for b in iter_batches(seg): b.is_valid()`` pays for is all it costs).

from cpython.object cimport PyTypeObject

cdef tuple _NO_ARGS = ()


cdef class BatchView:
    """One walked batch of a buffer (``records.RecordBatch`` is its subclass): ``_buffer``,
    ``_row`` (its ``BATCH_DTYPE`` row, made when first asked for), ``_path`` (named in
    errors), and what the subclass keeps (``_table``, ``_checked``).

    ``BatchView(buffer, row, path=None, crc_valid=-1)``: ``crc_valid`` (1/0) when the caller
    knows the CRC's verdict, else the row's (-1 there: checked when asked)."""
    cdef public object _buffer
    cdef public object _path
    cdef public object _table
    cdef public bint _checked
    cdef object _rows           # what _info points into (the walk's rows, or the row given)
    cdef Py_ssize_t _index      # this batch's row in _rows, for _row
    cdef object _row_
    cdef const BatchInfo *_info
    cdef int _crc_valid

    def __init__(self, buffer, row, path=None, int crc_valid=-1):
        self._rows = _batch_info(row, &self._info)
        self._row_ = row
        self._buffer = buffer
        self._path = path
        self._crc_valid = crc_valid

    @property
    def _row(self):
        if self._row_ is None:
            self._row_ = self._rows[self._index]
        return self._row_

    def is_valid(self):
        """True when the stored CRC matches the bytes (CRC32C for v2, CRC32 for legacy)."""
        cdef int valid = self._crc_valid if self._crc_valid >= 0 else self._info.crc_valid
        if valid < 0:
            # one batch at a known place: its CRC only, nothing to judge
            one = walk_batches(self._buffer, self._info.position,
                               self._info.position + self._info.size)[0]
            valid = one["crc_valid"][0] if len(one) else 0
        return valid > 0


@cython.final
cdef class _BatchViews:
    """The iterator ``batch_views`` returns. ``_running`` while a ``next`` runs (a generator's
    ``gi_running``): a finalizer its allocations run that advances it gets "already
    executing", never a view of rows it has just let go."""
    cdef bint _running
    cdef object _start
    cdef object _finish
    cdef PyTypeObject *_type
    cdef object _cls
    cdef object _buffer
    cdef object _path
    cdef object _rows
    cdef const BatchInfo *_infos
    cdef Py_ssize_t _i
    cdef Py_ssize_t _n

    def __iter__(self):
        return self

    def __next__(self):
        if self._running:
            raise ValueError("batch iterator already executing")
        self._running = True
        try:
            return self._next()
        finally:
            self._running = False

    cdef object _next(self):
        cdef BatchView view
        if self._start is not None:
            start, self._start = self._start, None
            buffer, rows, path, self._finish = start()
            self._rows = np.ascontiguousarray(rows, dtype=BATCH_DTYPE)
            self._infos = <const BatchInfo *>cnp.PyArray_DATA(<cnp.ndarray>self._rows)
            self._n = (<cnp.ndarray>self._rows).shape[0]
            self._buffer, self._path = buffer, path
        if self._i >= self._n:
            if self._finish is not None:
                finish, self._finish = self._finish, None
                self._buffer = self._rows = None
                finish()
            raise StopIteration
        if self._type == NULL:
            self._i += 1
            return self._cls(self._buffer, self._rows[self._i - 1], self._path)
        # the class's own allocation, without a call through type(): its fields set here
        view = <BatchView>self._type.tp_new(self._cls, <PyObject *>_NO_ARGS, NULL)
        view._buffer = self._buffer
        view._path = self._path
        view._rows = self._rows
        view._index = self._i
        view._info = self._infos + self._i
        view._crc_valid = -1
        self._i += 1
        return view


def batch_views(cls, start):
    """An iterator of ``cls(buffer, row, path)`` for the batches of a walk, made in C for a
    ``BatchView`` class: ``start()``, called at the first ``next``, returns ``(buffer, rows,
    path, finish)`` (``rows``: the walk's ``BATCH_DTYPE`` rows of ``buffer``; CRC verdicts
    are theirs), and ``finish()`` is called after the last batch (to raise the walk's error,
    if any)."""
    cdef _BatchViews it = _BatchViews.__new__(_BatchViews)
    it._cls = cls
    it._type = <PyTypeObject *>cls if isinstance(cls, type) and issubclass(cls, BatchView) \
        else NULL
    it._start = start
    return it
