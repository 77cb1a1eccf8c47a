"""The one-node group coordinator (``kafkalog.serve.groups``) without a network: rebalances on
join, leave and an expired session, MEMBER_ID_REQUIRED (KIP-394), the generation and member
checks of SyncGroup, Heartbeat and OffsetCommit, and committed offsets surviving a restart of
the store. The clock is the test's (``time`` of the module replaced), so no test sleeps."""
import threading

import pytest

from kafkalog.serve import groups
from kafkalog.serve.groups import GroupCoordinator
from kafkalog.serve.offsets import OffsetStore


class Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now

    def time(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(groups, "time", fake)
    return fake


@pytest.fixture
def coordinator(tmp_path, clock):
    c = GroupCoordinator(OffsetStore(tmp_path), lambda topic, partition: topic == "t")
    yield c
    c.close()


def join_body(member="", metadata=b"m"):
    return {"groupId": "g", "sessionTimeoutMs": 6000, "rebalanceTimeoutMs": 6000,
            "memberId": member, "groupInstanceId": None, "protocolType": "consumer",
            "protocols": [{"name": "range", "metadata": metadata}]}


def join(c, member="", metadata=b"m", version=3):
    return c.join(join_body(member, metadata), version, "client")


def joining(c, member="", metadata=b"m"):
    """join in a thread (it waits for the others): the thread and the answer, once there."""
    answer = {}
    t = threading.Thread(target=lambda: answer.update(join(c, member, metadata)))
    t.start()
    return t, answer


def sync(c, member, generation, assignments=()):
    return c.sync({"groupId": "g", "generationId": generation, "memberId": member,
                   "assignments": [{"memberId": m, "assignment": a} for m, a in assignments]})


def beat(c, member, generation):
    return c.heartbeat({"groupId": "g", "generationId": generation, "memberId": member})[
        "errorCode"]


def test_join_sync_rebalance_on_join_leave_and_expiry(coordinator, clock):
    c = coordinator
    first = join(c, metadata=b"one")
    a = first["memberId"]
    assert (first["errorCode"], first["generationId"], first["leader"]) == (0, 1, a)
    assert sync(c, a, 1, [(a, b"all")])["assignment"] == b"all"
    assert beat(c, a, 1) == 0
    # a second member joins: the first is told to rejoin; both get generation 2
    t, second = joining(c, metadata=b"two")
    while beat(c, a, 1) != groups.REBALANCE_IN_PROGRESS:
        pass
    again = join(c, a, b"one")
    t.join(10)
    b = second["memberId"]
    assert (again["generationId"], second["generationId"]) == (2, 2)
    assert again["leader"] == a and second["members"] == []
    assert {(m["memberId"], m["metadata"]) for m in again["members"]} == \
        {(a, b"one"), (b, b"two")}
    assert sync(c, a, 1)["errorCode"] == groups.ILLEGAL_GENERATION
    answers = {}
    follower = threading.Thread(target=lambda: answers.update(sync(c, b, 2)))
    follower.start()                 # waits for the leader's assignment
    assert sync(c, a, 2, [(a, b"p0"), (b, b"p1")])["assignment"] == b"p0"
    follower.join(10)
    assert answers["assignment"] == b"p1"
    # b's session expires (a keeps heartbeating): a rebalance with a alone
    clock.now += 5
    assert beat(c, a, 2) == 0
    clock.now += 2
    c.sweep()
    assert beat(c, a, 2) == groups.REBALANCE_IN_PROGRESS
    assert beat(c, b, 2) == groups.UNKNOWN_MEMBER_ID
    alone = join(c, a, b"one")
    assert (alone["generationId"], len(alone["members"])) == (3, 1)
    sync(c, a, 3, [(a, b"all")])
    # a leaves: the group is empty
    assert c.leave({"groupId": "g", "members": [{"memberId": a}]}, 3)["members"][0][
        "errorCode"] == 0
    assert beat(c, a, 3) == groups.UNKNOWN_MEMBER_ID


def test_member_id_required_then_accepted(coordinator):
    first = join(coordinator, version=4)
    assert first["errorCode"] == groups.MEMBER_ID_REQUIRED and first["memberId"]
    assert join(coordinator, "made-up", version=4)["errorCode"] == groups.UNKNOWN_MEMBER_ID
    again = join(coordinator, first["memberId"], version=4)
    assert (again["errorCode"], again["memberId"]) == (0, first["memberId"])


def test_commits_checked_and_kept(coordinator, tmp_path):
    c = coordinator

    def commit(generation, member, topic="t", offset=42):
        answer = c.commit({"groupId": "g", "generationIdOrMemberEpoch": generation,
                           "memberId": member, "topics": [{"name": topic, "partitions": [
                               {"partitionIndex": 0, "committedOffset": offset,
                                "committedLeaderEpoch": 3, "committedMetadata": "x"}]}]}, 8)
        return answer["topics"][0]["partitions"][0]["errorCode"]
    assert commit(-1, "") == 0                   # no group: offsets stored only
    a = join(c)["memberId"]
    assert commit(1, a) == groups.REBALANCE_IN_PROGRESS       # before its SyncGroup
    sync(c, a, 1, [(a, b"")])
    assert commit(7, a) == groups.ILLEGAL_GENERATION
    assert commit(1, "other") == groups.UNKNOWN_MEMBER_ID
    assert commit(1, a, topic="unknown") == groups.UNKNOWN_TOPIC_OR_PARTITION
    assert commit(1, a, offset=99) == 0
    reopened = GroupCoordinator(OffsetStore(tmp_path), lambda topic, partition: True)
    fetched = reopened.fetch_offsets({"groups": [{"groupId": "g", "topics": None}]}, 8)
    assert fetched["groups"][0]["topics"] == [{"name": "t", "partitions": [
        {"partitionIndex": 0, "committedOffset": 99, "committedLeaderEpoch": 3,
         "metadata": "x", "errorCode": 0}]}]
    old = reopened.fetch_offsets({"groupId": "g", "topics": [
        {"name": "t", "partitionIndexes": [0, 1]}]}, 5)
    assert [p["committedOffset"] for p in old["topics"][0]["partitions"]] == [99, -1]
