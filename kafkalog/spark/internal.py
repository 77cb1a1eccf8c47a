"""The answers about Kafka's internal topics (``kafkalog.internal``) as Spark DataFrames.

Each ``__consumer_offsets`` / ``__transaction_state`` partition is replayed on its own, so the
partition directories are spread over the executors (which must see the same paths, as for
``kafkalog.spark.read``); the cluster metadata image is one log and is built on the driver.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from kafkalog._extras import require_extra
from kafkalog.errors import MissingSparkExtraError
from kafkalog.internal.cluster import METADATA_TOPIC, cluster_metadata
from kafkalog.internal.groups import OFFSETS_TOPIC, committed_offsets, groups
from kafkalog.internal.replay import internal_partitions
from kafkalog.internal.transactions import TRANSACTION_TOPIC, transactions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from kafkalog._typing import StrPath

_TP = "array<struct<topic:string,partitions:array<int>>>"

OFFSETS_SCHEMA = ("`group` string, topic string, `partition` int, offset bigint, "
                  "leader_epoch int, metadata string, commit_timestamp bigint, "
                  "expire_timestamp bigint, record_offset bigint, transactional boolean, "
                  "partition_dir string")
GROUP_MEMBERS_SCHEMA = (f"`group` string, type string, state string, protocol_type string, "
                        f"protocol string, generation int, epoch int, assignment_epoch int, "
                        f"member_id string, client_id string, client_host string, "
                        f"subscribed_topics array<string>, assignment {_TP}, "
                        f"partition_dir string")
TRANSACTIONS_SCHEMA = ("transactional_id string, producer_id bigint, producer_epoch int, "
                       "state string, partitions array<struct<topic:string,`partition`:int>>, "
                       "timeout_ms int, last_update_ms bigint, start_ms bigint, "
                       "previous_producer_id bigint, next_producer_id bigint, "
                       "client_transaction_version int, open boolean, hanging boolean, "
                       "record_offset bigint, partition_dir string")
METADATA_PARTITIONS_SCHEMA = ("topic string, topic_id string, `partition` int, leader int, "
                              "leader_epoch int, partition_epoch int, replicas array<int>, "
                              "isr array<int>")


def _require() -> None:
    require_extra(MissingSparkExtraError, "internal", ("pyspark",))


def _columns(schema: str) -> list[str]:
    names = []
    depth = 0
    for piece in schema.split(","):
        if depth == 0:
            names.append(piece.strip().split()[0].strip("`"))
        depth += piece.count("<") - piece.count(">")
    return names


def _per_partition(spark: SparkSession, path: StrPath, topic: str,
                   rows_of: Callable[[str], Iterable[dict[str, Any]]],
                   schema: str) -> DataFrame:
    _require()
    dirs = internal_partitions(path, topic)
    columns = _columns(schema)

    def rows(d: str) -> Iterator[tuple[Any, ...]]:
        for r in rows_of(d):
            yield tuple(r.get(c) for c in columns)
    rdd = spark.sparkContext.parallelize(dirs, max(1, len(dirs))).flatMap(rows)
    return spark.createDataFrame(rdd, schema)


def offsets_df(spark: SparkSession, path: StrPath) -> DataFrame:
    """``committed_offsets`` as a DataFrame (``OFFSETS_SCHEMA``)."""
    return _per_partition(spark, path, OFFSETS_TOPIC, committed_offsets, OFFSETS_SCHEMA)


def _member_rows(d: str) -> Iterator[dict[str, Any]]:
    for g in groups(d):
        for m in g["members"] or [{}]:
            yield {**g, **m}


def group_members_df(spark: SparkSession, path: StrPath) -> DataFrame:
    """``groups`` as a DataFrame, one row per member (a group without members has one row
    with null member columns): ``GROUP_MEMBERS_SCHEMA``."""
    return _per_partition(spark, path, OFFSETS_TOPIC, _member_rows, GROUP_MEMBERS_SCHEMA)


def transactions_df(spark: SparkSession, path: StrPath, now_ms: int | None = None
                    ) -> DataFrame:
    """``transactions`` as a DataFrame (``TRANSACTIONS_SCHEMA``)."""
    return _per_partition(spark, path, TRANSACTION_TOPIC,
                          lambda d: transactions(d, now_ms), TRANSACTIONS_SCHEMA)


def metadata_partitions_df(spark: SparkSession, path: StrPath) -> DataFrame:
    """The cluster metadata image's partitions, one row each
    (``METADATA_PARTITIONS_SCHEMA``); built on the driver."""
    _require()
    internal_partitions(path, METADATA_TOPIC)
    image = cluster_metadata(path)
    rows = [(t["name"], t["topic_id"], p["partition"], p["leader"], p["leader_epoch"],
             p["partition_epoch"], p["replicas"], p["isr"])
            for t in image["topics"] for p in t["partitions"]]
    return spark.createDataFrame(rows, METADATA_PARTITIONS_SCHEMA)


__all__ = ["GROUP_MEMBERS_SCHEMA", "METADATA_PARTITIONS_SCHEMA", "OFFSETS_SCHEMA",
           "TRANSACTIONS_SCHEMA", "group_members_df", "metadata_partitions_df", "offsets_df",
           "transactions_df"]
