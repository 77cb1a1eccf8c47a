"""Kafka tiered storage (KIP-405) as Aiven's RemoteStorageManager writes it, read as partitions.

Aiven's tiered-storage-for-apache-kafka uploads each closed segment as three objects under
``<key.prefix><topic>-<topicId>/<partition>/<20-digit base offset>-<segmentId>``: ``.log`` (the
segment cut into chunks, each optionally zstd-compressed, then optionally AES-256-GCM-encrypted,
concatenated), ``.indexes`` (the offset, time, producer-snapshot, leader-epoch and transaction
indexes, each transformed alone, concatenated) and ``.rsm-manifest`` (JSON: where each chunk
and index lies, and the segment's wrapped data key). ``../shared/fixtures/tiered-aiven/README.md``
states the format.

Such a prefix, on any filesystem ``kafkalog.storage`` reads (a local directory or an fsspec
URL), is shown to the rest of kafkalog as partition directories: a *view*, a path
``rsm+<url of the objects>`` that ``storage`` hands to this module. Inside a view the topic
directory keeps its name and the partition directory ``<p>`` is named ``<topic>-<p>``, as in
a broker's log dir; it holds, for each segment, ``<base>.log`` (the original bytes),
``<base>.index``, ``.timeindex``, ``.txnindex`` (when the segment has one) and
``<end + 1>.snapshot``; plus the newest segment's ``leader-epoch-checkpoint`` and a
``partition.metadata`` naming the topic id. The loader, segments, indexes, ``dump``,
``verify``, the Spark planner and reader read a view as they read any remote partition
(``storage.is_remote`` is true for it): small files whole, the ``.log`` through a
``ChunkBuffer`` that fetches, decrypts and decompresses only the chunks covering the bytes a
read asks for (one ranged request per run of adjacent chunks).

Keys: ``add_keys({"key1": "private.pem"})`` registers RSA private keys by the key-pair id the
plugin names them with (process-wide, like storage options); a segment's data key is unwrapped
once with RSA-OAEP (SHA3-512, MGF1-SHA3-512: the plugin's Bouncy Castle parameters, which
``cryptography`` refuses, so the OAEP decoding is done here around its raw RSA numbers).
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import math
import mmap
import os
import re
import secrets
import struct
import threading
from dataclasses import dataclass
from typing import Any, Mapping

from kafkalog import storage
from kafkalog.codecs import ZSTD, decompress
from kafkalog.errors import (
    CorruptTieredObjectError, KafkaLogError, LogNotFoundError, MissingTieredExtraError,
    TieredKeyError, TieredStorageError,
)
from kafkalog.files import (
    INDEX_SUFFIX, LEADER_EPOCH_CHECKPOINT, LOG_SUFFIX, PARTITION_METADATA, SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, file_name,
)

log = logging.getLogger("kafkalog.tiered")

SCHEME = "rsm+"
MANIFEST_SUFFIX = ".rsm-manifest"
INDEXES_SUFFIX = ".indexes"
IV_SIZE, TAG_SIZE = 12, 16
# A Kafka Uuid as text: 22 characters of URL-safe base64 of 16 bytes, so the last one carries
# 2 bits of data and 4 zero bits. A partition number has at most 10 digits: a directory named
# like this is never a broker's partition directory.
_UUID = r"[A-Za-z0-9_-]{21}[AQgw]"
_TOPIC_DIR = re.compile(rf"^(.+)-({_UUID})$")
_SEGMENT_OBJECT = re.compile(rf"^(\d{{20}})-({_UUID})(\.log|\.indexes|\.rsm-manifest)$")
_PARTITION = re.compile(r"^\d{1,10}$")
# The manifest's index names, in the order the .indexes object holds them, and the file each
# becomes in a view (the producer snapshot's name depends on the segment's end: None here).
_INDEXES = (("offset", INDEX_SUFFIX), ("timestamp", TIME_INDEX_SUFFIX),
            ("producerSnapshot", None), ("leaderEpoch", None), ("transaction", TXN_INDEX_SUFFIX))


# ------------------------------------------------------------------------------ views
def is_view(path: Any) -> bool:
    """True for a path inside a tiered-storage view (``rsm+...``)."""
    return isinstance(path, str) and path.startswith(SCHEME)


def _url(path: str) -> str:
    """A real path as a URL (a view names local objects as ``file://`` URLs)."""
    return path if storage.is_remote(path) else "file://" + os.path.abspath(path)


def _local(url: str) -> str:
    """A view's real URL as ``storage`` reads it (``file://`` URLs become local paths)."""
    return storage.normalize(url)


def resolve(path: Any) -> Any:
    """The view of ``path`` when it names Aiven objects, else ``path`` unchanged.

    ``path`` (normalized, see ``storage.normalize``) may be a partition prefix
    (``.../<topic>-<topicId>/<p>``), a topic prefix (``.../<topic>-<topicId>``), a prefix
    holding topic prefixes, or one segment's ``.log`` or ``.rsm-manifest`` object (viewed as
    ``<base>.log`` of its partition)."""
    if not isinstance(path, str) or is_view(path):
        return path
    parent, name = os.path.split(path.rstrip("/"))
    match = _SEGMENT_OBJECT.match(name)
    if match is not None and match.group(3) != INDEXES_SUFFIX:
        directory = _partition_view(parent)
        if directory is not None:
            return os.path.join(directory, file_name(int(match.group(1)), LOG_SUFFIX))
        return path
    if _PARTITION.match(name) and _TOPIC_DIR.match(os.path.basename(parent)):
        return _partition_view(path) or path
    if _TOPIC_DIR.match(name):
        return SCHEME + _url(path) if storage.isdir(path) else path
    if _holds_topic_prefixes(path):
        return SCHEME + _url(path)
    return path


def is_topic_view(path: Any) -> bool:
    """Whether ``path`` is a topic prefix (``<topic>-<topicId>``) inside a view."""
    return is_view(path) and _TOPIC_DIR.match(os.path.basename(path.rstrip("/"))) is not None


def _partition_view(real):
    """The view of real partition prefix ``real`` (None when it is not one)."""
    topic_dir, partition = os.path.split(real.rstrip("/"))
    topic = _TOPIC_DIR.match(os.path.basename(topic_dir))
    if topic is None or not _PARTITION.match(partition):
        return None
    return SCHEME + os.path.join(_url(topic_dir), f"{topic.group(1)}-{partition}")


def _holds_topic_prefixes(path):
    """Whether directory ``path`` holds directories named like Aiven's topic prefixes and no
    broker partition directories (a plain partition directory or a Kafka file never does)."""
    from kafkalog.files import parse_file_name, topic_partition_or_none
    name = os.path.basename(path.rstrip("/"))
    if topic_partition_or_none(name) is not None or parse_file_name(name) is not None:
        return False
    try:          # a file or a missing path fails the listing: no separate isdir request
        dirs = [e.name for e in storage.list_dir(path) if e.is_dir]
    except (OSError, KafkaLogError):
        return False
    topics = [d for d in dirs if _TOPIC_DIR.match(d)]
    if topics and any(topic_partition_or_none(d) is not None for d in dirs):
        log.warning("%s holds both broker partition directories and tiered-storage topic "
                    "prefixes (%s): read as a log dir; give the tiered prefixes as paths of "
                    "their own to read them", path, ", ".join(topics[:3]))
        return False
    return bool(topics)


class _Place:
    """Where a view path points: ``real`` (the real prefix or object URL of a directory
    above the partitions), or a partition (``partition_url``, its real prefix) and a ``name``
    inside it (None for the partition directory itself)."""

    def __init__(self, path):
        rest = path[len(SCHEME):].rstrip("/")
        parts = rest.split("/")
        self.partition_url = self.name = self.real = None
        for i in range(len(parts) - 1, 0, -1):
            topic = _TOPIC_DIR.match(parts[i - 1])
            if topic is None:
                continue
            prefix = topic.group(1) + "-"
            if parts[i].startswith(prefix) and _PARTITION.match(parts[i][len(prefix):]):
                if len(parts) - i > 2:
                    break                         # nothing lies deeper than a partition's files
                self.partition_url = "/".join(parts[:i] + [parts[i][len(prefix):]])
                self.name = parts[i + 1] if len(parts) > i + 1 else None
                return
        self.real = rest


# ------------------------------------------------------------------------------ storage calls
def list_dir(path: str) -> list[storage.Entry]:
    """``storage.list_dir`` of a view directory."""
    place = _Place(path)
    if place.partition_url is not None:
        if place.name is not None:
            raise LogNotFoundError(f"{path}: not a directory")
        return _partition(place.partition_url).entries()
    real = _local(place.real)
    out = []
    in_topic = _TOPIC_DIR.match(os.path.basename(real.rstrip("/")))
    for e in storage.list_dir(real):
        if not e.is_dir:
            continue
        if in_topic is not None and _PARTITION.match(e.name):
            out.append(e._replace(name=f"{in_topic.group(1)}-{e.name}"))
        else:
            out.append(e)
    return sorted(out)


def isdir(path: str) -> bool:
    place = _Place(path)
    if place.partition_url is not None:
        if place.name is not None:
            return False
        try:
            return bool(_partition(place.partition_url).files)
        except LogNotFoundError:
            return False
    return storage.isdir(_local(place.real))


def isfile(path: str) -> bool:
    place = _Place(path)
    if place.name is None:
        return False
    try:
        return place.name in _partition(place.partition_url).files
    except LogNotFoundError:
        return False


def exists(path: str) -> bool:
    return isdir(path) or isfile(path)


def _file(path):
    place = _Place(path)
    if place.partition_url is None:
        raise FileNotFoundError(f"{path}: no such file (tiered storage holds files only in "
                                f"partition prefixes)")
    if place.name is None:
        raise IsADirectoryError(path)
    partition = _partition(place.partition_url)
    file = partition.files.get(place.name)
    if file is None:
        raise FileNotFoundError(f"{path}: no such file in the tiered partition "
                                f"{place.partition_url}")
    return partition, file


def size_of(path: str) -> int:
    return _file(path)[1].size


def modified_ms(path: str) -> int:
    partition, file = _file(path)
    return storage.modified_ms(partition.object_path(file.segment, MANIFEST_SUFFIX))


def read_file(path: str) -> bytes:
    """A view file's bytes (a ``.log`` decoded whole)."""
    partition, file = _file(path)
    if file.index is None:
        if file.content is not None:
            return file.content
        return bytes(range_buffer(path, file.size).ensure(0, file.size)[:file.size])
    return file.segment.index_bytes(file.index)


def range_buffer(path: str, size: int) -> ChunkBuffer:
    """The ``ChunkBuffer`` of a view's ``.log`` (shared while storage's cache keeps it)."""
    partition, file = _file(path)
    if file.index is not None or file.content is not None:
        raise KafkaLogError(f"{path}: only a segment's .log is read by ranges")
    return storage.cached_buffer(path, size, lambda: ChunkBuffer(path, file.segment))


def open_file(path: str) -> io.IOBase:
    """A sequential reader of a view file (a ``.log`` fetched chunk by chunk)."""
    partition, file = _file(path)
    if file.index is not None or file.content is not None:
        return io.BytesIO(read_file(path))
    return _LogReader(range_buffer(path, file.size))


def check_segment(path: str) -> list[TieredStorageError]:
    """Decode every chunk and index of the segment whose view ``.log`` is ``path``: the
    errors met, one per damaged part (what ``verify`` reports)."""
    _, file = _file(path)
    errors = range_buffer(path, file.size).check()
    if any(isinstance(e, TieredKeyError) for e in errors):
        return errors                    # every index would fail the same way
    for name, _ in _INDEXES:
        if file.segment.indexes[name] is not None:
            try:
                file.segment.index_bytes(name)
            except TieredStorageError as e:
                errors.append(e)
    return errors


def refresh(path: str) -> None:
    """Forget the listings and manifests of the partitions under ``path``."""
    place = _Place(path)
    with _lock:
        if place.partition_url is not None:
            _partitions.pop(place.partition_url, None)
        else:
            for key in [k for k in _partitions if k.startswith(place.real)]:
                del _partitions[key]


def real_path(path: str) -> str:
    """The real object or prefix a view path stands for (for messages and tests)."""
    place = _Place(path)
    if place.partition_url is None:
        return _local(place.real)
    if place.name is None:
        return _local(place.partition_url)
    partition, file = _file(path)
    return partition.object_path(file.segment, LOG_SUFFIX if file.index is None
                                 else INDEXES_SUFFIX)


# ------------------------------------------------------------------------------ manifests
@dataclass
class _ViewFile:
    size: int
    segment: Any = None                 # the Segment it comes from (None: synthesized)
    index: str | None = None            # the manifest's index name; None for the .log
    content: bytes | None = None        # a synthesized file's bytes


class Segment:
    """One uploaded segment: its manifest, and the objects' sizes from the listing.

    ``chunk_offsets[i]`` is where chunk ``i`` starts in the ``.log`` object (the last entry:
    the object's size by the manifest); ``fetched_chunks`` / ``decoded_chunks`` /
    ``requests`` count the work done for it."""

    def __init__(self, partition: Partition, stem: str, manifest: bytes) -> None:
        self.partition = partition
        self.stem = stem
        self.manifest_path = partition.object_path(self, MANIFEST_SUFFIX)
        match = _SEGMENT_OBJECT.match(stem + MANIFEST_SUFFIX)
        assert match is not None
        self.base_offset, self.segment_id = int(match.group(1)), match.group(2)
        try:
            m = json.loads(manifest)
            if m.get("version") != "1":
                raise ValueError(f"manifest version {m.get('version')!r} (only \"1\" is known)")
            chunks = m["chunkIndex"]
            self.chunk_size = int(chunks["originalChunkSize"])
            self.size = int(chunks["originalFileSize"])
            if self.chunk_size <= 0 or self.size < 0:
                raise ValueError(f"chunk size {self.chunk_size}, file size {self.size}")
            self.compressed = bool(m["compression"])
            sizes = self._chunk_sizes(chunks)
            self.indexes = {name: (None if m["segmentIndexes"].get(name) is None else
                                   (int(m["segmentIndexes"][name]["position"]),
                                    int(m["segmentIndexes"][name]["size"])))
                            for name, _ in _INDEXES}
            encryption = m.get("encryption")
            self.key_id = self._wrapped_key = self.aad = None
            if encryption is not None:
                self.key_id, _, wrapped = encryption["dataKey"].partition(":")
                self._wrapped_key = base64.b64decode(wrapped, validate=True)
                self.aad = base64.b64decode(encryption["aad"], validate=True)
            meta = m.get("remoteLogSegmentMetadata") or {}
            self.end_offset = int(meta.get("endOffset", -1))
            self.max_timestamp = int(meta.get("maxTimestampMs", -1))
        except CorruptTieredObjectError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, struct.error) as e:
            raise CorruptTieredObjectError(f"{self.manifest_path}: not a valid manifest: "
                                           f"{type(e).__name__}: {e}",
                                           object=self.manifest_path) from None
        expected = math.ceil(self.size / self.chunk_size)
        if len(sizes) != expected or any(s <= 0 for s in sizes):
            raise CorruptTieredObjectError(
                f"{self.manifest_path}: the chunk index lists {len(sizes)} chunks (sizes "
                f"{sizes[:4]}{'...' if len(sizes) > 4 else ''}); a {self.size}-byte segment "
                f"in {self.chunk_size}-byte chunks has {expected}", object=self.manifest_path)
        self.chunk_offsets = [0]
        for s in sizes:
            self.chunk_offsets.append(self.chunk_offsets[-1] + s)
        self._data_key: bytes | None = None
        self._indexes_object: bytes | None = None
        #: the size of the .log object in the listing (None: missing)
        self.log_object_size: int | None = None
        self._lock = threading.Lock()
        self.fetched_chunks = self.decoded_chunks = self.requests = 0

    def _chunk_sizes(self, chunks):
        """The transformed size of every chunk, by the manifest's chunk index."""
        n = math.ceil(self.size / self.chunk_size)
        if chunks["type"] == "fixed":
            if n == 0:
                return []
            return [int(chunks["transformedChunkSize"])] * (n - 1) + \
                [int(chunks["finalTransformedChunkSize"])]
        if chunks["type"] != "variable":
            raise ValueError(f"chunk index type {chunks['type']!r}")
        frame = base64.b64decode(chunks["transformedChunks"], validate=True)
        try:
            return decode_chunk_sizes(decompress(ZSTD, frame, 64 * 1024 * 1024))
        except KafkaLogError as e:
            raise ValueError(f"transformedChunks: {e}") from None

    @property
    def chunk_count(self) -> int:
        return len(self.chunk_offsets) - 1

    @property
    def encrypted(self) -> bool:
        return self.key_id is not None

    def stored_index_size(self, name: str) -> int:
        entry = self.indexes[name]
        assert entry is not None
        return entry[1] - (IV_SIZE + TAG_SIZE if self.encrypted else 0)

    # -------------------------------------------------------------------------- decoding
    def data_key(self) -> bytes:
        """The segment's AES-256 key, unwrapped once with the registered RSA key."""
        with self._lock:
            if self._data_key is None:
                self._data_key = _unwrap(self.key_id, self._wrapped_key, self.manifest_path)
            return self._data_key

    def _detransform(self, blob, what, compressed, original_size, chunk=None):
        """Stored bytes of a chunk or an index → its original bytes (decrypt, then
        decompress), each failure a CorruptTieredObjectError naming ``what``."""
        if self.encrypted:
            aesgcm = _aesgcm(self.data_key())
            if len(blob) < IV_SIZE + TAG_SIZE:
                raise CorruptTieredObjectError(f"{what}: {len(blob)} bytes, shorter than an "
                                               f"IV and a tag", object=what, chunk=chunk)
            try:
                blob = aesgcm.decrypt(bytes(blob[:IV_SIZE]), bytes(blob[IV_SIZE:]), self.aad)
            except Exception as e:   # noqa: BLE001 - cryptography's InvalidTag, and kin
                raise CorruptTieredObjectError(
                    f"{what} fails AES-GCM authentication (damaged, or not encrypted with "
                    f"this segment's data key and AAD): {type(e).__name__}",
                    object=what, chunk=chunk) from None
        if compressed:
            try:
                blob = decompress(ZSTD, bytes(blob), original_size)
            except KafkaLogError as e:
                raise CorruptTieredObjectError(f"{what} does not decompress: {e}",
                                               object=what, chunk=chunk) from None
        if original_size is not None and len(blob) != original_size:
            raise CorruptTieredObjectError(f"{what} decodes to {len(blob)} bytes, not "
                                           f"{original_size}", object=what, chunk=chunk)
        return blob

    def chunk_span(self, i: int) -> tuple[int, int]:
        """Original byte range [start, end) of chunk ``i``."""
        start = i * self.chunk_size
        return start, min(self.size, start + self.chunk_size)

    def decode_chunk(self, i: int, stored: bytes | memoryview) -> bytes:
        start, end = self.chunk_span(i)
        what = f"{self.partition.object_path(self, LOG_SUFFIX)} chunk {i}"
        return self._detransform(stored, what, self.compressed, end - start, chunk=i)

    def index_bytes(self, name: str) -> bytes:
        """The original bytes of index ``name`` ("offset", "timestamp", ...)."""
        entry = self.indexes[name]
        if entry is None:
            raise FileNotFoundError(f"{self.manifest_path}: the segment has no {name} index")
        position, size = entry
        blob = self._indexes()
        what = f"{self.partition.object_path(self, INDEXES_SUFFIX)} {name} index"
        if position + size > len(blob):
            raise CorruptTieredObjectError(
                f"{what}: the manifest puts it at [{position}, {position + size}) but the "
                f"object has {len(blob)} bytes", object=what)
        return bytes(self._detransform(memoryview(blob)[position:position + size], what,
                                       False, None))

    def _indexes(self):
        with self._lock:
            if self._indexes_object is None:
                path = self.partition.object_path(self, INDEXES_SUFFIX)
                try:
                    self._indexes_object = storage.read_file(path)
                except FileNotFoundError:
                    raise CorruptTieredObjectError(f"{path} is missing (its manifest is "
                                                   f"{self.manifest_path})",
                                                   object=path) from None
                self.requests += 1
            return self._indexes_object


def decode_chunk_sizes(data: bytes) -> list[int]:
    """Aiven's ``ChunkSizesBinaryCodec``: big-endian int32 count; one int32 when count is 1;
    else int32 base, uint8 bytes per value, (count - 1) unsigned values (size - base) and the
    last size as an int32."""
    view = memoryview(data)
    if len(view) < 4:
        raise ValueError("chunk size list shorter than its count")
    (count,) = struct.unpack_from(">i", view, 0)
    if count < 0:
        raise ValueError(f"chunk count {count}")
    if count == 0:
        sizes: list[int] = []
        end = 4
    elif count == 1:
        sizes, end = [struct.unpack_from(">i", view, 4)[0]], 8
    else:
        base, width = struct.unpack_from(">iB", view, 4)
        if not 1 <= width <= 4:
            raise ValueError(f"{width} bytes per chunk size")
        at = 9
        if at + (count - 1) * width + 4 > len(view):
            raise ValueError(f"chunk size list too short for {count} chunks")
        sizes = [base + int.from_bytes(view[at + k * width:at + (k + 1) * width], "big")
                 for k in range(count - 1)]
        at += (count - 1) * width
        sizes.append(struct.unpack_from(">i", view, at)[0])
        end = at + 4
    if end != len(view):
        raise ValueError(f"{len(view) - end} bytes after the chunk size list")
    return sizes


class Partition:
    """The uploaded segments of one partition prefix, by base offset, and the files of its
    view."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.real = _local(url)
        topic_dir, self.partition = os.path.split(url)
        match = _TOPIC_DIR.match(os.path.basename(topic_dir))
        assert match is not None
        self.topic, self.topic_id = match.group(1), match.group(2)
        try:
            entries = {e.name: e for e in storage.list_dir(self.real) if e.is_file}
        except FileNotFoundError:
            raise LogNotFoundError(f"{self.real}: no such tiered partition prefix") from None
        stems = sorted(n[:-len(MANIFEST_SUFFIX)] for n in entries
                       if n.endswith(MANIFEST_SUFFIX) and _SEGMENT_OBJECT.match(n))
        manifests = storage.read_files([os.path.join(self.real, s + MANIFEST_SUFFIX)
                                        for s in stems])
        by_base: dict[int, Segment] = {}
        for stem, manifest in zip(stems, manifests):
            segment = Segment(self, stem, manifest)
            segment.log_object_size = _object_size(entries, stem + LOG_SUFFIX)
            other = by_base.get(segment.base_offset)
            if other is not None:
                keep, drop = sorted((other, segment), key=lambda s: (s.end_offset, s.stem))[::-1]
                log.warning("%s: two uploads of the segment at offset %d (%s, %s); reading "
                            "%s, the one ending last", self.real, segment.base_offset,
                            other.stem, segment.stem, keep.stem)
                segment = keep
            by_base[segment.base_offset] = segment
        self.segments = [by_base[b] for b in sorted(by_base)]
        self.files = self._view_files()

    def object_path(self, segment: Segment, suffix: str) -> str:
        return os.path.join(self.real, segment.stem + suffix)

    def _view_files(self):
        files: dict[str, _ViewFile] = {}
        for s in self.segments:
            files[file_name(s.base_offset, LOG_SUFFIX)] = _ViewFile(s.size, s)
            for name, suffix in _INDEXES:
                if s.indexes[name] is None:
                    continue
                if name == "producerSnapshot":
                    if s.end_offset >= s.base_offset:
                        files[file_name(s.end_offset + 1, SNAPSHOT_SUFFIX)] = _ViewFile(
                            s.stored_index_size(name), s, name)
                elif suffix is not None:
                    files[file_name(s.base_offset, suffix)] = _ViewFile(
                        s.stored_index_size(name), s, name)
        newest = self.segments[-1] if self.segments else None
        if newest is not None and newest.indexes["leaderEpoch"] is not None:
            # each segment's holds every epoch up to its end: the newest one's is the log's
            files[LEADER_EPOCH_CHECKPOINT] = _ViewFile(
                newest.stored_index_size("leaderEpoch"), newest, "leaderEpoch")
        metadata = f"version: 0\ntopic_id: {self.topic_id}\n".encode()
        files[PARTITION_METADATA] = _ViewFile(len(metadata), content=metadata)
        return files

    def entries(self) -> list[storage.Entry]:
        return sorted(storage.Entry(n, f.size, True, False) for n, f in self.files.items())


def _object_size(entries, name):
    e = entries.get(name)
    return None if e is None else e.size


_lock = threading.Lock()
_partitions: dict[str, Partition] = {}


def _partition(url: str) -> Partition:
    """The partition at real prefix ``url``, listed and its manifests read once (until
    ``refresh``)."""
    with _lock:
        found = _partitions.get(url)
    if found is None:
        found = Partition(url)
        with _lock:
            found = _partitions.setdefault(url, found)
    return found


def reset() -> None:
    """Forget every partition read and every registered key."""
    with _lock:
        _partitions.clear()
        _keys.clear()


def partitions_cached() -> list[Partition]:
    """The partitions read so far (their segments count the chunks fetched and decoded)."""
    with _lock:
        return list(_partitions.values())


# ------------------------------------------------------------------------------ the .log
class ChunkBuffer:
    """A view ``.log``'s original bytes, decoded by chunks on demand: ``storage.RangeBuffer``'s
    interface (``ensure``, ``fetched``, ``resident``, ``step``) over Aiven's chunk index."""

    def __init__(self, path: str, segment: Segment) -> None:
        self.path = path
        self.segment = segment
        self.size = segment.size
        self.step = segment.chunk_size
        self._mm: Any = mmap.mmap(-1, self.size) if self.size else b""
        self._have = bytearray(segment.chunk_count)
        self._lock = threading.Lock()
        self.fetched = 0

    def _check_object(self):
        s = self.segment
        log_path = s.partition.object_path(s, LOG_SUFFIX)
        if s.log_object_size is None:
            raise CorruptTieredObjectError(f"{log_path} is missing (its manifest is "
                                           f"{s.manifest_path})", object=log_path)
        if s.chunk_offsets[-1] != s.log_object_size:
            raise CorruptTieredObjectError(
                f"{log_path}: the manifest's {s.chunk_count} chunk sizes add up to "
                f"{s.chunk_offsets[-1]} bytes, but the object has {s.log_object_size}",
                object=log_path)
        return log_path

    def ensure(self, start: int, end: int) -> Any:
        """The buffer with original bytes [start, end) (clamped) present."""
        start, end = max(0, start), min(end, self.size)
        if start >= end:
            return self._mm
        first, last = start // self.step, (end - 1) // self.step
        if all(self._have[first:last + 1]):
            storage.touch_buffer(self)
            return self._mm
        with self._lock:
            missing = [i for i in range(first, last + 1) if not self._have[i]]
            if missing:
                self._fetch(missing)
        storage.touch_buffer(self, added=True)
        return self._mm

    def _fetch(self, missing, errors=None):
        """Fetch and decode chunks ``missing``; a chunk that does not decode raises, or with
        ``errors`` (a list) is appended there and left missing."""
        s = self.segment
        log_path = self._check_object()
        runs = _runs(missing, s.chunk_offsets, storage.BLOCK_SIZE)
        stored = storage.read_ranges(log_path, [(s.chunk_offsets[a], s.chunk_offsets[b + 1])
                                                for a, b in runs])
        s.requests += len(runs)
        for (a, b), data in zip(runs, stored):
            view = memoryview(data)
            base = s.chunk_offsets[a]
            for i in range(a, b + 1):
                try:
                    chunk = s.decode_chunk(i, view[s.chunk_offsets[i] - base:
                                                   s.chunk_offsets[i + 1] - base])
                except CorruptTieredObjectError as e:
                    if errors is None:
                        raise
                    errors.append(e)
                    continue
                lo, hi = s.chunk_span(i)
                self._mm[lo:hi] = chunk
                self._have[i] = 1
                s.fetched_chunks += 1
                s.decoded_chunks += 1
            self.fetched += len(data)

    def check(self) -> list[TieredStorageError]:
        """Fetch and decode every chunk not decoded yet; the errors met, one per damaged
        chunk (an object whose chunk index does not fit it, or a data key that cannot be
        unwrapped: that error alone)."""
        errors: list[TieredStorageError] = []
        with self._lock:
            missing = [i for i, have in enumerate(self._have) if not have]
            try:
                if missing:
                    self._fetch(missing, errors)
            except TieredStorageError as e:
                return [e]
        return errors

    @property
    def resident(self) -> int:
        return sum(self._have) * self.step

    @property
    def chunks_present(self) -> int:
        return sum(self._have)


def _runs(chunks, offsets, limit):
    """Adjacent missing chunks grouped into requests of at most ``limit`` stored bytes (one
    chunk at least)."""
    runs: list[tuple[int, int]] = []
    for i in chunks:
        if runs and runs[-1][1] == i - 1 and offsets[i + 1] - offsets[runs[-1][0]] <= limit:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


class _LogReader(io.RawIOBase):
    """A sequential file object over a ``ChunkBuffer``."""

    def __init__(self, buffer: ChunkBuffer) -> None:
        super().__init__()
        self._buffer = buffer
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._buffer.size}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = self._buffer.size if n is None or n < 0 else min(self._buffer.size, self._pos + n)
        if end <= self._pos:
            return b""
        data = bytes(self._buffer.ensure(self._pos, end)[self._pos:end])
        self._pos = end
        return data


# ------------------------------------------------------------------------------ keys
_keys: dict[str, Any] = {}


def add_keys(rsm_keys: Mapping[str, Any] | None) -> None:
    """Register RSA private keys by key-pair id: each value a PEM file's path, PEM text
    (``str`` or ``bytes`` starting with ``-----BEGIN``) or a ``cryptography`` private key.
    Every later read in the process decrypts with them."""
    if not rsm_keys:
        return
    loaded = {}
    for key_id, value in rsm_keys.items():
        loaded[str(key_id)] = _load_key(str(key_id), value)
    with _lock:
        _keys.update(loaded)


def key_pem(value: Any) -> str:
    """A key given by path or PEM text, as PEM text (what travels to Spark executors)."""
    if isinstance(value, bytes):
        return value.decode("ascii")
    if isinstance(value, str) and value.lstrip().startswith("-----BEGIN"):
        return value
    try:
        with open(os.fspath(value), "r", encoding="ascii") as f:
            return f.read()
    except OSError as e:
        raise TieredKeyError(f"cannot read the RSA private key file {value}: {e}",
                             key_id=None) from None


def _load_key(key_id, value):
    _require_cryptography()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    if isinstance(value, rsa.RSAPrivateKey):
        return value
    pem = key_pem(value)
    try:
        key = serialization.load_pem_private_key(pem.encode("ascii"), password=None)
    except (ValueError, TypeError) as e:
        raise TieredKeyError(f"key {key_id!r}: not an unencrypted PEM private key: {e}",
                             key_id=key_id) from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise TieredKeyError(f"key {key_id!r}: not an RSA private key", key_id=key_id)
    return key


def _require_cryptography():
    from kafkalog._extras import require_extra
    require_extra(MissingTieredExtraError, "tiered", ["cryptography"])


def _aesgcm(key):
    _require_cryptography()
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    return AESGCM(key)


def _unwrap(key_id, wrapped, manifest_path):
    """The data key wrapped in ``manifest_path`` with key pair ``key_id``."""
    with _lock:
        key = _keys.get(key_id)
    if key is None:
        raise TieredKeyError(
            f"{manifest_path}: its data key is encrypted with key pair {key_id!r}, and no "
            f"private key is registered under that id (rsm_keys={{{key_id!r}: "
            f"'private.pem'}}, the rsmKeys option, or --rsm-key {key_id}=PATH)",
            key_id=key_id, object=manifest_path)
    data_key = rsa_oaep_sha3_512_decrypt(key, wrapped)
    if data_key is None or len(data_key) != 32:
        raise TieredKeyError(
            f"{manifest_path}: key {key_id!r} does not decrypt this segment's data key (a "
            f"different key pair registered under that id, or a damaged manifest)",
            key_id=key_id, object=manifest_path)
    return data_key


def _mgf1(seed, length):
    out = bytearray()
    counter = 0
    while len(out) < length:
        out += hashlib.sha3_512(seed + counter.to_bytes(4, "big")).digest()
        counter += 1
    return bytes(out[:length])


def _xor(a, b):
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


def rsa_oaep_sha3_512_decrypt(key: Any, ciphertext: bytes) -> bytes | None:
    """RSAES-OAEP decryption (RFC 8017 7.1.2) with SHA3-512 as the hash and in MGF1, an empty
    label; None when the ciphertext does not decode under ``key``. The RSA operation is
    blinded and uses the CRT numbers of the ``cryptography`` key."""
    numbers = key.private_numbers()
    n, e = numbers.public_numbers.n, numbers.public_numbers.e
    k = (n.bit_length() + 7) // 8
    h_len = 64
    if len(ciphertext) != k or k < 2 * h_len + 2:
        return None
    c = int.from_bytes(ciphertext, "big")
    if c >= n:
        return None
    while True:
        r = secrets.randbelow(n - 2) + 2
        try:
            r_inv = pow(r, -1, n)
            break
        except ValueError:            # r shares a factor with n (never, in practice)
            continue
    blinded = (c * pow(r, e, n)) % n
    m1 = pow(blinded, numbers.dmp1, numbers.p)
    m2 = pow(blinded, numbers.dmq1, numbers.q)
    m = (m2 + ((numbers.iqmp * (m1 - m2)) % numbers.p) * numbers.q) * r_inv % n
    em = m.to_bytes(k, "big")
    masked_seed, masked_db = em[1:1 + h_len], em[1 + h_len:]
    seed = _xor(masked_seed, _mgf1(masked_db, h_len))
    db = _xor(masked_db, _mgf1(seed, k - h_len - 1))
    label_hash = hashlib.sha3_512(b"").digest()
    rest = db[h_len:].lstrip(b"\x00")
    # one verdict for every failure, as RFC 8017 asks
    ok = em[0] == 0 and secrets.compare_digest(db[:h_len], label_hash) and rest[:1] == b"\x01"
    return rest[1:] if ok else None


# ------------------------------------------------------------------------------ reports
def work() -> list[dict[str, Any]]:
    """Per segment of every tiered partition read in the process: its chunks, those fetched
    and decoded, and the requests made for it (what reads cost)."""
    return [{"object": p.object_path(s, LOG_SUFFIX), "base_offset": s.base_offset,
             "chunks": s.chunk_count, "fetched_chunks": s.fetched_chunks,
             "decoded_chunks": s.decoded_chunks, "requests": s.requests}
            for p in partitions_cached() for s in p.segments]
