# A file mapping that keeps no descriptor (Kafka's MappedByteBuffer): CPython's mmap.mmap keeps
# a duplicate of the descriptor for as long as the mapping lives (until 3.13's trackfd=False),
# so every mapped index and .log held one. The mapping stays valid after the descriptor it was
# made from is closed (POSIX), and is unmapped by close() or, while a view of it is still
# exported, when the last view goes (as mmap.mmap refuses close() then: BufferError).
from posix.mman cimport mmap as _c_mmap, munmap, msync, PROT_READ, PROT_WRITE, MAP_SHARED, \
    MAP_FAILED, MS_SYNC
from cpython.buffer cimport PyBUF_WRITABLE
from cpython.exc cimport PyErr_SetFromErrno


cdef class FileMapping:
    """``length`` bytes of the file open as ``fd``, shared, writable when ``writable``; the
    descriptor may be closed at once. What the callers use of ``mmap.mmap``: the buffer,
    ``len``, ``m[i]`` / ``m[a:b]`` (an int / bytes), ``m[a:b] = data``, ``flush``, ``close``."""
    cdef unsigned char *addr
    cdef Py_ssize_t size
    cdef Py_ssize_t exports
    cdef readonly bint writable
    cdef readonly bint closed

    def __cinit__(self, int fd, Py_ssize_t length, bint writable=False):
        if length <= 0:
            raise ValueError(f"cannot map {length} bytes")
        cdef void *p = _c_mmap(NULL, <size_t>length,
                               PROT_READ | PROT_WRITE if writable else PROT_READ,
                               MAP_SHARED, fd, 0)
        if p == MAP_FAILED:
            PyErr_SetFromErrno(OSError)
        self.addr = <unsigned char *>p
        self.size = length
        self.writable = writable

    def __dealloc__(self):
        if self.addr != NULL:
            munmap(self.addr, <size_t>self.size)
            self.addr = NULL

    cdef int _check_open(self) except -1:
        if self.addr == NULL:
            raise ValueError("mmap closed or invalid")
        return 0

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        self._check_open()
        if (flags & PyBUF_WRITABLE) and not self.writable:
            raise BufferError("the mapping is read-only")
        buffer.buf = self.addr
        buffer.obj = self
        buffer.len = self.size
        buffer.readonly = not self.writable
        buffer.itemsize = 1
        buffer.format = "B"
        buffer.ndim = 1
        buffer.shape = &self.size
        buffer.strides = &buffer.itemsize
        buffer.suboffsets = NULL
        buffer.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *buffer):
        self.exports -= 1

    def __len__(self):
        self._check_open()
        return self.size

    def __getitem__(self, key):
        self._check_open()
        cdef Py_ssize_t start, stop, step, i
        if isinstance(key, slice):
            start, stop, step = key.indices(self.size)
            if step != 1:
                return PyBytes_FromStringAndSize(<char *>self.addr, self.size)[key]
            return PyBytes_FromStringAndSize(<char *>self.addr + start,
                                             stop - start if stop > start else 0)
        i = key
        if i < 0:
            i += self.size
        if i < 0 or i >= self.size:
            raise IndexError("mmap index out of range")
        return self.addr[i]

    def __setitem__(self, key, value):
        self._check_open()
        if not self.writable:
            raise TypeError("mmap can't modify a readonly memory map.")
        if not isinstance(key, slice):
            raise TypeError("only slices of the mapping can be assigned")
        cdef Py_ssize_t start, stop, step
        start, stop, step = key.indices(self.size)
        cdef const unsigned char[::1] data = value
        if step != 1 or data.shape[0] != max(0, stop - start):
            raise IndexError("mmap slice assignment is wrong size")
        if data.shape[0]:
            memcpy(self.addr + start, &data[0], data.shape[0])

    def flush(self):
        """Write the mapped pages to the file (msync): the range is synced, whichever
        mapping of the file dirtied it."""
        self._check_open()
        if msync(self.addr, <size_t>self.size, MS_SYNC) != 0:
            PyErr_SetFromErrno(OSError)

    def close(self):
        """Unmap now; BufferError while a view is still exported (it unmaps when the last
        view goes)."""
        if self.addr == NULL:
            return
        if self.exports:
            raise BufferError("cannot close exported pointers exist")
        munmap(self.addr, <size_t>self.size)
        self.addr = NULL
        self.closed = True
