"""Bad input gets a typed error with the file and position: never a huge allocation, a hang
or a crash."""
import struct

import pytest
import zlib

import cramjam

from kafkalog import Record, build_batch, codecs, iter_batches, OffsetIndex, TimeIndex
from kafkalog.errors import (
    CorruptIndexError, CorruptRecordError, KafkaLogError, RecordTooLargeError,
    UnsupportedCompressionError,
)
from kafkalog._common_py import zigzag_varint as _varint


def records(n=5):
    return [Record(key=b"k%d" % i, value=b"v" * 50, timestamp=1000 + i) for i in range(n)]


def write(tmp_path, data, name="00000000000000000000.log"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_two_gigabyte_length_is_reported_in_strict_walks(tmp_path):
    good = build_batch(records())
    bad = bytearray(build_batch(records(), base_offset=5))
    struct.pack_into(">i", bad, 8, 2**31 - 1)
    path = write(tmp_path, good + bad)
    # Kafka's file iterator stops silently at an entry that runs past the end...
    assert len(list(iter_batches(path))) == 1
    # ...a strict walk (data that must be whole batches) says where and why.
    with pytest.raises(CorruptRecordError) as e:
        list(iter_batches(path, strict=True))
    assert e.value.position == len(good) and e.value.path == path
    assert "2147483647" in str(e.value)


def test_negative_length(tmp_path):
    good = build_batch(records())
    bad = bytearray(build_batch(records(), base_offset=5))
    struct.pack_into(">i", bad, 8, -7)
    path = write(tmp_path, good + bad)
    with pytest.raises(CorruptRecordError) as e:
        list(iter_batches(path))
    assert e.value.position == len(good) and str(path) in str(e.value)


def test_varint_that_never_ends(tmp_path):
    body = b"\x00" + b"\xff" * 20          # attributes, then an endless timestamp delta
    rec = _varint(len(body)) + body
    batch = bytearray(build_batch(records(1), base_offset=5))   # after the first batch
    batch = batch[:61] + rec
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    path = write(tmp_path, bytes(build_batch(records())) + bytes(batch))
    batches = list(iter_batches(path, validate_crc=False))
    with pytest.raises(CorruptRecordError) as e:
        list(batches[1])
    assert e.value.position is not None and e.value.path == path


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_decompression_bomb(codec, monkeypatch, tmp_path):
    monkeypatch.setattr(codecs, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    big = [Record(value=b"\0" * (1 << 20), timestamp=1), Record(value=b"\0" * 10, timestamp=1)]
    data = build_batch(big, compression=codec)
    assert len(data) < 100_000
    path = write(tmp_path, data)
    (batch,) = list(iter_batches(path))
    with pytest.raises(RecordTooLargeError) as e:
        list(batch)
    assert e.value.position == 0 and e.value.path == path


def test_gzip_bomb_at_the_default_limit():
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    bomb = b"".join(c.compress(chunk) for _ in range(300)) + c.flush()
    with pytest.raises(RecordTooLargeError):
        codecs.decompress(codecs.GZIP, bomb)


@pytest.mark.parametrize("codec", [codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD])
def test_corrupt_compressed_data(codec):
    good = codecs.compress(codec, b"hello world " * 100)
    for damaged in (good[:len(good) // 2], good[:4] + b"\xff" * 40, b"", b"\x00" * 30):
        with pytest.raises(KafkaLogError):
            codecs.decompress(codec, damaged)


def test_unknown_codec(tmp_path):
    batch = bytearray(build_batch(records()))
    batch[22] |= 0x07                         # codec 7 (crc not recomputed: decoding is asked)
    (b,) = list(iter_batches(bytes(batch), validate_crc=False))
    with pytest.raises(UnsupportedCompressionError):
        list(b)
    with pytest.raises(UnsupportedCompressionError):
        build_batch(records(), compression="brotli")


def test_snappy_raw_and_xerial_both_read():
    data = b"snappy data " * 5000
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert bytes(codecs.decompress(codecs.SNAPPY, raw)) == data
    xerial = codecs.compress(codecs.SNAPPY, data)
    assert xerial.startswith(b"\x82SNAPPY\x00")
    assert bytes(codecs.decompress(codecs.SNAPPY, xerial)) == data


def test_lz4_frames_with_a_broken_header_checksum_are_read():
    data = b"lz4 data " * 3000
    frame = bytearray(codecs.compress(codecs.LZ4, data))
    assert bytes(cramjam.lz4.decompress(bytes(frame))) == data     # a standard frame
    frame[6] ^= 0x5A                       # what old brokers wrote for magic 0
    assert bytes(codecs.decompress(codecs.LZ4, bytes(frame))) == data


def test_zstd_with_and_without_content_size():
    import zstandard
    data = b"zstd data " * 10000
    with_size = zstandard.ZstdCompressor(write_content_size=True).compress(data)
    without = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert bytes(codecs.decompress(codecs.ZSTD, with_size)) == data
    assert bytes(codecs.decompress(codecs.ZSTD, without)) == data


def test_truncated_index(tmp_path):
    path = write(tmp_path, struct.pack(">ii", 3, 100) + b"\0\0\0", "00000000000000000000.index")
    idx = OffsetIndex(path, 0, writable=False)
    assert idx.entries == 1
    with pytest.raises(CorruptIndexError) as e:
        idx.sanity_check()
    assert str(path) in str(e.value)
    idx.close()
    tpath = write(tmp_path, b"\0" * 5, "00000000000000000000.timeindex")
    t = TimeIndex(tpath, 0, writable=False)
    with pytest.raises(CorruptIndexError):
        t.sanity_check()
    t.close()


def test_hostile_record_count_allocates_nothing_big():
    batch = bytearray(build_batch(records(2)))
    struct.pack_into(">i", batch, 57, 2**31 - 1)
    (b,) = list(iter_batches(bytes(batch), validate_crc=False))
    with pytest.raises(CorruptRecordError):
        list(b)
