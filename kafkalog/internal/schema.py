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
"""
from __future__ import annotations

import base64
import struct
from typing import Any, Iterable

from kafkalog.errors import InternalRecordError

_PRIMITIVES = {
    # name: (struct format, width)
    "int8": (">b", 1), "int16": (">h", 2), "uint16": (">H", 2), "int32": (">i", 4),
    "uint32": (">I", 4), "int64": (">q", 8), "float64": (">d", 8),
}
_SCALARS = set(_PRIMITIVES) | {"bool", "uuid", "string", "bytes", "records"}
_ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


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
    __slots__ = ("name", "type", "array", "versions", "tag", "default", "nullable")

    def __init__(self, name: str, type_: str | Struct, array: bool, versions: Versions,
                 tag: int | None, default: Any, nullable: Versions | None = None) -> None:
        self.nullable = nullable
        self.name = name
        self.type = type_
        self.array = array
        self.versions = versions
        self.tag = tag
        self.default = default


class Struct:
    """A message or nested struct: its fields in order, tagged ones also by tag."""
    __slots__ = ("name", "fields", "tagged")

    def __init__(self, name: str) -> None:
        self.name = name
        self.fields: list[Field] = []
        self.tagged: dict[int, Field] = {}

    def add(self, field: Field) -> None:
        self.fields.append(field)
        if field.tag is not None:
            self.tagged[field.tag] = field


class Message:
    """A top-level message: its ``Struct``, valid and flexible versions."""
    __slots__ = ("name", "struct", "valid", "flexible")

    def __init__(self, name: str, valid: str, flexible: str, fields: str) -> None:
        self.name = name
        self.valid = Versions(valid)
        self.flexible = Versions(flexible)
        self.struct = parse_fields(name, fields)

    def read(self, data: bytes, version: int, offset: int = 0, exact: bool = True,
             check_version: bool = True) -> dict[str, Any]:
        """The message at ``data[offset:]`` read as ``version``, in Kafka's JSON shape.

        With ``exact``, bytes left over after it are an error (Kafka's deserializers read a
        record's whole value). Raises InternalRecordError for a version the schema does not
        have (unless not ``check_version``: a newer version is then read with the fields
        of the newest one) or bytes that do not follow it.
        """
        if check_version and version not in self.valid:
            raise InternalRecordError(f"{self.name} has no version {version}")
        reader = Reader(data, offset)
        try:
            out = reader.struct(self.struct, version, version in self.flexible)
        except (struct.error, IndexError, UnicodeDecodeError, ValueError) as e:
            raise InternalRecordError(f"{self.name} v{version} cannot be read: {e}") from None
        if exact and reader.pos != len(data):
            raise InternalRecordError(f"{self.name} v{version}: {len(data) - reader.pos} bytes "
                                      f"left after the message")
        return out


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
    return int(text)


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
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def take(self, n: int) -> bytes:
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
        return None if n < 0 else self.take(n).decode("utf-8")

    def bytes_(self, flexible: bool) -> bytes | None:
        n = self.length(flexible, "int32")
        return None if n < 0 else self.take(n)

    def scalar(self, type_: str, flexible: bool) -> Any:
        if type_ in _PRIMITIVES:
            return self.fixed(type_)
        if type_ == "bool":
            return self.take(1)[0] != 0
        if type_ == "uuid":
            return uuid_text(self.take(16))
        if type_ == "string":
            return self.string(flexible)
        # bytes and records: base64, as Kafka's JsonConverter writes them
        raw = self.bytes_(flexible)
        return None if raw is None else base64.b64encode(raw).decode("ascii")

    def value(self, field: Field, version: int, flexible: bool, tagged: bool = False) -> Any:
        type_ = field.type
        nullable = field.nullable is not None and version in field.nullable
        if field.array:
            n = self.length(flexible, "int32")
            if n < 0:
                return _null(field, nullable)
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
        for f in s.fields:
            if version not in f.versions:
                continue
            if f.tag is not None and flexible:
                continue
            out[f.name] = self.value(f, version, flexible)
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


def messages(entries: Iterable[tuple[str, str, str, str]]) -> dict[str, Message]:
    """``Message`` objects by name from (name, valid versions, flexible versions, fields)."""
    return {name: Message(name, valid, flexible, fields)
            for name, valid, flexible, fields in entries}
