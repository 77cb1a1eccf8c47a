"""Keys and values of Kafka's internal topics decoded as kafka-dump-log's decoders do.

``decode_record(decoder, key, value)`` returns a ``Decoded``: ``decoded`` (the JSON that
DumpLogSegments' parser builds, as Python objects) and ``key_text`` / ``payload_text`` (the
strings it prints after ``key:`` and ``payload:``). The three decoders are kafka-dump-log's
``--offsets-decoder`` (``__consumer_offsets``), ``--transaction-log-decoder``
(``__transaction_state``) and ``--cluster-metadata-decoder`` (``__cluster_metadata``);
``decoder_for_topic`` picks one by topic name. ``decode_control`` reads a KRaft control
record (leader change, snapshot header and footer, kraft.version, voters).
"""
from __future__ import annotations

import base64
import decimal
import json
import logging
import re
import struct
from typing import Any, Callable, NamedTuple

from kafkalog.errors import InternalRecordError
from kafkalog.internal.schema import Message, Reader
from kafkalog.internal.tables import (
    CONTROL_RECORD_TYPES, GROUP_RECORD_TYPES, MESSAGES, METADATA_RECORD_TYPES,
    TRANSACTION_STATES, UNSTABLE_MESSAGES,
)

log = logging.getLogger(__name__)

OFFSETS = "offsets"
TRANSACTION_LOG = "transaction-log"
CLUSTER_METADATA = "cluster-metadata"
DECODERS = (OFFSETS, TRANSACTION_LOG, CLUSTER_METADATA)

# Topic -> decoder: what kafka-dump-log must be told with a flag, chosen by name here.
TOPIC_DECODERS = {"__consumer_offsets": OFFSETS, "__transaction_state": TRANSACTION_LOG,
                  "__cluster_metadata": CLUSTER_METADATA}

DELETE = "<DELETE>"             # what kafka-dump-log prints for a tombstone's payload


class Decoded(NamedTuple):
    """A decoded record: ``decoded`` is ``{"key": ..., "payload": ...}`` (None for an absent
    key or a tombstone); ``key_text`` / ``payload_text`` are kafka-dump-log's strings (None
    when it prints nothing)."""
    decoded: dict[str, Any]
    key_text: str | None
    payload_text: str | None


def decoder_for_topic(topic: str | None) -> str | None:
    """The decoder of an internal topic, None for any other topic."""
    return TOPIC_DECODERS.get(topic) if topic is not None else None


# ----------------------------------------------------------------------------------------------
# JSON as Kafka prints it (Jackson's compact form)

_LOWER_HEX_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u00([0-9a-f]{2})")


def _java_double(x: float) -> str:
    """``x`` as Java's ``Double.toString`` prints it (what Jackson writes for a double)."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if str(x).startswith("-") else "0.0"
    if 1e-3 <= abs(x) < 1e7:
        text = repr(x)
        return text if "e" not in text else format(decimal.Decimal(text), "f")
    sign, digits, exponent = decimal.Decimal(repr(x)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    power = len(digits) - 1 + exponent
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


def kafka_json(value: Any) -> str:
    """``value`` as compact JSON the way Kafka's Jackson nodes print: no spaces, non-ASCII kept,
    doubles as Java prints them, control characters as upper-case ``\\u00XX``."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        if "\\u00" in text:
            text = _LOWER_HEX_ESCAPE.sub(lambda m: m.group(1) + "\\u00" + m.group(2).upper(),
                                         text)
        return text
    if isinstance(value, dict):
        return "{" + ",".join(kafka_json(str(k)) + ":" + kafka_json(v)
                              for k, v in value.items()) + "}"
    return "[" + ",".join(kafka_json(v) for v in value) + "]"


# ----------------------------------------------------------------------------------------------
# The three decoders

def _version_prefix(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise InternalRecordError(f"{what} of {len(data)} bytes has no version")
    return struct.unpack_from(">h", data)[0]


def _message(name: str) -> Message:
    return MESSAGES[name]


def decode_offsets(key: bytes | None, value: bytes | None) -> Decoded:
    """A ``__consumer_offsets`` record as kafka-dump-log's ``--offsets-decoder`` prints it:
    ``{"type": "<record type>", "data": ...}`` and ``{"version": "<v>", "data": ...}``
    (versions as strings, as DumpLogSegments writes them); a tombstone's payload is None and
    printed ``<DELETE>``."""
    if key is None:
        raise InternalRecordError("a __consumer_offsets record without a key")
    record_type = _version_prefix(key, "key")
    names = GROUP_RECORD_TYPES.get(record_type)
    if names is None:
        raise InternalRecordError(f"unknown __consumer_offsets record type {record_type}")
    key_json = {"type": str(record_type), **_read_or_raw(names[0], key, 0)}
    payload_json = None
    if value is not None:
        version = _version_prefix(value, "value")
        payload_json = {"version": str(version), **_read_or_raw(names[1], value, version)}
        data = payload_json["data"] if names[1] == "GroupMetadataValue" else {}
        if data.get("protocolType") == "consumer":
            for member in data["members"]:
                _replace_protocol(member, "subscription", "ConsumerProtocolSubscription")
                _replace_protocol(member, "assignment", "ConsumerProtocolAssignment")
    return Decoded({"key": key_json, "payload": payload_json}, kafka_json(key_json),
                   DELETE if payload_json is None else kafka_json(payload_json))


def _read_or_raw(name: str, data: bytes, version: int) -> dict[str, Any]:
    """``{"data": ...}``: the message after its int16 version prefix. A message whose layout is
    unstable upstream (``UNSTABLE_MESSAGES``) that does not read as this table's layout comes
    back ``{"unstable": true, "raw": <base64 of the bytes>}`` with a WARNING instead of a
    guess; any other that does not read raises InternalRecordError."""
    try:
        return {"data": _message(name).read(data, version, 2)}
    except InternalRecordError as e:
        if name not in UNSTABLE_MESSAGES:
            raise
        log.warning("%s v%d is unstable upstream (its layout changes between Kafka releases) "
                    "and does not read as the layout known here, shown raw: %s",
                    name, version, e)
        return {"unstable": True, "raw": base64.b64encode(data).decode("ascii")}


def is_raw(decoded: dict[str, Any]) -> bool:
    """Whether a decoded record's key or payload was left raw (see ``_read_or_raw``)."""
    return any(part is not None and "raw" in part
               for part in (decoded.get("key"), decoded.get("payload")))


def _replace_protocol(member: dict[str, Any], field: str, message: str) -> None:
    """A classic consumer group member's subscription or assignment decoded in place, as
    DumpLogSegments does; bytes it cannot read stay base64."""
    text = member.get(field)
    if text is None:
        return
    raw = base64.b64decode(text)
    try:
        version = _version_prefix(raw, field)
        # Kafka reads as much as the version's schema says and ignores the rest.
        member[field] = _message(message).read(raw, version, 2, exact=False,
                                               check_version=False)
    except InternalRecordError:
        pass


def decode_transaction_log(key: bytes | None, value: bytes | None) -> Decoded:
    """A ``__transaction_state`` record: ``decoded`` in the offsets shape (Kafka's
    TransactionLogKey/ValueJsonConverter), the text as kafka-dump-log's
    ``--transaction-log-decoder`` prints it (``transaction_metadata::transactionalId=<id>``
    and ``producerId:P,producerEpoch:E,state=S,partitions=[t-p,...],...``)."""
    if key is None:
        raise InternalRecordError("a __transaction_state record without a key")
    key_version = _version_prefix(key, "key")
    if key_version != 0:
        raise InternalRecordError(f"unknown __transaction_state key version {key_version}")
    key_data = _message("TransactionLogKey").read(key, 0, 2)
    key_json = {"type": "0", "data": key_data}
    key_text = f"transaction_metadata::transactionalId={key_data['transactionalId']}"
    if value is None:
        return Decoded({"key": key_json, "payload": None}, key_text, DELETE)
    version = _version_prefix(value, "value")
    data = _message("TransactionLogValue").read(value, version, 2)
    state = data["transactionStatus"]
    if state not in TRANSACTION_STATES:
        raise InternalRecordError(f"unknown transaction state {state}")
    partitions = ",".join(f"{t}-{p}" for t, p in hash_set_order(
        [(s["topic"], p) for s in data["transactionPartitions"] or () for p in s["partitionIds"]]))
    text = (f"producerId:{data['producerId']},producerEpoch:{data['producerEpoch']},"
            f"state={TRANSACTION_STATES[state]},partitions=[{partitions}],"
            f"txnLastUpdateTimestamp={data['transactionLastUpdateTimestampMs']},"
            f"txnTimeoutMs={data['transactionTimeoutMs']}")
    return Decoded({"key": key_json, "payload": {"version": str(version), "data": data}},
                   key_text, text)


def _java_int(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def _java_string_hash(s: str) -> int:
    h = 0
    for unit in struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return _java_int(h)


def hash_set_order(partitions: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Topic-partitions in the iteration order of the Scala ``mutable.HashSet`` Kafka's
    TransactionMetadata keeps them in (what kafka-dump-log prints): by bucket of the improved
    ``TopicPartition.hashCode`` in a power-of-two table (load factor 0.75), then by hash."""
    unique = list(dict.fromkeys(partitions))
    size = 16
    while len(unique) >= size * 3 // 4:
        size *= 2
    keyed = []
    for topic, p in unique:
        h = _java_int(31 * (31 + p) + _java_string_hash(topic))
        improved = _java_int(h ^ ((h & 0xFFFFFFFF) >> 16))
        keyed.append((improved & (size - 1), improved, (topic, p)))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [k[2] for k in keyed]


def metadata_type_name(message: str) -> str:
    """``MetadataRecordType``'s enum name of a message: ``TopicRecord`` -> ``TOPIC_RECORD``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", message).upper()


def decode_cluster_metadata(key: bytes | None, value: bytes | None) -> Decoded:
    """A ``__cluster_metadata`` record (MetadataRecordSerde's frame: unsigned varints frame
    version 1, record type, record version; then the record) as kafka-dump-log's
    ``--cluster-metadata-decoder`` prints it: ``{"type": NAME, "version": v, "data": ...}``."""
    if value is None:
        raise InternalRecordError("a __cluster_metadata record without a value")
    reader = Reader(value)
    try:
        frame, type_id, version = reader.uvarint(), reader.uvarint(), reader.uvarint()
    except ValueError as e:
        raise InternalRecordError(f"metadata record frame cannot be read: {e}") from None
    if frame != 1:
        raise InternalRecordError(f"unknown metadata record frame version {frame}")
    name = METADATA_RECORD_TYPES.get(type_id)
    if name is None:
        raise InternalRecordError(f"unknown metadata record type {type_id}")
    data = _message(name).read(value, version, reader.pos)
    payload = {"type": metadata_type_name(name), "version": version, "data": data}
    return Decoded({"key": None, "payload": payload}, None, kafka_json(payload))


_DECODE: dict[str, Callable[[bytes | None, bytes | None], Decoded]] = {
    OFFSETS: decode_offsets, TRANSACTION_LOG: decode_transaction_log,
    CLUSTER_METADATA: decode_cluster_metadata,
}


def decode_record(decoder: str, key: bytes | None, value: bytes | None) -> Decoded:
    """A record's key and value decoded by ``decoder`` (one of ``DECODERS``); raises
    InternalRecordError for a record the decoder cannot read."""
    try:
        return _DECODE[decoder](key, value)
    except KeyError:
        if decoder not in _DECODE:
            raise InternalRecordError(f"unknown decoder {decoder!r}; one of {DECODERS}") \
                from None
        raise


def decode_control(key: bytes | None, value: bytes | None
                   ) -> tuple[dict[str, Any], str] | None:
    """(JSON, kafka-dump-log's text) of a KRaft control record, None for other control
    records (transaction markers). The text is what kafka-dump-log prints after the record's
    fields: `` SnapshotHeader {...}``, `` KRaftVersion {...}``, `` KRaftVoters {...}``,
    `` controlType: LEADER_CHANGE(2)``. Raises InternalRecordError for one it cannot read."""
    if key is None or len(key) < 4:
        return None
    type_id = struct.unpack_from(">h", key, 2)[0]
    entry = CONTROL_RECORD_TYPES.get(type_id)
    if entry is None:
        return None
    name, label = entry
    if value is None:
        raise InternalRecordError(f"{name} control record without a value")
    data = _message(name).read(value, 0, exact=False)
    text = f" {label} {kafka_json(data)}" if label else f" controlType: LEADER_CHANGE({type_id})"
    return data, text
