"""Salvage reads: resynchronise after damage, return every record outside the damaged batches,
list the gaps, and write a clean copy Kafka could load. Damage is done to copies of the
Kafka-written fixtures; what should survive comes from their ``.expected.json``."""
import base64
import json
import logging
import random
import struct

import numpy as np
import pytest
from crc32c import crc32c

from kafkalog import Log, Record
from kafkalog._kernels import walk_batches
from kafkalog.builder import build_batch as build_any
from kafkalog.cli import main
from kafkalog.errors import KafkaLogError
from kafkalog.salvage import salvage_partition, salvage_segment, write_partition
from kafkalog.verify import verify_partition

from conftest import FIXTURES, KERNELS, expected
from test_kernels import PAD, both, sample_batches
from test_recover import INTERVAL, index_files, kafka_indexed, torn_backup

LOG0 = "00000000000000000000.log"


# ------------------------------------------------------------------------------ damage helpers
def batches_of(log_path):
    """The walked batches (``BATCH_DTYPE``) of a .log file."""
    return walk_batches(log_path.read_bytes(), validate_crc=False)[0]


def seal(data, position):
    """Recompute a v2 batch's CRC32C (bytes [21, end), stored big-endian at 17), so the
    damage is invisible to Kafka's CRC check."""
    size = struct.unpack_from(">i", data, position + 8)[0] + 12
    struct.pack_into(">I", data, position + 17, crc32c(bytes(data[position + 21:position + size])))


def flip_payload(log_path, index, recompute_crc=True):
    """Flip a byte in the middle of the records of batch ``index``; returns its row."""
    row = batches_of(log_path)[index]
    data = bytearray(log_path.read_bytes())
    pos, size = int(row["position"]), int(row["size"])
    data[pos + 61 + (size - 61) // 2] ^= 0xFF
    if recompute_crc:
        seal(data, pos)
    log_path.write_bytes(bytes(data))
    return row


def overwrite(log_path, position, garbage):
    data = bytearray(log_path.read_bytes())
    data[position:position + len(garbage)] = garbage
    log_path.write_bytes(bytes(data))


def insert(log_path, position, garbage):
    data = log_path.read_bytes()
    log_path.write_bytes(data[:position] + garbage + data[position:])


def garbage(n, seed=5):
    return random.Random(seed).randbytes(n)


def expected_records(name):
    """{offset: (timestamp, key, value)} of every record Kafka wrote into fixture ``name``."""
    out = {}
    for seg in expected(FIXTURES / name)["segments"]:
        for batch in seg["batches"]:
            for r in batch.get("records", []):
                out[r["offset"]] = (r["timestamp"], _b64(r["key_b64"]), _b64(r["value_b64"]))
    return out


def _b64(text):
    return None if text is None else base64.b64decode(text)


def salvaged(found):
    return {r.offset: (r.timestamp, r.key, r.value) for r in found.records()}


def without(records, *batches):
    lost = {o for b in batches for o in range(b["base_offset"], b["last_offset"] + 1)}
    return {o: v for o, v in records.items() if o not in lost}


# ------------------------------------------------------------------------------ the kernel
def _legacy_entries():
    return build_any([Record(key=b"k", value=b"v", timestamp=5)] * 3, magic=1) + \
        build_any([Record(value=b"x")] * 2, magic=0, base_offset=3)


def test_next_valid_batch_boundaries(kernels):
    batches = sample_batches(4)
    good = b"".join(batches)
    data = PAD + garbage(300) + good
    first = len(PAD) + 300
    assert kernels.next_valid_batch(b"", 0) == (-1, 0)
    assert both("next_valid_batch", data, len(PAD)) == (first, len(batches[0]))
    # exactly at a batch, and from one byte into it: the next batch
    assert both("next_valid_batch", data, first) == (first, len(batches[0]))
    assert both("next_valid_batch", data, first + 1) == (first + len(batches[0]),
                                                         len(batches[1]))
    # the end bounds the search: a batch cut by ``end`` is not whole
    last = len(data) - len(batches[-1])
    assert both("next_valid_batch", data, last, len(data) - 1) == (-1, 0)
    assert both("next_valid_batch", data, last, len(data)) == (last, len(batches[-1]))
    assert both("next_valid_batch", data, len(data)) == (-1, 0)
    assert both("next_valid_batch", data, len(data) - 10) == (-1, 0)
    # a batch whose CRC fails is skipped; one whose CRC is recomputed is found
    bad = bytearray(data)
    bad[first + 70] ^= 0xFF
    assert both("next_valid_batch", bytes(bad), len(PAD)) == (first + len(batches[0]),
                                                              len(batches[1]))
    seal(bad, first)
    assert both("next_valid_batch", bytes(bad), len(PAD)) == (first, len(batches[0]))
    # zeros (a preallocated tail) hold no batch
    assert both("next_valid_batch", PAD + b"\0" * 5000, len(PAD)) == (-1, 0)
    with pytest.raises(ValueError):
        kernels.next_valid_batch(data, len(data) + 1)
    with pytest.raises(ValueError):
        kernels.next_valid_batch(data, -1)


def test_next_valid_batch_legacy_entries(kernels):
    legacy = _legacy_entries()
    data = PAD + garbage(64, seed=9) + legacy
    start = len(PAD) + 64
    assert both("next_valid_batch", data, len(PAD))[0] == start
    assert both("next_valid_batch", data, len(PAD), -1, False) == (-1, 0)


def test_next_valid_batch_large_candidates_must_chain(kernels):
    """A candidate declaring more than 1 MiB must end at the range's end or where another
    header could start (random bytes would otherwise cost a CRC over megabytes each)."""
    from kafkalog import build_batch
    big = build_batch([Record(value=bytes(1_200_000))], base_offset=0)
    small = sample_batches(1)[0]
    data = PAD + b"\x07" * 5 + big
    assert both("next_valid_batch", data, len(PAD)) == (len(PAD) + 5, len(big))
    assert both("next_valid_batch", data + small, len(PAD))[0] == len(PAD) + 5
    assert both("next_valid_batch", data + b"\x05" * 100, len(PAD)) == (-1, 0)
    assert both("next_valid_batch", data + b"\x05" * 10, len(PAD))[0] == len(PAD) + 5
    mid = data + b"\xff" * 40 + small
    assert both("next_valid_batch", mid, len(PAD)) == (len(mid) - len(small), len(small))


def test_next_valid_batch_random_damage_agrees():
    rng = random.Random(11)
    good = b"".join(sample_batches(6, seed=3)) + _legacy_entries()
    for _ in range(150):
        data = bytearray(PAD + good)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(PAD), len(data))] = rng.randrange(256)
        start = rng.randrange(len(PAD), len(data))
        both("next_valid_batch", bytes(data), start)
        both("next_valid_batch", bytes(data), start, -1, False)


def test_next_valid_batch_is_exported():
    from kafkalog._kernels import KERNEL_NAMES
    assert "next_valid_batch" in KERNEL_NAMES
    for module in KERNELS.values():
        assert callable(module.next_valid_batch)


# ------------------------------------------------------------------------------ salvage reads
@pytest.mark.parametrize("name", ["plain-0", "gzip-0", "multiseg-0", "legacy_v1-0", "txn-0",
                                  "headers-0"])
def test_salvage_of_a_clean_partition_is_everything(name):
    found = salvage_partition(FIXTURES / name)
    assert found.gaps == []
    want = expected_records(name)
    assert salvaged(found) == want
    assert found.record_count == len(want)
    assert found.first_offset == min(want) and found.last_offset == max(want)


def test_salvage_skips_garbage_in_the_middle_of_a_segment(fixture_copy):
    d = fixture_copy("multiseg-0")
    seg = sorted(d.glob("*.log"))[4]
    rows = batches_of(seg)
    # 150 bytes of garbage over the end of batch 10 and the start of batch 11
    at = int(rows["position"][11]) - 60
    overwrite(seg, at, garbage(150))
    found = salvage_partition(d)
    want = without(expected_records("multiseg-0"), rows[10], rows[11])
    assert salvaged(found) == want
    [gap] = found.gaps
    assert gap.file == str(seg) and gap.code == "crc_mismatch"
    assert gap.start == int(rows["position"][10]) and gap.end == int(rows["position"][12])
    assert gap.bytes == gap.end - gap.start
    assert gap.offset_before == int(rows["last_offset"][9])
    assert gap.offset_after == int(rows["base_offset"][12])


def test_salvage_resynchronises_after_inserted_garbage(fixture_copy):
    d = fixture_copy("plain-0")
    log = d / LOG0
    rows = batches_of(log)
    insert(log, int(rows["position"][100]), garbage(333))
    found = salvage_partition(d)
    assert salvaged(found) == expected_records("plain-0")       # nothing lost
    [gap] = found.gaps
    assert (gap.start, gap.bytes, gap.code) == (int(rows["position"][100]), 333, "corrupt_batch")
    assert (gap.offset_before, gap.offset_after) == (int(rows["last_offset"][99]),
                                                     int(rows["base_offset"][100]))


def test_salvage_drops_a_gzip_batch_whose_records_do_not_decode(fixture_copy):
    d = fixture_copy("gzip-0")
    log = d / LOG0
    row = flip_payload(log, 3)
    found = salvage_partition(d)
    assert salvaged(found) == without(expected_records("gzip-0"), row)
    [gap] = found.gaps
    assert gap.code == "undecodable_records"
    assert (gap.start, gap.end) == (int(row["position"]), int(row["position"] + row["size"]))
    assert gap.offset_before == int(row["base_offset"]) - 1
    assert gap.offset_after == int(row["last_offset"]) + 1


@pytest.mark.parametrize("name,code,lost", [("corrupt_flip-0", "crc_mismatch", 10),
                                            ("corrupt_garbage-0", "corrupt_batch", 0),
                                            ("crashed-0", "torn_tail", 0)])
def test_salvage_of_the_damaged_fixtures(name, code, lost):
    found = salvage_partition(FIXTURES / name)
    want = expected_records(name)
    got = salvaged(found)
    assert set(got) <= set(want) and len(want) - len(got) == lost
    assert all(got[o] == want[o] for o in got)
    [gap] = found.gaps
    assert gap.code == code and gap.offset_after is None
    assert gap.offset_before == max(got)


def test_salvage_verify_and_recovery_call_a_short_middle_segment_the_same(fixture_copy):
    """A middle segment cut mid-batch is missing data for all three (not "a torn write",
    which only the last segment can end in)."""
    d, _, torn, _ = torn_backup(fixture_copy)
    [gap] = [g for g in salvage_partition(d).gaps if g.file.endswith(torn.name)]
    problems = verify_partition(d)["problems"]
    assert gap.code == "missing_data" and "(a torn write)" not in gap.message
    assert "missing_data" in {p["code"] for p in problems if p["file"].endswith(torn.name)}


def test_salvage_skips_a_stale_copy_of_an_earlier_batch(fixture_copy):
    d = fixture_copy("plain-0")
    log = d / LOG0
    rows = batches_of(log)
    data = log.read_bytes()
    first = data[:int(rows["size"][0])]
    log.write_bytes(data + first)                    # a whole, valid, old batch at the end
    found = salvage_partition(d)
    assert salvaged(found) == expected_records("plain-0")
    [gap] = found.gaps
    assert gap.code == "offsets_not_increasing" and gap.start == len(data)


def test_salvage_segment_tables_and_gap_positions(fixture_copy):
    d = fixture_copy("plain-0")
    log = d / LOG0
    rows = batches_of(log)
    overwrite(log, int(rows["position"][5]) + 30, b"\xff" * 10)
    seg = salvage_segment(log)
    assert seg.base_offset == 0 and seg.size == log.stat().st_size
    assert len(seg.batches) == len(rows) - 1
    assert seg.record_count == sum(len(t) for t in seg.tables())
    offsets = np.concatenate([t.records["offset"] for t in seg.tables(chunk_bytes=4096)])
    assert (np.diff(offsets) > 0).all()
    assert [(g.start, g.end) for g in seg.gaps] == [
        (int(rows["position"][5]), int(rows["position"][6]))]


# ------------------------------------------------------------------------------ the copy
def test_write_partition_makes_a_clean_copy(fixture_copy, tmp_path):
    d = fixture_copy("multiseg-0")
    logs = sorted(d.glob("*.log"))
    rows = batches_of(logs[2])
    overwrite(logs[2], int(rows["position"][0]) + 100, garbage(40))    # the first batch
    found = salvage_partition(d)
    out = tmp_path / "out" / "multiseg-0"
    written = write_partition(found, out)
    want = without(expected_records("multiseg-0"), rows[0])
    # files named after their first offset; batches copied byte for byte
    assert written["segments"] == [f"{s.first_offset:020d}.log" for s in found.segments]
    assert sorted(p.name for p in out.glob("*.log")) == written["segments"]
    assert f"{int(rows['base_offset'][1]):020d}.log" in written["segments"]
    for seg in found.segments:
        copy = (out / f"{seg.first_offset:020d}.log").read_bytes()
        with open(seg.path, "rb") as f:
            source = f.read()
        assert copy == b"".join(source[int(p):int(p) + int(s)]
                                for p, s in zip(seg.batches["position"], seg.batches["size"]))
    assert written["log_end_offset"] == max(want) + 1 and written["records"] == len(want)
    assert (out / "partition.metadata").exists() == (d / "partition.metadata").exists()
    # indexes, snapshot and epochs rebuilt: the copy verifies clean, and reads back
    report = verify_partition(out)
    assert report["ok"], report["problems"]
    with Log.open(out, read_only=True) as log_:
        got = {r.offset: (r.timestamp, r.key, r.value) for r in log_.records()}
    assert got == want
    with pytest.raises(KafkaLogError):
        write_partition(found, out)                  # not an empty directory


def test_write_partition_warns_only_about_what_it_leaves_out(tmp_path, fixture_copy, caplog):
    d = fixture_copy("multiseg-0")
    log = sorted(d.glob("*.log"))[2]
    data = bytearray(log.read_bytes())
    data[5000] ^= 1
    log.write_bytes(bytes(data))
    with caplog.at_level(logging.INFO):
        written = write_partition(salvage_partition(d), tmp_path / "copy-0")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "left out of" in warnings[0]
    rebuilt = [r for r in caplog.records if "rebuilt index" in r.getMessage()]
    assert rebuilt and {r.levelno for r in rebuilt} == {logging.INFO}
    assert written["log_end_offset"] == 30000
    # the filter went with the load: a later load of another directory warns as before
    assert not logging.getLogger("kafkalog.loader").filters


def test_write_partition_refuses_an_empty_salvage(tmp_path, fixture_copy):
    d = fixture_copy("plain-0")
    (d / LOG0).write_bytes(garbage(500))
    found = salvage_partition(d)
    assert found.record_count == 0 and found.first_offset is None
    with pytest.raises(KafkaLogError):
        write_partition(found, tmp_path / "x-0")


def test_salvage_cli(fixture_copy, tmp_path, capfd):
    d = fixture_copy("gzip-0")
    row = flip_payload(d / LOG0, 2)
    assert main(["salvage", str(d)]) == 0
    out = capfd.readouterr().out
    assert "1 gap" in out and "undecodable_records" in out and f"[{int(row['position'])}," in out
    target = tmp_path / "restored" / "gzip-0"
    assert main(["salvage", "--json", "--out", str(target), str(d)]) == 0
    out, err = capfd.readouterr()
    doc = json.loads(out)
    # quiet about the indexes of its own output, and the gap is told once (in the report)
    assert err == ""
    [part] = doc["partitions"]
    assert part["gaps"][0]["code"] == "undecodable_records"
    assert part["gaps"][0]["offset_before"] == int(row["base_offset"]) - 1
    assert part["written"]["dir"] == str(target)
    assert part["records"] == len(expected_records("gzip-0")) - int(row["record_count"])
    assert main(["verify", str(target)]) == 0
    capfd.readouterr()
    # a log dir: one partition directory each under --out
    logdir = tmp_path / "restored-all"
    assert main(["salvage", "--out", str(logdir), str(d.parent)]) == 0
    assert (logdir / "gzip-0" / LOG0).exists()
    assert main(["salvage", "--out", str(logdir), str(d.parent)]) == 1     # not empty now
    assert "not an empty directory" in capfd.readouterr().err


def test_salvage_builds_on_batches_written_by_kafkalog(tmp_path):
    d = tmp_path / "t-0"
    with Log.open(d) as log_:
        for i in range(20):
            log_.append([Record(key=b"k%d" % i, value=b"v" * i)])
    log_path = d / LOG0
    rows = batches_of(log_path)
    overwrite(log_path, int(rows["position"][7]) + 8, b"\0" * 4)         # its size field
    found = salvage_partition(d)
    assert [r.offset for r in found.records()] == [o for o in range(20) if o != 7]
    assert [g.code for g in found.gaps] == ["corrupt_batch"]


def test_salvage_of_a_preallocated_zero_tail(fixture_copy):
    d = fixture_copy("plain-0")
    with open(d / LOG0, "ab") as f:
        f.write(b"\0" * 4096)
    found = salvage_partition(d)
    assert salvaged(found) == expected_records("plain-0")
    assert [(g.code, g.bytes) for g in found.gaps] == [("log_zero_tail", 4096)]


def test_salvage_writes_indexes_at_the_topic_config_interval(tmp_path, capfd):
    expected = index_files(kafka_indexed("multiseg-0", tmp_path / "kafka", INTERVAL))
    d = kafka_indexed("multiseg-0", tmp_path / "multiseg-0", INTERVAL)
    damaged = sorted(d.glob("*.log"))[2]
    insert(damaged, batches_of(damaged)[5]["position"], garbage(700))
    found = salvage_partition(d)
    assert len(found.gaps) == 1 and found.record_count == 30000

    def indexes(out):
        return {n: b for n, (b, _) in index_files(out).items()}
    write_partition(found, tmp_path / "py-0", INTERVAL)
    assert indexes(tmp_path / "py-0") == {n: b for n, (b, _) in expected.items()}
    properties = tmp_path / "topic.properties"
    properties.write_text("index.interval.bytes = 1000\n")
    assert main(["salvage", "--config", str(properties), "--out", str(tmp_path / "cli-0"),
                 str(d)]) == 0
    assert indexes(tmp_path / "cli-0") == indexes(tmp_path / "py-0")
    write_partition(found, tmp_path / "default-0")    # the default interval: fewer entries
    assert all(len(b) < len(expected[n][0]) for n, b in indexes(tmp_path / "default-0").items())
    bad = tmp_path / "bad.properties"
    bad.write_text("index.interval.bytes=x\n")
    capfd.readouterr()
    assert main(["salvage", "--config", str(bad), "--out", str(tmp_path / "bad-0"), str(d)]) == 1
    assert capfd.readouterr().err.startswith("kafkalog salvage: ")
    assert not (tmp_path / "bad-0").exists()
    with pytest.raises(KafkaLogError):       # before anything is written
        write_partition(found, tmp_path / "bad-1", str(bad))
    assert not (tmp_path / "bad-1").exists()
