# Included by _core.pyx: Compaction: the key -> latest offset map and the rewrite of kept records.
# ----------------------------------------------------------------------------------------------
# The offset map is Kafka's SkimpyOffsetMap in shape: one flat open-addressing table of 24-byte
# entries (a 128-bit hash of the key, and the latest offset + 1, 0 marking a free slot), linear
# probing; nothing is kept per key but its entry. The hash is MurmurHash3 x64 128 (seed 0):
# two keys collide with probability 2**-128 per pair, as Kafka accepts for MD5's 16 bytes.

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    static inline uint64_t kl_rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
    static inline uint64_t kl_fmix64(uint64_t k) {
        k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33;
        k *= 0xc4ceb9fe1a85ec53ULL; k ^= k >> 33; return k;
    }
    static inline uint64_t kl_le64(const unsigned char *p) {
        uint64_t v; memcpy(&v, p, 8);
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        v = __builtin_bswap64(v);
    #endif
        return v;
    }
    /* MurmurHash3_x64_128 (Austin Appleby's public-domain algorithm), seed 0. */
    static void kl_murmur3_128(const unsigned char *data, size_t len, uint64_t *out1,
                               uint64_t *out2) {
        const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
        uint64_t h1 = 0, h2 = 0, k1, k2;
        size_t nblocks = len / 16, i;
        for (i = 0; i < nblocks; i++) {
            k1 = kl_le64(data + i * 16); k2 = kl_le64(data + i * 16 + 8);
            k1 *= c1; k1 = kl_rotl64(k1, 31); k1 *= c2; h1 ^= k1;
            h1 = kl_rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;
            k2 *= c2; k2 = kl_rotl64(k2, 33); k2 *= c1; h2 ^= k2;
            h2 = kl_rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
        }
        const unsigned char *tail = data + nblocks * 16;
        k1 = 0; k2 = 0;
        switch (len & 15) {
        case 15: k2 ^= ((uint64_t)tail[14]) << 48; /* fall through */
        case 14: k2 ^= ((uint64_t)tail[13]) << 40; /* fall through */
        case 13: k2 ^= ((uint64_t)tail[12]) << 32; /* fall through */
        case 12: k2 ^= ((uint64_t)tail[11]) << 24; /* fall through */
        case 11: k2 ^= ((uint64_t)tail[10]) << 16; /* fall through */
        case 10: k2 ^= ((uint64_t)tail[9]) << 8;   /* fall through */
        case 9:  k2 ^= ((uint64_t)tail[8]);
                 k2 *= c2; k2 = kl_rotl64(k2, 33); k2 *= c1; h2 ^= k2; /* fall through */
        case 8:  k1 ^= ((uint64_t)tail[7]) << 56;  /* fall through */
        case 7:  k1 ^= ((uint64_t)tail[6]) << 48;  /* fall through */
        case 6:  k1 ^= ((uint64_t)tail[5]) << 40;  /* fall through */
        case 5:  k1 ^= ((uint64_t)tail[4]) << 32;  /* fall through */
        case 4:  k1 ^= ((uint64_t)tail[3]) << 24;  /* fall through */
        case 3:  k1 ^= ((uint64_t)tail[2]) << 16;  /* fall through */
        case 2:  k1 ^= ((uint64_t)tail[1]) << 8;   /* fall through */
        case 1:  k1 ^= ((uint64_t)tail[0]);
                 k1 *= c1; k1 = kl_rotl64(k1, 31); k1 *= c2; h1 ^= k1;
        }
        h1 ^= (uint64_t)len; h2 ^= (uint64_t)len;
        h1 += h2; h2 += h1;
        h1 = kl_fmix64(h1); h2 = kl_fmix64(h2);
        h1 += h2; h2 += h1;
        *out1 = h1; *out2 = h2;
    }
    """
    void kl_murmur3_128(const unsigned char *data, size_t len, uint64_t *out1,
                        uint64_t *out2) noexcept nogil

OFFSET_MAP_ENTRY_BYTES = 24


def key_hash(const unsigned char[::1] key):
    """The map's 128-bit hash of ``key`` as two unsigned 64-bit ints (tests compare twins)."""
    cdef uint64_t h1, h2
    kl_murmur3_128(&key[0] if key.shape[0] else NULL, <size_t>key.shape[0], &h1, &h2)
    return h1, h2


cdef inline Py_ssize_t _probe(uint64_t *slots, uint64_t mask, uint64_t h1, uint64_t h2
                              ) noexcept nogil:
    """The slot holding (h1, h2), else the free slot where it belongs."""
    cdef uint64_t i = h1 & mask
    while slots[i * 3 + 2] != 0 and (slots[i * 3] != h1 or slots[i * 3 + 1] != h2):
        i = (i + 1) & mask
    return <Py_ssize_t>i


def offset_map_put(uint64_t[:, ::1] slots, int64_t count, int64_t limit,
                   const unsigned char[::1] data, cnp.ndarray records,
                   const uint8_t[::1] use):
    """Put each used record's key -> offset in the map (``slots``: a power-of-two number of
    rows of 3 uint64, zeros when empty; ``count`` entries in it); a later offset wins.

    Returns ``(count, stop)``: the entries now, and the index of the first used record whose
    new key did not fit under ``limit`` entries (``len(records)`` when all did)."""
    cdef Py_ssize_t n = records.shape[0], i, s
    cdef const RecordInfo *r = <const RecordInfo *> cnp.PyArray_DATA(records)
    cdef const unsigned char *p = &data[0] if data.shape[0] else NULL
    cdef uint64_t *t = &slots[0, 0]
    cdef uint64_t mask = <uint64_t>slots.shape[0] - 1, h1, h2, stored
    cdef Py_ssize_t stop = n
    if use.shape[0] != n:
        raise ValueError("use must have one entry per record")
    with nogil:
        for i in range(n):
            if not use[i] or r[i].key_len < 0:
                continue
            kl_murmur3_128(p + r[i].key_pos, <size_t>r[i].key_len, &h1, &h2)
            s = _probe(t, mask, h1, h2)
            stored = <uint64_t>(r[i].offset + 1)
            if t[s * 3 + 2] == 0:
                if count >= limit:
                    stop = i
                    break
                t[s * 3] = h1
                t[s * 3 + 1] = h2
                t[s * 3 + 2] = stored
                count += 1
            elif stored > t[s * 3 + 2]:
                t[s * 3 + 2] = stored
    return count, stop


def offset_map_get(uint64_t[:, ::1] slots, const unsigned char[::1] data, cnp.ndarray records):
    """The latest offset the map holds for each record's key (-1: none, or a null key)."""
    cdef Py_ssize_t n = records.shape[0], i, s
    cdef const RecordInfo *r = <const RecordInfo *> cnp.PyArray_DATA(records)
    cdef const unsigned char *p = &data[0] if data.shape[0] else NULL
    cdef uint64_t *t = &slots[0, 0]
    cdef uint64_t mask = <uint64_t>slots.shape[0] - 1, h1, h2
    out = np.full(n, -1, dtype=np.int64)
    cdef int64_t[::1] o = out
    with nogil:
        for i in range(n):
            if r[i].key_len < 0:
                continue
            kl_murmur3_128(p + r[i].key_pos, <size_t>r[i].key_len, &h1, &h2)
            s = _probe(t, mask, h1, h2)
            if t[s * 3 + 2] != 0:
                o[i] = <int64_t>t[s * 3 + 2] - 1
    return out


cdef inline Py_ssize_t _get_varint(const unsigned char *p, Py_ssize_t end, Py_ssize_t pos,
                                   int64_t *value) noexcept nogil:
    """Read a zigzag varint at pos; returns the position after it, or -1."""
    cdef uint64_t v = 0
    cdef int shift = 0
    while pos < end and shift < 70:
        v |= (<uint64_t>(p[pos] & 0x7F)) << shift
        if not (p[pos] & 0x80):
            value[0] = <int64_t>(v >> 1) ^ -(<int64_t>(v & 1))
            return pos + 1
        pos += 1
        shift += 7
    return -1


COMPACT_COPY, COMPACT_DROP, COMPACT_REBUILD = 0, 1, 2


def compact_batches(const unsigned char[::1] buf, cnp.ndarray batches,
                    const uint8_t[::1] keep, const int8_t[::1] action,
                    const int64_t[::1] horizon):
    """The bytes of uncompressed v2 ``batches`` of ``buf`` after compaction, as
    ``builder.build_batch`` would write them from the kept records.

    ``action`` per batch: ``COMPACT_COPY`` (as it is), ``COMPACT_DROP``, ``COMPACT_REBUILD``
    (only the records whose ``keep`` flag is set: ``keep`` has one entry per record of the
    batches, in order). A rebuilt batch keeps its base offset, last offset delta, max
    timestamp and producer fields; its base timestamp is ``horizon`` when that is >= 0 (the
    delete horizon, flagged in the attributes), else its first kept record's timestamp; each
    kept record's timestamp delta is written again against it; length, count and CRC follow.
    Raises CorruptRecordError for a record that does not parse (the batches were decoded)."""
    cdef Py_ssize_t nb = batches.shape[0], b, k = 0, bound = 0, w = 0, start, pos, end
    cdef Py_ssize_t body, rec_end, after, kept, hdr
    cdef const BatchInfo *rows = <const BatchInfo *> cnp.PyArray_DATA(batches)
    cdef const unsigned char *p = &buf[0] if buf.shape[0] else NULL
    cdef int64_t length, ts_delta, base_ts, new_base
    cdef int32_t count, j
    cdef int16_t attributes
    cdef unsigned char *o
    cdef unsigned char scratch[20]
    cdef Py_ssize_t head_len
    if action.shape[0] != nb or horizon.shape[0] != nb:
        raise ValueError("action and horizon must have one entry per batch")
    for b in range(nb):
        if rows[b].magic != 2 or (rows[b].attributes & 0x07) != 0:
            raise ValueError("compact_batches rewrites uncompressed v2 batches only")
        if action[b] != COMPACT_DROP:
            bound += rows[b].size + (rows[b].record_count * 10 if action[b] else 0)
        k += rows[b].record_count
    if keep.shape[0] != k:
        raise ValueError("keep must have one entry per record")
    out = bytearray(bound)
    view = memoryview(out)
    o = <unsigned char *> PyByteArray_AsString(out)
    k = 0
    for b in range(nb):
        start = rows[b].position
        count = rows[b].record_count
        if action[b] == COMPACT_COPY:
            memcpy(o + w, p + start, rows[b].size)
            w += rows[b].size
            k += count
            continue
        if action[b] == COMPACT_DROP:
            k += count
            continue
        hdr = w
        memcpy(o + w, p + start, B_RECORDS)
        w += B_RECORDS
        base_ts = kl_i64(p + start + B_BASE_TIMESTAMP)
        new_base = horizon[b]
        kept = 0
        pos = start + B_RECORDS
        end = start + rows[b].size
        for j in range(count):
            pos = _get_varint(p, end, pos, &length)
            if pos < 0 or length < 0 or pos + length > end:
                raise CorruptRecordError("record does not parse", start, None,
                                         rows[b].base_offset)
            rec_end = pos + length
            if keep[k + j]:
                body = pos + 1                                  # after the attributes
                after = _get_varint(p, rec_end, body, &ts_delta)
                if after < 0:
                    raise CorruptRecordError("record does not parse", start, None,
                                             rows[b].base_offset)
                if kept == 0 and horizon[b] < 0:
                    new_base = base_ts + ts_delta               # the first kept record's
                scratch[0] = p[pos]                             # attributes
                head_len = 1 + _put_varint(scratch + 1, base_ts + ts_delta - new_base)
                w += _put_varint(o + w, head_len + (rec_end - after))
                memcpy(o + w, scratch, head_len)
                w += head_len
                memcpy(o + w, p + after, rec_end - after)
                w += rec_end - after
                kept += 1
            pos = rec_end
        k += count
        attributes = kl_i16(p + start + B_ATTRIBUTES)
        if horizon[b] >= 0:
            attributes |= 0x40                                 # DELETE_HORIZON_MASK
        kl_put_i32(o + hdr + B_LENGTH, <int32_t>(w - hdr - LOG_OVERHEAD))
        kl_put_i16(o + hdr + B_ATTRIBUTES, attributes)
        kl_put_i64(o + hdr + B_BASE_TIMESTAMP, new_base if kept or horizon[b] >= 0 else -1)
        kl_put_i32(o + hdr + B_RECORD_COUNT, <int32_t>kept)
        kl_put_i32(o + hdr + B_CRC, <int32_t>_crc32c_span(view, o, hdr + B_ATTRIBUTES, w))
    del view
    check_mapped(p)
    del out[w:]
    return bytes(out)
