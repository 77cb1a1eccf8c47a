"""Aiven's manifests read: one uploaded segment (``Segment``: where each chunk and index lies
in its objects, how each is transformed, its wrapped data key) and the segments of one
partition prefix (``Partition``) with the files its view shows.

Objects live under ``<key.prefix><topic>-<topicId>/<partition>/`` as
``<20-digit base offset>-<segmentId>`` + ``.log`` (the segment cut into chunks, each optionally
zstd-compressed, then optionally AES-256-GCM-encrypted, concatenated), ``.indexes`` (the
offset, time, producer-snapshot, leader-epoch and transaction indexes, each transformed alone,
concatenated) and ``.rsm-manifest`` (JSON: where each chunk and index lies, and the segment's
wrapped data key). ``../shared/fixtures/tiered-aiven/README.md`` states the format.
"""
from __future__ import annotations

import base64
import json
import logging
import math
import os
import re
import struct
import threading
from dataclasses import dataclass
from typing import Any, Mapping

from kafkalog import storage
from kafkalog.codecs import ZSTD, decompress
from kafkalog.errors import CorruptTieredObjectError, KafkaLogError, LogNotFoundError
from kafkalog.files import (
    INDEX_SUFFIX, LEADER_EPOCH_CHECKPOINT, LOG_SUFFIX, PARTITION_METADATA, SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, file_name,
)
from kafkalog.storage_backend import Entry
from kafkalog.tiered.crypto import aes_gcm, keyring_of, unwrap_data_key

log = logging.getLogger("kafkalog.tiered")

MANIFEST_SUFFIX = ".rsm-manifest"
INDEXES_SUFFIX = ".indexes"
IV_SIZE, TAG_SIZE = 12, 16
# A Kafka Uuid as text: 22 characters of URL-safe base64 of 16 bytes, so the last one carries
# 2 bits of data and 4 zero bits. A partition number has at most 10 digits: a directory named
# like this is never a broker's partition directory.
_UUID = r"[A-Za-z0-9_-]{21}[AQgw]"
TOPIC_DIR = re.compile(rf"^(.+)-({_UUID})$")
SEGMENT_OBJECT = re.compile(rf"^(\d{{20}})-({_UUID})(\.log|\.indexes|\.rsm-manifest)$")
PARTITION_NAME = re.compile(r"^\d{1,10}$")
# The manifest's index names, in the order the .indexes object holds them, and the file each
# becomes in a view (the producer snapshot's name depends on the segment's end: None here).
INDEXES = (("offset", INDEX_SUFFIX), ("timestamp", TIME_INDEX_SUFFIX),
           ("producerSnapshot", None), ("leaderEpoch", None), ("transaction", TXN_INDEX_SUFFIX))


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
        match = SEGMENT_OBJECT.match(stem + MANIFEST_SUFFIX)
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
                            for name, _ in INDEXES}
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
        """The segment's AES-256 key, unwrapped once with the RSA key of its partition's
        keyring (the keys of the call that resolved the view)."""
        with self._lock:
            if self._data_key is None:
                assert self.key_id is not None and self._wrapped_key is not None
                self._data_key = unwrap_data_key(keyring_of(self.partition.keyring),
                                                 self.key_id, self._wrapped_key,
                                                 self.manifest_path)
            return self._data_key

    def _detransform(self, blob, what, compressed, original_size, chunk=None):
        """Stored bytes of a chunk or an index → its original bytes (decrypt, then
        decompress), each failure a CorruptTieredObjectError naming ``what``."""
        if self.encrypted:
            aesgcm = aes_gcm(self.data_key())
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
    view; ``keyring`` is the token of the keyring its encrypted segments are read with (None:
    no keys; looked up when a data key is needed, so keys given to a read task later serve)."""

    def __init__(self, url: str, keyring: str | None = None,
                 listed: list[Entry] | None = None,
                 manifests: Mapping[str, bytes] | None = None) -> None:
        """``listed``: the prefix's entries when a listing of a prefix above it saw them
        (None: listed here); ``manifests``: its manifests' bytes by object path, read
        together with other partitions' (None: read here)."""
        self.url = url
        self.keyring = keyring
        self.real = storage.normalize(url)
        topic_dir, self.partition = os.path.split(url)
        match = TOPIC_DIR.match(os.path.basename(topic_dir))
        assert match is not None
        self.topic, self.topic_id = match.group(1), match.group(2)
        if listed is None:
            try:
                listed = storage.list_dir(self.real)
            except FileNotFoundError:
                raise LogNotFoundError(f"{self.real}: no such tiered partition prefix") \
                    from None
        entries = {e.name: e for e in listed if e.is_file}
        paths = manifest_paths(self.real, listed)
        if manifests is None:
            manifests = dict(zip(paths, storage.read_files(paths)))
        by_base: dict[int, Segment] = {}
        for path in paths:
            stem, manifest = os.path.basename(path)[:-len(MANIFEST_SUFFIX)], manifests[path]
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
            for name, suffix in INDEXES:
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

    def entries(self) -> list[Entry]:
        return sorted(Entry(n, f.size, True, False) for n, f in self.files.items())


def manifest_paths(prefix: str, listed: list[Entry]) -> list[str]:
    """The manifests' object paths among the entries ``listed`` in partition prefix
    ``prefix``, oldest segment first."""
    return [os.path.join(prefix, n) for n in sorted(
        e.name for e in listed if e.is_file and e.name.endswith(MANIFEST_SUFFIX)
        and SEGMENT_OBJECT.match(e.name))]


def _object_size(entries, name):
    e = entries.get(name)
    return None if e is None else e.size
