# A file mapping that keeps no descriptor (Kafka's MappedByteBuffer): CPython's mmap.mmap keeps
# a duplicate of the descriptor for as long as the mapping lives (until 3.13's trackfd=False),
# so every mapped index and .log held one. The mapping stays valid after the descriptor it was
# made from is closed (POSIX), and is unmapped by close() or, while a view of it is still
# exported, when the last view goes (as mmap.mmap refuses close() then: BufferError).
#
# A file can shrink under a read-only mapping (another process's truncation, a compaction's
# swap, os.truncate): a read of a page past the new end is a SIGBUS, which kills the process.
# As the JVM does for a MappedByteBuffer, a SIGBUS handler turns that fault into an error: the
# read-only mappings are registered, and a fault inside one replaces its pages from the fault
# to its end with zero pages (so the read goes on, over zeros) and marks it faulted; every
# kernel that read a buffer checks after its pass (``check_mapped``), as do the iterators that
# hold one, and a faulted mapping refuses new views, so the zeros are never handed out: the
# reader gets FileShrunkError. Faults anywhere else go to the handler that was there before
# (faulthandler's, or the default: the process dies, as before).
from posix.mman cimport mmap as _c_mmap, munmap, msync, PROT_READ, PROT_WRITE, MAP_SHARED, \
    MAP_FAILED, MS_SYNC
from cpython.buffer cimport PyBUF_WRITABLE
from cpython.exc cimport PyErr_SetFromErrno
from cpython.ref cimport PyObject
import os as _os

cdef extern from *:
    """
    #include <signal.h>
    #include <stdlib.h>
    #include <stdint.h>
    #include <sys/mman.h>
    #include <unistd.h>

    /* One registered mapping: [start, end) rounded to pages; ``owner`` is the FileMapping
       (borrowed: it unregisters before it goes). */
    typedef struct kl_range {
        uintptr_t start, end;
        volatile sig_atomic_t faulted;
        PyObject *owner;
        struct kl_range *prev, *next;
    } kl_range;

    static kl_range *kl_ranges = NULL;
    /* A spin lock the handler can take: the threads that edit the list hold it only around
       pointer updates of malloc'd nodes, where they cannot fault, so a faulting thread
       waits at most for such an update to finish. */
    static int kl_ranges_lock = 0;
    /* Faults turned into zero pages since the process started: 0 keeps check_mapped to one
       load and compare. */
    static volatile unsigned long kl_fault_count = 0;
    static struct sigaction kl_prev_bus;
    static volatile sig_atomic_t kl_chained = 0;

    static inline void kl_lock(void) {
        while (__atomic_exchange_n(&kl_ranges_lock, 1, __ATOMIC_ACQUIRE)) { }
    }
    static inline void kl_unlock(void) {
        __atomic_store_n(&kl_ranges_lock, 0, __ATOMIC_RELEASE);
    }

    static void kl_on_sigbus(int sig, siginfo_t *info, void *ctx) {
        (void)ctx;
        /* si_code > 0: a fault of this thread (a signal sent by kill() is never ours, and
           may arrive while this thread holds the lock) */
        if (info != NULL && info->si_code > 0) {
            uintptr_t a = (uintptr_t)info->si_addr, page = (uintptr_t)sysconf(_SC_PAGESIZE);
            int handled = 0;
            kl_range *r;
            kl_lock();
            for (r = kl_ranges; r != NULL; r = r->next) {
                if (a >= r->start && a < r->end) {
                    uintptr_t from = a & ~(page - 1);
                    if (mmap((void *)from, r->end - from, PROT_READ,
                             MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED) {
                        r->faulted = 1;
                        handled = 1;
                    }
                    break;
                }
            }
            kl_unlock();
            if (handled) {
                __atomic_add_fetch(&kl_fault_count, 1, __ATOMIC_SEQ_CST);
                return;     /* the read is retried, over zeros */
            }
        }
        /* Not ours. The handler before ours gets it once (a fault recurs when we return;
           a sent signal is sent again); should that handler give it back to us (Python's
           faulthandler restores the handler it replaced, maybe ours), the default. */
        if (kl_chained) {
            signal(SIGBUS, SIG_DFL);
        } else {
            kl_chained = 1;
            sigaction(SIGBUS, &kl_prev_bus, NULL);
        }
        if (info == NULL || info->si_code <= 0)
            raise(sig);
    }

    /* Installs the handler unless it is the one installed (again after another replaced
       it: pytest's faulthandler is enabled after kafkalog may be imported). 0 or -1. */
    static int kl_install_sigbus(void) {
        struct sigaction cur, ours;
        if (sigaction(SIGBUS, NULL, &cur) != 0) return -1;
        if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == kl_on_sigbus) return 0;
        memset(&ours, 0, sizeof(ours));
        ours.sa_sigaction = kl_on_sigbus;
        ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&ours.sa_mask);
        kl_prev_bus = cur;
        kl_chained = 0;
        return sigaction(SIGBUS, &ours, NULL);
    }

    static kl_range *kl_register(void *addr, size_t length, PyObject *owner) {
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        kl_range *r = (kl_range *)calloc(1, sizeof(kl_range));
        if (r == NULL) return NULL;
        r->start = (uintptr_t)addr;
        r->end = ((uintptr_t)addr + length + page - 1) & ~(page - 1);
        r->owner = owner;
        kl_lock();
        r->next = kl_ranges;
        if (kl_ranges != NULL) kl_ranges->prev = r;
        kl_ranges = r;
        kl_unlock();
        return r;
    }

    static void kl_unregister(kl_range *r) {
        kl_lock();
        if (r->prev != NULL) r->prev->next = r->next; else kl_ranges = r->next;
        if (r->next != NULL) r->next->prev = r->prev;
        kl_unlock();
        free(r);
    }

    /* The owner of the faulted mapping holding ``p``, or NULL. */
    static PyObject *kl_faulted_owner(const void *p) {
        uintptr_t a = (uintptr_t)p;
        PyObject *owner = NULL;
        kl_range *r;
        kl_lock();
        for (r = kl_ranges; r != NULL; r = r->next) {
            if (a >= r->start && a < r->end) {
                if (r->faulted) owner = r->owner;
                break;
            }
        }
        kl_unlock();
        return owner;
    }
    """
    ctypedef struct kl_range:
        int faulted
    unsigned long kl_fault_count
    int kl_install_sigbus()
    kl_range *kl_register(void *addr, size_t length, PyObject *owner)
    void kl_unregister(kl_range *r)
    PyObject *kl_faulted_owner(const void *p)


cdef int _raise_if_faulted(const void *p) except -1:
    cdef PyObject *owner = kl_faulted_owner(p)
    if owner != NULL:
        raise (<FileMapping>owner)._shrunk()
    return 0


cdef inline int check_mapped(const void *p) except -1:
    """Raise FileShrunkError when ``p`` lies in a mapping whose file shrank under a read
    (call after every pass of a kernel over a buffer, before its results are used)."""
    if kl_fault_count == 0:
        return 0
    return _raise_if_faulted(p)


cdef class FileMapping:
    """``length`` bytes of the file open as ``fd``, shared, writable when ``writable``; the
    descriptor may be closed at once. What the callers use of ``mmap.mmap``: the buffer,
    ``len``, ``m[i]`` / ``m[a:b]`` (an int / bytes), ``m[a:b] = data``, ``flush``, ``close``.

    A read-only mapping covers at most what ``fstat`` says the file holds now (``len`` may
    be less than ``length``) and is guarded: should the file shrink under it, a read of the
    lost bytes sees zeros and the mapping is ``faulted``, after which the kernels, its views
    and its items raise ``FileShrunkError`` naming ``path``."""
    cdef unsigned char *addr
    cdef Py_ssize_t size
    cdef Py_ssize_t exports
    cdef kl_range *_range
    cdef readonly bint writable
    cdef readonly bint closed
    cdef readonly object path

    def __cinit__(self, int fd, Py_ssize_t length, bint writable=False, path=None):
        self.path = path
        if length > 0 and not writable:
            length = min(length, _os.fstat(fd).st_size)
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
        if not writable:
            # (writable mappings are the writer's own indexes: their blocks are allocated
            # before a store, and a store into zero pages would be lost silently)
            if kl_install_sigbus() != 0:
                PyErr_SetFromErrno(OSError)
            self._range = kl_register(p, <size_t>length, <PyObject *>self)
            if self._range == NULL:
                raise MemoryError()

    cdef void _unmap(self) noexcept:
        if self._range != NULL:
            kl_unregister(self._range)
            self._range = NULL
        munmap(self.addr, <size_t>self.size)
        self.addr = NULL

    def __dealloc__(self):
        if self.addr != NULL:
            self._unmap()

    @property
    def faulted(self):
        """Whether the file shrank under a read of this mapping (its lost bytes read as
        zeros)."""
        return self._range != NULL and self._range.faulted != 0

    cdef object _shrunk(self):
        from kafkalog.errors import FileShrunkError
        try:
            now = _os.stat(self.path).st_size if self.path is not None else None
        except OSError:
            now = None
        return FileShrunkError(self.path, self.size, now)

    cdef int _check_open(self) except -1:
        if self.addr == NULL:
            raise ValueError("mmap closed or invalid")
        if self._range != NULL and self._range.faulted:
            raise self._shrunk()
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
                value = PyBytes_FromStringAndSize(<char *>self.addr, self.size)[key]
            else:
                value = PyBytes_FromStringAndSize(<char *>self.addr + start,
                                                  stop - start if stop > start else 0)
            self._check_open()      # the copy may have read lost bytes
            return value
        i = key
        if i < 0:
            i += self.size
        if i < 0 or i >= self.size:
            raise IndexError("mmap index out of range")
        i = self.addr[i]
        self._check_open()
        return i

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
        self._unmap()
        self.closed = True
