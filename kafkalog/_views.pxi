# Included by _core.pyx: Held index views for one-call lookups.
# ----------------------------------------------------------------------------------------------
# Held index views: one lookup per Python call at the cost of a C call

from cpython.object cimport PyObject
from cpython.ref cimport Py_XDECREF

cdef extern from *:
    """
    /* A 2-tuple of a tuple subclass (a namedtuple) without running its Python __new__. */
    static PyObject *kl_pair(PyObject *type, PyObject *a, PyObject *b) {
        PyObject *t = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, 2);
        if (t == NULL) return NULL;
        Py_INCREF(a); PyTuple_SET_ITEM(t, 0, a);
        Py_INCREF(b); PyTuple_SET_ITEM(t, 1, b);
        return t;
    }
    """
    object kl_pair(object type, object a, object b)


cdef extern from *:
    """
    /* The previous result again, refilled, when nobody else holds it (refcount 1: only the
       view): what CPython's dict item iterator does with its result tuple. Saves the
       allocation, zeroing, GC tracking and deallocation of a tuple subclass per call. */
    static PyObject *kl_pair_reuse(PyObject **last, PyObject *type, PyObject *a, PyObject *b) {
        PyObject *t = *last;
        if (t != NULL && Py_REFCNT(t) == 1) {
            PyObject *old_a = PyTuple_GET_ITEM(t, 0), *old_b = PyTuple_GET_ITEM(t, 1);
            Py_INCREF(a); PyTuple_SET_ITEM(t, 0, a);
            Py_INCREF(b); PyTuple_SET_ITEM(t, 1, b);
            Py_DECREF(old_a);
            Py_DECREF(old_b);
            if (!PyObject_GC_IsTracked(t)) PyObject_GC_Track(t);   /* the GC may untrack it */
            Py_INCREF(t);
            return t;
        }
        t = kl_pair(type, a, b);
        if (t == NULL) return NULL;
        Py_XDECREF(*last);
        Py_INCREF(t);
        *last = t;
        return t;
    }
    """
    object kl_pair_reuse(PyObject **last, object type, object a, object b)


cdef class IndexView:
    """Holds a buffer view of an index mapping so that ``lookup`` costs one C call.

    ``kind`` is OFFSET_KEY (an offset index: ``lookup(offset)`` gives (offset, position), or
    (base_offset, 0) when no entry is low enough) or TIME_KEY (a time index: ``lookup(ts)``
    gives (timestamp, offset), or (-1, base_offset)). ``entries`` is kept up to date by the
    owning index; ``release()`` must be called before the mapping is closed or resized. The
    fields kernels read are declared in ``_core.pxd``.
    """

    def __cinit__(self, buf, Py_ssize_t entries, int64_t base_offset, int kind, result_type):
        if kind != OFFSET_KEY and kind != TIME_KEY:
            raise ValueError(f"kind must be OFFSET_KEY or TIME_KEY, not {kind}")
        PyObject_GetBuffer(buf, &self._view, PyBUF_SIMPLE)
        self._held = True
        self.buf = <const unsigned char *>self._view.buf
        self.length = self._view.len
        self.entries = entries
        self.base_offset = base_offset
        self._base_obj = base_offset
        self.kind = kind
        self._result_type = result_type
        self._last = NULL

    cdef int check(self) except -1:
        """Raise unless ``buf`` is held and holds ``entries`` entries."""
        if not self._held:
            raise ValueError("index view released (the index was closed)")
        if self.entries * _entry_size(self.kind) > self.length:
            raise ValueError(f"{self.entries} entries do not fit a buffer of {self.length} "
                             f"bytes")
        return 0

    def release(self):
        if self._held:
            PyBuffer_Release(&self._view)
            self._held = False
        self.buf = NULL
        self.length = 0
        self.entries = 0

    def __dealloc__(self):
        if self._held:
            PyBuffer_Release(&self._view)
        Py_XDECREF(self._last)

    @cython.always_allow_keywords(False)     # METH_O: no argument parsing per call
    def lookup(self, int64_t target):
        """Largest entry <= ``target`` (see the class docstring)."""
        self.check()
        cdef Py_ssize_t slot
        cdef const unsigned char *p = self.buf
        cdef int64_t base = self.base_offset
        if self.kind == OFFSET_KEY:
            slot = _search(p, self.entries, OFFSET_KEY, target - base, False)
            if slot < 0:
                return kl_pair_reuse(&self._last, self._result_type, self._base_obj, 0)
            return kl_pair_reuse(&self._last, self._result_type,
                                 base + _entry_value(p, slot, OFFSET_KEY),
                                 _entry_value(p, slot, OFFSET_VALUE))
        slot = _search(p, self.entries, TIME_KEY, target, False)
        if slot < 0:
            return kl_pair_reuse(&self._last, self._result_type, -1, self._base_obj)
        return kl_pair_reuse(&self._last, self._result_type, _entry_value(p, slot, TIME_KEY),
                             base + _entry_value(p, slot, TIME_VALUE))


def index_lookup_many(const unsigned char[::1] buf, Py_ssize_t entries, int kind,
                      int64_t base_offset, const int64_t[::1] targets):
    """``lookup`` for every target at once: two int64 arrays, (offsets, positions) for an
    offset index (``kind`` OFFSET_KEY) or (timestamps, offsets) for a time index (TIME_KEY),
    with the same not-found values as ``IndexView.lookup``.

    The keys are read once into native integers and searched with a branch-free binary
    search: the answer is the same as the hot/cold search's (entries are increasing).
    """
    if kind != OFFSET_KEY and kind != TIME_KEY:
        raise ValueError(f"kind must be OFFSET_KEY or TIME_KEY, not {kind}")
    cdef const unsigned char *p = _index_pointer(buf, entries, kind)
    cdef Py_ssize_t n = targets.shape[0], i, lo, half, half_step
    keys_arr = np.empty(entries, dtype=np.int64)
    cdef int64_t[::1] keys = keys_arr
    first = np.empty(n, dtype=np.int64)
    second = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] a = first
    cdef int64_t[::1] b = second
    cdef int64_t t, shift = base_offset if kind == OFFSET_KEY else 0
    with nogil:
        for i in range(entries):
            keys[i] = _entry_value(p, i, kind) + shift
        for i in range(n):
            t = targets[i]
            if entries == 0 or keys[0] > t:
                if kind == OFFSET_KEY:
                    a[i] = base_offset
                    b[i] = 0
                else:
                    a[i] = -1
                    b[i] = base_offset
                continue
            # largest slot with keys[slot] <= t
            lo = 0
            half = entries
            while half > 1:
                half_step = half >> 1
                if keys[lo + half_step] <= t:
                    lo = lo + half_step
                half -= half_step
            if kind == OFFSET_KEY:
                a[i] = keys[lo]
                b[i] = _entry_value(p, lo, OFFSET_VALUE)
            else:
                a[i] = keys[lo]
                b[i] = base_offset + _entry_value(p, lo, TIME_VALUE)
    return first, second
