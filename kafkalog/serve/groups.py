"""A one-node group coordinator for the classic consumer protocol (Kafka's
``GroupCoordinator``: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch). The clients' own assignors assign: the leader's JoinGroup answer carries every
member's metadata, its SyncGroup hands out the assignment.

A group goes Empty -> PreparingRebalance (a member joined or left, a session expired) ->
CompletingRebalance (every member rejoined, or the rebalance timeout passed: the rest are
removed) -> Stable (the leader's SyncGroup). Requests wait in their connection's thread on one
condition, as a broker holds a JoinGroup or SyncGroup until the group moves on; ``sweep``
(the server's timer) expires sessions and rebalance deadlines.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid

from kafkalog.serve.offsets import CommittedOffset

log = logging.getLogger(__name__)

# Kafka's error codes (org.apache.kafka.common.protocol.Errors)
UNKNOWN_SERVER_ERROR = -1
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_NOT_AVAILABLE = 15
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79

#: a broker's offset.metadata.max.bytes default
MAX_METADATA_CHARS = 4096
#: group.min/max.session.timeout.ms, a broker's defaults
MIN_SESSION_MS, MAX_SESSION_MS = 6_000, 1_800_000


class Member:
    __slots__ = ("assignment", "client_id", "instance_id", "join_answer", "joining",
                 "last_seen", "member_id", "protocols", "rebalance_ms", "session_ms")

    def __init__(self, member_id, instance_id, client_id):
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.session_ms = 10_000
        self.rebalance_ms = 10_000
        self.protocols: list[tuple[str, bytes]] = []
        self.last_seen = time.monotonic()
        self.joining = False         # rejoined in the rebalance under way
        self.join_answer = None      # its JoinGroup response, once the rebalance completes
        self.assignment = None       # its SyncGroup answer of this generation


class Group:
    __slots__ = ("deadline", "generation", "group_id", "leader", "members", "pending",
                 "protocol", "protocol_type", "state")

    def __init__(self, group_id):
        self.group_id = group_id
        self.state = "Empty"
        self.generation = 0
        self.protocol_type = None
        self.protocol = None
        self.leader = None
        self.members: dict[str, Member] = {}
        self.pending: dict[str, float] = {}   # member ids handed out (MEMBER_ID_REQUIRED)
        self.deadline = 0.0                   # the rebalance's end


class GroupCoordinator:
    """The groups of one server; ``offsets`` is the ``OffsetStore``, ``known(topic,
    partition)`` says whether a partition is served (commits of others are refused)."""

    def __init__(self, offsets, known):
        self._offsets = offsets
        self._known = known
        self._cond = threading.Condition()
        self._groups: dict[str, Group] = {}
        self._closing = False

    # ------------------------------------------------------------------ membership
    def join(self, body, version, client_id):
        group_id = body["groupId"]
        member_id = body.get("memberId") or ""
        instance_id = body.get("groupInstanceId")
        session_ms = body["sessionTimeoutMs"]
        rebalance_ms = body.get("rebalanceTimeoutMs", -1)
        protocols = [(p["name"], bytes(p["metadata"])) for p in body.get("protocols") or ()]

        def fail(code, member=""):
            return {"errorCode": code, "generationId": -1,
                    "protocolName": None if version >= 7 else "",
                    "leader": "", "memberId": member, "members": []}
        if not group_id:
            return fail(INVALID_GROUP_ID)
        if not MIN_SESSION_MS <= session_ms <= MAX_SESSION_MS:
            return fail(INVALID_SESSION_TIMEOUT)
        with self._cond:
            group = self._groups.setdefault(group_id, Group(group_id))
            if not protocols or (group.members and (
                    body["protocolType"] != group.protocol_type or
                    not self._common(group, protocols, member_id))):
                return fail(INCONSISTENT_GROUP_PROTOCOL)
            now = time.monotonic()
            if not member_id:
                member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
                if version >= 4 and instance_id is None:
                    # KIP-394: the member rejoins with its id, so a join lost in flight
                    # leaves no member behind
                    group.pending[member_id] = now + session_ms / 1000
                    return fail(MEMBER_ID_REQUIRED, member_id)
            elif member_id not in group.members and member_id not in group.pending:
                return fail(UNKNOWN_MEMBER_ID, member_id)
            group.pending.pop(member_id, None)
            member = group.members.get(member_id)
            if member is None:
                member = group.members[member_id] = Member(member_id, instance_id, client_id)
            member.session_ms = session_ms
            member.rebalance_ms = rebalance_ms if rebalance_ms > 0 else session_ms
            member.protocols = protocols
            member.last_seen = now
            member.joining = True
            member.join_answer = None
            group.protocol_type = body["protocolType"]
            if group.state != "PreparingRebalance":
                self._prepare(group, f"{member_id} joined")
            self._maybe_complete(group)
            while member.join_answer is None and not self._closing:
                if group.members.get(member_id) is not member:
                    return fail(UNKNOWN_MEMBER_ID, member_id)
                self._cond.wait(max(0.01, min(1.0, group.deadline - time.monotonic())))
                self._maybe_complete(group)
            answer = member.join_answer
            if answer is None:
                return fail(COORDINATOR_NOT_AVAILABLE, member_id)
            member.last_seen = time.monotonic()
            return answer

    @staticmethod
    def _common(group, protocols, member_id):
        names = {name for name, _ in protocols}
        return all(names & {n for n, _ in m.protocols}
                   for m in group.members.values() if m.member_id != member_id)

    def _prepare(self, group, reason):
        log.info("group %s: preparing a rebalance (%s)", group.group_id, reason)
        group.state = "PreparingRebalance"
        group.deadline = time.monotonic() + max(
            (m.rebalance_ms for m in group.members.values()), default=0) / 1000
        for m in group.members.values():
            m.assignment = None
        self._cond.notify_all()

    def _maybe_complete(self, group):
        """Complete the rebalance when every member rejoined or its deadline passed."""
        if group.state != "PreparingRebalance":
            return
        members = group.members
        if not all(m.joining for m in members.values()):
            if time.monotonic() < group.deadline:
                return
            for m in [m for m in members.values() if not m.joining]:
                log.info("group %s: %s did not rejoin in time: removed", group.group_id,
                         m.member_id)
                del members[m.member_id]
        group.generation += 1
        if not members:
            group.state, group.protocol, group.leader, group.protocol_type = \
                "Empty", None, None, None
            self._cond.notify_all()
            return
        # the protocol most members prefer among those all support (Kafka's selectProtocol)
        common = set.intersection(*({n for n, _ in m.protocols} for m in members.values()))
        votes: dict[str, int] = {}
        for m in members.values():
            first = next(n for n, _ in m.protocols if n in common)
            votes[first] = votes.get(first, 0) + 1
        group.protocol = max(sorted(votes), key=lambda n: votes[n])
        if group.leader not in members:
            group.leader = next(iter(members))
        group.state = "CompletingRebalance"
        everyone = [{"memberId": m.member_id, "groupInstanceId": m.instance_id,
                     "metadata": dict(m.protocols)[group.protocol]} for m in members.values()]
        now = time.monotonic()
        for m in members.values():
            m.joining = False
            m.last_seen = now
            m.join_answer = {
                "errorCode": NONE, "generationId": group.generation,
                "protocolType": group.protocol_type, "protocolName": group.protocol,
                "leader": group.leader, "skipAssignment": False, "memberId": m.member_id,
                "members": everyone if m.member_id == group.leader else []}
        log.info("group %s: generation %d, %d members, leader %s", group.group_id,
                 group.generation, len(members), group.leader)
        self._cond.notify_all()

    def _member(self, group_id, member_id, generation):
        """(group, member, error code) of a request naming them."""
        group = self._groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if member is None:
            return group, None, UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return group, member, ILLEGAL_GENERATION
        member.last_seen = time.monotonic()
        return group, member, NONE

    def sync(self, body):
        def answer(code, assignment=b"", group=None):
            return {"errorCode": code, "assignment": assignment,
                    "protocolType": None if group is None else group.protocol_type,
                    "protocolName": None if group is None else group.protocol}
        with self._cond:
            group, member, code = self._member(body["groupId"], body["memberId"],
                                               body["generationId"])
            if code:
                return answer(code)
            if group.state == "PreparingRebalance":
                return answer(REBALANCE_IN_PROGRESS)
            generation = group.generation
            if group.state == "CompletingRebalance" and member.member_id == group.leader:
                given = {a["memberId"]: bytes(a["assignment"])
                         for a in body.get("assignments") or ()}
                for m in group.members.values():
                    m.assignment = given.get(m.member_id, b"")
                group.state = "Stable"
                log.info("group %s: generation %d is stable", group.group_id, generation)
                self._cond.notify_all()
            while (group.state == "CompletingRebalance" and group.generation == generation
                   and group.members.get(member.member_id) is member and not self._closing):
                self._cond.wait(1.0)
            if group.state != "Stable" or group.generation != generation or \
                    member.assignment is None:
                return answer(REBALANCE_IN_PROGRESS, group=group)
            member.last_seen = time.monotonic()
            return answer(NONE, member.assignment, group)

    def heartbeat(self, body):
        with self._cond:
            group = self._groups.get(body["groupId"])
            if group is not None and group.state == "Empty":
                return {"errorCode": UNKNOWN_MEMBER_ID}
            group, _, code = self._member(body["groupId"], body["memberId"],
                                          body["generationId"])
            if code:
                return {"errorCode": code}
            if group.state == "PreparingRebalance":
                return {"errorCode": REBALANCE_IN_PROGRESS}
            return {"errorCode": NONE}

    def leave(self, body, version):
        if version < 3:
            leaving = [{"memberId": body["memberId"], "groupInstanceId": None}]
        else:
            leaving = body.get("members") or []
        results = []
        with self._cond:
            group = self._groups.get(body["groupId"])
            gone = []
            for m in leaving:
                member = None if group is None else group.members.get(m["memberId"])
                if member is None and group is not None and m.get("groupInstanceId"):
                    member = next((x for x in group.members.values()
                                   if x.instance_id == m["groupInstanceId"]), None)
                code = UNKNOWN_MEMBER_ID if member is None else NONE
                if member is not None:
                    del group.members[member.member_id]
                    gone.append(member.member_id)
                results.append({"memberId": m["memberId"],
                                "groupInstanceId": m.get("groupInstanceId"), "errorCode": code})
            if gone:
                self._prepare(group, f"{', '.join(gone)} left")
                self._maybe_complete(group)
        if version < 3:
            return {"errorCode": results[0]["errorCode"]}
        return {"errorCode": NONE, "members": results}

    def sweep(self):
        """Expire sessions, pending member ids and rebalance deadlines (the server's timer
        calls it a few times a second)."""
        now = time.monotonic()
        with self._cond:
            for group in self._groups.values():
                for mid, until in list(group.pending.items()):
                    if until < now:
                        del group.pending[mid]
                expired = [m for m in group.members.values()
                           if not m.joining and now - m.last_seen > m.session_ms / 1000]
                for m in expired:
                    log.info("group %s: session of %s expired: removed", group.group_id,
                             m.member_id)
                    del group.members[m.member_id]
                if expired:
                    self._prepare(group, "a session expired")
                self._maybe_complete(group)

    def close(self):
        with self._cond:
            self._closing = True
            self._cond.notify_all()

    # ------------------------------------------------------------------ offsets
    def commit(self, body, version):
        group_id = body["groupId"]
        generation = body.get("generationIdOrMemberEpoch", -1)
        member_id = body.get("memberId") or ""
        with self._cond:
            group = self._groups.get(group_id)
            if generation < 0 and (group is None or group.state == "Empty"):
                code = NONE              # a client only storing offsets here (no group)
            elif group is None:
                code = ILLEGAL_GENERATION
            elif group.state == "CompletingRebalance":
                code = REBALANCE_IN_PROGRESS
            else:
                code = self._member(group_id, member_id, generation)[2]
        now_ms = int(time.time() * 1000)
        topics, offsets = [], {}
        for t in body.get("topics") or ():
            parts = []
            for p in t.get("partitions") or ():
                error = code
                metadata = p.get("committedMetadata")
                if not error and not self._known(t["name"], p["partitionIndex"]):
                    error = UNKNOWN_TOPIC_OR_PARTITION
                elif not error and metadata is not None and len(metadata) > MAX_METADATA_CHARS:
                    error = OFFSET_METADATA_TOO_LARGE
                if not error:
                    offsets[(t["name"], p["partitionIndex"])] = CommittedOffset(
                        p["committedOffset"], p.get("committedLeaderEpoch", -1),
                        metadata or "", now_ms)
                parts.append({"partitionIndex": p["partitionIndex"], "errorCode": error})
            topics.append({"name": t["name"], "partitions": parts})
        if offsets:
            try:
                self._offsets.commit(group_id, offsets)
            except OSError as e:
                log.warning("group %s: committed offsets not written to %s: %s", group_id,
                            self._offsets.directory, e)
                for t in topics:
                    for p in t["partitions"]:
                        if p["errorCode"] == NONE:
                            p["errorCode"] = UNKNOWN_SERVER_ERROR
        return {"topics": topics}

    def fetch_offsets(self, body, version):
        if version < 8:
            group = self._fetch_group(body["groupId"], body.get("topics"))
            out = {"topics": group["topics"], "errorCode": NONE}
            return out
        return {"groups": [self._fetch_group(g["groupId"], g.get("topics"))
                           for g in body.get("groups") or ()]}

    def _fetch_group(self, group_id, wanted):
        saved = self._offsets.fetch(group_id)
        if wanted is None:              # every partition the group committed
            names: dict[str, list[int]] = {}
            for topic, partition in sorted(saved):
                names.setdefault(topic, []).append(partition)
            wanted = [{"name": t, "partitionIndexes": ps} for t, ps in names.items()]
        topics = []
        for t in wanted:
            parts = []
            for index in t.get("partitionIndexes") or ():
                found = saved.get((t["name"], index))
                parts.append({"partitionIndex": index,
                              "committedOffset": -1 if found is None else found.offset,
                              "committedLeaderEpoch": -1 if found is None
                              else found.leader_epoch,
                              "metadata": "" if found is None else found.metadata,
                              "errorCode": NONE})
            topics.append({"name": t["name"], "partitions": parts})
        return {"groupId": group_id, "topics": topics, "errorCode": NONE}
