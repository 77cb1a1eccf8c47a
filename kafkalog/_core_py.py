"""Pure-Python reference of every kernel in ``_core.pyx``: same signatures, same results.

Used when the compiled module is missing or ``KAFKALOG_NO_EXTENSIONS=1``, and by the tests as
the reference the compiled kernels are checked against. Written for clarity, not speed.

As ``_core.pyx`` includes its ``.pxi`` sections, this module gathers their twins, one module
per section with the section's name (``_walk.pxi`` / ``_walk_py.py``, fastavro's ``_read.pyx``
/ ``_read_py.py``); what the twins share is in ``_common_py.py``.
"""
from kafkalog._crc_py import crc32c
from kafkalog._walk_py import walk_batches
from kafkalog._decode_py import (
    decode_v2_records, decode_v2_offsets, decode_legacy_records, check_batches,
)
from kafkalog._index_py import (
    index_search, index_search_many, index_entries, index_valid_entries, index_lookup,
)
from kafkalog._scan_py import find_batch, index_entries_for, recovery_summary
from kafkalog._resync_py import next_valid_batch
from kafkalog._append_py import (
    prepare_append, build_v2_batch, as_record, APPEND_HAS_PRODUCER, APPEND_HAS_COMPRESSED,
)
from kafkalog._appender_py import ActiveSegmentAppender
from kafkalog._arrow_py import gather_spans
from kafkalog._views_py import IndexView, index_lookup_many
from kafkalog._batch_py import BatchView, batch_views
from kafkalog._record_py import (
    Record, make_records, table_records, batch_records, fetch_records, span_bytes, chained,
)
from kafkalog._read_py import (
    batch_header_plausible, segment_read, find_timestamp,
    FIND_TS_FOUND, FIND_TS_NONE, FIND_TS_MORE, FIND_TS_DECODE,
)
from kafkalog._log07_py import walk_log07
from kafkalog._mapping_py import FileMapping
from kafkalog._compact_py import (
    key_hash, offset_map_put, offset_map_get, compact_batches,
    OFFSET_MAP_ENTRY_BYTES, COMPACT_COPY, COMPACT_DROP, COMPACT_REBUILD,
)

__all__ = [
    "crc32c", "walk_batches", "decode_v2_records", "decode_v2_offsets", "decode_legacy_records",
    "check_batches",
    "index_search", "index_search_many", "index_entries", "index_valid_entries", "index_lookup",
    "find_batch", "index_entries_for", "recovery_summary", "next_valid_batch", "prepare_append",
    "build_v2_batch", "as_record", "ActiveSegmentAppender",
    "APPEND_HAS_PRODUCER", "APPEND_HAS_COMPRESSED", "gather_spans", "IndexView",
    "index_lookup_many", "Record", "make_records", "table_records", "batch_records",
    "fetch_records", "chained", "BatchView", "batch_views",
    "span_bytes", "batch_header_plausible", "segment_read", "find_timestamp", "FIND_TS_FOUND",
    "FIND_TS_NONE", "FIND_TS_MORE", "FIND_TS_DECODE", "key_hash", "offset_map_put",
    "offset_map_get", "compact_batches", "OFFSET_MAP_ENTRY_BYTES",
    "COMPACT_COPY", "COMPACT_DROP", "COMPACT_REBUILD", "walk_log07", "FileMapping",
]
