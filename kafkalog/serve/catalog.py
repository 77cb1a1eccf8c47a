"""What the server serves: every partition discovery finds under the paths given
(``scan.discovery.discover``, the listing every kafkalog reader uses), each read through its
replicas as the readers do (``served_ranges``: the preferred replica from its log start on,
older copies below it), with its topic's id.

Logs are opened read-only. A log a broker still writes grows: ``ServedPartition.refresh``
reopens it when its newest segment changed on disk (a fetch waiting at the log end asks).
"""
from __future__ import annotations

import base64
import contextlib
import logging
import os
import threading
import uuid

from kafkalog import storage
from kafkalog.errors import LogClosedError, OffsetOutOfRangeError, SegmentDeletedError
from kafkalog.log_dirs import located_each
from kafkalog.scan.discovery import discover, served_ranges

log = logging.getLogger(__name__)

#: the namespace of the topic ids made for partitions whose partition.metadata has none
_TOPIC_ID_NAMESPACE = uuid.UUID("8d0c5bde-0f0b-4a6e-9d8a-6b61666b6c6f")


def _topic_uuid(topic, kafka_id):
    """The topic's id: its partition.metadata's (Kafka's base64 form) or, when it has none,
    one derived from its name (stable across restarts: clients cache it)."""
    if kafka_id:
        try:
            raw = base64.urlsafe_b64decode(kafka_id + "=" * (-len(kafka_id) % 4))
            if len(raw) == 16:
                return uuid.UUID(bytes=raw)
        except ValueError:
            pass
    return uuid.uuid5(_TOPIC_ID_NAMESPACE, topic)


class ServedPartition:
    """One topic-partition and its replicas, most preferred first."""

    def __init__(self, topic, partition, replicas):
        self.topic = topic
        self.partition = partition
        self._replicas = sorted(replicas, key=lambda r: r.preference(), reverse=True) \
            if len(replicas) > 1 else list(replicas)
        self._ranges = served_ranges(self._replicas)
        self._lock = threading.Lock()
        self._seen = self._newest_segment()

    @property
    def primary(self):
        """The preferred replica's ``Log``: its high watermark, LSO and log end are served."""
        return self._replicas[0].log

    @property
    def log_start_offset(self):
        return self._ranges[0][1]

    def log_for(self, offset):
        """The ``Log`` serving ``offset`` (the replica whose range holds it)."""
        for replica, first, end in self._ranges:
            if offset >= first and (end is None or offset < end):
                return replica.log
        return self.primary

    def ranges(self):
        """[(Log, first offset, end offset or None)] in offset order."""
        return [(r.log, first, end) for r, first, end in self._ranges]

    def offsets(self):
        """(log start, high watermark, last stable offset, log end) as served now."""
        snapshot = self._retried(lambda: self.primary.offsets())
        return (self.log_start_offset, snapshot.high_watermark, snapshot.last_stable_offset,
                snapshot.log_end_offset)

    def read(self, offset, max_bytes, isolation, min_one_message):
        """``Log.read`` of the replica holding ``offset`` (a ``FetchDataInfo`` whose records
        are a ``FileSlice`` of a local segment, bytes of a remote one); raises
        ``OffsetOutOfRangeError`` outside [log start, log end]."""
        if offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is below the log start offset {self.log_start_offset} of "
                f"{self.topic}-{self.partition}")
        return self._retried(lambda: self.log_for(offset).read(
            offset, max_bytes, isolation, min_one_message, zero_copy=True))

    def _retried(self, call):
        """``call()``, once more when the log it read was reopened under it (``refresh``) or
        a broker deleted a segment it read (retention): the partition is reopened first."""
        try:
            return call()
        except SegmentDeletedError:
            self.refresh(force=True)
        except LogClosedError:
            pass
        return call()

    def _newest_segment(self):
        """(newest .log name, its size) on disk of the preferred replica, None for a remote
        one (object stores are not watched)."""
        path = self._replicas[0].path
        if storage.is_remote(path):
            return None
        try:
            names = sorted(n for n in os.listdir(path) if n.endswith(".log"))
            return (names[-1], os.stat(os.path.join(path, names[-1])).st_size) if names \
                else None
        except OSError:
            return None

    def refresh(self, force=False):
        """Reopen the preferred replica when its newest segment changed on disk (a broker
        appended or rolled), or when ``force``; True when it did."""
        now = self._newest_segment()
        if not force and (now is None or now == self._seen):
            return False
        with self._lock:
            if not force and now == self._seen:
                return False
            self._seen = now
            replica = self._replicas[0]
            replica.close()          # reopened lazily, as the files are now
            self._ranges = served_ranges(self._replicas)
        log.info("%s-%d changed on disk: reopened", self.topic, self.partition)
        return True


class Catalog:
    """The topics and partitions found under ``paths`` ({topic: {partition:
    ServedPartition}}), open until ``close``. ``read_above_high_watermark``: serve up to the
    log end where a log dir's checkpoint holds an older high watermark."""

    def __init__(self, paths, storage_options=None, rsm_keys=None,
                 read_above_high_watermark=False):
        self._stack = contextlib.ExitStack()
        try:
            with contextlib.ExitStack() as listing:
                # each path resolved and its partitions found and opened from one listing;
                # reopened later as the files are then (snapshot=False)
                found = discover(located_each(paths, listing, storage_options, rsm_keys),
                                 self._stack, read_above_high_watermark, snapshot=False)
                self.topics: dict[str, dict[int, ServedPartition]] = {}
                for (topic, partition), replicas in sorted(found.items()):
                    if any(r.log07 for r in replicas):
                        log.warning("%s-%d: a Kafka 0.7 log is not served (its offsets are byte "
                                    "offsets)", topic, partition)
                        continue
                    self.topics.setdefault(topic, {})[partition] = \
                        ServedPartition(topic, partition, replicas)
                self.topic_ids = {}
                for topic, partitions in self.topics.items():
                    first = partitions[min(partitions)]
                    self.topic_ids[topic] = _topic_uuid(topic, first.primary.topic_id)
        except BaseException:
            self._stack.close()
            raise
        self.topics_by_id = {v: k for k, v in self.topic_ids.items()}

    def get(self, topic, partition):
        """The ``ServedPartition``, or None."""
        return self.topics.get(topic, {}).get(partition)

    def close(self):
        self._stack.close()
