"""Kafka tiered storage (KIP-405) as Aiven's RemoteStorageManager writes it, read as partitions.

Aiven's tiered-storage-for-apache-kafka uploads each closed segment as three objects under
``<key.prefix><topic>-<topicId>/<partition>/<20-digit base offset>-<segmentId>``: ``.log``,
``.indexes`` and ``.rsm-manifest`` (``manifest``; ``../shared/fixtures/tiered-aiven/README.md``
states the format).

Such a prefix, on any filesystem ``kafkalog.storage`` reads (a local directory or an fsspec
URL), is shown to the rest of kafkalog as partition directories: a *view*, a path
``rsm+<url of the objects>`` served by the storage backend this package registers (``view``).
The loader, segments, indexes, ``dump``, ``verify``, the Spark planner and reader read a view
as they read any remote partition (``storage.is_remote`` is true for it): small files whole,
the ``.log`` through a ``ChunkBuffer`` that fetches, decrypts and decompresses only the chunks
covering the bytes a read asks for (``chunks``). Encrypted segments need the RSA private keys
given to the call that reads them (``rsm_keys``; ``crypto.keyring``).
"""
from kafkalog import storage
from kafkalog.tiered.chunks import ChunkBuffer
from kafkalog.tiered.crypto import Keyring, key_pem, keyring, rsa_oaep_sha3_512_decrypt
from kafkalog.tiered.manifest import (
    INDEXES_SUFFIX, IV_SIZE, MANIFEST_SUFFIX, TAG_SIZE, Partition, Segment, decode_chunk_sizes,
)
from kafkalog.tiered.view import (
    SCHEME, TieredView, check_segment, is_topic_view, is_view, partitions_cached, real_path,
    reset, resolve, work,
)

storage.register(SCHEME, TieredView())

__all__ = [
    "SCHEME", "MANIFEST_SUFFIX", "INDEXES_SUFFIX", "IV_SIZE", "TAG_SIZE", "ChunkBuffer",
    "Keyring", "Partition", "Segment", "TieredView", "check_segment", "decode_chunk_sizes",
    "is_topic_view", "is_view", "key_pem", "keyring", "partitions_cached", "real_path", "reset",
    "resolve", "rsa_oaep_sha3_512_decrypt", "work",
]
