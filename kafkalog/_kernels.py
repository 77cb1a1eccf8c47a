"""The one place that picks the kernels: the compiled ``_core`` unless it is missing or
``KAFKALOG_NO_EXTENSIONS=1``, else the pure-Python reference ``_core_py`` (which gathers the
twin modules, one per ``.pxi`` section: ``_walk_py``, ``_decode_py``, ...).

The choice is made once per process: modules bind the kernels when they are imported
(``from kafkalog._kernels import walk_batches``), so a call costs no attribute lookup. The
tests compare the two sets in one process by rebinding them (``tests/twins.py``)."""
import os
from typing import TYPE_CHECKING

KERNEL_NAMES = (
    "walk_batches", "decode_v2_records", "decode_v2_offsets", "decode_legacy_records",
    "index_search", "index_lookup", "index_search_many", "index_entries", "index_valid_entries", "find_batch",
    "index_entries_for", "recovery_summary", "prepare_append", "build_v2_batch", "as_record", "ActiveSegmentAppender", "gather_spans",
    "IndexView", "index_lookup_many",
    "Record", "make_records", "batch_records", "fetch_records", "chained", "span_bytes", "next_valid_batch",
    "check_batches", "BatchView", "batch_views",
    "crc32c", "key_hash", "offset_map_put", "offset_map_get", "compact_batches",
    "batch_header_plausible", "segment_read", "find_timestamp", "table_records", "walk_log07",
    "FileMapping",
)

COMPILED = False
if TYPE_CHECKING:
    # Type checkers see the stubs (_core.pyi); _core_py has the same signatures.
    from kafkalog import _core as _module
else:
    _module = None
    if os.environ.get("KAFKALOG_NO_EXTENSIONS", "") not in ("1", "true", "yes"):
        try:
            from kafkalog import _core as _module
            COMPILED = True
        except ImportError as e:
            # Silent, this costs 5-50x (e.g. a Spark worker importing an unbuilt checkout
            # from its working directory): say so once, naming what failed to load.
            import warnings
            warnings.warn(
                f"kafkalog: the compiled kernels (kafkalog._core) did not load ({e}); the "
                f"pure-Python kernels run instead, many times slower. Build the extension "
                f"(pip install ., or python setup.py build_ext --inplace), or set "
                f"KAFKALOG_NO_EXTENSIONS=1 to choose the pure-Python kernels knowingly.",
                RuntimeWarning, stacklevel=2)
            _module = None
    if _module is None:
        from kafkalog import _core_py as _module

KERNELS_FILE = _module.__file__    # which kernels run, for logs and reports
walk_batches = _module.walk_batches
decode_v2_records = _module.decode_v2_records
decode_v2_offsets = _module.decode_v2_offsets
decode_legacy_records = _module.decode_legacy_records
check_batches = _module.check_batches
index_search = _module.index_search
index_lookup = _module.index_lookup
index_search_many = _module.index_search_many
index_entries = _module.index_entries
index_valid_entries = _module.index_valid_entries
find_batch = _module.find_batch
index_entries_for = _module.index_entries_for
recovery_summary = _module.recovery_summary
prepare_append = _module.prepare_append
build_v2_batch = _module.build_v2_batch
as_record = _module.as_record
ActiveSegmentAppender = _module.ActiveSegmentAppender
gather_spans = _module.gather_spans
IndexView = _module.IndexView
index_lookup_many = _module.index_lookup_many
Record = _module.Record
make_records = _module.make_records
batch_records = _module.batch_records
fetch_records = _module.fetch_records
chained = _module.chained
BatchView = _module.BatchView
batch_views = _module.batch_views
span_bytes = _module.span_bytes
next_valid_batch = _module.next_valid_batch
crc32c = _module.crc32c
key_hash = _module.key_hash
offset_map_put = _module.offset_map_put
offset_map_get = _module.offset_map_get
compact_batches = _module.compact_batches
batch_header_plausible = _module.batch_header_plausible
segment_read = _module.segment_read
find_timestamp = _module.find_timestamp
table_records = _module.table_records
walk_log07 = _module.walk_log07
FileMapping = _module.FileMapping
FIND_TS_FOUND = _module.FIND_TS_FOUND
FIND_TS_MORE = _module.FIND_TS_MORE
FIND_TS_DECODE = _module.FIND_TS_DECODE
OFFSET_MAP_ENTRY_BYTES = _module.OFFSET_MAP_ENTRY_BYTES
COMPACT_COPY = _module.COMPACT_COPY
COMPACT_DROP = _module.COMPACT_DROP
COMPACT_REBUILD = _module.COMPACT_REBUILD
APPEND_HAS_PRODUCER = _module.APPEND_HAS_PRODUCER
APPEND_HAS_COMPRESSED = _module.APPEND_HAS_COMPRESSED
