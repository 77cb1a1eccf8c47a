"""Kafka's internal topics (``kafkalog.internal``): every record of the Kafka-written
``__consumer_offsets``, ``__transaction_state`` and ``__cluster_metadata`` fixtures decodes to
what kafka-dump-log's decoders produce (JSON and printed strings); ``dump`` decodes them by
topic (text and ``--json``, KRaft snapshots included); ``offsets``/``groups``/
``transactions``/``metadata`` are checked against replays of the fixtures computed here; the
schema reader on its own (flexible versions, tagged fields, damage as typed errors)."""
import base64
import json
import re
import struct

import pytest

from kafkalog.cli import main
from kafkalog.dump import DumpOptions, dump_path, iter_text
from kafkalog.errors import InternalRecordError, InvalidConfigError, KafkaLogError
from kafkalog.internal import (
    cluster_metadata, committed_offsets, decode_control, decode_record, decoder_for_topic,
    groups, kafka_json, transactions,
)
from kafkalog.internal.decode import hash_set_order
from kafkalog.internal.schema import Message, uuid_text
from kafkalog.internal.tables import GROUP_RECORD_TYPES, MESSAGES, METADATA_RECORD_TYPES

import test_spark
from conftest import SHARED

INTERNAL = SHARED / "fixtures" / "kafka-written-internal"
DIRS = ["__consumer_offsets-7", "__transaction_state-3", "__cluster_metadata-0"]
SNAPSHOT = "00000000000000000092-0000000002.checkpoint"

spark = test_spark.spark          # the one session-scoped SparkSession of the suite

needs_internal = pytest.mark.skipif(
    not INTERNAL.is_dir(), reason=f"Kafka-written internal-topic fixtures not found at "
                                  f"{INTERNAL}: put shared/ beside the checkout")


def _expected(name):
    return json.loads((INTERNAL / f"{name}.expected.json").read_text())


def _all_records(exp):
    return exp["records"] + [r for s in exp["snapshots"].values() for r in s["records"]]


def _b(text):
    return None if text is None else base64.b64decode(text)


_PARTITIONS = re.compile(r"partitions=\[([^\]]*)\]")


def _same_dump(topic, got, want):
    """kafka-dump-log's strings compared; the transaction state's partition list as a set
    (its order is a Scala HashSet's, emulated by the fixture)."""
    if got is None or want is None or not topic.startswith("__transaction_state"):
        return got == want
    g, w = _PARTITIONS.search(got), _PARTITIONS.search(want)
    if g is None or w is None:
        return got == want
    return (set(filter(None, g.group(1).split(","))) == set(filter(None, w.group(1).split(",")))
            and _PARTITIONS.sub("", got) == _PARTITIONS.sub("", want))


# ----------------------------------------------------------------------------------------------
# Every record decodes as Kafka's decoders do

@needs_internal
@pytest.mark.parametrize("name", DIRS)
def test_every_record_decodes_like_kafka_dump_log(name):
    exp = _expected(name)
    decoder = decoder_for_topic(exp["topic"])
    records = _all_records(exp)
    data = [r for r in records if not r["is_control"]]
    assert data
    for r in data:
        out = decode_record(decoder, _b(r["key_b64"]), _b(r["value_b64"]))
        assert out.decoded == r["decoded"], r["offset"]
        assert out.key_text == r["dump"]["key"], r["offset"]
        assert _same_dump(exp["topic"], out.payload_text, r["dump"]["payload"]), r["offset"]


@needs_internal
def test_transaction_partitions_follow_scala_hash_set_order():
    # Not required (the list is compared as a set), but the emulation matches the fixture.
    exp = _expected("__transaction_state-3")
    for r in exp["records"]:
        out = decode_record("transaction-log", _b(r["key_b64"]), _b(r["value_b64"]))
        assert out.payload_text == r["dump"]["payload"]


@needs_internal
@pytest.mark.parametrize("name", DIRS)
def test_control_records_decode_like_kafka_dump_log(name):
    exp = _expected(name)
    for r in _all_records(exp):
        if not r["is_control"]:
            continue
        got = decode_control(_b(r["key_b64"]), _b(r["value_b64"]))
        if r["control_type"] in ("COMMIT", "ABORT"):
            assert got is None
            continue
        data, text = got
        assert text == r["control"]["dump"]
        assert data == r["control"]["data"]


@needs_internal
def test_every_record_type_and_version_of_the_manifest_is_covered():
    manifest = json.loads((INTERNAL / "MANIFEST.json").read_text())
    seen = set()
    for name in DIRS:
        exp = _expected(name)
        for r in _all_records(exp):
            if r["is_control"]:
                seen.add(f"control {r['control_type']}")
                continue
            out = decode_record(decoder_for_topic(exp["topic"]), _b(r["key_b64"]),
                                _b(r["value_b64"])).decoded
            if name.startswith("__cluster"):
                seen.add(f"{out['payload']['type']} v{out['payload']['version']}")
            elif out["payload"] is None:
                seen.add(f"key type {out['key']['type']} tombstone")
            else:
                seen.add(f"key type {out['key']['type']} value v{out['payload']['version']}")
    for name in DIRS:
        assert set(manifest["dirs"][name]["decoded_summary"]) <= seen


# ----------------------------------------------------------------------------------------------
# dump: automatic by topic, kafka-dump-log's flags, KRaft snapshots

def _dump_records(doc):
    segments = doc["segments"] + doc.get("kraft_snapshots", [])
    return [(s["log_file"], r) for s in segments for b in s["batches"] for r in b["records"]]


@needs_internal
@pytest.mark.parametrize("name", DIRS)
def test_dump_json_adds_decoded_to_each_data_record(name):
    exp = _expected(name)
    doc = dump_path(str(INTERNAL / name))
    want = {(r["offset"], False): r for r in exp["records"]}
    want.update({(r["offset"], True): r for s in exp["snapshots"].values()
                 for r in s["records"]})
    got = _dump_records(doc)
    assert len(got) == len(want)
    for log_file, r in got:
        w = want[(r["offset"], log_file.endswith(".checkpoint"))]
        if w["is_control"]:
            assert "decoded" not in r
            if "data" in w["control"]:
                assert r["control"]["data"] == w["control"]["data"]
        else:
            assert r["decoded"] == w["decoded"]
    assert not doc["problems"]
    if name.startswith("__cluster"):
        assert [s["log_file"] for s in doc["kraft_snapshots"]] == [SNAPSHOT]


@needs_internal
@pytest.mark.parametrize("name", DIRS)
def test_dump_text_prints_kafka_dump_log_strings(name):
    exp = _expected(name)
    text = "".join(iter_text(str(INTERNAL / name)))
    lines = {}
    current = None
    for line in text.splitlines():
        if line.startswith("Dumping "):
            current = line.endswith(".checkpoint")
        m = re.match(r"\| offset: (\d+) ", line)
        if m:
            lines[(int(m.group(1)), current)] = line
    records = [(r, False) for r in exp["records"]] + \
        [(r, True) for s in exp["snapshots"].values() for r in s["records"]]
    for r, in_snapshot in records:
        line = lines[(r["offset"], in_snapshot)]
        if r["is_control"]:
            assert line.endswith(r["control"]["dump"]), line
            continue
        key, payload = r["dump"]["key"], r["dump"]["payload"]
        want = (f" key: {key}" if key is not None else "") + f" payload: {payload}"
        if exp["topic"] == "__transaction_state":
            got = line[line.index(" key: "):]
            assert _same_dump(exp["topic"], got, want), line
        else:
            assert line.endswith(want), line


@needs_internal
def test_dump_decoder_flags(capfd):
    d = str(INTERNAL / "__transaction_state-3")
    assert main(["dump", d]) == 0
    auto = capfd.readouterr().out
    assert main(["dump", "--transaction-log-decoder", d]) == 0
    assert capfd.readouterr().out == auto
    assert "transaction_metadata::transactionalId=orders-tx-1" in auto
    assert main(["dump", "--no-decode", d]) == 0
    raw = capfd.readouterr().out
    assert "transaction_metadata::" not in raw and "orders-tx-1" in raw
    # the wrong decoder: the records are still listed (raw), each one reported, exit 1
    assert main(["dump", "--offsets-decoder", d]) == 1
    out, err = capfd.readouterr()
    assert "cannot be decoded with the offsets decoder" in err
    assert "orders-tx-1" in out
    with pytest.raises(InvalidConfigError):
        DumpOptions(decoder="nope")
    # a KRaft snapshot on its own, text and JSON
    snap = str(INTERNAL / "__cluster_metadata-0" / SNAPSHOT)
    assert main(["dump", snap]) == 0
    out = capfd.readouterr().out
    assert ' SnapshotHeader {"version":0,"lastContainedLogTimestamp":' in out
    assert ' SnapshotFooter {"version":0}' in out
    assert main(["dump", "--json", snap]) == 0
    doc = json.loads(capfd.readouterr().out)
    assert doc["file"] == SNAPSHOT
    assert all("decoded" in r for b in doc["segment"]["batches"] if not b["is_control"]
               for r in b["records"])
    assert main(["dump", "--json", "--cluster-metadata-decoder", snap]) == 0
    assert json.loads(capfd.readouterr().out) == doc


# ----------------------------------------------------------------------------------------------
# Answers, checked against replays of the fixtures computed here

def _batch_of(exp):
    """record offset -> its batch (from the fixture's batch list), for the log's records."""
    out = {}
    for b in exp["batches"]:
        for o in range(b["base_offset"], b["last_offset"] + 1):
            out[o] = b
    return out


def _replay_offsets(exp):
    """The group coordinator's load of offsets, from the fixture's decoded records."""
    batches = _batch_of(exp)
    committed, pending = {}, {}
    for r in exp["records"]:
        b = batches[r["offset"]]
        if r["is_control"]:
            for off, tp, value in pending.pop(b["producer_id"], []):
                if r["control_type"] != "COMMIT":
                    continue
                if value is None:
                    committed.pop(tp, None)
                elif tp not in committed or committed[tp][0] < off:
                    committed[tp] = (off, value)
            continue
        key, payload = r["decoded"]["key"], r["decoded"]["payload"]
        if key["type"] not in ("0", "1"):
            continue
        tp = (key["data"]["group"], key["data"]["topic"], key["data"]["partition"])
        value = payload["data"] if payload else None
        if b["is_transactional"]:
            pending.setdefault(b["producer_id"], []).append((r["offset"], tp, value))
        elif value is None:
            committed.pop(tp, None)
        else:
            committed[tp] = (r["offset"], value)
    return {tp: v for tp, (_, v) in committed.items()}


@needs_internal
def test_offsets_are_the_group_coordinators_load():
    exp = _expected("__consumer_offsets-7")
    want = _replay_offsets(exp)
    got = committed_offsets(str(INTERNAL / "__consumer_offsets-7"))
    assert {(r["group"], r["topic"], r["partition"]): r["offset"] for r in got} == \
        {tp: v["offset"] for tp, v in want.items()}
    for r in got:
        v = want[(r["group"], r["topic"], r["partition"])]
        assert r["metadata"] == v["metadata"]
        assert r["commit_timestamp"] == v["commitTimestamp"]
        le = v.get("leaderEpoch", -1)
        assert r["leader_epoch"] == (le if le >= 0 else None)
    # the fixture's aborted transactional commits (offset 999999) are not loaded
    assert all(r["offset"] != 999999 for r in got)
    assert any(b["is_transactional"] and b["is_control"] for b in exp["batches"])
    assert committed_offsets(str(INTERNAL)) == got      # a log dir


@needs_internal
def test_groups():
    exp = _expected("__consumer_offsets-7")
    latest = {}
    for r in exp["records"]:
        if r["is_control"] or r["decoded"]["key"]["type"] != "2":
            continue
        group = r["decoded"]["key"]["data"]["group"]
        payload = r["decoded"]["payload"]
        if payload is None:
            latest.pop(group, None)
        else:
            latest[group] = payload["data"]
    rows = {g["group"]: g for g in groups(str(INTERNAL / "__consumer_offsets-7"))}
    classic = {g: v for g, v in rows.items() if v["type"] == "classic"}
    assert set(classic) == set(latest)
    for g, v in latest.items():
        row = classic[g]
        assert row["generation"] == v["generation"] and row["protocol"] == v["protocol"]
        assert [m["member_id"] for m in row["members"]] == [m["memberId"] for m in v["members"]]
        assert row["state"] == ("Stable" if v["members"] else "Empty")
        for m, want in zip(row["members"], v["members"]):
            assert m["assignment"] == [
                {"topic": t["topic"], "partitions": sorted(t["partitions"])}
                for t in want["assignment"]["assignedPartitions"]]
    modern = [v for v in rows.values() if v["type"] == "consumer"]
    assert modern and all(m["epoch"] is not None for m in modern)
    names = {t["topicName"] for r in exp["records"] if not r["is_control"]
             and r["decoded"]["key"]["type"] == "4" and r["decoded"]["payload"]
             for t in r["decoded"]["payload"]["data"]["topics"]}
    assigned = {p["topic"] for g in modern for m in g["members"] for p in m["assignment"]}
    assert assigned and assigned <= names        # topic ids named


@needs_internal
def test_transactions():
    exp = _expected("__transaction_state-3")
    latest = {}
    for r in exp["records"]:
        tid = r["decoded"]["key"]["data"]["transactionalId"]
        if r["decoded"]["payload"] is None:
            latest.pop(tid, None)
        else:
            latest[tid] = r["decoded"]["payload"]["data"]
    rows = transactions(str(INTERNAL / "__transaction_state-3"))
    assert [r["transactional_id"] for r in rows] == sorted(latest)
    states = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort",
              4: "CompleteCommit", 5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}
    for r in rows:
        v = latest[r["transactional_id"]]
        assert (r["producer_id"], r["producer_epoch"], r["timeout_ms"], r["last_update_ms"]) \
            == (v["producerId"], v["producerEpoch"], v["transactionTimeoutMs"],
                v["transactionLastUpdateTimestampMs"])
        assert r["state"] == states[v["transactionStatus"]]
        assert {(p["topic"], p["partition"]) for p in r["partitions"]} == {
            (s["topic"], p) for s in v["transactionPartitions"] or () for p in s["partitionIds"]}
    # an open transaction is hanging once its timeout has passed
    rows = transactions(str(INTERNAL), now_ms=2**62)
    assert all(r["hanging"] == r["open"] for r in rows)


def _replay_metadata(exp):
    """The metadata image from the fixture's snapshot plus the log's records after it."""
    topics, brokers, features, configs, pids = {}, {}, {}, {}, None
    snap = exp["snapshots"][SNAPSHOT]["records"]
    end = int(SNAPSHOT.split("-")[0])
    records = [r for r in snap if not r["is_control"]] + \
        [r for r in exp["records"] if r["offset"] >= end and not r["is_control"]]
    txn = None
    for r in records:
        p = r["decoded"]["payload"]
        kind, d = p["type"], p["data"]
        if kind == "BEGIN_TRANSACTION_RECORD":
            txn = []
            continue
        if kind == "END_TRANSACTION_RECORD":
            todo, txn = txn, None
        elif kind == "ABORT_TRANSACTION_RECORD":
            txn = None
            continue
        elif txn is not None:
            txn.append((kind, d))
            continue
        else:
            todo = [(kind, d)]
        for kind, d in todo:
            if kind == "TOPIC_RECORD":
                topics[d["topicId"]] = (d["name"], {})
            elif kind == "REMOVE_TOPIC_RECORD":
                topics.pop(d["topicId"], None)
            elif kind == "PARTITION_RECORD":
                topics[d["topicId"]][1][d["partitionId"]] = {
                    "replicas": d["replicas"], "isr": d["isr"], "leader": d["leader"],
                    "leader_epoch": d["leaderEpoch"]}
            elif kind == "PARTITION_CHANGE_RECORD":
                part = topics[d["topicId"]][1][d["partitionId"]]
                for f in ("replicas", "isr"):
                    if d.get(f) is not None:
                        part[f] = d[f]
                if d.get("leader", -2) != -2:
                    part["leader"] = d["leader"]
                    part["leader_epoch"] += 1
            elif kind == "REGISTER_BROKER_RECORD":
                brokers[d["brokerId"]] = d["fenced"]
            elif kind in ("FENCE_BROKER_RECORD", "UNFENCE_BROKER_RECORD"):
                brokers[d["id"]] = kind == "FENCE_BROKER_RECORD"
            elif kind == "BROKER_REGISTRATION_CHANGE_RECORD" and d.get("fenced"):
                brokers[d["brokerId"]] = d["fenced"] > 0
            elif kind == "FEATURE_LEVEL_RECORD":
                features[d["name"]] = d["featureLevel"]
            elif kind == "CONFIG_RECORD":
                configs.setdefault((d["resourceName"], d["name"]), d["value"])
                configs[(d["resourceName"], d["name"])] = d["value"]
            elif kind == "PRODUCER_IDS_RECORD":
                pids = d["nextProducerId"]
    return topics, brokers, features, {k: v for k, v in configs.items() if v is not None}, pids


@needs_internal
def test_metadata_is_the_snapshot_plus_the_log_after_it(capfd):
    exp = _expected("__cluster_metadata-0")
    topics, brokers, features, configs, pids = _replay_metadata(exp)
    image = cluster_metadata(str(INTERNAL / "__cluster_metadata-0"))
    assert image["snapshot"] == {"file": SNAPSHOT, "end_offset": 92, "epoch": 2}
    got = {t["topic_id"]: (t["name"], {p["partition"]: {k: p[k] for k in (
        "replicas", "isr", "leader", "leader_epoch")} for p in t["partitions"]})
        for t in image["topics"]}
    assert got == topics
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", t["topic_id"]) for t in image["topics"])
    assert {b["id"]: b["fenced"] for b in image["brokers"]} == brokers
    assert image["features"] == features
    assert {(c["resource_name"], k): v for c in image["configs"]
            for k, v in c["configs"].items()} == configs
    assert image["producer_ids"]["next_producer_id"] == pids
    assert image["log_end_offset"] == 150
    # the CLI: JSON is the same object; the table names every topic
    assert main(["metadata", "--json", str(INTERNAL)]) == 0
    assert json.loads(capfd.readouterr().out) == json.loads(json.dumps(image))
    assert main(["metadata", str(INTERNAL / "__cluster_metadata-0")]) == 0
    out = capfd.readouterr().out
    assert all(t["name"] in out for t in image["topics"])


@needs_internal
@pytest.mark.parametrize("command", ["offsets", "groups", "transactions"])
def test_answer_commands(capfd, command):
    assert main([command, "--json", str(INTERNAL)]) == 0
    rows = json.loads(capfd.readouterr().out)
    assert isinstance(rows, list) and rows
    if command == "offsets":
        assert {"group", "topic", "partition", "offset"} <= set(rows[0])
    assert main([command, str(INTERNAL)]) == 0
    out = capfd.readouterr().out
    key = {"offsets": "group", "groups": "group", "transactions": "transactional_id"}[command]
    assert all(r[key] in out for r in rows)


def test_answers_on_paths_without_the_topic(tmp_path, capfd):
    with pytest.raises(KafkaLogError):
        committed_offsets(tmp_path)
    with pytest.raises(KafkaLogError):
        cluster_metadata(tmp_path)
    assert main(["transactions", str(tmp_path)]) == 1
    assert "no __transaction_state partition directory" in capfd.readouterr().err


# ----------------------------------------------------------------------------------------------
# The schema reader on its own

def _uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact(s):
    return _uvarint(len(s) + 1) + s


MSG = Message("Example", "0-1", "1+", """
    id int32
    name string
    extra string 1+ tag0 =null
    items []Item
      a int16
      b uuid 1+
    maybe Item? 1+
""")


def test_schema_reader_versions_and_tags():
    # v0: not flexible; "b" and the nullable struct are not in v0
    v0 = struct.pack(">ih", 7, 2) + b"hi" + struct.pack(">ih", 1, 5)
    assert MSG.read(v0, 0) == {"id": 7, "name": "hi", "items": [{"a": 5}]}
    uid = bytes(range(16))
    item = struct.pack(">h", 5) + uid + b"\x00"
    # v1: compact, tagged fields (tag 0 known, tag 9 unknown and skipped), nullable struct
    v1 = (struct.pack(">i", 7) + _compact(b"hi") + _uvarint(2) + item + b"\xff"
          + _uvarint(2) + _uvarint(0) + _uvarint(4) + _compact(b"xyz")
          + _uvarint(9) + _uvarint(2) + b"??")
    assert MSG.read(v1, 1) == {"id": 7, "name": "hi", "extra": "xyz",
                               "items": [{"a": 5, "b": uuid_text(uid)}], "maybe": None}
    # a tagged field at its default is left out, as Kafka's JSON does
    v1 = struct.pack(">i", 7) + _compact(b"hi") + _uvarint(1) + b"\x01" + item + b"\x00"
    assert MSG.read(v1, 1) == {"id": 7, "name": "hi", "items": [],
                               "maybe": {"a": 5, "b": uuid_text(uid)}}
    assert uuid_text(bytes(16)) == "AAAAAAAAAAAAAAAAAAAAAA"


@pytest.mark.parametrize("data,version", [
    (b"", 0), (struct.pack(">ih", 7, 9) + b"hi", 0),          # truncated
    (struct.pack(">ih", 7, 2) + b"hi" + struct.pack(">i", 0) + b"x", 0),   # trailing bytes
    (struct.pack(">ih", 7, 2) + b"hi" + struct.pack(">i", 0), 5),          # no such version
    (struct.pack(">i", 7) + _compact(b"\xff\xfe"), 1),         # not UTF-8
])
def test_schema_reader_damage_is_typed(data, version):
    with pytest.raises(InternalRecordError):
        MSG.read(data, version)


def test_decoders_raise_typed_errors():
    with pytest.raises(InternalRecordError):
        decode_record("offsets", None, b"\x00\x01")
    with pytest.raises(InternalRecordError):
        decode_record("offsets", struct.pack(">h", 99), None)      # unknown record type
    with pytest.raises(InternalRecordError):
        decode_record("cluster-metadata", None, b"\x01\x7f\x00")  # unknown metadata type
    with pytest.raises(InternalRecordError):
        decode_record("cluster-metadata", None, b"\x02\x02\x00")  # unknown frame version
    with pytest.raises(InternalRecordError):
        decode_record("transaction-log", struct.pack(">h", 0) + b"\x00", None)
    with pytest.raises(InternalRecordError):
        decode_record("nope", b"", b"")


def test_tables_name_every_type():
    for key, value in GROUP_RECORD_TYPES.values():
        assert key in MESSAGES and value in MESSAGES
    assert all(name in MESSAGES for name in METADATA_RECORD_TYPES.values())
    # tombstones of every group record type decode
    for record_type, (key_name, _) in GROUP_RECORD_TYPES.items():
        fields = MESSAGES[key_name].struct.fields
        key = struct.pack(">h", record_type) + b"".join(
            struct.pack(">h", 1) + b"g" if f.type == "string" else struct.pack(">i", 3)
            for f in fields)
        out = decode_record("offsets", key, None)
        assert out.payload_text == "<DELETE>" and out.decoded["payload"] is None


def test_kafka_json_prints_like_jackson():
    assert kafka_json({"a": [1, None, True], "b": "é\u0001\\u0001"}) == \
        '{"a":[1,null,true],"b":"é\\u0001\\\\u0001"}'
    assert kafka_json(1048576.0) == "1048576.0"
    assert kafka_json(1e7) == "1.0E7"
    assert kafka_json(1.5e-5) == "1.5E-5"
    assert kafka_json(0.001) == "0.001"
    assert kafka_json(-0.0) == "-0.0"


def test_hash_set_order_is_scala_mutable_hash_set():
    parts = [("payments", 5), ("orders", 2), ("__consumer_offsets", 3), ("__consumer_offsets", 0)]
    assert hash_set_order(parts) == [("__consumer_offsets", 0), ("payments", 5), ("orders", 2),
                                     ("__consumer_offsets", 3)]
    many = [("t", p) for p in range(40)]
    assert sorted(hash_set_order(many)) == many


# ----------------------------------------------------------------------------------------------
# The coordinator's replay on a log written here

def _commit_key(group, topic, partition):
    s = lambda t: struct.pack(">h", len(t)) + t.encode()          # noqa: E731
    return struct.pack(">h", 1) + s(group) + s(topic) + struct.pack(">i", partition)


def _commit_value(offset, metadata=""):
    # OffsetCommitValue v3: offset, leaderEpoch, metadata, commitTimestamp
    return struct.pack(">hqih", 3, offset, 5, len(metadata)) + metadata.encode() + \
        struct.pack(">q", 1731000000000)


def test_transactional_commits_replay_as_the_coordinator_does(tmp_path):
    from kafkalog import Log, Record, build_batch, build_control_batch
    d = tmp_path / "__consumer_offsets-0"
    with Log.open(d) as log:
        def put(records, **kw):
            log.append_as_follower(build_batch(records, base_offset=log.log_end_offset, **kw))

        def marker(kind, pid):
            log.append_as_follower(build_control_batch(kind, producer_id=pid, producer_epoch=0,
                                                       base_offset=log.log_end_offset))
        k = _commit_key
        put([Record(key=k("g", "t", 0), value=_commit_value(10))])
        # committed transaction: applies (over the older plain commit)
        put([Record(key=k("g", "t", 0), value=_commit_value(20)),
             Record(key=k("g", "t", 1), value=_commit_value(21))],
            producer_id=7, producer_epoch=0, transactional=True)
        # a plain commit written before the marker is newer: it stays
        put([Record(key=k("g", "t", 1), value=_commit_value(22))])
        marker("commit", 7)
        # aborted: never applies; open at the end: not applied
        put([Record(key=k("g", "t", 2), value=_commit_value(30))],
            producer_id=8, producer_epoch=0, transactional=True)
        marker("abort", 8)
        put([Record(key=k("g", "t", 3), value=_commit_value(40))],
            producer_id=9, producer_epoch=0, transactional=True)
        # a tombstone removes
        put([Record(key=k("h", "t", 0), value=_commit_value(50)),
             Record(key=k("h", "t", 0), value=None)])
    got = {(r["group"], r["topic"], r["partition"]): (r["offset"], r["transactional"])
           for r in committed_offsets(d)}
    assert got == {("g", "t", 0): (20, True), ("g", "t", 1): (22, False)}


@needs_internal
def test_the_answers_as_spark_dataframes(spark):
    from kafkalog.spark import internal as spark_internal
    d = str(INTERNAL)
    key = ("group", "topic", "partition", "offset")
    assert {tuple(r[k] for k in key) for r in spark_internal.offsets_df(spark, d).collect()} \
        == {tuple(r[k] for k in key) for r in committed_offsets(d)}
    assert sorted(r["transactional_id"] for r in
                  spark_internal.transactions_df(spark, d).collect()) == \
        [r["transactional_id"] for r in transactions(d)]
    assert {r["group"] for r in spark_internal.group_members_df(spark, d).collect()} == \
        {g["group"] for g in groups(d)}
    image = cluster_metadata(d)
    assert spark_internal.metadata_partitions_df(spark, d).count() == \
        sum(len(t["partitions"]) for t in image["topics"])


# ----------------------------------------------------------------------------------------------
# Records the fixtures lack, built from a Kafka-written one: the tagged classic member metadata
# (its sessionTimeoutMs) and share-group records, whose layout is unstable upstream

def _compact_str(text):
    return _uvarint(len(text) + 1) + text.encode()


def _kafka_member_value():
    """A Kafka-written ConsumerGroupMemberMetadataValue v0 of the fixture, and its JSON."""
    for r in _expected("__consumer_offsets-7")["records"]:
        if not r["is_control"] and r["decoded"]["key"]["type"] == "5" and r["value_b64"]:
            return _b(r["key_b64"]), _b(r["value_b64"]), r["decoded"]["payload"]["data"]
    raise AssertionError("the fixture has no consumer group member record")


def _with_classic_metadata(value, session_timeout_ms, protocol, metadata):
    # the value ends with its (empty) tagged fields: replace them by tag 0, a nullable struct
    # (an unsigned varint 1 before it when present): sessionTimeoutMs, supportedProtocols
    assert value[-1] == 0
    body = (b"\x01" + struct.pack(">i", session_timeout_ms) + _uvarint(2)
            + _compact_str(protocol) + _uvarint(len(metadata) + 1) + metadata + b"\x00"
            + b"\x00")
    return value[:-1] + _uvarint(1) + _uvarint(0) + _uvarint(len(body)) + body


@needs_internal
def test_classic_member_metadata_reads_its_session_timeout():
    key, value, data = _kafka_member_value()
    out = decode_record("offsets", key, _with_classic_metadata(value, 45000, "range", b"\x01"))
    assert out.decoded["payload"]["data"] == {**data, "classicMemberMetadata": {
        "sessionTimeoutMs": 45000,
        "supportedProtocols": [{"name": "range", "metadata": "AQ=="}]}}
    assert out.payload_text.endswith(
        ',"classicMemberMetadata":{"sessionTimeoutMs":45000,'
        '"supportedProtocols":[{"name":"range","metadata":"AQ=="}]}}}')


def _share_state_key():
    return struct.pack(">h", 15) + struct.pack(">h", 1) + b"g"


def _share_state_value(layouts):
    """ShareGroupStatePartitionMetadataValue v0 with its arrays of topics: each a list of
    (uuid, name, partitions or None for the TopicInfo struct)."""
    out = struct.pack(">h", 0)
    for topics in layouts:
        out += _uvarint(len(topics) + 1)
        for uid, name, partitions in topics:
            out += uid + _compact_str(name)
            if partitions is not None:
                out += _uvarint(len(partitions) + 1) + b"".join(
                    struct.pack(">i", p) for p in partitions)
            out += b"\x00"
    return out + b"\x00"


UID = bytes(range(16))


def test_unstable_share_group_records_in_another_layout_are_raw_with_a_warning(caplog):
    # as the checked Kafka writes it: initializedTopics, deletingTopics
    value = _share_state_value([[(UID, "t", [0, 1])], [(UID, "old", None)]])
    out = decode_record("offsets", _share_state_key(), value)
    assert out.decoded["payload"]["data"] == {
        "initializedTopics": [{"topicId": uuid_text(UID), "topicName": "t",
                               "partitions": [0, 1]}],
        "deletingTopics": [{"topicId": uuid_text(UID), "topicName": "old"}]}
    assert not caplog.records
    # a later Kafka added initializingTopics first, without a version bump
    later = _share_state_value([[(UID, "t", [0])], [], []])
    with caplog.at_level("WARNING", logger="kafkalog.internal.decode"):
        out = decode_record("offsets", _share_state_key(), later)
    assert out.decoded["payload"] == {"version": "0", "unstable": True,
                                      "raw": base64.b64encode(later).decode()}
    assert out.decoded["key"]["data"] == {"groupId": "g"}
    assert '"raw":' in out.payload_text
    assert any("ShareGroupStatePartitionMetadataValue v0 is unstable" in r.getMessage()
               for r in caplog.records if r.levelname == "WARNING")
    # a stable record type whose bytes do not read stays an error
    key, value, _ = _kafka_member_value()
    with pytest.raises(InternalRecordError):
        decode_record("offsets", key, value[:-1] + b"\x05")


@needs_internal
def test_a_kafka_written_partition_with_those_records_dumps_and_replays(tmp_path, caplog):
    import shutil
    from kafkalog import Log, Record, build_batch
    d = tmp_path / "__consumer_offsets-7"
    shutil.copytree(INTERNAL / "__consumer_offsets-7", d)
    key, value, data = _kafka_member_value()
    later = _share_state_value([[(UID, "t", [0])], [], []])
    with Log.open(d) as log:
        end = log.log_end_offset
        log.append_as_follower(build_batch(
            [Record(key=key, value=_with_classic_metadata(value, 30000, "range", b"")),
             Record(key=_share_state_key(), value=later)], base_offset=end))
    with caplog.at_level("WARNING", logger="kafkalog.internal.decode"):
        doc = dump_path(str(d))
        rows = groups(str(d))
    records = {r["offset"]: r for _, r in _dump_records(doc)}
    # the fixture's own records still decode as kafka-dump-log's decoders did
    for r in _expected("__consumer_offsets-7")["records"]:
        if not r["is_control"]:
            assert records[r["offset"]]["decoded"] == r["decoded"], r["offset"]
    member = records[end]["decoded"]["payload"]["data"]
    assert member["classicMemberMetadata"]["sessionTimeoutMs"] == 30000
    assert records[end + 1]["decoded"]["payload"]["unstable"] is True
    assert not doc["problems"]
    assert any("unstable" in r.getMessage() for r in caplog.records)
    assert "new-protocol-group" in {g["group"] for g in rows}
