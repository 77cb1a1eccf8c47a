"""What the log's operations return, as Kafka's classes of those names: a read's
``FetchDataInfo`` (the records and where the read started, a ``LogOffsetMetadata``), an
append's ``LogAppendInfo``, and ``Log.offsets()``'s ``LogOffsetSnapshot``."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from kafkalog.index import AbortedTxn


class LogOffsetMetadata(NamedTuple):
    """Where an offset is: its segment's base offset and its byte position in that segment."""
    message_offset: int
    segment_base_offset: int
    relative_position_in_segment: int


#: ``LogOffsetMetadata`` from a 3-tuple, without the generated ``__new__`` (once per read
#: and per append)
offset_metadata = functools.partial(tuple.__new__, LogOffsetMetadata)


class FetchDataInfo:
    """The result of a read: ``records`` (bytes of whole batches, except that the last may be
    cut by the size limit), where the read started, and for read_committed the aborted
    transactions (a list of ``AbortedTxn``) in the range."""
    __slots__ = ("_metadata", "records", "first_entry_incomplete", "aborted_transactions")

    def __init__(self, fetch_offset_metadata: tuple[int, int, int], records: Any = b"",
                 first_entry_incomplete: bool = False,
                 aborted_transactions: list[AbortedTxn] | None = None) -> None:
        # a plain 3-tuple is made a LogOffsetMetadata when asked for (most reads never are:
        # making it was ~5% of a read)
        self._metadata = fetch_offset_metadata
        self.records = records
        self.first_entry_incomplete = first_entry_incomplete
        self.aborted_transactions = aborted_transactions

    @property
    def fetch_offset_metadata(self) -> LogOffsetMetadata:
        """Where the read started: (offset, segment base offset, byte position)."""
        metadata = self._metadata
        if type(metadata) is not LogOffsetMetadata:
            metadata = self._metadata = offset_metadata(metadata)
        return metadata

    def __repr__(self) -> str:
        return (f"FetchDataInfo({self.fetch_offset_metadata}, {len(self.records)} bytes, "
                f"aborted={self.aborted_transactions})")


class LogOffsetSnapshot(NamedTuple):
    """A log's offsets read together under its lock (``Log.offsets()``)."""
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    recovery_point: int


class LogAppendInfo(NamedTuple):
    """What an append wrote: its offsets, its max timestamp (ms) and the offset holding it,
    the LogAppendTime applied (-1 for CreateTime), its bytes and records."""
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    valid_bytes: int
    records_count: int


#: ``LogAppendInfo`` from a 7-tuple without the generated ``__new__`` (once per append)
append_info = functools.partial(tuple.__new__, LogAppendInfo)
