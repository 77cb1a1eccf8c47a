"""``__consumer_offsets`` replayed as the group coordinator loads it: committed offsets and
groups (classic, consumer (KIP-848) and share (KIP-932) groups).

The replay follows Kafka's coordinator: a record of a transactional batch is held for its
producer until the transaction's marker (COMMIT applies it, ABORT drops it), and a
transactional offset commit only replaces a committed offset written at a lower log offset;
a tombstone removes what its key names.
"""
from __future__ import annotations

import os
from typing import Any, Iterable

from kafkalog._typing import StrPath
from kafkalog.errors import KafkaLogError
from kafkalog.internal.decode import decode_offsets, is_raw
from kafkalog.internal.replay import InternalRecord, internal_partitions, read_partition
from kafkalog.records import ControlType

OFFSETS_TOPIC = "__consumer_offsets"

# ConsumerGroupMember's MemberState ids (kafka-dump-log prints the id).
MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS",
                 127: "UNKNOWN"}


class _Partition:
    """What one ``__consumer_offsets`` partition holds after its replay."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.offsets: dict[tuple[str, str, int], dict[str, Any]] = {}
        self.pending: dict[int, list[tuple[int, int, dict[str, Any], Any]]] = {}
        self.classic: dict[str, dict[str, Any]] = {}
        # KIP-848 / KIP-932 groups: group id -> {"type", "epoch", ...}
        self.modern: dict[str, dict[str, Any]] = {}

    # -------------------------------------------------------------------------- replay
    def replay(self, records: Iterable[InternalRecord]) -> None:
        for r in records:
            if r.control is not None:
                if r.control in (ControlType.COMMIT, ControlType.ABORT):
                    self._end_transaction(r.producer_id, r.control == ControlType.COMMIT)
                continue
            decoded = decode_offsets(r.key, r.value).decoded
            if is_raw(decoded):
                continue        # an unstable record type in another layout, warned about
            record_type = int(decoded["key"]["type"])
            key = decoded["key"]["data"]
            value = decoded["payload"]["data"] if decoded["payload"] is not None else None
            if r.is_transactional and r.producer_id >= 0:
                self.pending.setdefault(r.producer_id, []).append(
                    (r.offset, record_type, key, value))
                continue
            self._apply(r.offset, record_type, key, value, transactional=False)

    def _end_transaction(self, producer_id: int, commit: bool) -> None:
        for offset, record_type, key, value in self.pending.pop(producer_id, []):
            if commit:
                self._apply(offset, record_type, key, value, transactional=True)

    def _apply(self, offset: int, record_type: int, key: dict[str, Any], value: Any,
               transactional: bool) -> None:
        if record_type in (0, 1):
            tp = (key["group"], key["topic"], key["partition"])
            if value is None:
                self.offsets.pop(tp, None)
                return
            existing = self.offsets.get(tp)
            if transactional and existing is not None and existing["record_offset"] > offset:
                return      # a newer non-transactional commit wins (Kafka's olderThan)
            self.offsets[tp] = {
                "group": tp[0], "topic": tp[1], "partition": tp[2], "offset": value["offset"],
                "leader_epoch": _or_none(value.get("leaderEpoch", -1)),
                "metadata": value["metadata"], "commit_timestamp": value["commitTimestamp"],
                "expire_timestamp": _or_none(value.get("expireTimestamp", -1)),
                "record_offset": offset, "transactional": transactional,
                "partition_dir": self.name}
        elif record_type == 2:
            if value is None:
                self.classic.pop(key["group"], None)
            else:
                self.classic[key["group"]] = value
        elif 3 <= record_type <= 14:
            self._apply_modern(record_type, key, value)

    def _apply_modern(self, record_type: int, key: dict[str, Any], value: Any) -> None:
        kind = "consumer" if record_type <= 8 else "share"
        group = self.modern.setdefault(key["groupId"], {
            "type": kind, "epoch": None, "assignment_epoch": None, "topics": {},
            "members": {}, "assignments": {}, "targets": {}, "exists": False})
        member_id = key.get("memberId")
        what = {3: "group", 4: "topics", 5: "member", 6: "target_epoch", 7: "target",
                8: "assignment", 9: "topics", 10: "member", 11: "group", 12: "target_epoch",
                13: "target", 14: "assignment"}[record_type]
        if what == "group":
            group["epoch"] = None if value is None else value["epoch"]
            group["exists"] = value is not None
        elif what == "topics":
            group["topics"] = {} if value is None else {
                t["topicId"]: t["topicName"] for t in value["topics"]}
        elif what == "target_epoch":
            group["assignment_epoch"] = None if value is None else value["assignmentEpoch"]
        else:
            table = {"member": "members", "target": "targets", "assignment": "assignments"}[what]
            if value is None:
                group[table].pop(member_id, None)
            else:
                group[table][member_id] = value

    # -------------------------------------------------------------------------- answers
    def group_rows(self, topic_names: dict[str, str]) -> list[dict[str, Any]]:
        rows = [_classic_row(g, v, self.name) for g, v in self.classic.items()]
        for g, v in self.modern.items():
            if v["exists"]:
                rows.append(_modern_row(g, v, {**topic_names, **v["topics"]}, self.name))
        return rows


def _or_none(value: int) -> int | None:
    return None if value is None or value < 0 else value


def _topic_partitions(items: Any, topic_field: str, names: dict[str, str]
                      ) -> list[dict[str, Any]]:
    if not isinstance(items, list):
        return []
    return [{"topic": names.get(t[topic_field], t[topic_field]),
             "partitions": sorted(t["partitions"])} for t in items]


def _classic_row(group: str, v: dict[str, Any], name: str) -> dict[str, Any]:
    members = []
    for m in v["members"]:
        sub, assign = m["subscription"], m["assignment"]
        members.append({
            "member_id": m["memberId"], "group_instance_id": m.get("groupInstanceId"),
            "client_id": m["clientId"], "client_host": m["clientHost"],
            "session_timeout_ms": m["sessionTimeout"],
            "rebalance_timeout_ms": m.get("rebalanceTimeout"),
            "subscribed_topics": sub.get("topics") if isinstance(sub, dict) else None,
            "assignment": _topic_partitions(assign.get("assignedPartitions"), "topic", {})
            if isinstance(assign, dict) else None,
        })
    return {"group": group, "type": "classic", "protocol_type": v["protocolType"],
            "protocol": v["protocol"], "state": "Stable" if members else "Empty",
            "generation": v["generation"], "epoch": None, "assignment_epoch": None,
            "leader": v["leader"],
            "current_state_timestamp": _or_none(v.get("currentStateTimestamp", -1)),
            "members": members, "partition_dir": name}


def _modern_row(group: str, v: dict[str, Any], names: dict[str, str], name: str
                ) -> dict[str, Any]:
    members = []
    for member_id in sorted(set(v["members"]) | set(v["assignments"])):
        meta = v["members"].get(member_id, {})
        current = v["assignments"].get(member_id, {})
        target = v["targets"].get(member_id, {})
        members.append({
            "member_id": member_id, "instance_id": meta.get("instanceId"),
            "rack_id": meta.get("rackId"), "client_id": meta.get("clientId"),
            "client_host": meta.get("clientHost"),
            "subscribed_topics": meta.get("subscribedTopicNames"),
            "subscribed_topic_regex": meta.get("subscribedTopicRegex"),
            "server_assignor": meta.get("serverAssignor"),
            "member_epoch": current.get("memberEpoch"),
            "previous_member_epoch": current.get("previousMemberEpoch"),
            "member_state": MEMBER_STATES.get(current.get("state", -1)),
            "assignment": _topic_partitions(current.get("assignedPartitions"), "topicId", names),
            "pending_revocation": _topic_partitions(
                current.get("partitionsPendingRevocation"), "topicId", names),
            "target_assignment": _topic_partitions(target.get("topicPartitions"), "topicId",
                                                   names),
        })
    return {"group": group, "type": v["type"], "protocol_type": v["type"],
            "protocol": members[0]["server_assignor"] if members else None,
            "state": _modern_state(v, members), "generation": None, "epoch": v["epoch"],
            "assignment_epoch": v["assignment_epoch"], "leader": None,
            "current_state_timestamp": None, "members": members, "partition_dir": name}


def _modern_state(v: dict[str, Any], members: list[dict[str, Any]]) -> str:
    """Kafka's ConsumerGroup state: Empty, Assigning (the target assignment is behind the
    group epoch), Reconciling (a member is not stable at the assignment epoch) or Stable."""
    if not members:
        return "Empty"
    if v["type"] == "share":
        return "Stable"
    target = v["assignment_epoch"] if v["assignment_epoch"] is not None else -1
    if (v["epoch"] or 0) > target:
        return "Assigning"
    for m in members:
        if m["member_state"] != "STABLE" or m["member_epoch"] != target:
            return "Reconciling"
    return "Stable"


def _replayed(path: StrPath) -> list[_Partition]:
    out = []
    for d in internal_partitions(path, OFFSETS_TOPIC):
        state = _Partition(os.path.basename(d))
        state.replay(read_partition(d))
        out.append(state)
    return out


def _cluster_topic_names(path: StrPath) -> dict[str, str]:
    """Topic id -> name from a ``__cluster_metadata-0`` in the log dir ``path`` names (or
    holds ``path``); empty when there is none or it cannot be read."""
    from kafkalog.internal.cluster import topic_names
    path = os.path.abspath(os.fspath(path))
    for log_dir in (path, os.path.dirname(path)):
        if os.path.isdir(os.path.join(log_dir, "__cluster_metadata-0")):
            try:
                return topic_names(os.path.join(log_dir, "__cluster_metadata-0"))
            except KafkaLogError:
                return {}
    return {}


def committed_offsets(path: StrPath) -> list[dict[str, Any]]:
    """The committed offset of every group, topic and partition in a ``__consumer_offsets``
    partition directory or a log dir, as the group coordinator would load it.

    Returns a list of dicts sorted by group, topic, partition: ``group``, ``topic``,
    ``partition``, ``offset``, ``leader_epoch`` (None when not recorded), ``metadata``,
    ``commit_timestamp`` and ``expire_timestamp`` (ms; None when not set),
    ``record_offset`` (the commit's offset in ``__consumer_offsets``), ``transactional``,
    ``partition_dir``. Raises KafkaLogError when ``path`` holds no ``__consumer_offsets``
    partition or a record cannot be read.
    """
    rows = [row for p in _replayed(path) for row in p.offsets.values()]
    return sorted(rows, key=lambda r: (r["group"], r["topic"], r["partition"]))


def groups(path: StrPath, topic_names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The groups of a ``__consumer_offsets`` partition directory or log dir, as the group
    coordinator would load them, sorted by group id.

    Each is a dict: ``group``, ``type`` (``classic``, ``consumer``, ``share``),
    ``protocol_type``, ``protocol`` (the classic protocol or the server assignor), ``state``,
    ``generation`` (classic) or ``epoch`` and ``assignment_epoch`` (KIP-848/932), ``leader``,
    ``current_state_timestamp`` and ``members`` (their ids, clients, subscriptions and
    assignments as ``[{"topic", "partitions"}]``). Topic ids are named from the group's own
    topic metadata or ``topic_names`` (topic id -> name, e.g. from ``cluster_metadata``).
    """
    names = topic_names if topic_names is not None else _cluster_topic_names(path)
    rows = [row for p in _replayed(path) for row in p.group_rows(names)]
    return sorted(rows, key=lambda r: r["group"])
