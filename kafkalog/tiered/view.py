"""The tiered-storage view: a prefix of Aiven's objects shown to the rest of kafkalog as
partition directories, through ``kafkalog.storage``.

A view is a path ``rsm+<url of the objects>`` (``SCHEME``) that ``storage.locate`` resolves
for a path naming Aiven's objects (``resolve``) and whose calls ``storage`` hands to
``TieredView``. A view resolved with keys names their keyring in its scheme,
``rsm.<token>+<url>`` (``crypto.Keyring``): its encrypted segments are read with those keys,
those of a view without a token, or with another token, with none or other keys. Inside a
view the topic directory keeps its name and the partition directory
``<p>`` is named ``<topic>-<p>``, as in a broker's log dir; it holds, for each segment,
``<base>.log`` (the original bytes), ``<base>.index``, ``.timeindex``, ``.txnindex`` (when the
segment has one) and ``<end + 1>.snapshot``; plus the newest segment's
``leader-epoch-checkpoint`` and a ``partition.metadata`` naming the topic id (see
``manifest.Partition``). Small files are read whole, the ``.log`` through a
``chunks.ChunkBuffer``.
"""
from __future__ import annotations

import io
import logging
import os
import re
import threading
from typing import Any, Mapping

from kafkalog import storage
from kafkalog.errors import KafkaLogError, LogNotFoundError, TieredKeyError, TieredStorageError
from kafkalog.files import LOG_SUFFIX, file_name, parse_file_name, topic_partition_or_none
from kafkalog.storage_backend import Entry, StorageBackend, cached_buffer
from kafkalog.tiered.chunks import ChunkBuffer, LogReader
from kafkalog.tiered.crypto import forget_keys, keyring
from kafkalog.tiered.manifest import (
    INDEXES, INDEXES_SUFFIX, MANIFEST_SUFFIX, PARTITION_NAME, SEGMENT_OBJECT, TOPIC_DIR,
    Partition, manifest_paths,
)

log = logging.getLogger("kafkalog.tiered")

SCHEME = "rsm+"
_VIEW = re.compile(r"^rsm(?:\.([0-9a-f]+))?\+")


def is_view(path: Any) -> bool:
    """True for a path inside a tiered-storage view (``rsm+...``, ``rsm.<token>+...``)."""
    return isinstance(path, str) and _VIEW.match(path) is not None


def _scheme(token: str | None) -> str:
    """The scheme of a view whose keys are the keyring ``token`` names (None: no keys)."""
    return SCHEME if token is None else f"rsm.{token}+"


def _split(path: str) -> tuple[str | None, str]:
    """(keyring token or None, the URL of the objects) of view path ``path``."""
    match = _VIEW.match(path)
    assert match is not None
    return match.group(1), path[match.end():]


def _url(path: str) -> str:
    """A real path as a URL (a view names local objects as ``file://`` URLs)."""
    return path if storage.is_remote(path) else "file://" + os.path.abspath(path)


def resolve(path: Any, token: str | None = None) -> Any:
    """The view of ``path`` when it names Aiven objects (its keys the keyring ``token``
    names), else ``path`` unchanged.

    ``path`` (normalized, see ``storage.normalize``) may be a partition prefix
    (``.../<topic>-<topicId>/<p>``), a topic prefix (``.../<topic>-<topicId>``), a prefix
    holding topic prefixes, or one segment's ``.log`` or ``.rsm-manifest`` object (viewed as
    ``<base>.log`` of its partition)."""
    if not isinstance(path, str) or is_view(path):
        return path
    parent, name = os.path.split(path.rstrip("/"))
    match = SEGMENT_OBJECT.match(name)
    if match is not None and match.group(3) != INDEXES_SUFFIX:
        directory = _partition_view(parent, token)
        if directory is not None:
            return os.path.join(directory, file_name(int(match.group(1)), LOG_SUFFIX))
        return path
    if PARTITION_NAME.match(name) and TOPIC_DIR.match(os.path.basename(parent)):
        return _partition_view(path, token) or path
    if TOPIC_DIR.match(name):
        return _scheme(token) + _url(path) if storage.isdir(path) else path
    if _holds_topic_prefixes(path):
        return _scheme(token) + _url(path)
    return path


def is_topic_view(path: Any) -> bool:
    """Whether ``path`` is a topic prefix (``<topic>-<topicId>``) inside a view."""
    return is_view(path) and TOPIC_DIR.match(os.path.basename(path.rstrip("/"))) is not None


def _partition_view(real, token):
    """The view of real partition prefix ``real`` (None when it is not one)."""
    topic_dir, partition = os.path.split(real.rstrip("/"))
    topic = TOPIC_DIR.match(os.path.basename(topic_dir))
    if topic is None or not PARTITION_NAME.match(partition):
        return None
    return _scheme(token) + os.path.join(_url(topic_dir), f"{topic.group(1)}-{partition}")


def _holds_topic_prefixes(path):
    """Whether directory ``path`` holds directories named like Aiven's topic prefixes and no
    broker partition directories (a plain partition directory or a Kafka file never does)."""
    name = os.path.basename(path.rstrip("/"))
    if topic_partition_or_none(name) is not None or parse_file_name(name) is not None:
        return False
    try:          # a file or a missing path fails the listing: no separate isdir request
        dirs = [e.name for e in storage.list_dir(path) if e.is_dir]
    except (OSError, KafkaLogError):
        return False
    topics = [d for d in dirs if TOPIC_DIR.match(d)]
    if topics and any(topic_partition_or_none(d) is not None for d in dirs):
        log.warning("%s holds both broker partition directories and tiered-storage topic "
                    "prefixes (%s): read as a log dir; give the tiered prefixes as paths of "
                    "their own to read them", path, ", ".join(topics[:3]))
        return False
    return bool(topics)


def _prefixes_below(path, depth, limit=20):
    """Directories down to ``depth`` levels below ``path`` that hold tiered topic prefixes
    (the first ``limit`` subdirectories of each level looked at)."""
    try:
        dirs = [e.name for e in storage.list_dir(path) if e.is_dir][:limit]
    except (OSError, KafkaLogError):
        return []
    found = []
    for name in dirs:
        child = os.path.join(path, name)
        if _holds_topic_prefixes(child) and _holds_manifests(child):
            found.append(child)
        elif depth > 1:
            found.extend(_prefixes_below(child, depth - 1, limit))
    return found


def _holds_manifests(path):
    """Whether a partition prefix of the first topic prefix in ``path`` holds a manifest
    (unlike a tree that only mirrors the names, as the plugin's test outputs do)."""
    try:
        topic = next(e.name for e in storage.list_dir(path)
                     if e.is_dir and TOPIC_DIR.match(e.name))
        topic_dir = os.path.join(path, topic)
        partition = next(e.name for e in storage.list_dir(topic_dir)
                         if e.is_dir and PARTITION_NAME.match(e.name))
        return any(SEGMENT_OBJECT.match(e.name) and e.name.endswith(MANIFEST_SUFFIX)
                   for e in storage.list_dir(os.path.join(topic_dir, partition)))
    except (StopIteration, OSError, KafkaLogError):
        return False


class _Place:
    """Where a view path points: ``real`` (the real prefix or object URL of a directory
    above the partitions), or a partition (``partition_url``, its real prefix) and a ``name``
    inside it (None for the partition directory itself); ``token`` names its keyring."""

    def __init__(self, path):
        self.token, rest = _split(path)
        rest = rest.rstrip("/")
        parts = rest.split("/")
        self.partition_url = self.name = self.real = None
        for i in range(len(parts) - 1, 0, -1):
            topic = TOPIC_DIR.match(parts[i - 1])
            if topic is None:
                continue
            prefix = topic.group(1) + "-"
            if parts[i].startswith(prefix) and PARTITION_NAME.match(parts[i][len(prefix):]):
                if len(parts) - i > 2:
                    break                         # nothing lies deeper than a partition's files
                self.partition_url = "/".join(parts[:i] + [parts[i][len(prefix):]])
                self.name = parts[i + 1] if len(parts) > i + 1 else None
                return
        self.real = rest


# ------------------------------------------------------------------------------ partitions
_lock = threading.Lock()
# (real prefix, keyring token) -> Partition: a partition read with other keys (or none) is
# another object, so a data key unwrapped for one call never serves another.
_partitions: dict[tuple[str, str | None], Partition] = {}


def _partition(place: _Place) -> Partition:
    """The partition at ``place``'s real prefix with its keyring, listed and its manifests
    read once (until ``refresh``)."""
    assert place.partition_url is not None
    key = (place.partition_url, place.token)
    with _lock:
        found = _partitions.get(key)
    if found is None:
        found = Partition(place.partition_url, place.token)
        with _lock:
            found = _partitions.setdefault(key, found)
    return found


def _tree(path: str) -> dict[str, list[Entry]] | None:
    """``TieredView.list_tree``: the view of one recursive listing of the real prefix under
    view directory ``path`` (``storage.list_tree``, 1,000 keys per request), its partitions'
    manifests read together (concurrent GETs); None where the real storage is listed a
    directory at a time (local objects), or ``path`` is a partition."""
    place = _Place(path)
    if place.partition_url is not None:
        return None
    real = storage.normalize(place.real)
    listed = storage.list_tree(real)
    if listed is None:
        return None
    view_root = path.rstrip("/")
    tree: dict[str, list[Entry]] = {}
    partitions: list[tuple[str, str]] = []          # (real prefix, view directory)

    def walk(real_dir, view_dir, topic):
        # what list_dir shows: directories only, a topic prefix's partitions as <topic>-<p>
        out = []
        for e in listed.get(real_dir, ()):
            if not e.is_dir:
                continue
            if topic is not None and PARTITION_NAME.match(e.name):
                name = f"{topic.group(1)}-{e.name}"
                partitions.append((f"{real_dir}/{e.name}", f"{view_dir}/{name}"))
                out.append(e._replace(name=name))
            else:
                out.append(e)
                walk(f"{real_dir}/{e.name}", f"{view_dir}/{e.name}", TOPIC_DIR.match(e.name))
        tree[view_dir] = sorted(out)
    walk(real, view_root, TOPIC_DIR.match(os.path.basename(real)))
    token = place.token
    with _lock:
        new = [(url, d) for url, d in partitions if (url, token) not in _partitions]
    paths = [p for url, _ in new for p in manifest_paths(url, listed.get(url, []))]
    manifests = dict(zip(paths, storage.read_files(paths)))
    for url, directory in partitions:
        with _lock:
            found = _partitions.get((url, token))
        if found is None:
            found = Partition(url, token, listed.get(url, []), manifests)
            with _lock:
                found = _partitions.setdefault((url, token), found)
        tree[directory] = found.entries()
    return tree


def _file(path):
    place = _Place(path)
    if place.partition_url is None:
        raise FileNotFoundError(f"{path}: no such file (tiered storage holds files only in "
                                f"partition prefixes)")
    if place.name is None:
        raise IsADirectoryError(path)
    partition = _partition(place)
    file = partition.files.get(place.name)
    if file is None:
        raise FileNotFoundError(f"{path}: no such file in the tiered partition "
                                f"{place.partition_url}")
    return partition, file


def _range_buffer(path: str, size: int) -> ChunkBuffer:
    """The ``ChunkBuffer`` of a view's ``.log`` (shared while storage's cache keeps it)."""
    partition, file = _file(path)
    if file.index is not None or file.content is not None:
        raise KafkaLogError(f"{path}: only a segment's .log is read by ranges")
    return cached_buffer(path, size, lambda: ChunkBuffer(path, file.segment))


def reset() -> None:
    """Forget every partition read and every keyring."""
    with _lock:
        _partitions.clear()
    forget_keys()


def partitions_cached() -> list[Partition]:
    """The partitions read so far (their segments count the chunks fetched and decoded)."""
    with _lock:
        return list(_partitions.values())


# ------------------------------------------------------------------------------ storage calls
class TieredView(StorageBackend):
    """``storage``'s calls for a path inside a view (see the module docstring)."""

    def resolve(self, path: Any, keys: Mapping[str, Any] | None) -> Any:
        ring = keyring(keys)
        token = None if ring is None else ring.token
        if is_view(path):
            # a view resolved before (a read task's): given keys, it is read with them
            return path if ring is None else _scheme(token) + _split(path)[1]
        return resolve(path, token)

    def set_options(self, path: str, options: Mapping[str, Any]) -> None:
        storage.set_options(_split(path)[1], options)

    def shown(self, path: str) -> str:
        return real_path(path)

    def shown_below(self, path: str) -> list[str]:
        return [] if is_view(path) else _prefixes_below(path, 2)

    def groups_partitions(self, path: str) -> bool:
        return is_topic_view(path)

    def list_tree(self, path: str) -> dict[str, list[Entry]] | None:
        return _tree(path)

    def list_dir(self, path: str) -> list[Entry]:
        place = _Place(path)
        if place.partition_url is not None:
            if place.name is not None:
                raise LogNotFoundError(f"{path}: not a directory")
            return _partition(place).entries()
        real = storage.normalize(place.real)
        out = []
        in_topic = TOPIC_DIR.match(os.path.basename(real.rstrip("/")))
        for e in storage.list_dir(real):
            if not e.is_dir:
                continue
            if in_topic is not None and PARTITION_NAME.match(e.name):
                out.append(e._replace(name=f"{in_topic.group(1)}-{e.name}"))
            else:
                out.append(e)
        return sorted(out)

    def isdir(self, path: str) -> bool:
        place = _Place(path)
        if place.partition_url is not None:
            if place.name is not None:
                return False
            try:
                return bool(_partition(place).files)
            except LogNotFoundError:
                return False
        return storage.isdir(storage.normalize(place.real))

    def isfile(self, path: str) -> bool:
        place = _Place(path)
        if place.name is None:
            return False
        try:
            return place.name in _partition(place).files
        except LogNotFoundError:
            return False

    def size_of(self, path: str) -> int:
        return _file(path)[1].size

    def modified_ms(self, path: str) -> int:
        partition, file = _file(path)
        return storage.modified_ms(partition.object_path(file.segment, MANIFEST_SUFFIX))

    def read_file(self, path: str, size: int | None = None) -> bytes:
        """A view file's bytes (a ``.log`` decoded whole)."""
        partition, file = _file(path)
        if file.index is None:
            if file.content is not None:
                return file.content
            return bytes(_range_buffer(path, file.size).ensure(0, file.size)[:file.size])
        return file.segment.index_bytes(file.index)

    def range_buffer(self, path: str, size: int) -> ChunkBuffer:
        return _range_buffer(path, size)

    def open_file(self, path: str) -> io.IOBase:
        """A sequential reader of a view file (a ``.log`` fetched chunk by chunk)."""
        partition, file = _file(path)
        if file.index is not None or file.content is not None:
            return io.BytesIO(self.read_file(path))
        return LogReader(_range_buffer(path, file.size))

    def refresh(self, path: str) -> None:
        """Forget the listings and manifests of the partitions under ``path``, and what the
        storage under the view cached of them."""
        place = _Place(path)
        with _lock:
            for key in [k for k in _partitions
                        if (k[0] == place.partition_url if place.partition_url is not None
                            else k[0].startswith(place.real))]:
                del _partitions[key]
        storage.refresh(real_path(path))

    def reset(self) -> None:
        reset()


def check_segment(path: str) -> list[TieredStorageError]:
    """Decode every chunk and index of the segment whose view ``.log`` is ``path``: the
    errors met, one per damaged part (what ``verify`` reports)."""
    _, file = _file(path)
    errors = _range_buffer(path, file.size).check()
    if any(isinstance(e, TieredKeyError) for e in errors):
        return errors                    # every index would fail the same way
    for name, _ in INDEXES:
        if file.segment.indexes[name] is not None:
            try:
                file.segment.index_bytes(name)
            except TieredStorageError as e:
                errors.append(e)
    return errors


def real_path(path: str) -> str:
    """The real object or prefix a view path stands for (for messages and tests)."""
    place = _Place(path)
    if place.partition_url is None:
        return storage.normalize(place.real)
    if place.name is None:
        return storage.normalize(place.partition_url)
    partition, file = _file(path)
    return partition.object_path(file.segment, LOG_SUFFIX if file.index is None
                                 else INDEXES_SUFFIX)


# ------------------------------------------------------------------------------ reports
def work() -> list[dict[str, Any]]:
    """Per segment of every tiered partition read in the process: its chunks, those fetched
    and decoded, and the requests made for it (what reads cost)."""
    return [{"object": p.object_path(s, LOG_SUFFIX), "base_offset": s.base_offset,
             "chunks": s.chunk_count, "fetched_chunks": s.fetched_chunks,
             "decoded_chunks": s.decoded_chunks, "requests": s.requests}
            for p in partitions_cached() for s in p.segments]
