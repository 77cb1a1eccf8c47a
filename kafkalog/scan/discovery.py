"""Discovery on the driver: the partition directories under the paths given and, when several
paths hold one topic-partition, its replicas and which offsets each serves.

Replicas: when several paths hold the same topic-partition (copies from several brokers), the
replica whose newest segment starts at the highest offset (then: the most bytes, then the first
path given) is read for every offset it holds; offsets below its log start are read from the
next replica that holds them, and so on down. Each offset is read once.

Tiered storage: a prefix of objects written by Aiven's RemoteStorageManager (see
``kafkalog.tiered``) is discovered as partition directories like a log dir; given with a
broker's log dir, it is one more replica of each partition.
"""
from __future__ import annotations

import os

from kafkalog import storage
from kafkalog.files import LOG_SUFFIX, is_file_of, topic_partition_or_none
from kafkalog.log_dirs import holds_segments
from kafkalog.log import Log

ABOVE_ANY_OFFSET = 2 ** 63 - 1   # a high watermark the engine clamps to the log end


class Replica:
    """One copy of a topic-partition: the engine's read-only view of its directory.
    ``log_end_is_latest``: its high watermark is the log end (``readAboveHighWatermark``)."""

    def __init__(self, path, order, log_end_is_latest=False, storage_options=None):
        self.order = order
        self.log = Log.open(path, read_only=True,
                            high_watermark=ABOVE_ANY_OFFSET if log_end_is_latest else None,
                            storage_options=storage_options)
        self.path = self.log.path

    @property
    def log_start_offset(self):
        return self.log.log_start_offset

    def preference(self):
        segments = self.log.segments
        return (segments.active.base_offset, segments.size, -self.order)

    def close(self):
        self.log.close()


def discover(paths, stack, log_end_is_latest=False, storage_options=None, rsm_keys=None):
    """{(topic, partition): [Replica, ...]} for every partition directory under ``paths``
    (local paths or fsspec URLs, or tiered-storage prefixes; each replica's view closed by
    ``stack``, a ``contextlib.ExitStack``). ``storage_options``: the filesystem options of URL
    paths; ``rsm_keys``: the private keys of encrypted tiered-storage segments."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found = {}
    order = 0
    for root in paths:
        root = storage.configure(os.fspath(root), storage_options, rsm_keys)
        if storage.is_remote(root):
            directories = _remote_partition_dirs(root)
        else:
            directories = _local_partition_dirs(os.path.abspath(root))
        for directory, key in directories:
            replica = Replica(directory, order, log_end_is_latest, storage_options)
            stack.callback(replica.close)
            found.setdefault(key, []).append(replica)
            order += 1
    return found


def _local_partition_dirs(root):
    """(directory, (topic, partition)) of the partition directories under local ``root``
    (itself, or any directory below it), in name order."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root}: no such directory")
    for directory, subdirs, _ in os.walk(root):
        subdirs.sort()
        key = topic_partition_or_none(os.path.basename(directory))
        if key is not None and holds_segments(directory):
            yield directory, key
            subdirs[:] = []


def _remote_partition_dirs(root):
    """``_local_partition_dirs`` of a URL prefix, by listing it (one listing per prefix
    walked; a missing prefix or bucket is LogNotFoundError naming the URL)."""
    entries = storage.list_dir(root)
    key = topic_partition_or_none(os.path.basename(root))
    if key is not None and any(e.is_file and is_file_of(e.name, LOG_SUFFIX) for e in entries):
        yield root, key
        return
    for e in entries:
        if e.is_dir:
            yield from _remote_partition_dirs(os.path.join(root, e.name))



def served_ranges(replicas):
    """[(replica, first offset, end offset or None)] in offset order: the preferred replica
    from its log start on, the next one below that, and so on."""
    ranges = []
    covered_from = None
    for r in replicas:
        if covered_from is None:
            ranges.append((r, r.log_start_offset, None))
            covered_from = r.log_start_offset
        elif r.log_start_offset < covered_from:
            ranges.append((r, r.log_start_offset, covered_from))
            covered_from = r.log_start_offset
    ranges.reverse()          # adjacent by construction: each ends where the next begins
    return ranges
