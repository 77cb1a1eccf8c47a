# cython: language_level=3
"""Byte-level kernels: batch walking with CRC validation, record decoding, index search.

Each ``def`` here has a pure-Python twin of the same signature in the twin module of its
section (``_walk.pxi`` / ``_walk_py.py``, ...), gathered by ``_core_py.py`` as this module
includes the sections; callers get one or the other through ``kafkalog._kernels``. The layout of the bytes is described once in
``_layout.py``; the structs filled here are declared in ``_core.pxd``.

Shape of every kernel: a ``def`` wrapper that checks arguments and turns status codes into
``kafkalog.errors`` exceptions, around a ``noexcept nogil`` loop over a pointer and a length.
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.bytearray cimport (
    PyByteArray_AsString, PyByteArray_AS_STRING, PyByteArray_FromStringAndSize,
)
from libc.stdint cimport (
    int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t, INT32_MAX, INT64_MAX, INT64_MIN,
)
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memset
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_READ
from cpython.memoryview cimport PyMemoryView_FromMemory

cimport numpy as cnp
import numpy as np
import zlib

from crc32c import crc32c as _crc32c

from kafkalog._layout import BATCH_DTYPE, RECORD_DTYPE, HEADER_DTYPE, LOG07_ENTRY_DTYPE
from kafkalog.errors import CorruptRecordError, RecordTooLargeError

cnp.import_array()

# sizeof of the C structs, so tests can check them against the numpy dtypes in _layout.
STRUCT_SIZES = {"batch": sizeof(BatchInfo), "record": sizeof(RecordInfo),
                "header": sizeof(HeaderInfo), "log07": sizeof(Log07Entry)}

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* Big-endian loads through memcpy: no unaligned pointer casts. */
    static inline int64_t kl_i64(const unsigned char *p) {
        uint64_t v; memcpy(&v, p, 8); return (int64_t)__builtin_bswap64(v);
    }
    static inline int32_t kl_i32(const unsigned char *p) {
        uint32_t v; memcpy(&v, p, 4); return (int32_t)__builtin_bswap32(v);
    }
    static inline uint32_t kl_u32(const unsigned char *p) {
        uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v);
    }
    static inline int16_t kl_i16(const unsigned char *p) {
        uint16_t v; memcpy(&v, p, 2); return (int16_t)__builtin_bswap16(v);
    }
    /* and stores */
    static inline void kl_put_i32(unsigned char *p, int32_t v) {
        uint32_t u = __builtin_bswap32((uint32_t)v); memcpy(p, &u, 4);
    }
    static inline void kl_put_i64(unsigned char *p, int64_t v) {
        uint64_t u = __builtin_bswap64((uint64_t)v); memcpy(p, &u, 8);
    }
    static inline void kl_put_i16(unsigned char *p, int16_t v) {
        uint16_t u = __builtin_bswap16((uint16_t)v); memcpy(p, &u, 2);
    }
    """
    int64_t kl_i64(const unsigned char *p) noexcept nogil
    int32_t kl_i32(const unsigned char *p) noexcept nogil
    uint32_t kl_u32(const unsigned char *p) noexcept nogil
    int16_t kl_i16(const unsigned char *p) noexcept nogil
    void kl_put_i32(unsigned char *p, int32_t v) noexcept nogil
    void kl_put_i64(unsigned char *p, int64_t v) noexcept nogil
    void kl_put_i16(unsigned char *p, int16_t v) noexcept nogil


# Zigzag varints as records carry them (written by the batch builder and the compactor).
cdef inline Py_ssize_t _put_varint(unsigned char *out, int64_t value) noexcept nogil:
    cdef uint64_t v = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    cdef Py_ssize_t n = 0
    while v >= 0x80:
        out[n] = <unsigned char>((v & 0x7F) | 0x80)
        v >>= 7
        n += 1
    out[n] = <unsigned char>v
    return n + 1


cdef inline Py_ssize_t _varint_size(int64_t value) noexcept nogil:
    cdef uint64_t v = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    cdef Py_ssize_t n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


# Offsets of the v2 batch header fields (see the table in _layout.py).
cdef enum:
    B_BASE_OFFSET = 0
    B_LENGTH = 8
    B_LEADER_EPOCH = 12
    B_MAGIC = 16
    B_CRC = 17
    B_ATTRIBUTES = 21
    B_LAST_OFFSET_DELTA = 23
    B_BASE_TIMESTAMP = 27
    B_MAX_TIMESTAMP = 35
    B_PRODUCER_ID = 43
    B_PRODUCER_EPOCH = 51
    B_BASE_SEQUENCE = 53
    B_RECORD_COUNT = 57
    B_RECORDS = 61

# Legacy entry fields.
cdef enum:
    L_CRC = 12
    L_MAGIC = 16
    L_ATTRIBUTES = 17
    L_TIMESTAMP = 18

cdef enum:
    LOG_OVERHEAD = 12
    HEADER_UP_TO_MAGIC = 17
    V2_MIN_SIZE = 49        # batchLength of an empty v2 batch
    V0_MIN_SIZE = 14
    V1_MIN_SIZE = 22
    MIN_RECORD_SIZE = 7     # length, attributes, ts delta, offset delta, key, value, header count

# Walk status (mirrors _layout.WALK_*).
cdef enum:
    WALK_END = 0
    WALK_PARTIAL = 1
    WALK_CORRUPT = 2
    WALK_INVALID = 3

# Why a walk found corruption.
cdef enum:
    E_NONE = 0
    E_SIZE_BELOW_OVERHEAD = 1
    E_V2_TOO_SMALL = 2
    E_V1_TOO_SMALL = 3
    E_BAD_MAGIC = 4

# Record decode errors.
cdef enum:
    R_OK = 0
    R_VARINT = 1
    R_LENGTH = 2
    R_TRUNCATED = 3
    R_HEADER_COUNT = 4
    R_HEADER_KEY = 5
    R_SIZE_MISMATCH = 6
    R_COUNT = 7
    R_REMAINING = 8
    R_NOMEM = 9
    R_OFFSET_ORDER = 10
    R_OFFSET_RANGE = 11
    R_TIMESTAMP = 12
    R_CODEC = 13
    R_LAST_OFFSET_DELTA = 14
    R_OFFSET_OVERFLOW = 15
    R_COUNT_OFFSETS = 16
    R_SEQUENCE = 17
    R_PRODUCER = 18
    R_TXN_PRODUCER = 19
    R_LEGACY_SPAN = 20
    R_LEGACY_SIZE = 21
    R_WRAPPER_NULL = 22
    R_NEGATIVE_OFFSET = 23

_RECORD_ERRORS = {
    R_VARINT: "varint is too long or runs past the end of the record",
    R_LENGTH: "invalid record length",
    R_TRUNCATED: "a key, value or header runs past the end of the record",
    R_HEADER_COUNT: "invalid negative number of record headers",
    R_HEADER_KEY: "invalid negative header key size",
    R_SIZE_MISMATCH: "record length does not match the bytes its fields use",
    R_COUNT: "record count does not fit the batch",
    R_REMAINING: "incorrect declared batch size, records still remaining",
    R_OFFSET_ORDER: "record offsets do not increase inside the batch",
    R_OFFSET_RANGE: "record offset delta is outside the batch's offsets (lastOffsetDelta)",
    R_TIMESTAMP: "record timestamp delta overflows the batch's base timestamp",
    R_CODEC: "unknown compression codec in the batch attributes",
    R_LAST_OFFSET_DELTA: "invalid negative lastOffsetDelta",
    R_OFFSET_OVERFLOW: "last offset leaves no next offset in 64 bits",
    R_COUNT_OFFSETS: "record count does not fit the batch's offsets (negative, or more than "
                     "lastOffsetDelta + 1)",
    R_SEQUENCE: "invalid base sequence (below -1)",
    R_PRODUCER: "invalid producer id or epoch (below -1)",
    R_TXN_PRODUCER: "transactional batch without a producer id",
    R_LEGACY_SPAN: "legacy record key or value runs past its entry",
    R_LEGACY_SIZE: "legacy record size does not match its key and value",
    R_WRAPPER_NULL: "compressed legacy wrapper has a null value",
    R_NEGATIVE_OFFSET: "invalid negative offset",
}


# The kernels, one room per concern (asyncpg's pgproto builds one extension the same way).
include "_mapping.pxi"
include "_crc.pxi"
include "_walk.pxi"
include "_decode.pxi"
include "_index.pxi"
include "_scan.pxi"
include "_resync.pxi"
include "_append.pxi"
include "_appender.pxi"
include "_arrow.pxi"
include "_views.pxi"
include "_record.pxi"
include "_batch.pxi"
include "_read.pxi"
include "_compact.pxi"
include "_log07.pxi"
