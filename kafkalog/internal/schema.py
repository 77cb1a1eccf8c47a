"""A small reader of Kafka's generated message format, driven by schema tables.

Kafka describes every record of its internal topics in JSON message definitions (field names,
types, the versions a field exists in, which versions are "flexible", tagged fields) and
generates a Java class per message from them. Here a message is a ``Struct`` built from a
compact text table (``kafkalog.internal.tables``) and read by one loop, so a new record type
costs a table entry, not code.

The wire format (Kafka's ``Readable`` / ``ByteBufferAccessor``):

==============  ====================================  =======================================
type            non-flexible version                  flexible version
==============  ====================================  =======================================
int8..int64     big-endian, fixed width               same
uint16/uint32   big-endian, unsigned                  same
float64         IEEE 754 big-endian                   same
bool            one byte, non-zero is true            same
uuid            16 bytes                              same
string          int16 length, -1 for null, UTF-8      unsigned varint length + 1, 0 for null
bytes           int32 length, -1 for null             unsigned varint length + 1, 0 for null
[]T             int32 count, -1 for null              unsigned varint count + 1, 0 for null
struct          its fields in order                   its fields, then its tagged fields
tagged fields   (none)                                varint count, then (varint tag,
                                                      varint size, value) each
==============  ====================================  =======================================

A field line of a table is ``name type [versions] [tagN] [nullV] [=default]``: ``versions`` is
``3+``, ``1`` or ``1-3`` (all versions when left out), ``tagN`` makes it a tagged field with
tag N in those versions, ``=default`` is its default (``null``, a number, ``true``/``false``,
``""``). A type ending in ``?`` is nullable in all the field's versions, ``nullV`` (``null1+``)
in versions V only (Kafka's ``nullableVersions``): a nullable struct has an int8 marker before
it, -1 for null; a null string, bytes or array where the field is not nullable is an error, as
in Kafka's generated readers. A line indented below a field whose type is a struct (``Name`` or
``[]Name``) declares that struct's fields; a struct named again later without fields is the one
declared before (Kafka's ``commonStructs``).

Values come back in Kafka's JSON shape (the generated ``JsonConverter``): a dict per struct
with the field names as written in the table, a Uuid as Kafka prints it (base64url, 22
characters), bytes as base64, and a field left out when the version does not have it; a
tagged field appears only when it differs from its default.

The protocol codec (``kafkalog.protocol``) reads ``native`` values instead, as Kafka's
generated ``*Data`` classes hold them: ``uuid.UUID``, ``bytes``, and every field of the struct,
those the version lacks with their defaults (a struct the version lacks is None). It also
writes them (``Message.write``): a field left out of the dict takes its default, a tagged field
is written only when it differs from its default, and a ``records`` value larger than
``_INLINE_RECORDS`` stays a chunk of its own (bytes, memoryview, or any object with
``__len__`` the caller knows how to send), so a Fetch response never copies stored batches.

Lengths and counts are checked against the bytes left before anything is allocated: an
array's count cannot exceed them (each element takes at least one byte; Kafka's readers refuse
the same way), nor can a string's or bytes' length.
"""
from __future__ import annotations

import base64
import struct
import uuid
from typing import Any, Iterable

from kafkalog.errors import InternalRecordError, KafkaLogError

_PRIMITIVES = {
    # name: (struct format, width)
    "int8": (">b", 1), "int16": (">h", 2), "uint16": (">H", 2), "int32": (">i", 4),
    "uint32": (">I", 4), "int64": (">q", 8), "float64": (">d", 8),
}
_PACKERS = {name: struct.Struct(fmt).pack for name, (fmt, _) in _PRIMITIVES.items()}
_SCALARS = set(_PRIMITIVES) | {"bool", "uuid", "string", "bytes", "records"}
_ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
# records up to this size are copied into the surrounding bytes; larger ones stay a chunk
_INLINE_RECORDS = 4096


def uuid_text(raw: bytes) -> str:
    """A 16-byte Uuid as Kafka's ``Uuid.toString`` prints it (base64url, no padding)."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


class Versions:
    """A version range: ``lo`` to ``hi`` inclusive (``hi`` None is open-ended)."""
    __slots__ = ("lo", "hi")

    def __init__(self, text: str) -> None:
        if text.endswith("+"):
            self.lo, self.hi = int(text[:-1]), None
        elif "-" in text:
            lo, hi = text.split("-")
            self.lo, self.hi = int(lo), int(hi)
        elif text == "none":
            self.lo, self.hi = 1, 0
        else:
            self.lo = self.hi = int(text)

    def __contains__(self, version: int) -> bool:
        return version >= self.lo and (self.hi is None or version <= self.hi)


_ALL = Versions("0+")


class Field:
    """One field of a struct: ``name``, ``type`` (a scalar name or ``Struct``), ``array``,
    the ``versions`` it is in, its ``tag`` (None for a regular field), ``default`` and the
    versions it is ``nullable`` in (None for none)."""
    __slots__ = ("name", "type", "array", "versions", "tag", "default", "nullable", "native",
                 "pack")

    def __init__(self, name: str, type_: str | Struct, array: bool, versions: Versions,
                 tag: int | None, default: Any, nullable: Versions | None = None) -> None:
        self.nullable = nullable
        self.name = name
        self.type = type_
        self.array = array
        self.versions = versions
        self.tag = tag
        self.default = default
        # the default as a native value (see the module docstring); a list is copied per use
        self.native: Any = default
        if not array and default == _ZERO_UUID and type_ == "uuid":
            self.native = uuid.UUID(int=0)
        elif not array and default == "" and type_ in ("bytes", "records"):
            self.native = b""
        # a fixed-width number is written in one step (most fields of a Fetch response)
        self.pack = None if array or not isinstance(type_, str) else _PACKERS.get(type_)


class Struct:
    """A message or nested struct: its fields in order, tagged ones also by tag."""
    __slots__ = ("name", "fields", "tagged", "layouts")

    def __init__(self, name: str) -> None:
        self.name = name
        self.fields: list[Field] = []
        self.tagged: dict[int, Field] = {}
        # (version, flexible) -> (regular fields, tagged fields by tag), built on first use
        self.layouts: dict[tuple[int, bool], tuple[list[Field], list[Field]]] = {}

    def layout(self, version: int, flexible: bool) -> tuple[list[Field], list[Field]]:
        """The fields ``version`` has in order: those written in place and, in a flexible
        version, the tagged ones (by tag)."""
        key = (version, flexible)
        out = self.layouts.get(key)
        if out is None:
            present = [f for f in self.fields if version in f.versions]
            regular = [f for f in present if f.tag is None or not flexible]
            tagged = sorted((f for f in present if f.tag is not None and flexible),
                            key=lambda f: f.tag)  # type: ignore[arg-type, return-value]
            out = self.layouts[key] = (regular, tagged)
        return out

    def add(self, field: Field) -> None:
        self.fields.append(field)
        if field.tag is not None:
            self.tagged[field.tag] = field


class Message:
    """A top-level message: its ``Struct``, valid and flexible versions, and the error its
    reader and writer raise."""
    __slots__ = ("name", "struct", "valid", "flexible", "error")

    def __init__(self, name: str, valid: str, flexible: str, fields: str,
                 error: type[KafkaLogError] = InternalRecordError) -> None:
        self.name = name
        self.valid = Versions(valid)
        self.flexible = Versions(flexible)
        self.struct = parse_fields(name, fields)
        self.error = error

    def read(self, data: bytes | memoryview, version: int, offset: int = 0,
             exact: bool = True, check_version: bool = True,
             native: bool = False) -> dict[str, Any]:
        """The message at ``data[offset:]`` read as ``version``, in Kafka's JSON shape (or
        ``native``, see the module docstring).

        With ``exact``, bytes left over after it are an error (Kafka's deserializers read a
        record's whole value). Raises ``self.error`` (InternalRecordError unless the message
        was made with another) for a version the schema does not have (unless not
        ``check_version``: a newer version is then read with the fields of the newest one)
        or bytes that do not follow it.
        """
        if check_version and version not in self.valid:
            raise self.error(f"{self.name} has no version {version}")
        reader = Reader(data, offset, native)
        try:
            out = reader.struct(self.struct, version, version in self.flexible)
        except (struct.error, IndexError, UnicodeDecodeError, ValueError) as e:
            raise self.error(f"{self.name} v{version} cannot be read: {e}") from None
        if exact and reader.pos != len(data):
            raise self.error(f"{self.name} v{version}: {len(data) - reader.pos} bytes "
                             f"left after the message")
        return out

    def write(self, values: dict[str, Any], version: int, writer: Writer | None = None
              ) -> Writer:
        """``values`` (native, see the module docstring) written as ``version`` onto
        ``writer`` (a new one when None), which is returned: its ``chunks()`` are the bytes.

        Raises ``self.error`` for a version the schema does not have or a value the field
        cannot hold (a null where it is not nullable, a number out of range, a wrong type).
        """
        if version not in self.valid:
            raise self.error(f"{self.name} has no version {version}")
        writer = Writer() if writer is None else writer
        try:
            writer.struct(self.struct, values, version, version in self.flexible)
        except (struct.error, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise self.error(f"{self.name} v{version} cannot be written: {e}") from None
        return writer


def _default(text: str | None, type_: str | Struct, array: bool) -> Any:
    if text == "null":
        return None
    if array:
        return []
    if isinstance(type_, Struct):
        return None
    if text is None:
        return {"bool": False, "string": "", "uuid": _ZERO_UUID, "bytes": "",
                "float64": 0.0}.get(type_, 0)
    if type_ == "bool":
        return text == "true"
    if type_ == "string":
        return text.strip('"')
    if type_ == "float64":
        return float(text)
    return int(text, 0)     # Kafka's definitions write some defaults in hex (0x7fffffff)


def parse_fields(name: str, text: str, structs: dict[str, Struct] | None = None) -> Struct:
    """A ``Struct`` from field lines (see the module docstring)."""
    structs = {} if structs is None else structs
    root = Struct(name)
    # (indent, struct) of the structs being filled, innermost last
    stack: list[tuple[int, Struct]] = [(-1, root)]
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        while indent <= stack[-1][0]:
            stack.pop()
        parts = line.split()
        fname, ftype = parts[0], parts[1]
        versions, tag, default = _ALL, None, None
        nullable: Versions | None = _ALL if ftype.endswith("?") else None
        for p in parts[2:]:
            if p.startswith("tag"):
                tag = int(p[3:])
            elif p.startswith("null") and p != "null":
                nullable = Versions(p[4:])
            elif p.startswith("="):
                default = p[1:]
            else:
                versions = Versions(p)
        ftype = ftype.rstrip("?")
        array = ftype.startswith("[]")
        base = ftype[2:] if array else ftype
        type_: str | Struct
        if base in _SCALARS:
            type_ = base
        else:
            if base not in structs:
                structs[base] = Struct(base)
            type_ = structs[base]
        field = Field(fname, type_, array, versions, tag, _default(default, type_, array),
                      nullable)
        stack[-1][1].add(field)
        if isinstance(type_, Struct):
            stack.append((indent, type_))
    return root


def _null(field: Field, nullable: bool) -> None:
    if not nullable:
        raise ValueError(f"non-nullable field {field.name} was serialized as null")
    return None


class Reader:
    """A cursor over bytes that reads Kafka's types (see the module docstring)."""
    __slots__ = ("data", "pos", "native")

    def __init__(self, data: bytes | memoryview, pos: int = 0, native: bool = False) -> None:
        self.data = data
        self.pos = pos
        self.native = native

    def take(self, n: int) -> bytes | memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"needs {n} bytes at position {self.pos}, "
                             f"{len(self.data) - self.pos} left")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def fixed(self, type_: str) -> Any:
        fmt, width = _PRIMITIVES[type_]
        return struct.unpack(fmt, self.take(width))[0]

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ValueError(f"varint longer than 5 bytes at position {self.pos}")

    def length(self, flexible: bool, width: str) -> int:
        """A length or count: -1 for null."""
        if flexible:
            return self.uvarint() - 1
        return self.fixed(width)

    def string(self, flexible: bool) -> str | None:
        n = self.length(flexible, "int16")
        return None if n < 0 else str(self.take(n), "utf-8")

    def bytes_(self, flexible: bool) -> bytes | None:
        n = self.length(flexible, "int32")
        return None if n < 0 else bytes(self.take(n))

    def scalar(self, type_: str, flexible: bool) -> Any:
        if type_ in _PRIMITIVES:
            return self.fixed(type_)
        if type_ == "bool":
            return self.take(1)[0] != 0
        if type_ == "uuid":
            raw16 = bytes(self.take(16))
            return uuid.UUID(bytes=raw16) if self.native else uuid_text(raw16)
        if type_ == "string":
            return self.string(flexible)
        # bytes and records: base64, as Kafka's JsonConverter writes them
        raw = self.bytes_(flexible)
        if raw is None or self.native:
            return raw
        return base64.b64encode(raw).decode("ascii")

    def value(self, field: Field, version: int, flexible: bool, tagged: bool = False) -> Any:
        type_ = field.type
        nullable = field.nullable is not None and version in field.nullable
        if field.array:
            n = self.length(flexible, "int32")
            if n < 0:
                return _null(field, nullable)
            if n > len(self.data) - self.pos:
                raise ValueError(f"{field.name}: {n} elements cannot fit in the "
                                 f"{len(self.data) - self.pos} bytes left")
            if isinstance(type_, Struct):
                return [self.struct(type_, version, flexible) for _ in range(n)]
            return [self.scalar(type_, flexible) for _ in range(n)]
        if isinstance(type_, Struct):
            # a nullable struct: an int8 marker, -1 for null; a tagged one an unsigned
            # varint, 0 for null (Kafka's MessageDataGenerator)
            if nullable and (self.uvarint() <= 0 if tagged else self.fixed("int8") < 0):
                return None
            return self.struct(type_, version, flexible)
        out = self.scalar(type_, flexible)
        return _null(field, nullable) if out is None else out

    def struct(self, s: Struct, version: int, flexible: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in s.layout(version, flexible)[0]:
            out[f.name] = self.value(f, version, flexible)
        if self.native:
            for f in s.fields:      # what the version lacks, and tagged fields, as defaults
                if f.name not in out:
                    out[f.name] = list(f.native) if f.array and f.native else f.native
        if not flexible:
            return out
        tagged: dict[str, Any] = {}
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            known = s.tagged.get(tag)
            end = self.pos + size
            if known is None or version not in known.versions:
                self.take(size)         # an unknown tag is skipped, as Kafka does
                continue
            tagged[known.name] = self.value(known, version, flexible, tagged=True)
            if self.pos != end:
                raise ValueError(f"tagged field {known.name} (tag {tag}) declares {size} "
                                 f"bytes but holds {size + self.pos - end}")
        if self.native:
            out.update(tagged)
            return out
        if not any(f.tag is not None for f in s.fields):
            return out
        # JSON in declaration order; a tagged field only when it differs from its default
        ordered: dict[str, Any] = {}
        for f in s.fields:
            if f.name in out:
                ordered[f.name] = out[f.name]
            elif f.name in tagged and tagged[f.name] != f.default:
                ordered[f.name] = tagged[f.name]
        return ordered


class Writer:
    """Writes Kafka's types (see the module docstring) into a list of chunks: bytes, and the
    large ``records`` values as they were given."""
    __slots__ = ("buf", "parts")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.parts: list[Any] = []

    def chunks(self) -> list[Any]:
        """What was written, in order (bytearrays, and the large records values as given);
        the writer is empty after."""
        if self.buf:
            self.parts.append(self.buf)
            self.buf = bytearray()
        out, self.parts = self.parts, []
        return out

    def uvarint(self, n: int) -> None:
        if n < 0 or n > 0xFFFFFFFF:
            raise ValueError(f"{n} does not fit an unsigned varint")
        while n >= 0x80:
            self.buf.append((n & 0x7F) | 0x80)
            n >>= 7
        self.buf.append(n)

    def length(self, n: int, flexible: bool, width: str) -> None:
        """A length or count, -1 for null."""
        if flexible:
            self.uvarint(n + 1)
        else:
            self.buf += _PACKERS[width](n)

    def scalar(self, type_: str, v: Any, flexible: bool) -> None:
        if type_ in _PACKERS:
            self.buf += _PACKERS[type_](v)
        elif type_ == "bool":
            self.buf.append(1 if v else 0)
        elif type_ == "uuid":
            self.buf += v.bytes
        elif type_ == "string":
            raw = v.encode("utf-8")
            self.length(len(raw), flexible, "int16")
            self.buf += raw
        elif type_ == "bytes" or (isinstance(v, (bytes, bytearray, memoryview))
                                  and len(v) <= _INLINE_RECORDS):
            self.length(len(v), flexible, "int32")
            self.buf += v
        else:
            # stored batches stay the caller's object: a memoryview or a file slice
            self.length(len(v), flexible, "int32")
            self.parts.append(self.buf)
            self.buf = bytearray()
            self.parts.append(v)

    def value(self, field: Field, v: Any, version: int, flexible: bool,
              tagged: bool = False) -> None:
        type_ = field.type
        if v is None:
            if field.nullable is None or version not in field.nullable:
                if field.array or not isinstance(type_, Struct):
                    raise ValueError(f"non-nullable field {field.name} is null")
                v = {}      # a struct left out: its defaults, as Kafka's classes hold them
            elif isinstance(type_, Struct) and not field.array:
                if tagged:
                    self.uvarint(0)
                else:
                    self.buf.append(0xFF)
                return
            else:
                # a null string's length is an int16, as its length is
                self.length(-1, flexible, "int16" if type_ == "string" and not field.array
                            else "int32")
                return
        elif isinstance(type_, Struct) and not field.array and field.nullable is not None \
                and version in field.nullable:
            if tagged:
                self.uvarint(1)
            else:
                self.buf.append(1)
        if field.array:
            self.length(len(v), flexible, "int32")
            if isinstance(type_, Struct):
                for item in v:
                    self.struct(type_, item, version, flexible)
            else:
                for item in v:
                    self.scalar(type_, item, flexible)
        elif isinstance(type_, Struct):
            self.struct(type_, v, version, flexible)
        else:
            self.scalar(type_, v, flexible)

    def struct(self, s: Struct, values: dict[str, Any], version: int, flexible: bool) -> None:
        regular, tagged = s.layout(version, flexible)
        for f in regular:
            v = values.get(f.name, f.native)
            if f.pack is not None:
                self.buf += f.pack(v)
            else:
                self.value(f, v, version, flexible)
        if not flexible:
            return
        present = [(f, values[f.name]) for f in tagged
                   if f.name in values and values[f.name] != f.native]
        self.uvarint(len(present))
        for f, v in present:
            inner = Writer()
            inner.value(f, v, version, flexible, tagged=True)
            raw = inner.chunks()
            data = b"".join(raw)    # tagged fields are small; never records
            self.uvarint(f.tag)  # type: ignore[arg-type]
            self.uvarint(len(data))
            self.buf += data


def messages(entries: Iterable[tuple[str, str, str, str]],
             error: type[KafkaLogError] = InternalRecordError) -> dict[str, Message]:
    """``Message`` objects by name from (name, valid versions, flexible versions, fields),
    raising ``error`` for what cannot be read or written."""
    return {name: Message(name, valid, flexible, fields, error)
            for name, valid, flexible, fields in entries}
