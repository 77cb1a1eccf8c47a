# Included by _core.pyx: the one-call append of a few records (or one batch's bytes) to a log's
# active segment.
# ----------------------------------------------------------------------------------------------

from posix.unistd cimport pwrite, ftruncate
from libc.errno cimport errno, EINTR
from cpython.exc cimport PyErr_CheckSignals
import os as _os

cdef object _MINUS_ONE = -1

cdef extern from *:
    """
    /* A tuple of the tuple subclass ``cls`` (a NamedTuple: no fields of its own) holding
       ``v``, made as tuple.__new__(cls, ...) makes it, without the argument tuple between. */
    static PyObject *kl_named_tuple(PyObject *cls, PyObject **v, Py_ssize_t n) {
        PyObject *t = ((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, n);
        if (t == NULL) return NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_INCREF(v[i]);
            PyTuple_SET_ITEM(t, i, v[i]);
        }
        return t;
    }
    """
    object kl_named_tuple(object cls, PyObject **v, Py_ssize_t n)


cdef class ActiveSegmentAppender:
    """The hot state of the appends to one active segment, for ``Log.append`` of a few records
    or of one batch's bytes (``LocalLog.arm_appender`` arms it after an append of the general
    path; any other file operation on the log drops it): one call builds the batch at the log
    end offset (or validates the bytes and gives them their offsets, in its own buffer), checks
    what the general path would check (size, roll, index room, flush, leader epoch), writes it
    with one ``pwrite``, makes the segment's index entries when due, and keeps the log's
    objects in step: the ``.log`` size, the segment's bytes since its last index entry and max
    timestamp, the indexes' entries, the log end metadata, the unflushed count and
    (unreplicated) the high watermark, the values the general path leaves.

    It is the C half of ``LogSegment.append`` and ``LocalLog.append``: it writes the attributes
    the general path writes (``FileRecords.size``, the segment's ``max_timestamp_and_offset``
    and ``bytes_since_last_index_entry``, ``LocalLog``'s ``log_end_metadata`` and
    ``unflushed_messages``, ``Log.high_watermark``: public attributes; the entries it writes
    into the indexes' held views it reports to their owners, ``written_in_view`` and the
    segment's ``forget_index_room``). No private field of another object is touched.

    ``append`` returns the ``LogAppendInfo``, or None having done nothing when the general path
    has work this one does not do (a roll, a flush, a new leader epoch, a batch too large,
    records that are not ``Record`` objects or carry their own offsets, bytes that are not one
    valid batch without producer or compression): the caller then takes the general path,
    which arms a new appender.
    """
    cdef object segment, file, desc, config, time_fn, index_entry, offset_index, time_index
    cdef object lock_acquire, lock_release
    cdef object metadata_type, timestamp_offset_type, info_type
    cdef object log_end_obj, base_offset_obj      # (the ints, made once)
    cdef int fd
    cdef bint armed, replicated
    # set while a call runs (under the lock): what the Log's other mutating calls look at to
    # refuse one re-entered from this thread by a finalizer the call's allocations ran
    cdef readonly bint running
    cdef int64_t position, base_offset, log_end, bytes_since_index, index_interval
    cdef int64_t max_ts, offset_of_max_ts, rolling_ts, roll_ms, segment_bytes
    cdef int64_t max_message_bytes, unflushed, flush_messages, last_flush_ms, flush_ms
    cdef int64_t latest_epoch
    cdef _Out out

    def __cinit__(self):
        self.out.p = NULL
        self.out.n = self.out.cap = 0

    def __dealloc__(self):
        free(self.out.p)

    def __init__(self, config, segment, file, desc, int64_t log_end,
                 int64_t bytes_since_index, int64_t index_interval, int64_t max_ts,
                 int64_t offset_of_max_ts, int64_t rolling_ts, int64_t roll_ms,
                 int64_t segment_bytes, int64_t max_message_bytes, int64_t unflushed,
                 int64_t flush_messages, int64_t last_flush_ms, int64_t flush_ms,
                 int64_t latest_epoch, bint replicated, lock, time_fn, index_entry,
                 offset_index, time_index, metadata_type, timestamp_offset_type, info_type):
        self.config, self.segment, self.file, self.desc = config, segment, file, desc
        self.fd = desc.fd
        self.position = file.size
        self.base_offset = segment.base_offset
        self.log_end = log_end
        self.log_end_obj = log_end
        self.base_offset_obj = segment.base_offset
        self.bytes_since_index = bytes_since_index
        self.index_interval = index_interval
        self.max_ts = max_ts
        self.offset_of_max_ts = offset_of_max_ts
        self.rolling_ts = rolling_ts
        self.roll_ms = roll_ms
        self.segment_bytes = segment_bytes
        self.max_message_bytes = max_message_bytes
        self.unflushed = unflushed
        self.flush_messages = flush_messages
        self.last_flush_ms = last_flush_ms
        self.flush_ms = flush_ms
        self.latest_epoch = latest_epoch
        self.replicated = replicated
        self.lock_acquire, self.lock_release = lock.acquire, lock.release
        self.time_fn = time_fn
        self.index_entry = index_entry
        # (mapped and writable: the segment's, which arm_appender checked)
        self.offset_index, self.time_index = offset_index, time_index
        for t in (metadata_type, timestamp_offset_type, info_type):
            if not issubclass(t, tuple) or t.__basicsize__ != tuple.__basicsize__:
                raise TypeError(f"{t} is not a NamedTuple")
        self.metadata_type = metadata_type
        self.timestamp_offset_type = timestamp_offset_type
        self.info_type = info_type
        self.armed = True

    def append(self, log, local, records, int32_t partition_leader_epoch):
        """Append ``records`` (a list of Records, as one batch; or the bytes of one batch) to
        ``log`` (its ``LocalLog`` ``local``: passed, not kept, so that a log dropped unclosed
        is freed at once), under the log's lock; the ``LogAppendInfo``, or None (nothing done)
        for the general path. A failed write (the file cut back to where it was) takes the log
        offline (``LocalLog.offline``)."""
        cdef type kind = type(records)
        if not self.armed:
            return None
        if kind is list:
            if partition_leader_epoch > self.latest_epoch:
                return None
        elif kind is not bytes and kind is not bytearray:
            return None
        self.lock_acquire()
        try:
            # (the log's appender still: not dropped by another thread's operation meanwhile;
            # not running: re-entered from a finalizer, the general path refuses the call)
            if local.appender is not self or not self.armed or self.running or \
                    log.config is not self.config or local.failed is not None:
                return None
            # Disarmed until the call ends well: nothing it leaves half done is used again.
            self.armed = False
            self.running = True
            try:
                if kind is list:
                    return self._append_records(log, local, <list>records,
                                                partition_leader_epoch)
                return self._append_batch(log, local, records)
            finally:
                self.running = False
        finally:
            self.lock_release()

    cdef object _append_records(self, log, local, list records,
                                int32_t partition_leader_epoch):
        cdef int64_t now = <int64_t>(<double>self.time_fn() * 1000), last
        cdef Py_ssize_t n = len(records), i
        # (checked after the last call that can run Python code, which could change the list)
        if n == 0:
            return None
        for i in range(n):
            item = records[i]
            if type(item) is not Record or (<Record>item).offset_ is not None:
                return None
        if self._flush_due(n, now):
            return None
        last = self.log_end + n - 1
        _encode_v2_batch(&self.out, records, self.log_end, now, 0, -1, -1, -1,
                         partition_leader_epoch, None, None, None, None)
        return self._write(log, local, last, n, kl_i64(self.out.p + B_MAX_TIMESTAMP), last)

    cdef object _append_batch(self, log, local, data):
        """One v2 batch's bytes, validated (``prepare_append``'s pass) in the appender's buffer
        with its offsets from the log end; None for anything the general path must see (an
        invalid batch, for its error; several batches, a producer, compressed records, a new
        leader epoch)."""
        cdef Py_ssize_t size = len(data)
        cdef const unsigned char *p = <const unsigned char *>(
            PyBytes_AS_STRING(data) if type(data) is bytes else PyByteArray_AS_STRING(data))
        cdef _Prepared r
        cdef int64_t now
        # (what the header shows the general path must do is not validated here first)
        if size < B_RECORDS or kl_i32(p + B_LENGTH) != size - LOG_OVERHEAD or \
                kl_i16(p + B_ATTRIBUTES) & 0x07 or kl_i64(p + B_PRODUCER_ID) >= 0:
            return None
        self.out.n = 0
        _out_reserve(&self.out, size)
        memcpy(self.out.p, p, size)
        self.out.n = size
        if _prepare(self.out.p, size, self.log_end, self.max_message_bytes, -1,
                    None if kl_crc_hw else PyMemoryView_FromMemory(<char *>self.out.p, size,
                                                                   PyBUF_READ),
                    &r) != A_OK or r.batches != 1 or r.flags or \
                r.leader_epoch > self.latest_epoch:
            return None
        now = <int64_t>(<double>self.time_fn() * 1000)
        if self._flush_due(r.records, now):
            return None
        return self._write(log, local, r.last, r.records, r.max_timestamp,
                           r.offset_of_max_timestamp)

    cdef inline bint _flush_due(self, int64_t count, int64_t now) noexcept:
        return self.unflushed + count >= self.flush_messages or \
            now - self.last_flush_ms >= self.flush_ms

    cdef object _write(self, log, local, int64_t last, int64_t count, int64_t max_ts,
                       int64_t offset_of_max_ts):
        """The batch in the buffer (offsets from the log end to ``last``) written at the
        segment's end, unless the general path would roll first (None)."""
        cdef Py_ssize_t size = self.out.n
        cdef int64_t position = self.position
        if size > self.max_message_bytes or position > self.segment_bytes - size or \
                max_ts - self.rolling_ts > self.roll_ms or \
                last - self.base_offset > INT32_MAX:
            return None
        try:
            _write_at(self.fd, self.out.p, size, position)
            return self._appended(log, local, last, count, size, max_ts, offset_of_max_ts,
                                  position)
        except OSError as e:
            raise local.offline("append", e) from e

    cdef object _appended(self, log, local, int64_t last, int64_t count, Py_ssize_t size,
                          int64_t max_ts, int64_t offset_of_max_ts, int64_t position):
        """The state after the write: the objects kept in step, the index step when due; the
        appender armed again when the index leaves room. (Its own state first: what follows
        allocates, and can run finalizers.)"""
        cdef PyObject *v[7]
        cdef object first = self.log_end_obj
        cdef bint rearm = True
        self.position = position + size
        self.log_end = last + 1
        self.unflushed += count
        cdef object last_obj = last, max_ts_obj = max_ts
        cdef object offset_of_max_obj = last_obj if offset_of_max_ts == last else offset_of_max_ts
        cdef object position_obj, log_end_obj, size_obj = size, count_obj = count
        position_obj = self.position
        self.file.size = position_obj
        if max_ts > self.max_ts:
            self.max_ts = max_ts
            self.offset_of_max_ts = offset_of_max_ts
            v[0] = <PyObject *>max_ts_obj
            v[1] = <PyObject *>offset_of_max_obj
            self.segment.max_timestamp_and_offset = kl_named_tuple(self.timestamp_offset_type,
                                                                    v, 2)
        if self.bytes_since_index > self.index_interval:
            # The segment's index step (one batch in index.interval.bytes): here when the
            # entries go into the indexes' allocated room, else LogSegment.index_entry's. A
            # full index afterwards is the general path's roll, as is anything after a raise.
            status = self._index_entries(last, position)
            rearm = status == 1 if status else self.index_entry(last, position, size)
            self.bytes_since_index = size
        else:
            self.bytes_since_index += size
        self.segment.bytes_since_last_index_entry = self.bytes_since_index
        self.log_end_obj = log_end_obj = self.log_end
        v[0] = <PyObject *>log_end_obj
        v[1] = <PyObject *>self.base_offset_obj
        v[2] = <PyObject *>position_obj
        local.log_end_metadata = kl_named_tuple(self.metadata_type, v, 3)
        if not self.replicated:
            log.high_watermark = log_end_obj
        local.unflushed_messages = self.unflushed
        v[0] = <PyObject *>first
        v[1] = <PyObject *>last_obj
        v[2] = <PyObject *>max_ts_obj
        v[3] = <PyObject *>offset_of_max_obj
        v[4] = <PyObject *>_MINUS_ONE
        v[5] = <PyObject *>size_obj
        v[6] = <PyObject *>count_obj
        info = kl_named_tuple(self.info_type, v, 7)
        self.armed = rearm
        return info

    cdef int _index_entries(self, int64_t last, int64_t position) except -1:
        """LogSegment.index_entry's entries written into the mapped indexes through their
        held views, and the index objects kept in step (entry counts, last entries): 1 when
        both still have room, 2 when one is full now; 0 (nothing done) when the general step
        has work (room to allocate, a rule to raise for)."""
        cdef IndexView ov, tv
        cdef Py_ssize_t on, tn
        cdef int64_t last_ts, last_off
        cdef unsigned char *w
        o_view, t_view = self.offset_index.view, self.time_index.view
        if type(o_view) is not IndexView or type(t_view) is not IndexView:
            return 0
        ov, tv = o_view, t_view
        on, tn = ov.entries, tv.entries
        last_entry = self.time_index.last_entry
        last_ts, last_off = last_entry
        if ov.buf == NULL or tv.buf == NULL or position > INT32_MAX or \
                (on + 1) * 8 > min(<Py_ssize_t>self.offset_index.allocated, ov.length) or \
                (on > 0 and last <= self.offset_index.last_offset) or \
                (tn > 0 and (self.max_ts < last_ts or self.offset_of_max_ts < last_off)) or \
                tn >= tv.length // 12 - 1 or \
                (tn + 1) * 12 > min(<Py_ssize_t>self.time_index.allocated, tv.length):
            return 0
        w = <unsigned char *>ov.buf + on * 8
        kl_put_i32(w, <int32_t>(last - self.base_offset))
        kl_put_i32(w + 4, <int32_t>position)
        ov.entries = on + 1
        self.offset_index.written_in_view(last)
        if self.max_ts > last_ts:
            w = <unsigned char *>tv.buf + tn * 12
            kl_put_i64(w, self.max_ts)
            kl_put_i32(w + 8, <int32_t>(self.offset_of_max_ts - self.base_offset))
            tv.entries = tn + 1
            self.time_index.written_in_view(self.segment.max_timestamp_and_offset)
        self.segment.forget_index_room()
        return 2 if on + 1 >= ov.length // 8 or tv.entries >= tv.length // 12 - 1 else 1


cdef int _write_at(int fd, const unsigned char *p, Py_ssize_t size, int64_t position) except -1:
    """``size`` bytes at ``position`` (continued after a short write); on failure the file is
    cut back to ``position`` when the disk lets it, and OSError raised."""
    cdef Py_ssize_t done = 0, written
    cdef int saved
    while done < size:
        with nogil:
            written = pwrite(fd, p + done, size - done, position + done)
        if written < 0:
            if errno == EINTR:
                if PyErr_CheckSignals() < 0:      # (as os.pwrite: a handler that raised)
                    return -1
                continue
            saved = errno
            ftruncate(fd, position)
            raise OSError(saved, _os.strerror(saved))
        done += written
    return 0
