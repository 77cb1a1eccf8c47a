"""``kafkalog dump``: the JSON document equals Kafka's reading; the text listing; streaming in
bounded memory; damage reported where it is with the rest still dumped (exit status 1);
--max-bytes, the offset range, --hex/--base64; log dirs and single files."""
import base64
import json
import os
import re
import struct
import subprocess
import sys
import tracemalloc

import pytest
from crc32c import crc32c

from kafkalog import Record, build_batch, build_control_batch, segment_walker
from kafkalog._kernels import walk_batches
from kafkalog._layout import V2_CRC_START
from kafkalog.cli import main
from kafkalog.dump import DumpOptions, DumpReport, dump_partition, iter_json, iter_text, listing
from kafkalog.errors import KafkaLogError
from kafkalog.files import file_name

from conftest import FIXTURES, SHARED, expected, fixture_names
from test_records import diff

INTERNAL = SHARED / "fixtures" / "kafka-written-internal"
LOG0 = file_name(0, ".log")


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "kafkalog", *args], capture_output=True,
                          text=True, env=dict(os.environ))


def text_of(path, *args):
    return "".join(iter_text(path, DumpOptions(*args) if args else None))


# ----------------------------------------------------------------------------------------------
# The document and the listing of undamaged fixtures

@pytest.mark.parametrize("name", ["txn-0", "legacy_v1_codecs-0", "crashed-0"])
def test_dump_json_subprocess_equals_expected(name):
    exp = expected(FIXTURES / name)
    r = run_cli("dump", "--json", "--records", exp["records_mode"], str(FIXTURES / name))
    # crashed-0 ends in a torn batch: reported (exit 1), the document is still Kafka's.
    assert r.returncode == (1 if name == "crashed-0" else 0), r.stderr
    assert diff(exp, json.loads(r.stdout)) is None


@pytest.mark.parametrize("mode", ["full", "digest", "none"])
def test_streamed_json_is_the_document(mode):
    path = FIXTURES / "multiseg-0"
    pieces = list(iter_json(path, DumpOptions(mode)))
    assert len(pieces) > 15 * 3                        # written piece by piece
    assert "".join(pieces).count("\n") == 1            # one line per document
    doc = json.loads("".join(pieces))
    assert doc == dump_partition(path, mode)
    exp = expected(path)
    if mode == "full":
        assert diff(exp, doc) is None
    for e, s in zip(exp["segments"], doc["segments"]):
        assert s["record_count"] == e["record_count"] and len(s["batches"]) == len(e["batches"])
        assert s["records_sha256"] == (None if mode == "none" else e["records_sha256"])


def test_dump_digest_and_none_modes(capfd):
    exp = expected(FIXTURES / "headers-0")
    assert main(["dump", "--json", "--records", "digest", str(FIXTURES / "headers-0")]) == 0
    doc = json.loads(capfd.readouterr().out)
    seg = doc["segments"][0]
    assert "records" not in seg["batches"][0]
    assert seg["records_sha256"] == exp["segments"][0]["records_sha256"]
    assert main(["dump", "--json", "--records", "none", str(FIXTURES / "headers-0")]) == 0
    doc = json.loads(capfd.readouterr().out)
    assert doc["segments"][0]["record_count"] == exp["segments"][0]["record_count"]
    assert doc["segments"][0]["records_sha256"] is None
    assert doc["problems"] == []


def test_dump_text_listing(capfd):
    assert main(["dump", str(FIXTURES / "txn-0")]) == 0
    out = capfd.readouterr().out
    assert "Dumping " in out and "/00000000000000000000.log\nLog starting offset: 0\n" in out
    assert "baseOffset: 0 lastOffset: 4 count: 5 baseSequence: 0 lastSequence: 4" in out
    assert "isvalid: true" in out and "deleteHorizonMs: OptionalLong.empty" in out
    assert "endTxnMarker: ABORT coordinatorEpoch: 10" in out
    assert "endTxnMarker: COMMIT coordinatorEpoch:" in out
    assert "| offset: 0 CreateTime: 1700000000000 keySize: 16 valueSize: 100 sequence: 0 " \
           "headerKeys: [] key: key-000000000000 payload: {" in out
    assert re.search(r"Dumping \S+/00000000000000000645\.snapshot\n", out)
    # the open transaction's first offset, as kafka-dump-log prints an OptionalLong
    assert "currentTxnFirstOffset: OptionalLong[637]" in out
    assert "epoch: 0 startOffset: 0" in out
    assert "version: 0 producerId: 200 firstOffset: 25 lastOffset: 62 lastStableOffset: 37" in out


def test_control_records_are_printed_by_type():
    txn = text_of(FIXTURES / "txn-0")
    assert "endTxnMarker: ABORT coordinatorEpoch: " in txn
    if not INTERNAL.is_dir():
        pytest.skip(f"{INTERNAL} not found")
    meta = text_of(INTERNAL / "__cluster_metadata-0")
    # kafka-dump-log prints " controlType: LEADER_CHANGE(2)" for a KRaft leader change
    exp = json.loads((INTERNAL / "__cluster_metadata-0.expected.json").read_text())
    dumps = {r["control"]["dump"] for r in exp["records"] if r["is_control"]}
    assert dumps == {" controlType: LEADER_CHANGE(2)"}
    assert meta.count(" controlType: LEADER_CHANGE(2)") == sum(
        r["is_control"] for r in exp["records"])
    assert "endTxnMarker: LEADER_CHANGE" not in meta
    offsets = text_of(INTERNAL / "__consumer_offsets-7")
    exp = json.loads((INTERNAL / "__consumer_offsets-7.expected.json").read_text())
    for r in exp["records"]:
        if r["is_control"]:
            assert f"| offset: {r['offset']} " in offsets
            assert r["control"]["dump"] in offsets


def _all_fixture_dirs():
    dirs = [FIXTURES / n for n in fixture_names()]
    if INTERNAL.is_dir():
        dirs += sorted(p for p in INTERNAL.iterdir() if p.is_dir())
    return dirs


@pytest.mark.parametrize("mode", ["full", "none"])
def test_text_has_no_python_none_and_no_raw_bytes(mode):
    for d in _all_fixture_dirs():
        out = text_of(d, mode)
        assert not re.search(r"\bNone\b", out), d
        assert all(line.isprintable() for line in out.splitlines()), d


def test_dump_single_files(capfd):
    d = FIXTURES / "txn-0"
    for name, key in [("00000000000000000000.log", "segment"),
                      ("00000000000000000000.index", "offset_index"),
                      ("00000000000000000000.timeindex", "time_index"),
                      ("00000000000000000000.txnindex", "txn_index"),
                      ("00000000000000000645.snapshot", "entries"),
                      ("leader-epoch-checkpoint", "leader_epoch_checkpoint")]:
        assert main(["dump", "--json", str(d / name)]) == 0
        doc = json.loads(capfd.readouterr().out)
        assert doc["file"] == name and key in doc
        assert main(["dump", str(d / name)]) == 0
        assert capfd.readouterr().out.strip()
    exp = expected(d)
    assert main(["dump", "--json", str(d / "00000000000000000000.txnindex")]) == 0
    assert json.loads(capfd.readouterr().out)["txn_index"] == exp["segments"][0]["txn_index"]
    assert main(["dump", "--json", str(d / "00000000000000000000.log")]) == 0
    assert diff(exp["segments"][0], json.loads(capfd.readouterr().out)["segment"]) is None


def test_dump_bad_paths(tmp_path, capfd):
    assert main(["dump", str(tmp_path / "missing")]) == 1
    assert "missing" in capfd.readouterr().err
    (tmp_path / "notes.txt").write_text("x")
    assert main(["dump", str(tmp_path / "notes.txt")]) == 1
    assert "not a partition directory" in capfd.readouterr().err
    assert main(["dump", str(tmp_path / LOG0)]) == 1
    assert "no such file" in capfd.readouterr().err
    with pytest.raises(KafkaLogError):
        DumpOptions(records="some")


def test_dump_does_not_modify_files(fixture_copy):
    d = fixture_copy("crashed-0")
    before = {f.name: (f.stat().st_size, f.read_bytes()) for f in d.iterdir()}
    assert main(["dump", "--json", str(d)]) == 1         # its torn tail is reported
    assert main(["dump", str(d)]) == 1
    after = {f.name: (f.stat().st_size, f.read_bytes()) for f in d.iterdir()}
    assert before == after


def test_dump_of_a_log_dir(fixture_copy, tmp_path, capfd):
    a, b = fixture_copy("plain-0"), fixture_copy("txn-0")
    (tmp_path / "meta.properties").write_text("version=1\n")
    assert main(["dump", "--json", "--records", "digest", str(tmp_path)]) == 0
    docs = [json.loads(line) for line in capfd.readouterr().out.splitlines()]
    assert [d["dir"] for d in docs] == ["plain-0", "txn-0"]
    assert diff(expected(FIXTURES / "plain-0"), {**docs[0], "records_mode": "full"}) \
        in (None, "$.segments[0].batches[0].records missing")
    assert main(["dump", "--records", "none", str(tmp_path)]) == 0
    out = capfd.readouterr().out
    assert "Partition directory plain-0 (topic plain, partition 0)" in out
    assert "Partition directory txn-0 (topic txn, partition 0)" in out
    assert a.is_dir() and b.is_dir()
    # the fixtures' own root is a log dir too; it holds damaged partitions
    assert main(["dump", "--json", "--records", "none", str(FIXTURES)]) == 1
    docs = [json.loads(line) for line in capfd.readouterr().out.splitlines()]
    assert [d["dir"] for d in docs] == fixture_names()
    damaged = {d["dir"] for d in docs if d["problems"]}
    assert damaged == {"corrupt_flip-0", "corrupt_garbage-0", "crashed-0"}


# ----------------------------------------------------------------------------------------------
# Damage: reported where it is, the rest still dumped, exit status 1

def _batches(log):
    batches, _, _, _ = walk_batches(log.read_bytes(), validate_crc=False)
    return batches


def _patch(path, position, data):
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def test_bad_crc_batch_is_reported_and_later_batches_dumped(fixture_copy, capfd):
    d = fixture_copy("plain-0")
    log = d / LOG0
    bad = _batches(log)[150]
    pos = int(bad["position"])
    raw = log.read_bytes()
    _patch(log, pos + 200, bytes([raw[pos + 200] ^ 0xFF]))
    assert main(["dump", str(d)]) == 1
    captured = capfd.readouterr()
    assert f"Found an invalid batch at position {pos} of {LOG0}" in captured.out
    assert "| offset: 2999 " in captured.out                 # the last record, after it
    assert "Next offset: 3000  records: 3000" in captured.out
    assert f"at position {pos}: batch (offsets 1500..1509) failed its CRC check" in captured.err
    assert main(["dump", "--json", str(d)]) == 1
    doc = json.loads(capfd.readouterr().out)
    batches = doc["segments"][0]["batches"]
    assert len(batches) == 300 and [b["crc_valid"] for b in batches].count(False) == 1
    assert not batches[150]["crc_valid"] and len(batches[150]["records"]) == 10
    assert doc["problems"][0]["position"] == pos


def _recompute_crc(path, position, size):
    data = bytearray(path.read_bytes())
    data[position + 17:position + 21] = struct.pack(
        ">I", crc32c(bytes(data[position + V2_CRC_START:position + size])))
    path.write_bytes(bytes(data))


def test_undecodable_compressed_batch_is_reported_and_later_batches_dumped(fixture_copy,
                                                                           capfd):
    d = fixture_copy("gzip-0")
    log = d / LOG0
    batches = _batches(log)
    bad = batches[len(batches) // 2]
    pos, size = int(bad["position"]), int(bad["size"])
    raw = log.read_bytes()
    _patch(log, pos + 61 + 20, bytes([raw[pos + 61 + 20] ^ 0xFF]))
    _recompute_crc(log, pos, size)                   # only decoding fails
    assert main(["dump", str(d)]) == 1
    out = capfd.readouterr().out
    assert f"Found an undecodable batch at position {pos} of {LOG0}: gzip data is corrupt" in out
    last = int(batches[-1]["last_offset"])
    assert f"| offset: {last} " in out                       # batches after it are dumped
    assert "Found an invalid batch" not in out
    assert main(["dump", "--json", str(d)]) == 1
    doc = json.loads(capfd.readouterr().out)
    seg = doc["segments"][0]
    listed = {b["position"]: b for b in seg["batches"]}
    assert len(listed) == len(batches)
    assert listed[pos]["records"] == [] and "gzip" in listed[pos]["decode_error"]
    assert seg["batch_iteration_error"] is None
    n_bad = int(bad["last_offset"]) - int(bad["base_offset"]) + 1
    assert seg["record_count"] == expected(FIXTURES / "gzip-0")["segments"][0]["record_count"] \
        - n_bad
    # the other segments are whole
    exp = expected(FIXTURES / "gzip-0")
    assert all(diff(e, a) is None for e, a in zip(exp["segments"][1:], doc["segments"][1:]))


def test_trailing_garbage_is_reported_like_kafka_dump_log(fixture_copy, capfd):
    d = fixture_copy("plain-0")
    with open(d / LOG0, "ab") as f:
        f.write(bytes(range(7, 107)))
    assert main(["dump", str(d)]) == 1
    captured = capfd.readouterr()
    assert f"Found 100 invalid bytes at the end of {LOG0}\n" in captured.out
    assert "| offset: 2999 " in captured.out
    assert "100 invalid bytes at the end" in captured.err
    assert main(["dump", "--json", str(d)]) == 1
    seg = json.loads(capfd.readouterr().out)["segments"][0]
    assert seg["invalid_bytes_at_end"] == 100 and len(seg["batches"]) == 300
    assert seg["batch_iteration_error"] is None              # as Kafka's iterator: no error
    # the fixture Kafka itself damaged the same way
    assert main(["dump", str(FIXTURES / "corrupt_garbage-0")]) == 1
    assert "Found 100 invalid bytes at the end of 00000000000000001470.log" in \
        capfd.readouterr().out


def test_structural_damage_stops_the_segment_with_the_bytes_left(fixture_copy, capfd):
    d = fixture_copy("multiseg-0")
    logs = sorted(d.glob("*.log"))
    log = logs[3]
    batch = _batches(log)[40]
    pos = int(batch["position"])
    _patch(log, pos + 8, struct.pack(">i", 5))               # a size no batch can have
    left = log.stat().st_size - pos
    assert main(["dump", str(d)]) == 1
    out = capfd.readouterr().out
    assert (f"Found a corrupt batch header at position {pos} of {log.name}: record size 5 is "
            f"smaller than the minimum record overhead (14); the remaining {left} bytes were "
            f"not dumped") in out
    assert "| offset: 29999 " in out                         # the later segments are dumped
    assert main(["dump", "--json", str(d)]) == 1
    doc = json.loads(capfd.readouterr().out)
    seg = doc["segments"][3]
    assert len(seg["batches"]) == 40 and seg["batch_iteration_error"]
    assert seg["invalid_bytes_at_end"] == left
    assert seg["next_offset"] == int(batch["base_offset"])
    exp = expected(FIXTURES / "multiseg-0")
    assert all(diff(exp["segments"][i], doc["segments"][i]) is None for i in (0, 1, 2, 4, 14))


def test_a_size_running_past_the_end_is_the_invalid_tail(fixture_copy, capfd, monkeypatch):
    d = fixture_copy("plain-0")
    log = d / LOG0
    pos = int(_batches(log)[150]["position"])
    _patch(log, pos + 8, struct.pack(">i", 2**31 - 1))
    reads = []
    real = segment_walker.walk_batches
    monkeypatch.setattr(segment_walker, "walk_batches", lambda buf, **kw: reads.append(len(buf)) or
                        real(buf, **kw))
    assert main(["dump", "--records", "none", str(d)]) == 1
    out = capfd.readouterr().out
    # as Kafka's iterator, which stops there; the bytes it claims are not read
    assert f"Found {log.stat().st_size - pos} invalid bytes at the end of {LOG0}" in out
    assert out.count("baseOffset: ") == 150 and max(reads) <= 256 * 1024


def test_damaged_txnindex_is_reported_and_the_rest_dumped(fixture_copy, capfd):
    d = fixture_copy("txn-0")
    txn = d / "00000000000000000063.txnindex"
    assert txn.stat().st_size == 68                          # two entries
    _patch(txn, 34, struct.pack(">h", 7))                    # the second one's version
    assert main(["dump", str(d)]) == 1
    captured = capfd.readouterr()
    assert "Found a damaged transaction index 00000000000000000063.txnindex: unexpected " \
           "aborted transaction version 7" in captured.out
    assert "version: 0 producerId: 200 firstOffset: 76 lastOffset: 113" in captured.out
    assert "Next offset: 645" in captured.out and "645.snapshot" in captured.out
    assert "00000000000000000063.txnindex" in captured.err
    assert main(["dump", "--json", str(d)]) == 1
    doc = json.loads(capfd.readouterr().out)
    exp = expected(FIXTURES / "txn-0")
    entry = doc["segments"][1]["txn_index"]
    assert entry["entries"] == exp["segments"][1]["txn_index"]["entries"][:1]
    assert "version 7" in entry["error"]
    doc["segments"][1]["txn_index"] = exp["segments"][1]["txn_index"]
    assert diff(exp, doc) is None                            # everything else is Kafka's
    with open(txn, "ab") as f:                               # not a whole number of entries
        f.write(b"\0" * 5)
    assert main(["dump", str(txn)]) == 1
    assert "is not a whole number of entries" in capfd.readouterr().out


def test_damaged_snapshot_is_reported_and_the_rest_dumped(fixture_copy, capfd):
    d = fixture_copy("txn-0")
    snap = d / "00000000000000000645.snapshot"
    raw = snap.read_bytes()
    _patch(snap, len(raw) - 3, bytes([raw[-3] ^ 0x55]))
    assert main(["dump", str(d)]) == 1
    captured = capfd.readouterr()
    assert "Found a damaged producer snapshot 00000000000000000645.snapshot:" in captured.out
    assert "CRC" in captured.out and "epoch: 0 startOffset: 0" in captured.out
    assert main(["dump", "--json", str(d)]) == 1
    doc = json.loads(capfd.readouterr().out)
    exp = expected(FIXTURES / "txn-0")
    snaps = {s["file"]: s for s in doc["producer_snapshots"]}
    assert snaps["00000000000000000645.snapshot"]["entries"] == []
    assert "CRC" in snaps["00000000000000000645.snapshot"]["error"]
    assert all(diff(e, a) is None for e, a in zip(exp["segments"], doc["segments"]))
    assert [p["file"] for p in doc["problems"]] == [str(snap)]


def test_damaged_index_and_checkpoint_are_reported(fixture_copy, capfd):
    d = fixture_copy("plain-0")
    (d / "leader-epoch-checkpoint").write_text("0\nnot a number\n")
    timeindex = d / file_name(0, ".timeindex")
    entries = timeindex.stat().st_size // 12
    with open(timeindex, "ab") as f:
        f.write(b"\1" * 5)                                   # a partial entry
    assert main(["dump", "--records", "none", str(d)]) == 1
    captured = capfd.readouterr()
    assert "Found a damaged leader-epoch checkpoint" in captured.out
    assert f"Found 5 invalid bytes at the end of {timeindex.name}: not a whole entry" \
        in captured.out
    assert "Next offset: 3000" in captured.out
    assert "5 trailing bytes are not a whole 12-byte entry" in captured.err
    assert main(["dump", "--json", "--records", "none", str(d)]) == 1
    doc = json.loads(capfd.readouterr().out)
    index = doc["segments"][0]["time_index"]
    assert index["entries_count"] == len(index["entries"]) == entries   # as Kafka reads it
    assert index["trailing_bytes"] == 5 and doc["leader_epoch_checkpoint"] is None
    assert len(doc["problems"]) == 2


# ----------------------------------------------------------------------------------------------
# Streaming in bounded memory

def _write_partition(directory, megabytes, value_size=1000):
    """A partition of one segment of about ``megabytes`` MB of valid batches (one batch of
    ten records repeated, its base offset patched: the CRC does not cover it)."""
    directory.mkdir(parents=True, exist_ok=True)
    batch = build_batch([Record(key=b"k%03d" % i, value=bytes([65 + i]) * value_size,
                                timestamp=1_700_000_000_000 + i) for i in range(10)])
    count = megabytes * 1024 * 1024 // len(batch)
    out = bytearray(batch * count)
    for i in range(count):
        struct.pack_into(">q", out, i * len(batch), i * 10)
    (directory / LOG0).write_bytes(bytes(out))
    return count * 10, len(out)


def test_first_lines_come_before_the_segment_is_read(tmp_path, monkeypatch):
    _, size = _write_partition(tmp_path / "big-0", 16)
    walked = []
    real = segment_walker.walk_batches

    def counting(buf, *args, **kwargs):
        walked.append(len(buf))
        return real(buf, *args, **kwargs)

    monkeypatch.setattr(segment_walker, "walk_batches", counting)
    for make in (iter_text, iter_json):
        walked.clear()
        pieces = make(tmp_path / "big-0")
        seen = ""
        while "k000" not in seen and "azAwMA" not in seen:   # the first record's key
            seen += next(pieces)
        assert sum(walked) <= 64 * 1024 < size / 100
        pieces.close()


def _peak(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_partition(tmp_path):
    _write_partition(tmp_path / "small-0", 4)
    _, large = _write_partition(tmp_path / "large-0", 24)

    def consume(path, make, mode):
        def run():
            n = 0
            for piece in make(path, DumpOptions(mode)):
                n += len(piece)
            assert n > 0
        return run

    for make, mode in ((iter_text, "full"), (iter_json, "full"), (iter_json, "digest")):
        peak_small = _peak(consume(tmp_path / "small-0", make, mode))
        peak_large = _peak(consume(tmp_path / "large-0", make, mode))
        assert peak_large < 6 * 1024 * 1024 < large / 3, (make, mode, peak_large)
        assert peak_large < peak_small * 1.5 + 1024 * 1024, (make, mode, peak_small, peak_large)


def test_a_batch_larger_than_a_chunk(tmp_path):
    d = tmp_path / "wide-0"
    d.mkdir()
    wide = build_batch([Record(key=b"w", value=b"x" * 3_000_000, timestamp=1)])
    small = build_batch([Record(key=b"s", value=b"y", timestamp=2)], base_offset=1)
    (d / LOG0).write_bytes(wide + small)
    report = DumpReport()
    doc = json.loads("".join(iter_json(d, report=report)))
    seg = doc["segments"][0]
    assert [b["base_offset"] for b in seg["batches"]] == [0, 1] and not report.damaged
    assert seg["records_sha256"] == expected_sha(seg)


def expected_sha(seg):
    import hashlib
    h = hashlib.sha256()
    for b in seg["batches"]:
        for r in b["records"]:
            h.update(f"{r['offset']}\t{r['timestamp']}\t{r['key_b64']}\t{r['value_b64']}\t0\n"
                     .encode())
    return h.hexdigest()


def test_broken_pipe_is_quiet():
    p = subprocess.Popen([sys.executable, "-m", "kafkalog", "dump", str(FIXTURES / "plain-0")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline().startswith(b"Partition directory plain-0")
    p.stdout.close()
    err = p.stderr.read().decode()
    p.wait(timeout=60)
    assert "Traceback" not in err and "Exception ignored" not in err, err


# ----------------------------------------------------------------------------------------------
# --max-bytes, the offset range, payload formats

def test_max_bytes_stops_reading_like_kafka_dump_log(capfd):
    d = FIXTURES / "plain-0"
    assert main(["dump", "--max-bytes", "5000", str(d)]) == 0
    out = capfd.readouterr().out
    assert out.count("baseOffset: ") == 3                    # 3 batches of 1314 bytes end in it
    assert "invalid bytes" not in out                        # a cut is not damage
    assert main(["dump", "--json", "--max-bytes", "5000", str(d)]) == 0
    doc = json.loads(capfd.readouterr().out)
    seg = doc["segments"][0]
    assert len(seg["batches"]) == 3 and seg["next_offset"] == 30 and seg["record_count"] == 30
    assert seg["bytes_read_limit"] == 5000 and doc["limits"] == {"max_bytes": 5000}
    assert run_cli("dump", "--max-bytes", "-1", str(d)).returncode == 2
    # on a multi-segment partition each .log is cut
    assert main(["dump", "--json", "--records", "none", "--max-bytes", "1",
                 str(FIXTURES / "txn-0")]) == 0
    doc = json.loads(capfd.readouterr().out)
    assert all(s["batches"] == [] for s in doc["segments"]) and len(doc["segments"]) == 10


def test_offset_range(capfd):
    d = FIXTURES / "multiseg-0"
    exp = expected(d)
    boundary = exp["segments"][1]["base_offset"]
    start, end = boundary - 15, boundary + 7
    assert main(["dump", "--json", "--start-offset", str(start), "--end-offset", str(end),
                 str(d)]) == 0
    doc = json.loads(capfd.readouterr().out)
    assert [s["base_offset"] for s in doc["segments"]] == [0, boundary]
    records = [r["offset"] for s in doc["segments"] for b in s["batches"] for r in b["records"]]
    assert records == list(range(start, end))
    for s in doc["segments"]:
        for b in s["batches"]:
            assert b["last_offset"] >= start and b["base_offset"] < end
    assert sum(s["record_count"] for s in doc["segments"]) == end - start
    assert main(["dump", "--start-offset", str(start), "--end-offset", str(end), str(d)]) == 0
    out = capfd.readouterr().out
    shown = [int(m) for m in re.findall(r"^\| offset: (\d+) ", out, re.M)]
    assert shown == list(range(start, end))
    assert out.count("Log starting offset:") == 2
    # open-ended
    assert main(["dump", "--json", "--records", "none", "--start-offset", "29990", str(d)]) == 0
    doc = json.loads(capfd.readouterr().out)
    assert len(doc["segments"]) == 1 and doc["segments"][0]["next_offset"] == 30000
    assert run_cli("dump", "--start-offset", "9", "--end-offset", "3", str(d)).returncode == 2


def test_offset_range_in_legacy_compressed_wrappers():
    d = FIXTURES / "legacy_v1_codecs-0"
    exp = expected(d)
    offsets = [r["offset"] for s in exp["segments"] for b in s["batches"] for r in b["records"]]
    start, end = offsets[len(offsets) // 3] + 1, offsets[2 * len(offsets) // 3]
    doc = dump_partition(d, options=DumpOptions(start_offset=start, end_offset=end))
    got = [r["offset"] for s in doc["segments"] for b in s["batches"] for r in b["records"]]
    assert got == [o for o in offsets if start <= o < end]


def _binary_partition(directory):
    directory.mkdir()
    records = [Record(key=b"\x00\x01k", value=bytes(range(256)), timestamp=1,
                      headers=[("h\n1", b"v")]),
               Record(key="clé".encode(), value=b"back\\slash\ttab\xe2\x80\xa8", timestamp=2),
               Record(key=None, value=None, timestamp=3)]
    (directory / LOG0).write_bytes(build_batch(records) + build_control_batch(
        "commit", producer_id=5, producer_epoch=0, coordinator_epoch=4, base_offset=3,
        timestamp=4))
    return directory


def test_payloads_are_escaped_text_hex_or_base64(tmp_path, capfd):
    d = _binary_partition(tmp_path / "bin-0")
    assert main(["dump", str(d)]) == 0
    out = capfd.readouterr().out
    assert all(line.isprintable() for line in out.splitlines())
    assert "key: \\x00\\x01k payload: \\x00\\x01\\x02" in out
    assert "\\x7f\\x80\\x81" in out and "\\xff" in out       # bytes that are not UTF-8
    assert "headerKeys: [h\\n1]" in out
    assert "key: clé payload: back\\\\slash\\ttab\\u2028" in out
    assert "| offset: 2 CreateTime: 3 keySize: -1 valueSize: -1 sequence: -1 headerKeys: []\n" \
           in out                                            # null key and value: not printed
    assert "endTxnMarker: COMMIT coordinatorEpoch: 4" in out
    assert main(["dump", "--hex", str(d)]) == 0
    out = capfd.readouterr().out
    assert f"key: 00016b payload: {bytes(range(256)).hex()}" in out
    assert main(["dump", "--base64", str(d)]) == 0
    out = capfd.readouterr().out
    assert f"key: AAFr payload: {base64.b64encode(bytes(range(256))).decode()}" in out
    assert run_cli("dump", "--hex", "--base64", str(d)).returncode == 2


def test_escape():
    esc = listing._escape
    assert esc(b"plain text") == "plain text"
    assert esc(b"a\\b") == "a\\\\b"
    assert esc(b"\xff\xfe") == "\\xff\\xfe"
    assert esc("é中".encode()) == "é中"
    assert esc(b"\x1b[31m") == "\\x1b[31m"
    assert esc("\u0085\u00a0".encode()) == "\\x85\\xa0"
    assert listing._escape_all([b"a", None, b"b\n"]) == ["a", None, "b\\n"]
    assert listing._escape_all([b"a", None, b""]) == ["a", None, ""]
    assert listing._escape_all([None]) == [None]
