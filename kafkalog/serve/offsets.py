"""Committed offsets, kept under the server's ``--state-dir`` (never in the served data):
one JSON file per group, rewritten atomically on each commit (``write_atomically``: a
``.tmp`` fsynced and renamed), read back when the server starts.

A group's file is named by a hash of its id (ids may hold any character); the id is inside.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading

from kafkalog.checkpoint import write_atomically
from kafkalog.errors import CorruptCheckpointError

log = logging.getLogger(__name__)

_SUFFIX = ".offsets.json"


class CommittedOffset(tuple):
    """(offset, leader epoch, metadata, commit timestamp in ms)."""
    __slots__ = ()

    def __new__(cls, offset, leader_epoch, metadata, timestamp):
        return tuple.__new__(cls, (offset, leader_epoch, metadata, timestamp))

    offset = property(lambda self: self[0])
    leader_epoch = property(lambda self: self[1])
    metadata = property(lambda self: self[2])


class OffsetStore:
    """{group: {(topic, partition): CommittedOffset}} kept in ``directory``."""

    def __init__(self, directory):
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self._lock = threading.Lock()
        self._groups: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        for name in sorted(os.listdir(self.directory)):
            if name.endswith(_SUFFIX):
                group, offsets = self._load(os.path.join(self.directory, name))
                self._groups[group] = offsets

    @staticmethod
    def _load(path):
        try:
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
            return saved["group"], {
                (t, int(p)): CommittedOffset(*v)
                for t, parts in saved["offsets"].items() for p, v in parts.items()}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CorruptCheckpointError(f"{path}: not a committed-offsets file of kafkalog "
                                         f"serve ({e})") from e

    def _path(self, group):
        digest = hashlib.sha256(group.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return os.path.join(self.directory, digest + _SUFFIX)

    def commit(self, group, offsets):
        """Store ``offsets`` ({(topic, partition): CommittedOffset}) for ``group`` and write
        its file before returning (a commit answered is on disk)."""
        with self._lock:
            saved = dict(self._groups.get(group, {}))
            saved.update(offsets)
            doc: dict[str, dict[str, list]] = {}
            for (topic, partition), value in saved.items():
                doc.setdefault(topic, {})[str(partition)] = list(value)
            write_atomically(self._path(group),
                             json.dumps({"group": group, "offsets": doc}, sort_keys=True))
            self._groups[group] = saved

    def fetch(self, group):
        """{(topic, partition): CommittedOffset} of ``group`` (a copy)."""
        with self._lock:
            return dict(self._groups.get(group, {}))
