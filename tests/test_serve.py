"""``kafkalog serve`` read by Kafka clients no one here wrote (issue 42): librdkafka
(confluent-kafka), kafka-python, aiokafka and Debian's kcat (scripts/setup.sh installs it where
it runs as root with apt; skipped elsewhere).
Group consumers and assigned consumers, read_committed over Kafka-written transactions with
aborts, offsets_for_times, commits then a restart and a resume from the committed offset;
every record a client receives equals kafkalog's own read of the same partition. The raw
protocol (``kafkalog.protocol``'s client side) checks what no client shows: writes refused on
a connection that keeps serving, OFFSET_OUT_OF_RANGE, a Fetch waiting for a log that grows.

One server for the module; clients are given short timeouts and heartbeats so that the file
takes seconds.
"""
import asyncio
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading

import pytest
from conftest import FIXTURES

from kafkalog import Log, Record
from kafkalog.protocol import decode_response, encode_request
from kafkalog.serve import Server

pytestmark = pytest.mark.requires_fixtures()

ck = pytest.importorskip("confluent_kafka")
TOPICS = ("plain", "txn", "multiseg")
FAST = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 100, "fetch.wait.max.ms": 50,
        "topic.metadata.refresh.interval.ms": 1000}


def expected(topic, isolation="high_watermark", start=0):
    """kafkalog's own read: [(offset, key, value)]."""
    with Log.open(FIXTURES / f"{topic}-0", read_only=True) as log_:
        return [(r.offset, r.key, r.value) for r in log_.records(start, isolation=isolation)]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with Server([FIXTURES / f"{t}-0" for t in TOPICS],
                tmp_path_factory.mktemp("state")) as server:
        yield server


def bootstrap(server):
    host, port = server.address
    return f"{host}:{port}"


def rd_consume(consumer, count):
    """Poll ``consumer`` until ``count`` records or 10 s: [(offset, key, value)]."""
    got = []
    for _ in range(200):
        if len(got) >= count:
            break
        for m in consumer.consume(min(500, count - len(got)), 0.05):
            assert not m.error(), m.error()
            got.append((m.offset(), m.key(), m.value()))
    return got


# ---------------------------------------------------------------------- librdkafka
@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_librdkafka_assigned_consumer_reads_transactions(served, isolation):
    want = expected("txn", "committed" if isolation == "read_committed" else "high_watermark")
    c = ck.Consumer({"bootstrap.servers": bootstrap(served), "group.id": "unused",
                     "enable.auto.commit": False, "isolation.level": isolation, **FAST})
    try:
        c.assign([ck.TopicPartition("txn", 0, 0)])
        assert rd_consume(c, len(want)) == want
        # librdkafka's high watermark of a read_committed consumer is the LSO
        low, high = c.get_watermark_offsets(ck.TopicPartition("txn", 0), timeout=5)
        with Log.open(FIXTURES / "txn-0", read_only=True) as log_:
            assert (low, high) == (log_.log_start_offset, log_.last_stable_offset
                                   if isolation == "read_committed" else log_.high_watermark)
    finally:
        c.close()


def test_librdkafka_group_commits_and_resumes_after_a_restart(tmp_path):
    want = expected("multiseg")
    config = {"group.id": "resume", "enable.auto.commit": False,
              "auto.offset.reset": "earliest", **FAST}
    got = []
    for part in (0, 1):
        with Server([FIXTURES / "multiseg-0"], tmp_path) as server:
            c = ck.Consumer({"bootstrap.servers": bootstrap(server), **config})
            c.subscribe(["multiseg"])
            got += rd_consume(c, 1000)
            c.commit(asynchronous=False)
            committed = c.committed([ck.TopicPartition("multiseg", 0)], timeout=5)
            assert committed[0].offset == got[-1][0] + 1
            c.close()
    assert got == want[:2000]           # the second server went on at the committed offset
    assert not any(n.startswith(".") or n.endswith(".tmp") for n in os.listdir(tmp_path))


def test_librdkafka_group_rebalances_on_join_and_leave(served):
    """Two members of one group over one partition: the second's join rebalances the group
    (one holds the partition, the other nothing); when the holder leaves, the other is given it
    and goes on from the committed offset."""
    want = expected("plain")
    config = {"bootstrap.servers": bootstrap(served), "group.id": "pair",
              "enable.auto.commit": False, "auto.offset.reset": "earliest", **FAST}
    told = {}                       # each member's assignments, as it is told them
    first = ck.Consumer(config)
    first.subscribe(["plain"], on_assign=lambda c, parts: told.setdefault(1, []).append(parts))
    got = rd_consume(first, 500)
    first.commit(asynchronous=False)
    second = ck.Consumer(config)
    second.subscribe(["plain"], on_assign=lambda c, parts: told.setdefault(2, []).append(parts))
    for _ in range(400):            # both poll until both were told the new generation's
        for c in (first, second):
            got += [(m.offset(), m.key(), m.value()) for m in c.consume(100, 0.02)]
        if len(told.get(1, ())) >= 2 and told.get(2):
            break
    try:
        assert len(told[1][-1]) + len(told[2][-1]) == 1
        holder, other = (second, first) if told[2][-1] else (first, second)
        got += rd_consume(holder, 100)  # in generation 2, then committed
        holder.commit(asynchronous=False)
        committed = holder.committed([ck.TopicPartition("plain", 0)], timeout=5)[0].offset
        holder.close()              # LeaveGroup: the other is given the partition
        rest = rd_consume(other, len(want) - committed)
    finally:
        first.close()
        second.close()
    # a move repeats what was read and not committed: every record right, none below the
    # commit missed, and the rest from the committed offset on
    assert set(got) <= set(want) and {r[0] for r in got} >= set(range(committed))
    assert rest == want[committed:]


def test_librdkafka_offsets_for_times(served):
    with Log.open(FIXTURES / "multiseg-0", read_only=True) as log_:
        stamps = [r.timestamp for r in log_.records()]
        queries = [stamps[0] - 1, stamps[len(stamps) // 3], stamps[-1], stamps[-1] + 1]
        want = [log_.offset_for_timestamp(t) for t in queries]
    c = ck.Consumer({"bootstrap.servers": bootstrap(served), "group.id": "times", **FAST})
    try:
        found = [c.offsets_for_times([ck.TopicPartition("multiseg", 0, t)], timeout=5)[0]
                 for t in queries]       # (one partition once per request)
    finally:
        c.close()
    assert [tp.offset for tp in found] == [-1 if w is None else w[0] for w in want]


def test_librdkafka_reads_a_tiered_storage_prefix(tmp_path):
    """A tiered-storage prefix (objects of Aiven's RemoteStorageManager) served as a log dir:
    read_committed records equal the engine's read of the same objects. (Encrypted prefixes
    take ``rsm_keys`` as every reader does; a key costs seconds to load, so not here.)"""
    objects = FIXTURES.parent / "tiered-aiven" / "a-plain" / "objects"
    if not os.path.isdir(objects):
        pytest.skip(f"{objects} not found")
    with Server([objects], tmp_path) as server:
        log_ = server.catalog.get("txn", 0).primary
        want = [(r.offset, r.key, r.value) for r in log_.records(isolation="committed")]
        c = ck.Consumer({"bootstrap.servers": bootstrap(server), "group.id": "tiered",
                         "isolation.level": "read_committed", **FAST})
        c.assign([ck.TopicPartition("txn", 0, 0)])
        got = rd_consume(c, len(want))
        c.close()
    assert len(want) > 100 and got == want


# ---------------------------------------------------------------------- kafka-python
def test_kafka_python_assigned_group_and_times(served):
    kafka = pytest.importorskip("kafka")
    tp = kafka.TopicPartition("txn", 0)
    want = expected("txn", "committed")
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap(served), isolation_level="read_committed",
                            enable_auto_commit=False, consumer_timeout_ms=5000,
                            fetch_max_wait_ms=50)
    try:
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = []
        for m in c:           # (the timeout ends the loop only when records are missing)
            got.append((m.offset, m.key, m.value))
            if len(got) == len(want):
                break
        assert got == want
        with Log.open(FIXTURES / "txn-0", read_only=True) as log_:
            assert c.end_offsets([tp])[tp] == log_.last_stable_offset
            stamp = next(iter(log_.records(100))).timestamp
            assert c.offsets_for_times({tp: stamp})[tp].offset == \
                log_.offset_for_timestamp(stamp)[0]
    finally:
        c.close()
    c = kafka.KafkaConsumer("plain", bootstrap_servers=bootstrap(served), group_id="kp",
                            enable_auto_commit=False, auto_offset_reset="earliest",
                            heartbeat_interval_ms=100, fetch_max_wait_ms=50,
                            consumer_timeout_ms=5000)
    try:
        got = []
        for m in c:
            got.append((m.offset, m.key, m.value))
            if len(got) == 1500:
                break
        c.commit()
        assert c.committed(kafka.TopicPartition("plain", 0)) == 1500
    finally:
        c.close()
    assert got == expected("plain")[:1500]


# ---------------------------------------------------------------------- aiokafka
def test_aiokafka_assigned_group_and_times(served):
    aiokafka = pytest.importorskip("aiokafka")

    async def run():
        want = expected("txn", "committed")
        tp = aiokafka.TopicPartition("txn", 0)
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap(served),
                                      isolation_level="read_committed",
                                      enable_auto_commit=False, auto_offset_reset="earliest",
                                      fetch_max_wait_ms=50)
        await c.start()
        try:
            c.assign([tp])
            got = []
            for _ in range(100):
                batch = await c.getmany(timeout_ms=200, max_records=len(want) - len(got))
                got += [(m.offset, m.key, m.value) for ms in batch.values() for m in ms]
                if len(got) >= len(want):
                    break
            times = await c.offsets_for_times({tp: 0})
        finally:
            await c.stop()
        assert got == want
        assert times[tp].offset == 0
        c = aiokafka.AIOKafkaConsumer("multiseg", bootstrap_servers=bootstrap(served),
                                      group_id="aio", enable_auto_commit=False,
                                      auto_offset_reset="earliest", heartbeat_interval_ms=100,
                                      fetch_max_wait_ms=50)
        await c.start()
        try:
            got = []
            for _ in range(100):
                if len(got) >= 700:
                    break
                batch = await c.getmany(timeout_ms=500, max_records=700 - len(got))
                got += [(m.offset, m.key, m.value) for ms in batch.values() for m in ms]
            await c.commit()
            assert await c.committed(aiokafka.TopicPartition("multiseg", 0)) == 700
        finally:
            await c.stop()
        assert got == expected("multiseg")[:700]
    asyncio.run(run())


# ---------------------------------------------------------------------- kcat
def test_kcat_reads_a_partition(served):
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (Debian/Ubuntu: apt-get install kcat)")
    out = subprocess.run(["kcat", "-C", "-b", bootstrap(served), "-t", "plain", "-p", "0",
                          "-o", "beginning", "-e", "-q", "-f", "%o %k %S\n"],
                         capture_output=True, timeout=30, check=True).stdout
    rows = [line.split(b" ") for line in out.splitlines()]
    assert [(int(o), k, int(n)) for o, k, n in rows] == \
        [(o, k, len(v)) for o, k, v in expected("plain")]


# ---------------------------------------------------------------------- the raw protocol
class Connection:
    """A client of ``kafkalog.protocol``'s own encoder (requests) and decoder (answers)."""

    def __init__(self, server):
        self.sock = socket.create_connection(server.address, timeout=10)
        self.correlation = 0

    def call(self, api_key, version, body):
        self.correlation += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation, "t", body))
        head = self._recv(4)
        frame = self._recv(struct.unpack(">i", head)[0])
        correlation, answer = decode_response(api_key, version, frame)
        assert correlation == self.correlation
        return answer

    def _recv(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "the server closed the connection"
            data += chunk
        return data

    def close(self):
        self.sock.close()


def fetch_body(topic, offset, wait_ms=0, min_bytes=0, isolation=0):
    return {"replicaId": -1, "maxWaitMs": wait_ms, "minBytes": min_bytes,
            "isolationLevel": isolation,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetchOffset": offset, "partitionMaxBytes": 1 << 20}]}]}


def test_writes_are_refused_and_the_connection_keeps_serving(served):
    conn = Connection(served)
    try:
        produce = conn.call(0, 9, {"acks": -1, "timeoutMs": 1000, "topicData": [
            {"name": "plain", "partitionData": [{"index": 0, "records": b""}]}]})
        assert produce["responses"][0]["partitionResponses"][0]["errorCode"] == 29
        created = conn.call(19, 7, {"topics": [{"name": "new", "numPartitions": 1,
                                                "replicationFactor": 1}]})
        assert created["topics"][0]["errorCode"] == 29
        assert conn.call(22, 4, {"transactionalId": "t", "transactionTimeoutMs": 1000}
                         )["errorCode"] == 53
        topics = conn.call(3, 12, {"topics": None})["topics"]
        assert sorted(t["name"] for t in topics) == sorted(TOPICS)
        configs = conn.call(32, 4, {"resources": [
            {"resourceType": 2, "resourceName": "plain", "configurationKeys": None}]})
        assert {"cleanup.policy", "retention.ms"} <= \
            {c["name"] for c in configs["results"][0]["configs"]}
    finally:
        conn.close()


def test_fetch_errors_as_a_broker_gives_them(served):
    conn = Connection(served)
    try:
        with Log.open(FIXTURES / "plain-0", read_only=True) as log_:
            end = log_.log_end_offset
        part = conn.call(1, 12, fetch_body("plain", end + 1))["responses"][0]["partitions"][0]
        assert (part["errorCode"], part["highWatermark"]) == (1, end)
        part = conn.call(1, 12, fetch_body("nope", 0))["responses"][0]["partitions"][0]
        assert part["errorCode"] == 3
        # at the log end of a log that does not grow: empty once the wait is over
        part = conn.call(1, 12, fetch_body("plain", end, 20, 1))["responses"][0]["partitions"][0]
        assert (part["errorCode"], len(part["records"] or b"")) == (0, 0)
        # read_committed: the aborted transactions of the range come along
        part = conn.call(1, 12, fetch_body("txn", 0, isolation=1)
                         )["responses"][0]["partitions"][0]
        with Log.open(FIXTURES / "txn-0", read_only=True) as log_:
            info = log_.read(0, 1 << 20, "committed")
            assert part["lastStableOffset"] == log_.last_stable_offset
        assert bytes(part["records"]) == info.records
        assert [(a["producerId"], a["firstOffset"]) for a in part["abortedTransactions"]] == \
            [(a.producer_id, a.first_offset) for a in info.aborted_transactions]
    finally:
        conn.close()


def test_a_waiting_fetch_answers_when_the_log_grows(tmp_path):
    shutil.copytree(FIXTURES / "plain-0", tmp_path / "plain-0")
    with Server([tmp_path / "plain-0"], tmp_path / "state") as server:
        conn = Connection(server)
        end = server.catalog.get("plain", 0).primary.log_end_offset
        answer = {}
        waiting = threading.Thread(target=lambda: answer.update(
            conn.call(1, 12, fetch_body("plain", end, wait_ms=20_000, min_bytes=1))))
        waiting.start()
        with Log.open(tmp_path / "plain-0") as writer:
            writer.append([Record(key=b"k", value=b"new")])
        waiting.join(30)
        conn.close()
    part = answer["responses"][0]["partitions"][0]
    assert part["errorCode"] == 0 and part["highWatermark"] == end + 1
    assert struct.unpack_from(">q", bytes(part["records"]))[0] == end   # the new batch


def test_segments_deleted_under_the_server_move_the_log_start(tmp_path):
    """A broker's retention deletes segments the server listed: the partition is reopened and
    a fetch below the new log start is OFFSET_OUT_OF_RANGE, as from a broker."""
    shutil.copytree(FIXTURES / "multiseg-0", tmp_path / "multiseg-0")
    with Server([tmp_path / "multiseg-0"], tmp_path / "state") as server:
        with Log.open(tmp_path / "multiseg-0", {"retention.ms": -1}) as writer:
            writer.delete_records(10_000)
            writer.delete_old_segments()
            start = writer.log_start_offset
        conn = Connection(server)
        part = conn.call(1, 12, fetch_body("multiseg", 0))["responses"][0]["partitions"][0]
        assert part["errorCode"] == 1
        answer = conn.call(2, 7, {"replicaId": -1, "isolationLevel": 0, "topics": [
            {"name": "multiseg", "partitions": [{"partitionIndex": 0, "timestamp": -2}]}]})
        first = answer["topics"][0]["partitions"][0]["offset"]
        assert 0 < first <= start
        part = conn.call(1, 12, fetch_body("multiseg", first))["responses"][0]["partitions"][0]
        assert part["errorCode"] == 0 and len(part["records"]) > 0
        conn.close()


def test_cli_serves_until_sigterm(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafkalog", "serve", "--listen", "127.0.0.1:0", "--state-dir",
         str(tmp_path), str(FIXTURES / "plain-0")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "listening on 127.0.0.1:" in line, (line, proc.stderr.read())
        port = int(line.rsplit(":", 1)[1])
        server = type("Address", (), {"address": ("127.0.0.1", port)})
        conn = Connection(server)
        assert conn.call(18, 3, {"clientSoftwareName": "t", "clientSoftwareVersion": "1"}
                         )["errorCode"] == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
