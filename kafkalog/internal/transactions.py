"""``__transaction_state`` replayed as the transaction coordinator loads it: the last state of
every transactional id (a tombstone removes an expired one)."""
from __future__ import annotations

import os
from typing import Any

from kafkalog._typing import StrPath
from kafkalog.internal.decode import decode_transaction_log
from kafkalog.internal.replay import internal_partitions, read_partition
from kafkalog.internal.tables import TRANSACTION_STATES

TRANSACTION_TOPIC = "__transaction_state"
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")


def transactions(path: StrPath, now_ms: int | None = None) -> list[dict[str, Any]]:
    """Every transactional id of a ``__transaction_state`` partition directory or log dir,
    sorted by id.

    Each is a dict: ``transactional_id``, ``producer_id``, ``producer_epoch``, ``state``
    (Kafka's TransactionState name), ``partitions`` (``[{"topic", "partition"}]``, sorted),
    ``timeout_ms``, ``last_update_ms``, ``start_ms`` (None when no transaction started),
    ``previous_producer_id`` / ``next_producer_id`` (None when not recorded),
    ``client_transaction_version``, ``open`` (Ongoing or Prepare*: markers not all written)
    and ``hanging``: open, and its last update plus its timeout is before ``now_ms`` (by
    default the newest record timestamp of its partition: the log's own "now", when the
    coordinator should long since have aborted or completed it). ``record_offset`` and
    ``partition_dir`` say where its state was read.
    """
    rows = []
    for d in internal_partitions(path, TRANSACTION_TOPIC):
        latest: dict[str, dict[str, Any]] = {}
        newest = -1
        for r in read_partition(d):
            if r.control is not None:
                continue
            newest = max(newest, r.timestamp)
            decoded = decode_transaction_log(r.key, r.value).decoded
            tid = decoded["key"]["data"]["transactionalId"]
            if decoded["payload"] is None:
                latest.pop(tid, None)
            else:
                latest[tid] = _row(tid, decoded["payload"]["data"], r.offset,
                                   os.path.basename(d))
        clock = newest if now_ms is None else now_ms
        for row in latest.values():
            row["hanging"] = row["open"] and row["last_update_ms"] + row["timeout_ms"] < clock
            rows.append(row)
    return sorted(rows, key=lambda r: r["transactional_id"])


def _row(tid: str, v: dict[str, Any], offset: int, name: str) -> dict[str, Any]:
    state = TRANSACTION_STATES[v["transactionStatus"]]
    partitions = sorted({(s["topic"], p) for s in v["transactionPartitions"] or ()
                         for p in s["partitionIds"]})
    start = v["transactionStartTimestampMs"]
    return {
        "transactional_id": tid, "producer_id": v["producerId"],
        "producer_epoch": v["producerEpoch"], "state": state,
        "partitions": [{"topic": t, "partition": p} for t, p in partitions],
        "timeout_ms": v["transactionTimeoutMs"],
        "last_update_ms": v["transactionLastUpdateTimestampMs"],
        "start_ms": start if start >= 0 else None,
        "previous_producer_id": _or_none(v.get("previousProducerId", -1)),
        "next_producer_id": _or_none(v.get("nextProducerId", -1)),
        "client_transaction_version": v.get("clientTransactionVersion", 0),
        "open": state in OPEN_STATES, "hanging": False,
        "record_offset": offset, "partition_dir": name,
    }


def _or_none(value: int) -> int | None:
    return None if value < 0 else value
