"""Kafka's compression codecs: gzip, snappy (xerial-framed and raw), lz4 (frame), zstd.

cramjam supplies snappy, lz4 and zstd from one maintained wheel (no system libraries);
gzip uses the standard library's zlib, whose ``max_length`` bounds the output. Every
decompression is bounded by ``MAX_DECOMPRESSED_BYTES`` so a hostile batch (a decompression
bomb) gives a typed error instead of an unbounded allocation.
"""
import struct
import zlib

import cramjam

from kafkalog.errors import (
    CorruptRecordError, KafkaLogError, RecordTooLargeError, UnsupportedCompressionError,
)

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}

# Kafka itself does not bound a batch's decompressed size; 256 MiB is far above any real batch
# (max.message.bytes defaults to 1 MB compressed) while keeping a bomb from taking the machine.
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16            # magic, int32 version, int32 compatible version
_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK_SIZES = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
_ZSTD_MAGIC = 0xFD2FB528


def codec_id(name_or_id):
    """The attribute value (0-4) for a codec name or id; raises UnsupportedCompressionError."""
    if isinstance(name_or_id, int):
        if name_or_id in CODEC_NAMES:
            return name_or_id
    elif name_or_id in CODEC_IDS:
        return CODEC_IDS[name_or_id]
    raise UnsupportedCompressionError(f"unknown compression codec {name_or_id!r}")


def compress(codec, data):
    """Compress ``data`` the way Kafka's Java producer does; returns bytes."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        return _lz4_frame_compress(data)
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def decompress(codec, data, limit=None):
    """Decompress one batch's record bytes; returns a bytes-like object.

    Raises
    ------
    UnsupportedCompressionError
        For a codec id Kafka does not define.
    RecordTooLargeError
        When the output would exceed ``limit`` (default ``MAX_DECOMPRESSED_BYTES``).
    CorruptRecordError
        When the compressed data is damaged: whatever a codec library raises on it (its own
        errors, ``ValueError``, ``OverflowError``, ``MemoryError`` for a size it cannot
        allocate, ...) is turned into this.
    """
    limit = MAX_DECOMPRESSED_BYTES if limit is None else limit
    try:
        if codec == GZIP:
            return _gunzip(data, limit)
        if codec == SNAPPY:
            return _snappy_decompress(data, limit)
        if codec == LZ4:
            return _lz4_decompress(data, limit)
        if codec == ZSTD:
            return _zstd_decompress(data, limit)
    except KafkaLogError:
        raise
    except Exception as e:    # noqa: BLE001 - any library failure on stored bytes is corruption
        raise CorruptRecordError(f"{CODEC_NAMES[codec]} data is corrupt: "
                                 f"{type(e).__name__}: {e}") from None
    if codec == NONE:
        return data
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def _too_large(codec, limit):
    return RecordTooLargeError(
        f"{codec} data decompresses to more than {limit} bytes (decompression limit)")


def _gunzip(data, limit):
    d = zlib.decompressobj(47)     # gzip or zlib header, detected
    out = d.decompress(data, limit + 1)
    if len(out) > limit:
        raise _too_large("gzip", limit)
    if not d.eof:
        raise CorruptRecordError("gzip data is truncated")
    return out


def _snappy_decompress(data, limit):
    data = memoryview(data)
    if bytes(data[:8]) != _XERIAL_MAGIC:
        return _snappy_raw(data, limit)
    pos, chunks, total = _XERIAL_HEADER, [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("xerial snappy block header is truncated")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecordError("xerial snappy block runs past the data")
        block = _snappy_raw(data[pos:pos + n], limit - total)
        total += len(block)
        chunks.append(block)
        pos += n
    return b"".join(chunks)


def _snappy_raw(data, limit):
    if cramjam.snappy.decompress_raw_len(data) > limit:
        raise _too_large("snappy", limit)
    return cramjam.snappy.decompress_raw(data)


def _xerial_compress(data):
    # Kafka's Java clients frame snappy like xerial's SnappyOutputStream: 32 KiB blocks.
    out = [_XERIAL_MAGIC, struct.pack(">ii", 1, 1)]
    view = memoryview(data)
    for i in range(0, len(view), 32768):
        block = bytes(cramjam.snappy.compress_raw(view[i:i + 32768]))
        out.append(struct.pack(">i", len(block)))
        out.append(block)
    return b"".join(out)


def _lz4_frame(data):
    """Parse an LZ4 frame: (blocks [(start, size, stored)], block max size), or None for a
    frame of linked blocks (decoded whole by cramjam). The header checksum is tolerated, not
    checked: brokers writing magic 0 computed it over the magic bytes too (KAFKA-3160), and
    the batch CRC already guards the bytes."""
    if len(data) < 7 or struct.unpack_from("<I", data, 0)[0] != _LZ4_MAGIC:
        raise CorruptRecordError("not an LZ4 frame")
    flg, bd = data[4], data[5]
    if flg >> 6 != 1:
        raise CorruptRecordError(f"unsupported LZ4 frame version {flg >> 6}")
    independent, block_checksum = flg & 0x20, flg & 0x10
    has_content_size, content_checksum, has_dict = flg & 0x08, flg & 0x04, flg & 0x01
    block_max = _LZ4_BLOCK_SIZES.get((bd >> 4) & 0x7)
    if block_max is None:
        raise CorruptRecordError(f"invalid LZ4 block size code {(bd >> 4) & 0x7}")
    if has_dict:
        # Kafka never writes one (its LZ4 streams have no dictionary): a damaged frame
        raise CorruptRecordError("LZ4 frame declares a dictionary, which Kafka never writes")
    if not independent:
        return None, block_max
    pos = 6 + (8 if has_content_size else 0) + 1             # + header checksum
    blocks = []
    while True:
        if pos + 4 > len(data):
            raise CorruptRecordError("LZ4 frame is truncated")
        (word,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if word == 0:
            break
        n, stored = word & 0x7FFFFFFF, word & 0x80000000
        if n > block_max or pos + n > len(data):
            raise CorruptRecordError("LZ4 block runs past the frame")
        blocks.append((pos, n, stored))
        pos += n + (4 if block_checksum else 0)
    if content_checksum and pos + 4 > len(data):
        raise CorruptRecordError("LZ4 frame is truncated")
    return blocks, block_max


def _lz4_decompress(data, limit):
    data = memoryview(data)
    blocks, block_max = _lz4_frame(data)
    if blocks is None:
        # Linked blocks need the previous block as dictionary: let cramjam decode the frame.
        out = bytes(cramjam.lz4.decompress(data))
        if len(out) > limit:
            raise _too_large("lz4", limit)
        return out
    out = bytearray(min(len(blocks) * block_max, limit + 1))
    with memoryview(out) as view:
        written = _lz4_blocks_into(data, blocks, block_max, view, limit)
    del out[written:]
    return out


def _lz4_blocks_into(data, blocks, block_max, view, limit):
    """Decode independent LZ4 blocks end to end into ``view``; returns the bytes written."""
    written = 0
    capacity = len(view)
    for start, n, stored in blocks:
        if stored:
            if written + n > min(limit, capacity):
                raise _too_large("lz4", limit)
            view[written:written + n] = data[start:start + n]
            written += n
        else:
            room = min(block_max, capacity - written)
            try:
                written += cramjam.lz4.decompress_block_into(data[start:start + n],
                                                             view[written:written + room])
            except cramjam.DecompressionError:
                if room < block_max:
                    raise _too_large("lz4", limit) from None
                raise
        if written > limit:
            raise _too_large("lz4", limit)
    return written


def decompress_plan(codec, data):
    """``(bound, plan)``: an upper bound of ``data``'s decompressed size known without
    decompressing, and what ``decompress_into`` needs; None when there is none (only LZ4
    frames of independent blocks have one)."""
    if codec != LZ4:
        return None
    try:
        blocks, block_max = _lz4_frame(memoryview(data))
    except (struct.error, ValueError, KafkaLogError):
        return None              # let the ordinary path raise the precise error
    return None if blocks is None else (len(blocks) * block_max, (blocks, block_max))


def decompress_into(codec, data, view, plan, limit=None):
    """Decompress into the writable buffer ``view`` (at least the planned bound); returns
    the bytes written."""
    limit = MAX_DECOMPRESSED_BYTES if limit is None else limit
    try:
        return _lz4_blocks_into(memoryview(data), plan[0], plan[1], view, limit)
    except KafkaLogError:
        raise
    except Exception as e:    # noqa: BLE001 - any library failure on stored bytes is corruption
        raise CorruptRecordError(f"lz4 data is corrupt: {type(e).__name__}: {e}") from None


def _xxh32_short(data, seed=0):
    """xxHash32 of fewer than 16 bytes: all the LZ4 frame header checksum needs."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF

    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & mask

    assert len(data) < 16
    h = (seed + p5 + len(data)) & mask
    i = 0
    while i + 4 <= len(data):
        h = (rotl((h + struct.unpack_from("<I", data, i)[0] * p3) & mask, 17) * p4) & mask
        i += 4
    while i < len(data):
        h = (rotl((h + data[i] * p5) & mask, 11) * p1) & mask
        i += 1
    h = ((h ^ (h >> 15)) * p2) & mask
    h = ((h ^ (h >> 13)) * p3) & mask
    return h ^ (h >> 16)


def _lz4_frame_compress(data):
    """An LZ4 frame as Kafka's KafkaLZ4BlockOutputStream writes it: independent 64 KiB blocks,
    no content size, no checksums, a correct header checksum."""
    descriptor = bytes([0x60, 0x40])            # version 01, independent blocks; 64 KiB max
    out = [struct.pack("<I", _LZ4_MAGIC), descriptor,
           bytes([(_xxh32_short(descriptor) >> 8) & 0xFF])]
    view = memoryview(data)
    for i in range(0, len(view), 64 << 10):
        raw = view[i:i + (64 << 10)]
        block = bytes(cramjam.lz4.compress_block(raw, store_size=False))
        if len(block) >= len(raw):
            out.append(struct.pack("<I", len(raw) | 0x80000000))
            out.append(bytes(raw))
        else:
            out.append(struct.pack("<I", len(block)))
            out.append(block)
    out.append(b"\0\0\0\0")
    return b"".join(out)


def _zstd_decompress(data, limit):
    data = memoryview(data)
    size = _zstd_content_size(data)
    if size is not None:
        if size > limit:
            raise _too_large("zstd", limit)
        out = bytearray(size)
        n = cramjam.zstd.decompress_into(data, out)
        if n != size:
            raise CorruptRecordError("zstd frame is shorter than its declared content size")
        return out
    # Kafka's zstd-jni stream leaves the content size out: grow a bounded buffer until it fits.
    capacity = min(limit, max(1 << 16, 8 * len(data)))
    while True:
        out = bytearray(capacity)
        try:
            n = cramjam.zstd.decompress_into(data, out)
        except cramjam.DecompressionError as e:
            if "whole buffer" not in str(e):
                raise
            if capacity >= limit:
                raise _too_large("zstd", limit) from None
            capacity = min(limit, capacity * 4)
            continue
        del out[n:]
        return out


def _zstd_content_size(data):
    """Frame_Content_Size from a zstd frame header, or None when the frame leaves it out."""
    if len(data) < 6 or struct.unpack_from("<I", data, 0)[0] != _ZSTD_MAGIC:
        raise CorruptRecordError("not a zstd frame")
    fhd = data[4]
    fcs_flag, single_segment, dict_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if width == 0:
        return None
    if pos + width > len(data):
        raise CorruptRecordError("zstd frame header is truncated")
    raw = int.from_bytes(data[pos:pos + width], "little")
    return raw + 256 if width == 2 else raw
