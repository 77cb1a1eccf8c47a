"""Control records: the records of a control batch (transaction markers, KRaft's), whose key
is an int16 version and an int16 type (Kafka's ``ControlRecordType``) and whose value, for a
transaction marker, carries the coordinator epoch (Kafka's ``EndTransactionMarker``)."""
from __future__ import annotations

import enum
import struct
from typing import Any

import numpy as np

from kafkalog.errors import CorruptRecordError


class ControlType(enum.IntEnum):
    """Control record types (the key of a record in a control batch)."""
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


def parse_control_record(key: bytes | None, value: bytes | None
                         ) -> tuple[ControlType | int, int | None]:
    """(ControlType or int, coordinator epoch or None) of a control record's key and value."""
    if key is None or len(key) < 4:
        raise CorruptRecordError("control record key is too short")
    _version, kind = struct.unpack_from(">hh", key)
    try:
        kind = ControlType(kind)
    except ValueError:
        pass
    epoch = None
    if kind in (ControlType.ABORT, ControlType.COMMIT) and value is not None and len(value) >= 6:
        epoch = struct.unpack_from(">hi", value)[1]
    return kind, epoch


def check_control_keys(table: Any, batches: np.ndarray, control: np.ndarray,
                       path: Any = None) -> None:
    """A control record's key is (int16 version, int16 type): Kafka's
    ``ControlRecordType.parse`` refuses a shorter one, and so do the readers of markers."""
    short = control[table.batch] & (table.records["key_len"] < 4)
    if short.any():
        row = batches[table.batch[np.argmax(short)]]
        raise CorruptRecordError("control record key is too short (a control record's key "
                                 "is an int16 version and an int16 type)",
                                 position=int(row["position"]), path=path,
                                 base_offset=int(row["base_offset"]))
