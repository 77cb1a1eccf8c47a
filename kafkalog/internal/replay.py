"""Records of an internal topic's partitions, in offset order, read through the engine
(``Log.open(..., read_only=True)``), with what a coordinator's replay needs of their batch:
producer id, transactional, control type."""
from __future__ import annotations

import os
from typing import Iterator, NamedTuple

from kafkalog import progress
from kafkalog._typing import StrPath
from kafkalog.errors import KafkaLogError
from kafkalog.files import topic_partition_or_none
from kafkalog.log import Log
from kafkalog.log_dirs import partition_dirs
from kafkalog.records import ControlType, RecordBatch, iter_batches, parse_control_record

_READ_BYTES = 1 << 20


class InternalRecord(NamedTuple):
    """One record and the batch facts a replay needs. ``control`` is the ControlType (or
    type id) of a control record, None for a data record."""
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    producer_id: int
    is_transactional: bool
    control: ControlType | int | None
    leader_epoch: int


def _records_of(batch: RecordBatch, start: int) -> Iterator[InternalRecord]:
    control = batch.is_control
    for r in batch:
        offset, timestamp = int(r.offset or 0), int(r.timestamp or 0)
        if offset < start:
            continue
        kind = parse_control_record(r.key, r.value)[0] if control else None
        yield InternalRecord(offset, timestamp, r.key, r.value, batch.producer_id,
                             batch.is_transactional, kind, batch.partition_leader_epoch)


def read_partition(path: StrPath, start_offset: int | None = None) -> Iterator[InternalRecord]:
    """Every record of a partition directory from ``start_offset`` (the log start offset when
    None) to the log end, control records included. Opens the log read-only (no recovery, no
    write); raises KafkaLogError (CorruptRecordError at a damaged batch)."""
    with Log.open(path, read_only=True) as log:
        offset = log.log_start_offset if start_offset is None else \
            max(start_offset, log.log_start_offset)
        end = log.log_end_offset
        while offset < end:
            data = log.read(offset, _READ_BYTES).records
            if not data:
                break
            progress.advance(len(data))
            before = offset
            for batch in iter_batches(data):
                yield from _records_of(batch, offset)
                offset = batch.last_offset + 1
            if offset == before:
                break


def read_batches_file(path: StrPath) -> Iterator[InternalRecord]:
    """Every record of a file of batches (a KRaft ``.checkpoint`` snapshot)."""
    for batch in iter_batches(os.fspath(path)):
        yield from _records_of(batch, 0)


def internal_partitions(path: StrPath, topic: str) -> list[str]:
    """The partition directories of ``topic`` that ``path`` names: ``path`` itself (a
    partition directory of that topic) or those in it (a log dir). Raises KafkaLogError when
    there are none."""
    path = os.path.abspath(os.fspath(path))
    try:
        dirs = partition_dirs(path, named=True)
    except OSError as e:
        if isinstance(e, KafkaLogError):            # typed, naming the path already
            raise
        raise KafkaLogError(f"{path}: {e}") from None
    found = [d for d in dirs if (topic_partition_or_none(os.path.basename(d)) or ("",))[0]
             == topic]
    if not found:
        raise KafkaLogError(f"{path}: no {topic} partition directory")
    return found
