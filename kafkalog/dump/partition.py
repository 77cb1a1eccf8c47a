"""``kafkalog dump``: a partition directory's files other than the ``.log`` (offset and time
indexes, ``.txnindex``, producer snapshots, the leader-epoch checkpoint), read without changing
them (indexes are opened read-only), and what a path names. A file that cannot be read is
reported in the ``DumpReport`` and the rest of the partition still dumped.
"""
from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from kafkalog import storage
from kafkalog.checkpoint import read_leader_epoch_checkpoint
from kafkalog.errors import KafkaLogError, LogNotFoundError, NotARegularFileError
from kafkalog.files import (
    INDEX_SUFFIXES, LEADER_EPOCH_CHECKPOINT, LOG07_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX,
    parse_file_name, parse_kraft_snapshot_name, parse_log07_file_name,
)
from kafkalog.index import TXN_ENTRY_DTYPE, TimeIndex, TransactionIndex
from kafkalog.log_dirs import PartitionListing, each_partition, located, partition_listing
from kafkalog.producer_state import read_snapshot

if TYPE_CHECKING:
    from kafkalog._typing import StrPath


def _read_index(cls, path, base_offset):
    """(head dict, first column, second column, extra fields) of an offset or time index."""
    index = cls(path, base_offset, writable=False)
    try:
        valid = index.valid_entries()
        head = {"file": os.path.basename(path), "file_size": index.length,
                "entries_count": index.entries, "zero_tail_entries": index.entries - valid}
        a, b = index.entries_array()
        extra = {}
        if cls is TimeIndex:
            extra["last_entry"] = [int(index.last_entry.timestamp),
                                   int(index.last_entry.offset)]
    finally:
        index.close_handler()
    return head, a[:valid], b[:valid], extra


def index_or_problem(cls, path, base_offset, report):
    """``_read_index``'s result, None when there is no file, or a dict with ``error`` when it
    cannot be read (reported). A partial entry at the end is reported and left out (Kafka's
    sanity check refuses such a file; its readers ignore the partial entry)."""
    if not storage.exists(path):
        return None
    try:
        read = _read_index(cls, path, base_offset)
    except (KafkaLogError, OSError, ValueError) as e:
        report.add(path, None, f"cannot read the index: {e}")
        return {"file": os.path.basename(path), "file_size": _size_or_none(path),
                "error": str(e)}
    head = read[0]
    partial = head["file_size"] % cls.entry_size
    if partial:
        head["trailing_bytes"] = partial
        report.add(path, head["file_size"] - partial,
                   f"{partial} trailing bytes are not a whole {cls.entry_size}-byte entry")
    return read


def _size_or_none(path):
    try:
        return storage.size_of(path)
    except OSError:
        return None


def _txn_entry_dicts(entries):
    return [{"version": int(e["version"]), "producer_id": int(e["producer_id"]),
             "first_offset": int(e["first_offset"]), "last_offset": int(e["last_offset"]),
             "last_stable_offset": int(e["last_stable_offset"])} for e in entries]


def txn_index(path, base_offset, report):
    """The ``txn_index`` entry; a damaged file is reported and the whole entries before the
    damage listed."""
    if not storage.exists(path):
        return None
    d = {"file": os.path.basename(path), "file_size": _size_or_none(path)}
    try:
        d["entries"] = _txn_entry_dicts(TransactionIndex(path, base_offset).entries_array())
    except (KafkaLogError, OSError) as e:
        report.add(path, None, str(e))
        d["entries"] = _txn_entries_before_damage(path)
        d["error"] = str(e)
    return d


def _txn_entries_before_damage(path):
    # TransactionIndex refuses the whole file; the entries before the damage still tell what
    # was aborted.
    try:
        data = storage.read_file(path)
    except (OSError, KafkaLogError):
        return []
    whole = len(data) - len(data) % TXN_ENTRY_DTYPE.itemsize
    entries = np.frombuffer(data[:whole], TXN_ENTRY_DTYPE)
    bad = np.flatnonzero(entries["version"] != 0)
    return _txn_entry_dicts(entries[:bad[0]] if len(bad) else entries)


def dump_snapshot(path: StrPath) -> list[dict[str, Any]]:
    """The ``producer_snapshots[].entries`` of a ``.snapshot`` file; raises
    CorruptSnapshotError for a damaged one."""
    out = []
    for e in read_snapshot(path):
        last_seq, delta = int(e["last_sequence"]), int(e["offset_delta"])
        first_txn = int(e["current_txn_first_offset"])
        out.append({
            "producer_id": int(e["producer_id"]), "producer_epoch": int(e["producer_epoch"]),
            "coordinator_epoch": int(e["coordinator_epoch"]),
            "last_timestamp": int(e["timestamp"]),
            "first_seq": _decrement_sequence(last_seq, delta) if last_seq >= 0 else last_seq,
            "last_seq": last_seq, "last_data_offset": int(e["last_offset"]),
            "last_offset_delta": delta,
            "current_txn_first_offset": first_txn if first_txn >= 0 else None,
        })
    return out


def _decrement_sequence(sequence, decrement):
    if sequence < decrement:
        return 2**31 - 1 - (decrement - sequence) + 1
    return sequence - decrement


def snapshot_doc(path, report):
    """The ``producer_snapshots[]`` entry; a damaged file is reported, with no entries."""
    d = {"file": os.path.basename(path)}
    try:
        d["entries"] = dump_snapshot(path)
    except (KafkaLogError, OSError) as e:
        report.add(path, None, str(e))
        d["entries"] = []
        d["error"] = str(e)
    return d


def leader_epochs(path, report):
    if not storage.exists(path):
        return None
    try:
        return [{"epoch": e, "start_offset": o} for e, o in read_leader_epoch_checkpoint(path)]
    except (KafkaLogError, OSError, ValueError) as e:
        report.add(path, None, f"cannot read the leader-epoch checkpoint: {e}")
        return None


def file_sizes(path, names):
    """Name and size of every regular file; a file that vanishes meanwhile (a ``.deleted``
    segment removed by a running log) is left out."""
    if storage.is_remote(path):
        wanted = set(names)
        return [{"name": e.name, "size": e.size} for e in storage.list_dir(path)
                if e.is_file and e.name in wanted]
    out = []
    for n in names:
        try:
            st = os.stat(os.path.join(path, n))
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.append({"name": n, "size": st.st_size})
    return out


# ----------------------------------------------------------------------------------------------
# What a path names

def dirs_to_dump(path: StrPath) -> PartitionListing:
    """The partition directories a dump of ``path`` covers (Kafka 0.7 ones too), as listed;
    ``PartitionNotFoundError`` (naming what is there) when it holds none, not even an empty one
    named ``<topic>-<partition>``."""
    return partition_listing(path, named=True, required=True, log07=True)


def located_dirs(path: StrPath, storage_options: Mapping[str, Any] | None = None,
                 rsm_keys: Mapping[str, Any] | None = None
                 ) -> tuple[str, PartitionListing | None]:
    """(the root ``path`` is located at, ``dirs_to_dump`` of it or None when it is a file),
    a remote one from one listing (``log_dirs.located``)."""
    with located(path, storage_options, rsm_keys) as location:
        root = location.root
        return root, dirs_to_dump(root) if storage.isdir(root) else None


def partitions_pieces(listing, one, report):
    """The pieces of ``one(d, report)`` (a partition's dump) for each partition directory of
    ``listing`` (``dirs_to_dump``'s), in order: streamed one partition after the other, or
    for partitions in a bucket several dumped at once (``log_dirs.each_partition``, what was
    listed not asked again: ``storage.listed``), each one's text whole and its problems added
    to ``report`` in order."""
    dirs = [d for d, _ in listing.partitions]
    if len(dirs) < 2 or not any(storage.is_remote(d) for d in dirs):
        for d in dirs:
            yield from one(d, report)
        return
    from kafkalog.dump.segments import DumpReport
    known = storage.Listed(listing.listed)

    def whole(d):
        own = DumpReport()
        with storage.listed(known):
            return "".join(one(d, own)), own.problems
    for text, problems in each_partition(whole, dirs):
        report.problems.extend(problems)
        yield text


KRAFT_SNAPSHOT = "kraft-snapshot"


def file_kind(path):
    """(kind, base offset) of a single file dump's path (kind: its suffix, ``KRAFT_SNAPSHOT`` or
    ``LEADER_EPOCH_CHECKPOINT``; a 0.7 file's base offset is a byte offset); raises
    KafkaLogError for others."""
    if not storage.exists(path):
        raise LogNotFoundError(f"{path}: no such file or directory")
    name = os.path.basename(path)
    parsed = parse_file_name(name)
    kind = parsed[1] if parsed is not None and not parsed[2] else None
    log07_base = parse_log07_file_name(name)
    if log07_base is not None:
        kind, parsed = LOG07_SUFFIX, (log07_base,)
    elif name == LEADER_EPOCH_CHECKPOINT:
        kind = name
    elif parse_kraft_snapshot_name(name) is not None:
        kind = KRAFT_SNAPSHOT
    elif kind not in (LOG_SUFFIX, SNAPSHOT_SUFFIX) + INDEX_SUFFIXES:
        raise KafkaLogError(f"{path}: not a partition directory or a Kafka segment, index, "
                            f"snapshot, KRaft snapshot, checkpoint or 0.7 .kafka file")
    if not storage.isfile(path):
        raise NotARegularFileError(f"{path}: not a regular file")
    return kind, parsed[0] if parsed else None


def segments_in_range(bases, options):
    """The base offsets of the segments that can hold offsets in the options' range."""
    out = []
    for i, base in enumerate(bases):
        if options.end_offset is not None and base >= options.end_offset:
            break
        nxt = bases[i + 1] if i + 1 < len(bases) else None
        if options.start_offset is not None and nxt is not None and nxt <= options.start_offset:
            continue
        out.append(base)
    return out

