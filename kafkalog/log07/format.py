"""Kafka 0.7 messages: building entries as 0.7's producer and log wrote them, and reading the
messages out of walked entries (a compressed wrapper's inner messages included).

The byte layout is named once in ``kafkalog._layout``; walking entries and checking their
CRC32 is the ``walk_log07`` kernel's. An entry's offset is its byte position in the
partition's stream: its file's base offset + its position in the file.
"""
from __future__ import annotations

import struct
import zlib
from typing import Any, Iterable, Iterator, NamedTuple

from kafkalog import codecs
from kafkalog._kernels import walk_log07
from kafkalog._layout import WALK_END, WALK_PARTIAL
from kafkalog.errors import CorruptRecordError, UnknownCodecError, UnsupportedCompressionError

#: The codecs 0.7 knew (the low 2 bits of a magic 1 message's attributes).
LOG07_CODECS = (codecs.NONE, codecs.GZIP, codecs.SNAPPY)
_ENTRY_CHUNK = 1 << 16        # entries per kernel call: bounds the entry table's memory


class Message07(NamedTuple):
    """A message of a Kafka 0.7 log.

    ``offset``: the byte offset of its entry (for a message inside a compressed wrapper, the
    wrapper's); ``next_offset``: where the following fetch starts (the end of its entry, or
    of its wrapper: 0.7 fetches can only start at a top-level entry); ``payload``: bytes;
    ``codec``: the name of the codec it was stored under (``"none"``, or its wrapper's);
    ``magic``, ``crc`` (its CRC32 as stored) and ``size`` (bytes of its entry, the 4-byte
    length included) are its own."""
    offset: int
    next_offset: int
    payload: bytes
    codec: str
    magic: int
    crc: int
    size: int


def codec_of(codec: int | str) -> int:
    """The attribute value of a codec 0.7 knew (``"none"``, ``"gzip"``, ``"snappy"`` or 0-2);
    raises UnsupportedCompressionError for any other."""
    value = codecs.codec_id(codec)
    if value not in LOG07_CODECS:
        raise UnsupportedCompressionError(
            f"Kafka 0.7 logs know the codecs none, gzip and snappy, not {codec!r}")
    return value


def encode_entry(payload: bytes, codec: int = codecs.NONE, magic: int = 1) -> bytes:
    """One entry: the 4-byte length, then magic, attributes (magic 1 only), CRC32 of the
    payload, payload."""
    header = bytes((magic, codec)) if magic == 1 else bytes((magic,))
    body = header + struct.pack(">I", zlib.crc32(payload)) + payload
    return struct.pack(">i", len(body)) + body


def encode_message_set(payloads: Iterable[bytes], codec: int = codecs.NONE) -> tuple[bytes, int]:
    """(bytes, number of entries) of ``payloads`` as 0.7's producer sent them: one magic 1
    entry each, or with a codec one wrapper entry whose payload is those entries compressed."""
    entries = [encode_entry(bytes(p)) for p in payloads]
    if codec == codecs.NONE or not entries:
        return b"".join(entries), len(entries)
    return encode_entry(codecs.compress(codec, b"".join(entries)), codec), 1


def walk_all(buf: Any, start: int, end: int, validate_crc: bool
             ) -> Iterator[tuple[Any, int, int, str | None]]:
    """``walk_log07`` over ``buf[start:end]`` in chunks of entries: yields (entries, status,
    stop, message) per chunk, the last one's status saying why the walk ended."""
    pos = start
    while True:
        entries, status, stop, message = walk_log07(buf, pos, end, validate_crc, _ENTRY_CHUNK)
        last = status != WALK_END or stop >= end or len(entries) == 0
        yield entries, status, stop, message
        if last:
            return
        pos = stop


def messages_of(buf: Any, entries: Any, base_offset: int, validate_crc: bool = True,
                path: str | None = None) -> Iterator[Message07]:
    """The messages of walked ``entries`` (``LOG07_ENTRY_DTYPE`` rows, positions in ``buf``,
    whose first byte is at offset ``base_offset``), a wrapper's inner messages in its place."""
    for row in entries.tolist():
        position, payload_position, size, payload_size, crc, magic, _, codec, _ = row
        offset = base_offset + position
        payload = bytes(buf[payload_position:payload_position + payload_size])
        if codec == codecs.NONE:
            yield Message07(offset, offset + size, payload, "none", magic, crc, size)
        else:
            yield from _inner_messages(payload, codec, offset, offset + size, validate_crc,
                                       path, position)


def _inner_messages(payload, codec, offset, next_offset, validate_crc, path, position):
    if codec not in LOG07_CODECS:
        raise UnknownCodecError(f"Kafka 0.7 message has unknown codec {codec}", position, path)
    inner = codecs.decompress(codec, payload)
    entries, status, stop, message = walk_log07(inner, 0, -1, validate_crc)
    if status != WALK_END:
        why = "a truncated message" if status == WALK_PARTIAL else message
        raise CorruptRecordError(f"the {codecs.CODEC_NAMES[codec]} message set of the wrapper "
                                 f"at offset {offset} holds {why} at inner position {stop}",
                                 position, path)
    name = codecs.CODEC_NAMES[codec]
    for m in messages_of(inner, entries, 0, validate_crc, path):
        yield m._replace(offset=offset, next_offset=next_offset,
                         codec=name if m.codec == "none" else m.codec)
