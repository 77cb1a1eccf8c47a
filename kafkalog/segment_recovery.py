"""The bodies of ``LogSegment.recover`` (Kafka's ``LogSegment.recover``): one segment's bytes
walked with the segment walker's ``RECOVER`` policy, checked batch by batch, cut at the first
invalid batch, and its indexes, producer state and leader epochs rebuilt from what stays; and
of ``LogSegment.rebuild_indexes``: the indexes alone rebuilt from the bytes, nothing cut.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol, TypeVar

from kafkalog._kernels import recovery_summary, walk_batches
from kafkalog.errors import IndexOffsetOverflowError
from kafkalog.records import validate_batches
from kafkalog.segment_walker import RECOVER, walk_segment

if TYPE_CHECKING:
    from kafkalog.file_records import FileRecords
    from kafkalog.leader_epoch import LeaderEpochCache
    from kafkalog.producer_state import ProducerStateManager
    from kafkalog.config import LogConfig
    from kafkalog.transaction_index import TransactionIndex


class RecoveredSegment(Protocol):
    """What recovery reads and sets of the segment it recovers (a ``LogSegment``), declared
    here so this module knows nothing else of one."""
    base_offset: int
    config: LogConfig
    txn_index: TransactionIndex
    bytes_since_last_index_entry: int

    @property
    def log_path(self) -> str: ...
    def write_indexes(self, offset_index: bytes, time_index: bytes, max_ts: int,
                      max_ts_offset: int) -> None: ...


_S = TypeVar("_S", bound=RecoveredSegment)


def recover_segment(segment: _S, file: FileRecords,
                    producer_state: ProducerStateManager,
                    leader_epochs: LeaderEpochCache | None,
                    before_truncate: Callable[[_S, int, str], None] | None,
                    txn_index_exists: bool | None, last_segment: bool) -> int:
    """Recover ``segment`` (its ``.log`` is ``file``) under its scan lock, as
    ``LogSegment.recover`` documents; returns the bytes truncated."""
    if txn_index_exists is not False:
        segment.txn_index.reset()
    path = segment.log_path
    buf = file.recovery_buffer()
    walk = walk_segment(buf, policy=RECOVER, path=path, last_segment=last_segment)
    batches = walk.batches
    reason = walk.events[0].message if walk.events else None
    n_valid, invalid = validate_batches(buf, batches, path)
    if n_valid < len(batches):
        reason = f"invalid batch structure: {invalid}"
        batches = batches[:n_valid]
    # One kernel call for the checks and the index bytes; it also says whether the
    # producer state and the epoch cache have anything to learn (mostly not).
    (bad, valid_bytes, offset_index, time_index, max_ts, max_ts_offset, last_entry,
     producer_batches, max_epoch) = recovery_summary(
        batches, segment.base_offset, segment.config["index.interval.bytes"])
    if bad >= 0:
        raise IndexOffsetOverflowError(
            f"segment {path} holds offset {int(batches['last_offset'][bad])} "
            f"that does not fit its base offset {segment.base_offset}")
    if producer_batches:
        producer_state.apply_batches(buf, batches, path, segment.txn_index)
    if leader_epochs is not None and max_epoch >= 0:
        latest = leader_epochs.latest_epoch()
        if latest is None or max_epoch > latest:
            leader_epochs.assign_from_batches(batches)
    truncated = file.size - valid_bytes
    if truncated > 0:
        if before_truncate is not None:
            before_truncate(segment, valid_bytes, reason or "an incomplete batch at the "
                            "end of the file (a torn write)")
        file.truncate_to(valid_bytes)
    # One write per index file, at its final size (no preallocation, remap or msync per
    # segment); unchanged files are not rewritten.
    segment.write_indexes(offset_index, time_index, max_ts, max_ts_offset)
    # Appends go on indexing where recovery stopped, so the next recovery of this segment
    # finds the entries it would write itself (no "rebuilt index" for a sound segment).
    segment.bytes_since_last_index_entry = valid_bytes - last_entry
    return truncated


def rebuild_index_files(segment: RecoveredSegment, file: FileRecords) -> None:
    """Rewrite the offset and time indexes of ``segment`` (its ``.log`` is ``file``) from its
    batches, under its scan lock; the log is not cut (a reader may map it)."""
    batches = walk_batches(file.buffer(), 0, validate_crc=False)[0]
    _, _, offset_index, time_index, max_ts, max_ts_offset, _, _, _ = recovery_summary(
        batches, segment.base_offset, segment.config["index.interval.bytes"])
    segment.write_indexes(offset_index, time_index, max_ts, max_ts_offset)
