# Included by _core.pyx: CRC32C (Castagnoli, the v2 batch checksum).
# ----------------------------------------------------------------------------------------------
# CRC32C: the SSE4.2 instruction when the CPU has it (checked at run time, so the module still
# builds and loads without it), else the crc32c package (the portable path, also the twin's).

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
    #include <nmmintrin.h>
    #define KL_CRC_BUILT 1

    /* Mark Adler's three-way interleaved crc32c (zlib licence): three streams keep the
       crc32 unit busy (latency 3, throughput 1), and are joined by a table-driven "append
       n zero bytes" operator over GF(2). */
    #define KL_CRC_POLY 0x82f63b78u
    #define KL_CRC_LONG 8192
    #define KL_CRC_SHORT 256
    static uint32_t kl_crc_long[4][256];
    static uint32_t kl_crc_short[4][256];
    static int kl_crc_hw = 0;

    static uint32_t kl_gf2_times(const uint32_t *mat, uint32_t vec) {
        uint32_t sum = 0;
        while (vec) { if (vec & 1) sum ^= *mat; vec >>= 1; mat++; }
        return sum;
    }
    static void kl_gf2_square(uint32_t *square, const uint32_t *mat) {
        for (int n = 0; n < 32; n++) square[n] = kl_gf2_times(mat, mat[n]);
    }
    /* The operator that appends len zero bytes to a crc. */
    static void kl_crc_zeros_op(uint32_t *even, size_t len) {
        uint32_t odd[32], row = 1;
        odd[0] = KL_CRC_POLY;
        for (int n = 1; n < 32; n++) { odd[n] = row; row <<= 1; }
        kl_gf2_square(even, odd);      /* 2 zero bits */
        kl_gf2_square(odd, even);      /* 4 zero bits */
        do {                           /* then 1 zero byte, 2, 4, ... */
            kl_gf2_square(even, odd);
            len >>= 1;
            if (len == 0) return;
            kl_gf2_square(odd, even);
            len >>= 1;
        } while (len);
        memcpy(even, odd, sizeof(odd));
    }
    static void kl_crc_zeros(uint32_t zeros[][256], size_t len) {
        uint32_t op[32];
        kl_crc_zeros_op(op, len);
        for (uint32_t n = 0; n < 256; n++) {
            zeros[0][n] = kl_gf2_times(op, n);
            zeros[1][n] = kl_gf2_times(op, n << 8);
            zeros[2][n] = kl_gf2_times(op, n << 16);
            zeros[3][n] = kl_gf2_times(op, n << 24);
        }
    }
    static inline uint32_t kl_crc_shift(uint32_t zeros[][256], uint32_t crc) {
        return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^
               zeros[2][(crc >> 16) & 0xff] ^ zeros[3][crc >> 24];
    }
    static inline uint64_t kl_load64(const unsigned char *p) {
        uint64_t v; memcpy(&v, p, 8); return v;
    }

    __attribute__((target("sse4.2")))
    static uint32_t kl_crc32c_sse42(uint32_t crc, const unsigned char *next, size_t len) {
        uint64_t crc0 = crc ^ 0xffffffffu, crc1, crc2;
        const unsigned char *end;
        while (len >= KL_CRC_LONG * 3) {
            crc1 = crc2 = 0;
            end = next + KL_CRC_LONG;
            do {
                crc0 = _mm_crc32_u64(crc0, kl_load64(next));
                crc1 = _mm_crc32_u64(crc1, kl_load64(next + KL_CRC_LONG));
                crc2 = _mm_crc32_u64(crc2, kl_load64(next + 2 * KL_CRC_LONG));
                next += 8;
            } while (next < end);
            crc0 = kl_crc_shift(kl_crc_long, (uint32_t)crc0) ^ crc1;
            crc0 = kl_crc_shift(kl_crc_long, (uint32_t)crc0) ^ crc2;
            next += 2 * KL_CRC_LONG;
            len -= 3 * KL_CRC_LONG;
        }
        while (len >= KL_CRC_SHORT * 3) {
            crc1 = crc2 = 0;
            end = next + KL_CRC_SHORT;
            do {
                crc0 = _mm_crc32_u64(crc0, kl_load64(next));
                crc1 = _mm_crc32_u64(crc1, kl_load64(next + KL_CRC_SHORT));
                crc2 = _mm_crc32_u64(crc2, kl_load64(next + 2 * KL_CRC_SHORT));
                next += 8;
            } while (next < end);
            crc0 = kl_crc_shift(kl_crc_short, (uint32_t)crc0) ^ crc1;
            crc0 = kl_crc_shift(kl_crc_short, (uint32_t)crc0) ^ crc2;
            next += 2 * KL_CRC_SHORT;
            len -= 3 * KL_CRC_SHORT;
        }
        while (len >= 8) {
            crc0 = _mm_crc32_u64(crc0, kl_load64(next));
            next += 8;
            len -= 8;
        }
        while (len) {
            crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
            len--;
        }
        return (uint32_t)crc0 ^ 0xffffffffu;
    }

    static int kl_crc_init(void) {
        __builtin_cpu_init();
        kl_crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        if (kl_crc_hw) {
            kl_crc_zeros(kl_crc_long, KL_CRC_LONG);
            kl_crc_zeros(kl_crc_short, KL_CRC_SHORT);
        }
        return kl_crc_hw;
    }
    #else
    #define KL_CRC_BUILT 0
    static int kl_crc_hw = 0;
    static int kl_crc_init(void) { return 0; }
    static uint32_t kl_crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n) {
        (void)p; (void)n; return crc;   /* never called: kl_crc_hw is 0 */
    }
    #endif
    """
    int KL_CRC_BUILT
    int kl_crc_hw
    int kl_crc_init() noexcept nogil
    uint32_t kl_crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n) noexcept nogil


kl_crc_init()


cdef inline uint32_t _crc32c_at(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """CRC32C of n bytes at p; only while ``kl_crc_hw`` (callers check it)."""
    return kl_crc32c_sse42(0, p, <size_t>n)


cdef inline uint32_t _crc32c_span(object view, const unsigned char *p, Py_ssize_t start,
                                  Py_ssize_t end) except? 0:
    """CRC32C of p[start:end]; ``view`` is a memoryview of the same bytes, for the package."""
    if kl_crc_hw:
        return _crc32c_at(p + start, end - start)
    return _crc32c(view[start:end])


def crc32c(const unsigned char[::1] buf, uint32_t value=0):
    """CRC32C of ``buf`` (continuing ``value``, as the crc32c package's ``crc32c``)."""
    cdef Py_ssize_t n = buf.shape[0]
    cdef uint32_t out
    if not kl_crc_hw:
        out = _crc32c(buf, value)
    else:
        with nogil:
            out = kl_crc32c_sse42(value, &buf[0] if n > 0 else NULL, <size_t>n)
    check_mapped(&buf[0] if n > 0 else NULL)
    return out


def _crc_hardware(enabled=None):
    """Whether CRC32C runs on the SSE4.2 instruction; ``enabled`` False forces the package
    (tests use it to run the portable path), True turns it back on if the CPU has it."""
    global kl_crc_hw
    if enabled is not None:
        kl_crc_hw = kl_crc_init() if enabled else 0
    return bool(kl_crc_hw)
