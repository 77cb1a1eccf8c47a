"""kafkalog: Apache Kafka's log storage layer for Python, with a Cython core."""
from typing import TYPE_CHECKING, Any

from kafkalog._version import __version__  # noqa: E402

from kafkalog import errors  # noqa: E402
# Registers the storage backend of tiered-storage views (``rsm+``) before any path is read.
from kafkalog import tiered  # noqa: E402, F401
from kafkalog._kernels import COMPILED as _COMPILED  # noqa: E402
from kafkalog.index import (  # noqa: E402
    AbortedTxn, OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset, TransactionIndex,
)
from kafkalog._kernels import Record  # noqa: E402
from kafkalog.records import (  # noqa: E402
    ControlType, RecordBatch, RecordTable, TimestampType, decode_batches, iter_batches,
)
from kafkalog.builder import build_batch, build_control_batch  # noqa: E402
from kafkalog.config import LogConfig  # noqa: E402
from kafkalog.fetch_data_info import FetchDataInfo  # noqa: E402
from kafkalog.segment import LogSegment  # noqa: E402
from kafkalog.log import Log, LogAppendInfo, LogOffsetSnapshot  # noqa: E402
from kafkalog.manager import LogManager  # noqa: E402
from kafkalog.log07 import Log07, Message07  # noqa: E402

if TYPE_CHECKING:
    from kafkalog import arrow
    from kafkalog.arrow import read_arrow, read_pandas, record_batch_reader

# kafkalog.arrow (and the Spark planner it uses) is imported when first asked for; it imports
# pyarrow and pandas only when called (MissingArrowExtraError without them).
_ARROW_NAMES = ("read_arrow", "read_pandas", "record_batch_reader")


def __getattr__(name: str) -> Any:
    if name in _ARROW_NAMES or name == "arrow":
        import importlib
        module = importlib.import_module("kafkalog.arrow")
        return module if name == "arrow" else getattr(module, name)
    raise AttributeError(f"module 'kafkalog' has no attribute {name!r}")


def compiled() -> bool:
    """True when the Cython kernels are in use (not the pure-Python reference)."""
    return _COMPILED


__all__ = [
    "__version__", "errors", "compiled", "Record", "RecordBatch", "RecordTable",
    "TimestampType", "ControlType", "build_batch", "build_control_batch", "iter_batches",
    "decode_batches", "OffsetIndex", "TimeIndex", "TransactionIndex", "AbortedTxn",
    "OffsetPosition", "TimestampOffset", "LogConfig", "LogSegment", "FetchDataInfo", "Log",
    "LogAppendInfo", "LogOffsetSnapshot", "LogManager", "Log07", "Message07", "arrow", "read_arrow", "read_pandas",
    "record_batch_reader",
]
