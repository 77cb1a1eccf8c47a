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

import numpy as np

from kafkalog import codecs
from kafkalog._kernels import walk_log07
from kafkalog._layout import HEADER_DTYPE, RECORD_DTYPE, WALK_END, WALK_PARTIAL
from kafkalog.errors import CorruptRecordError, UnknownCodecError, UnsupportedCompressionError
from kafkalog.records import RecordTable, TimestampType

#: A scan task's ``"format"`` when it reads a Kafka 0.7 file.
LOG07_FORMAT = "0.7"
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


class MessageColumns(NamedTuple):
    """The messages of walked entries, columnar, in log order: ``data`` is the buffer
    ``value_pos`` indexes into; ``entry`` the index of each message's top-level entry among
    those walked; ``size``, ``crc``, ``magic`` the message's own; ``codec`` its top-level
    entry's (the codec it was stored under)."""
    data: Any
    entry: np.ndarray
    value_pos: np.ndarray
    value_len: np.ndarray
    size: np.ndarray
    crc: np.ndarray
    magic: np.ndarray
    codec: np.ndarray


def decode_entries(buf: Any, entries: np.ndarray, validate_crc: bool = True,
                   path: str | None = None) -> MessageColumns:
    """``MessageColumns`` of walked ``entries`` (``LOG07_ENTRY_DTYPE`` rows, positions in
    ``buf``). Without a wrapper among them the payloads stay in ``buf`` (no copy); else the
    walked bytes and each wrapper's decompressed message set (walked by the kernel, its own
    wrappers decoded the same way, as 0.7's deep iterator did) are gathered in one buffer.

    Raises CorruptRecordError for a wrapper whose message set does not decompress or walk
    to its end (an inner CRC32 mismatch with ``validate_crc``), UnknownCodecError for a codec
    0.7 did not know."""
    wrappers = np.flatnonzero(entries["codec"] != codecs.NONE)
    plain = entries if len(wrappers) == 0 else entries[entries["codec"] == codecs.NONE]
    index = np.arange(len(entries)) if len(wrappers) == 0 else \
        np.flatnonzero(entries["codec"] == codecs.NONE)
    columns = [MessageColumns(None, index, plain["payload_position"].astype(np.int64),
                              plain["payload_size"].astype(np.int32), plain["size"].copy(),
                              plain["crc"].copy(), plain["magic"].copy(),
                              plain["codec"].copy())]
    if len(wrappers) == 0:
        return columns[0]._replace(data=buf)
    first = int(entries["position"][0])
    last = entries[-1]
    data = bytearray(buf[first:int(last["position"]) + int(last["size"])])
    columns[0] = columns[0]._replace(value_pos=columns[0].value_pos - first)
    for i in wrappers.tolist():
        inner = _inner(buf, entries[i], validate_crc, path)
        n = len(inner.entry)
        columns.append(inner._replace(entry=np.full(n, i), value_pos=inner.value_pos + len(data),
                                      codec=np.full(n, entries["codec"][i], np.int8)))
        data += inner.data
    order = np.argsort(np.concatenate([c.entry for c in columns]), kind="stable")
    return MessageColumns(data, *(np.concatenate([getattr(c, f) for c in columns])[order]
                                  for f in MessageColumns._fields[1:]))


def _inner(buf, row, validate_crc, path):
    """``MessageColumns`` of one wrapper's message set (its own ``data``); any damage inside
    is a CorruptRecordError at the wrapper's position."""
    codec, position = int(row["codec"]), int(row["position"])
    if codec not in LOG07_CODECS:
        raise UnknownCodecError(f"Kafka 0.7 message has unknown codec {codec}", position, path)
    name = codecs.CODEC_NAMES[codec]
    start = int(row["payload_position"])
    try:
        inner = bytes(codecs.decompress(codec, buf[start:start + int(row["payload_size"])]))
        entries, status, stop, message = walk_log07(inner, 0, -1, validate_crc)
        if status != WALK_END:
            why = "a truncated message" if status == WALK_PARTIAL else message
            raise CorruptRecordError(f"holds {why} at inner position {stop}")
        columns = decode_entries(inner, entries, validate_crc)
    except CorruptRecordError as e:
        raise CorruptRecordError(f"the {name} message set of the wrapper: {e.reason}",
                                 position, path) from None
    return columns._replace(data=bytes(columns.data))


def messages_of(buf: Any, entries: np.ndarray, base_offset: int, validate_crc: bool = True,
                path: str | None = None) -> Iterator[Message07]:
    """The messages of walked ``entries`` (positions in ``buf``, whose first byte is at
    offset ``base_offset``) as ``Message07``, a wrapper's inner messages in its place; a
    damaged wrapper raises CorruptRecordError after the messages before it."""
    try:
        c = decode_entries(buf, entries, validate_crc, path)
    except CorruptRecordError as e:
        if e.position is not None:
            yield from messages_of(buf, entries[entries["position"] < e.position], base_offset,
                                   validate_crc, path)
        raise
    starts = base_offset + entries["position"].astype(np.int64)
    ends = starts + entries["size"]
    data = c.data
    for i, pos, n, size, crc, magic, codec in zip(
            c.entry.tolist(), c.value_pos.tolist(), c.value_len.tolist(), c.size.tolist(),
            c.crc.tolist(), c.magic.tolist(), c.codec.tolist()):
        yield Message07(int(starts[i]), int(ends[i]), bytes(data[pos:pos + n]),
                        codecs.CODEC_NAMES.get(codec, str(codec)), magic, crc, size)


def message_table(buf: Any, entries: np.ndarray, base_offset: int, validate_crc: bool = True,
                  path: str | None = None) -> RecordTable:
    """The messages of walked ``entries`` as a ``RecordTable`` (the readers' columnar form):
    ``offset`` its top-level entry's byte offset, the payload as value, no key, no timestamp
    (-1, ``NO_TIMESTAMP_TYPE``), no headers; ``batch`` the index of its top-level entry."""
    c = decode_entries(buf, entries, validate_crc, path)
    n = len(c.entry)
    records = np.zeros(n, RECORD_DTYPE)
    records["offset"] = base_offset + entries["position"][c.entry]
    records["timestamp"] = -1
    records["value_pos"] = c.value_pos
    records["value_len"] = c.value_len
    records["key_len"] = -1
    records["size"] = c.size
    return RecordTable(c.data, records, np.empty(0, HEADER_DTYPE), c.entry.astype(np.int32),
                       np.full(n, -1, np.int64), c.crc.astype(np.int64),
                       np.full(n, TimestampType.NO_TIMESTAMP_TYPE, np.int8))
