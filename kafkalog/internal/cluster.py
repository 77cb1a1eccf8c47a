"""The cluster metadata image, replayed as a KRaft broker or controller loads it: the newest
KRaft snapshot (``<end offset>-<epoch>.checkpoint``), then the records of
``__cluster_metadata-0`` from the snapshot's end offset to the log end.

Records between a BeginTransactionRecord and its EndTransactionRecord are applied together
(an AbortTransactionRecord drops them; a transaction still open at the log end is not
applied), as Kafka's MetadataBatchLoader does. Partition changes merge as Kafka's
``PartitionRegistration.merge``: a new leader bumps the leader epoch, every change bumps the
partition epoch.
"""
from __future__ import annotations

import os
from typing import Any, Iterable

from kafkalog._typing import StrPath
from kafkalog.internal.decode import decode_cluster_metadata, decode_control
from kafkalog.internal.replay import (
    InternalRecord, internal_partitions, read_batches_file, read_partition,
)
from kafkalog.log_dirs import kraft_snapshot_files
from kafkalog.records import ControlType

METADATA_TOPIC = "__cluster_metadata"

# Kafka's ConfigResource.Type ids.
CONFIG_RESOURCE_TYPES = {0: "UNKNOWN", 2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER",
                         16: "CLIENT_METRICS", 32: "GROUP"}
NO_LEADER_CHANGE = -2


class ClusterImage:
    """The metadata image being replayed (plain dicts keyed as Kafka's image is)."""

    def __init__(self) -> None:
        self.topics: dict[str, dict[str, Any]] = {}           # topic id -> topic
        self.brokers: dict[int, dict[str, Any]] = {}
        self.controllers: dict[int, dict[str, Any]] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self.features: dict[str, int] = {}
        self.producer_ids: dict[str, Any] | None = None
        self.producer_id_blocks: list[dict[str, Any]] = []
        self.client_quotas: dict[tuple[tuple[str, Any], ...], dict[str, float]] = {}
        self.acls: dict[str, dict[str, Any]] = {}
        self.scram: dict[tuple[str, int], dict[str, Any]] = {}
        self.delegation_tokens: dict[str, dict[str, Any]] = {}
        self.zk_migration_state: int | None = None
        self.quorum: dict[str, Any] = {"leader_id": None, "leader_epoch": None, "voters": None}
        self.last_offset: int | None = None
        self._txn: list[tuple[int, str, dict[str, Any]]] | None = None

    # -------------------------------------------------------------------------- replay
    def replay(self, records: Iterable[InternalRecord]) -> None:
        for r in records:
            if r.control is not None:
                self._control(r)
                continue
            payload = decode_cluster_metadata(r.key, r.value).decoded["payload"]
            kind, data = payload["type"], payload["data"]
            if kind == "BEGIN_TRANSACTION_RECORD":
                self._txn = []
            elif kind == "END_TRANSACTION_RECORD":
                for offset, k, d in self._txn or ():
                    self.apply(k, d)
                    self.last_offset = offset
                self._txn = None
            elif kind == "ABORT_TRANSACTION_RECORD":
                self._txn = None
            elif self._txn is not None:
                self._txn.append((r.offset, kind, data))
                continue
            else:
                self.apply(kind, data)
            self.last_offset = r.offset

    def _control(self, r: InternalRecord) -> None:
        if r.control == ControlType.LEADER_CHANGE:
            decoded = decode_control(r.key, r.value)
            if decoded is not None:
                data = decoded[0]
                self.quorum = {"leader_id": data["leaderId"], "leader_epoch": r.leader_epoch,
                               "voters": [v["voterId"] for v in data["voters"]]}
        elif r.control == ControlType.KRAFT_VOTERS:
            decoded = decode_control(r.key, r.value)
            if decoded is not None:
                self.quorum["voters"] = [v["voterId"] for v in decoded[0]["voters"]]

    def apply(self, kind: str, d: dict[str, Any]) -> None:
        """Apply one metadata record (its MetadataRecordType name and JSON data)."""
        handler = getattr(self, "_" + kind.lower(), None)
        if handler is not None:
            handler(d)

    def _topic_record(self, d: dict[str, Any]) -> None:
        self.topics[d["topicId"]] = {"name": d["name"], "topic_id": d["topicId"],
                                     "partitions": {}}

    def _remove_topic_record(self, d: dict[str, Any]) -> None:
        topic = self.topics.pop(d["topicId"], None)
        if topic is not None:
            self.configs.pop((2, topic["name"]), None)

    def _partition_record(self, d: dict[str, Any]) -> None:
        topic = self.topics.get(d["topicId"])
        if topic is None:
            return
        topic["partitions"][d["partitionId"]] = {
            "partition": d["partitionId"], "replicas": d["replicas"], "isr": d["isr"],
            "leader": d["leader"], "leader_epoch": d["leaderEpoch"],
            "partition_epoch": d["partitionEpoch"],
            "removing_replicas": d["removingReplicas"] or [],
            "adding_replicas": d["addingReplicas"] or [],
            "leader_recovery_state": d.get("leaderRecoveryState", 0),
            "eligible_leader_replicas": d.get("eligibleLeaderReplicas") or [],
            "last_known_elr": d.get("lastKnownElr") or [],
            "directories": d.get("directories") or [],
        }

    def _partition_change_record(self, d: dict[str, Any]) -> None:
        topic = self.topics.get(d["topicId"])
        p = topic["partitions"].get(d["partitionId"]) if topic else None
        if p is None:
            return
        for field, name in (("replicas", "replicas"), ("isr", "isr"),
                            ("removingReplicas", "removing_replicas"),
                            ("addingReplicas", "adding_replicas"),
                            ("eligibleLeaderReplicas", "eligible_leader_replicas"),
                            ("lastKnownElr", "last_known_elr"), ("directories", "directories")):
            if d.get(field) is not None:
                p[name] = d[field]
        leader = d.get("leader", NO_LEADER_CHANGE)
        if leader != NO_LEADER_CHANGE:
            p["leader"] = leader
            p["leader_epoch"] += 1
        if d.get("leaderRecoveryState", -1) != -1:
            p["leader_recovery_state"] = d["leaderRecoveryState"]
        p["partition_epoch"] += 1

    def _clear_elr_record(self, d: dict[str, Any]) -> None:
        for topic in self.topics.values():
            if d["topicName"] in ("", topic["name"]):
                for p in topic["partitions"].values():
                    p["eligible_leader_replicas"], p["last_known_elr"] = [], []

    def _register_broker_record(self, d: dict[str, Any]) -> None:
        self.brokers[d["brokerId"]] = {
            "id": d["brokerId"], "epoch": d["brokerEpoch"], "incarnation_id": d["incarnationId"],
            "endpoints": [{"name": e["name"], "host": e["host"], "port": e["port"],
                           "security_protocol": e["securityProtocol"]} for e in d["endPoints"]],
            "features": {f["name"]: [f["minSupportedVersion"], f["maxSupportedVersion"]]
                         for f in d["features"]},
            "rack": d["rack"], "fenced": d["fenced"],
            "in_controlled_shutdown": d.get("inControlledShutdown", False),
            "is_migrating_zk_broker": d.get("isMigratingZkBroker", False),
            "log_dirs": d.get("logDirs", []),
        }

    def _unregister_broker_record(self, d: dict[str, Any]) -> None:
        self.brokers.pop(d["brokerId"], None)

    def _fence_broker_record(self, d: dict[str, Any]) -> None:
        if d["id"] in self.brokers:
            self.brokers[d["id"]]["fenced"] = True

    def _unfence_broker_record(self, d: dict[str, Any]) -> None:
        if d["id"] in self.brokers:
            self.brokers[d["id"]]["fenced"] = False

    def _broker_registration_change_record(self, d: dict[str, Any]) -> None:
        b = self.brokers.get(d["brokerId"])
        if b is None:
            return
        fenced = d.get("fenced", 0)
        if fenced:
            b["fenced"] = fenced > 0
        if d.get("inControlledShutdown", 0) == 1:
            b["in_controlled_shutdown"] = True
        if d.get("logDirs"):
            b["log_dirs"] = d["logDirs"]

    def _register_controller_record(self, d: dict[str, Any]) -> None:
        self.controllers[d["controllerId"]] = {
            "id": d["controllerId"], "incarnation_id": d["incarnationId"],
            "endpoints": [{"name": e["name"], "host": e["host"], "port": e["port"],
                           "security_protocol": e["securityProtocol"]} for e in d["endPoints"]],
            "features": {f["name"]: [f["minSupportedVersion"], f["maxSupportedVersion"]]
                         for f in d["features"]}}

    def _unregister_controller_record(self, d: dict[str, Any]) -> None:
        self.controllers.pop(d["controllerId"], None)

    def _config_record(self, d: dict[str, Any]) -> None:
        resource = (d["resourceType"], d["resourceName"])
        if d["value"] is None:
            configs = self.configs.get(resource, {})
            configs.pop(d["name"], None)
            if not configs:
                self.configs.pop(resource, None)
        else:
            self.configs.setdefault(resource, {})[d["name"]] = d["value"]

    def _feature_level_record(self, d: dict[str, Any]) -> None:
        if d["featureLevel"] == 0 and d["name"] != "metadata.version":
            self.features.pop(d["name"], None)      # level 0 removes a feature
        else:
            self.features[d["name"]] = d["featureLevel"]

    def _producer_ids_record(self, d: dict[str, Any]) -> None:
        previous = self.producer_ids["next_producer_id"] if self.producer_ids else None
        self.producer_ids = {"broker_id": d["brokerId"], "broker_epoch": d["brokerEpoch"],
                             "next_producer_id": d["nextProducerId"]}
        self.producer_id_blocks.append({
            "broker_id": d["brokerId"], "broker_epoch": d["brokerEpoch"],
            "first_producer_id": previous, "next_producer_id": d["nextProducerId"]})

    def _client_quota_record(self, d: dict[str, Any]) -> None:
        entity = tuple((e["entityType"], e["entityName"]) for e in d["entity"])
        if d["remove"]:
            quotas = self.client_quotas.get(entity, {})
            quotas.pop(d["key"], None)
            if not quotas:
                self.client_quotas.pop(entity, None)
        else:
            self.client_quotas.setdefault(entity, {})[d["key"]] = d["value"]

    def _access_control_entry_record(self, d: dict[str, Any]) -> None:
        self.acls[d["id"]] = dict(d)

    def _remove_access_control_entry_record(self, d: dict[str, Any]) -> None:
        self.acls.pop(d["id"], None)

    def _user_scram_credential_record(self, d: dict[str, Any]) -> None:
        self.scram[(d["name"], d["mechanism"])] = {"name": d["name"],
                                                   "mechanism": d["mechanism"],
                                                   "iterations": d["iterations"]}

    def _remove_user_scram_credential_record(self, d: dict[str, Any]) -> None:
        self.scram.pop((d["name"], d["mechanism"]), None)

    def _delegation_token_record(self, d: dict[str, Any]) -> None:
        self.delegation_tokens[d["tokenId"]] = {
            k: d[k] for k in ("tokenId", "owner", "requester", "renewers", "issueTimestamp",
                              "maxTimestamp", "expirationTimestamp")}

    def _remove_delegation_token_record(self, d: dict[str, Any]) -> None:
        self.delegation_tokens.pop(d["tokenId"], None)

    def _zk_migration_state_record(self, d: dict[str, Any]) -> None:
        self.zk_migration_state = d["zkMigrationState"]

    # -------------------------------------------------------------------------- answer
    def to_dict(self) -> dict[str, Any]:
        topics = []
        for t in sorted(self.topics.values(), key=lambda t: t["name"]):
            topics.append({"name": t["name"], "topic_id": t["topic_id"],
                           "partitions": [t["partitions"][p] for p in sorted(t["partitions"])]})
        return {
            "topics": topics,
            "brokers": [self.brokers[b] for b in sorted(self.brokers)],
            "controllers": [self.controllers[c] for c in sorted(self.controllers)],
            "configs": [{"resource_type": CONFIG_RESOURCE_TYPES.get(rt, str(rt)),
                         "resource_name": name, "configs": dict(sorted(c.items()))}
                        for (rt, name), c in sorted(self.configs.items())],
            "features": dict(sorted(self.features.items())),
            "producer_ids": self.producer_ids,
            "producer_id_blocks": self.producer_id_blocks,
            "client_quotas": [{"entity": [{"entity_type": t, "entity_name": n}
                                          for t, n in entity], "quotas": q}
                              for entity, q in self.client_quotas.items()],
            "acls": list(self.acls.values()),
            "scram_credentials": list(self.scram.values()),
            "delegation_tokens": list(self.delegation_tokens.values()),
            "zk_migration_state": self.zk_migration_state,
            "quorum": self.quorum,
            "pending_transaction": self._txn is not None,
        }


def cluster_metadata(path: StrPath) -> dict[str, Any]:
    """The cluster metadata image of a ``__cluster_metadata-0`` directory (or a log dir
    holding it): the newest KRaft snapshot, then the log's records after it.

    Returns a dict: ``topics`` (sorted by name; each ``name``, ``topic_id`` as Kafka prints a
    Uuid, ``partitions`` with ``partition``, ``replicas``, ``isr``, ``leader``,
    ``leader_epoch``, ``partition_epoch``, ELR and directories), ``brokers``,
    ``controllers``, ``configs`` (``resource_type``, ``resource_name``, ``configs``),
    ``features`` (name -> level), ``producer_ids`` (the next producer id and who took the
    last block), ``producer_id_blocks`` (blocks allocated by the records replayed),
    ``client_quotas``, ``acls``, ``scram_credentials``, ``delegation_tokens``, ``quorum``
    (leader, epoch, voters), ``snapshot`` (the snapshot loaded: ``file``, ``end_offset``,
    ``epoch``; None when there is none), ``last_applied_offset``, ``log_end_offset`` and
    ``pending_transaction`` (a metadata transaction left open at the log end, not applied).
    """
    d = internal_partitions(path, METADATA_TOPIC)[0]
    image = ClusterImage()
    snapshots = kraft_snapshot_files(d)
    snapshot = None
    start = None
    if snapshots:
        sid, file = snapshots[-1]
        image.replay(read_batches_file(file))
        image.last_offset = sid.end_offset - 1
        snapshot = {"file": os.path.basename(file), "end_offset": sid.end_offset,
                    "epoch": sid.epoch}
        start = sid.end_offset
    log_end = start or 0
    for r in read_partition(d, start):
        image.replay([r])
        log_end = r.offset + 1
    out = image.to_dict()
    out.update(snapshot=snapshot, last_applied_offset=image.last_offset,
               log_end_offset=log_end)
    return out


def topic_names(path: StrPath) -> dict[str, str]:
    """Topic id -> name from the cluster metadata image of ``path``."""
    return {t["topic_id"]: t["name"] for t in cluster_metadata(path)["topics"]}
