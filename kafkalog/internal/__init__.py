"""Kafka's internal topics: ``__consumer_offsets``, ``__transaction_state`` and
``__cluster_metadata`` decoded as kafka-dump-log's decoders do, and replayed into answers
(committed offsets, groups, transactions, the cluster metadata image).

The decoders are driven by schema tables (``tables``) read by one schema reader (``schema``).
"""
from kafkalog.internal.cluster import cluster_metadata
from kafkalog.internal.decode import (
    DECODERS, Decoded, decode_control, decode_record, decoder_for_topic, kafka_json,
)
from kafkalog.internal.groups import committed_offsets, groups
from kafkalog.internal.transactions import transactions

__all__ = ["DECODERS", "Decoded", "cluster_metadata", "committed_offsets", "decode_control",
           "decode_record", "decoder_for_topic", "groups", "kafka_json", "transactions"]
