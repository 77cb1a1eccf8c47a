"""Kafka's segment indexes: ``OffsetIndex`` (.index), ``TimeIndex`` (.timeindex) and
``TransactionIndex`` (.txnindex), with Kafka's append rules, errors and searches. Each lives in
its own module (``offset_index``, ``time_index``, ``transaction_index``; what the first two
share in ``abstract_index``); this module is where users import them from.
"""
from kafkalog.abstract_index import ALLOCATION_WINDOW, DEFAULT_MAX_INDEX_SIZE, AbstractIndex
from kafkalog.offset_index import OffsetIndex, OffsetPosition, offset_entries_problem
from kafkalog.time_index import TimeIndex, TimestampOffset, time_entries_problem
from kafkalog.transaction_index import (
    TXN_ENTRY_DTYPE, AbortedTxn, TransactionIndex, TxnIndexSearchResult,
)

__all__ = [
    "ALLOCATION_WINDOW", "DEFAULT_MAX_INDEX_SIZE", "AbstractIndex", "OffsetIndex", "OffsetPosition",
    "offset_entries_problem", "TimeIndex", "TimestampOffset", "time_entries_problem",
    "TXN_ENTRY_DTYPE", "AbortedTxn", "TransactionIndex", "TxnIndexSearchResult",
]
