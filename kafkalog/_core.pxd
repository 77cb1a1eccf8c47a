# Shared C declarations of the kernel structs (numpy mirrors live in kafkalog/_layout.py) and
# of the IndexView contract the read kernels use.
from cpython.object cimport PyObject
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint32_t

ctypedef struct BatchInfo:
    int64_t position
    int64_t base_offset
    int64_t last_offset
    int64_t max_timestamp
    int64_t base_timestamp
    int64_t producer_id
    int32_t size
    int32_t record_count
    int32_t partition_leader_epoch
    int32_t base_sequence
    uint32_t crc
    int16_t attributes
    int16_t producer_epoch
    int8_t magic
    int8_t crc_valid

ctypedef struct RecordInfo:
    int64_t offset
    int64_t timestamp
    int64_t key_pos
    int64_t value_pos
    int64_t header_start
    int32_t size
    int32_t key_len
    int32_t value_len
    int32_t header_count
    int8_t attributes

ctypedef struct Log07Entry:
    int64_t position
    int64_t payload_position
    int32_t size
    int32_t payload_size
    uint32_t crc
    int8_t magic
    int8_t attributes
    int8_t codec
    int8_t crc_valid

ctypedef struct HeaderInfo:
    int64_t key_pos
    int64_t value_pos
    int32_t key_len
    int32_t value_len


cdef class IndexView:
    # A held view of an offset or time index's entries: the contract kernels read instead of
    # an index object's fields (asyncpg's buffer.pxd). ``buf`` holds ``length`` bytes (NULL
    # and 0 once released), of which the first ``entries`` entries are valid (kept up to date
    # by the owning index); ``kind`` is OFFSET_KEY or TIME_KEY; relative offsets count from
    # ``base_offset``. A kernel calls ``check()`` before reading ``buf``.
    cdef const unsigned char *buf
    cdef Py_ssize_t length
    cdef public Py_ssize_t entries
    cdef readonly int64_t base_offset
    cdef readonly int kind
    # IndexView's own: the buffer it holds, and what lookup() returns
    cdef Py_buffer _view
    cdef bint _held
    cdef object _result_type
    cdef object _base_obj
    cdef PyObject *_last          # the last result (a strong reference), see kl_pair_reuse

    cdef int check(self) except -1
