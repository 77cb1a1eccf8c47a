"""The one place that picks the kernels: the compiled ``_core`` unless it is missing or
``KAFKALOG_NO_EXTENSIONS=1``, else the pure-Python reference ``_core_py``."""
import os

COMPILED = False
if os.environ.get("KAFKALOG_NO_EXTENSIONS", "") not in ("1", "true", "yes"):
    try:
        from kafkalog._core import (  # noqa: F401
            walk_batches, decode_v2_records, decode_legacy_records, index_search,
            index_lookup, index_search_many, index_entries, index_valid_entries,
        )
        COMPILED = True
    except ImportError:
        pass
if not COMPILED:
    from kafkalog._core_py import (  # noqa: F401
        walk_batches, decode_v2_records, decode_legacy_records, index_search,
        index_lookup, index_search_many, index_entries, index_valid_entries,
    )
