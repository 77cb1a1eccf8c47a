"""Kafka's request and response frames: the 4-byte size prefix, the headers, the bodies.

A frame on the wire is an int32 size, then the header, then the body
(``kafkalog.protocol.messages`` describes the bodies). The header versions follow from the
API version, as Kafka's ``ApiMessageType.requestHeaderVersion`` derives them:

================  ===========================================  ==============================
header            fields                                       used for
================  ===========================================  ==============================
request v1        api key int16, api version int16,            non-flexible versions
                  correlation id int32, client id (nullable
                  string, int16 length in every version)
request v2        v1, then tagged fields                       flexible versions
response v0       correlation id int32                         non-flexible versions, and
                                                               ApiVersions in every version
response v1       v0, then tagged fields                       flexible versions
================  ===========================================  ==============================

An ApiVersions request of a version the server does not have is not an error: as Kafka's
``RequestContext`` does, its body is not read and the answer is version 0, so that a newer
client learns the versions the server has.
"""
from __future__ import annotations

import struct
from typing import Any

from kafkalog.errors import ProtocolEncodeError, ProtocolError, UnsupportedVersionError
from kafkalog.internal.schema import Message, Reader, Writer
from kafkalog.protocol.messages import APIS, MESSAGES

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")
API_VERSIONS = 18
UNSUPPORTED_VERSION = 35        # Kafka's error code


class Request:
    """A decoded request: its header's ``api_key``, ``api_version``, ``correlation_id``,
    ``client_id`` ("" when null, as Kafka reads it), the API's ``name``, the ``body`` (a dict,
    see ``kafkalog.internal.schema``'s native values) and the ``response_version`` its answer
    is written in (the request's, or 0 for an ApiVersions request of an unknown version)."""
    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "name", "body",
                 "response_version")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str,
                 name: str, body: dict[str, Any], response_version: int) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.name = name
        self.body = body
        self.response_version = response_version

    def __repr__(self) -> str:
        return (f"Request({self.name} v{self.api_version}, correlation id "
                f"{self.correlation_id}, client {self.client_id!r})")


def frame_size(prefix: bytes | memoryview, limit: int) -> int:
    """The size a frame's 4-byte ``prefix`` announces; ProtocolError when it is negative or
    over ``limit`` bytes (Kafka's ``socket.request.max.bytes``), before anything is read."""
    if len(prefix) != 4:
        raise ProtocolError(f"a frame's size prefix is 4 bytes, not {len(prefix)}")
    size = _SIZE.unpack(prefix)[0]
    if size < 0 or size > limit:
        raise ProtocolError(f"frame size {size} is outside 0..{limit}")
    return size


def _skip_tagged(reader: Reader) -> None:
    """A header's tagged fields: none is known, each is skipped."""
    for _ in range(reader.uvarint()):
        reader.uvarint()
        reader.take(reader.uvarint())


def decode_request(frame: bytes | memoryview) -> Request:
    """The request in ``frame`` (the bytes after the size prefix).

    Raises UnsupportedVersionError for an API key or version outside ``APIS`` (the header's
    values are its attributes), ProtocolError for bytes that do not follow the schema.
    """
    if len(frame) < _HEADER.size:
        raise ProtocolError(f"a request of {len(frame)} bytes is shorter than its header")
    api_key, version, correlation_id = _HEADER.unpack_from(frame, 0)
    api = APIS.get(api_key)
    if api is None:
        raise UnsupportedVersionError(f"unknown API key {api_key}", api_key, version,
                                      correlation_id)
    name, lo, hi = api
    message = MESSAGES[name + "Request"]
    supported = lo <= version <= hi
    if not supported and api_key != API_VERSIONS:
        raise UnsupportedVersionError(f"{name} v{version} is not supported (v{lo} to v{hi})",
                                      api_key, version, correlation_id)
    reader = Reader(frame, _HEADER.size, native=True)
    try:
        client_id = reader.string(False) or ""
        # an unknown ApiVersions version's header: v2 from the first flexible version on
        if version in message.flexible:
            _skip_tagged(reader)
    except (ValueError, struct.error, UnicodeDecodeError) as e:
        raise ProtocolError(f"{name} v{version}: the request header cannot be read: {e}"
                            ) from None
    if not supported:
        return Request(api_key, version, correlation_id, client_id, name, {}, 0)
    body = message.read(frame, version, reader.pos, native=True)
    return Request(api_key, version, correlation_id, client_id, name, body, version)


def encode_response(request: Request, body: dict[str, Any]) -> list[Any]:
    """The response to ``request`` with ``body`` (native values; a field left out takes its
    default) as chunks to write in order: the first holds the size prefix and the header,
    ``records`` values over a few KB are chunks of their own, as given (bytes, memoryview,
    or a file slice the server sends with ``sendfile``). Raises ProtocolEncodeError for a
    body the schema cannot hold."""
    version = request.response_version
    message = MESSAGES[request.name + "Response"]
    writer = Writer()
    writer.buf += _SIZE.pack(0)     # the size, filled in below
    writer.buf += _SIZE.pack(request.correlation_id)
    if version in message.flexible and request.api_key != API_VERSIONS:
        writer.uvarint(0)           # header v1: no tagged fields
    _write(message, body, version, writer)
    return _sized(writer)


def _write(message: Message, body: dict[str, Any], version: int, writer: Writer) -> None:
    try:
        message.write(body, version, writer)
    except ProtocolError as e:
        raise ProtocolEncodeError(str(e)) from None


def _sized(writer: Writer) -> list[Any]:
    chunks = writer.chunks()
    struct.pack_into(">i", chunks[0], 0, sum(len(c) for c in chunks) - 4)
    return chunks


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body: dict[str, Any]) -> bytes:
    """A client's request frame, size prefix included (for tests and tools; the server only
    decodes requests). Raises ProtocolEncodeError for a body the schema cannot hold."""
    name = APIS[api_key][0]
    message = MESSAGES[name + "Request"]
    writer = Writer()
    writer.buf += _SIZE.pack(0)
    writer.buf += _HEADER.pack(api_key, version, correlation_id)
    if client_id is None:
        writer.scalar("int16", -1, False)
    else:
        writer.scalar("string", client_id, False)
    if version in message.flexible:
        writer.uvarint(0)
    _write(message, body, version, writer)
    return b"".join(_sized(writer))


def decode_response(api_key: int, version: int, frame: bytes | memoryview
                    ) -> tuple[int, dict[str, Any]]:
    """(correlation id, body) of a response ``frame`` (after the size prefix) to a request
    of ``api_key`` and ``version`` (a client's side; for tests and tools)."""
    message = MESSAGES[APIS[api_key][0] + "Response"]
    reader = Reader(frame, 0, native=True)
    try:
        correlation_id = reader.fixed("int32")
        if version in message.flexible and api_key != API_VERSIONS:
            _skip_tagged(reader)
    except (ValueError, struct.error) as e:
        raise ProtocolError(f"the response header cannot be read: {e}") from None
    return correlation_id, message.read(frame, version, reader.pos, native=True)


def api_versions_body(request: Request) -> dict[str, Any]:
    """The body of the answer to an ApiVersions ``request``: every API of ``APIS`` with its
    versions, and UNSUPPORTED_VERSION when the request's version is unknown."""
    error = 0 if request.response_version == request.api_version else UNSUPPORTED_VERSION
    return {"errorCode": error, "throttleTimeMs": 0,
            "apiKeys": [{"apiKey": key, "minVersion": lo, "maxVersion": hi}
                        for key, (_, lo, hi) in sorted(APIS.items())]}
