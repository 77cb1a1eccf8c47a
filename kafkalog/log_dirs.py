"""What a path holds, found by listing it: the partition directories of a log dir (as Kafka's
``LogManager`` finds the logs it loads) and the KRaft snapshots of a partition directory.
File names come from ``files``, listings from ``storage`` (local, remote or a view)."""
from __future__ import annotations

import os

from kafkalog import storage
from kafkalog._typing import StrPath
from kafkalog.files import (
    LOG_SUFFIX, KRaftSnapshotId, is_file_of, parse_kraft_snapshot_name, topic_partition_or_none,
)


def holds_segments(directory: StrPath) -> bool:
    """True when ``directory`` holds at least one ``.log`` segment file."""
    try:
        return any(is_file_of(n, LOG_SUFFIX) for n in storage.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return False


def kraft_snapshot_files(directory: StrPath) -> list[tuple[KRaftSnapshotId, str]]:
    """(id, path) of every KRaft snapshot in a partition directory, oldest first."""
    found = []
    for name in storage.listdir(directory):
        sid = parse_kraft_snapshot_name(name)
        if sid is not None:
            found.append((sid, os.path.join(os.fspath(directory), name)))
    return sorted(found)


def partition_dirs(path: StrPath, named: bool = False) -> list[str]:
    """The partition directories ``path`` names: itself when it is one, else those directly
    inside it (a log dir; in a tiered-storage view, those of its topic prefixes), by name;
    empty when there are none. A partition directory holds a
    ``.log`` segment, or with ``named`` is merely named ``<topic>-<partition>``."""
    def is_partition(directory: str) -> bool:
        return holds_segments(directory) or \
            (named and topic_partition_or_none(os.path.basename(directory)) is not None)
    path = str(storage.normalize(os.fspath(path)))
    if storage.is_remote(path):
        entries = storage.list_dir(path)
        if any(e.is_file and is_file_of(e.name, LOG_SUFFIX) for e in entries):
            return [path]
        if named and topic_partition_or_none(os.path.basename(path)) is not None:
            return [path]
        found = []
        for e in entries:
            child = os.path.join(path, e.name)
            if e.is_dir and is_partition(child):
                found.append(child)
            elif e.is_dir and storage.groups_partitions(child):
                found.extend(os.path.join(child, t.name) for t in storage.list_dir(child)
                             if t.is_dir and is_partition(os.path.join(child, t.name)))
        return found
    path = os.path.abspath(path)
    if is_partition(path):
        return [path]
    found = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isdir(full) and is_partition(full):
            found.append(full)
    return found
