"""``kafkalog verify``: deep by default (every record decoded), problems as
``{code, file, position, offset, message}``. Damage is done to copies of the Kafka-written
fixtures, each kind checked for its code, file, position and offset."""
import json
import shutil
import struct

import pytest

from kafkalog.cli import main
from kafkalog.verify import CODES, render_problem, verify_partition

from conftest import FIXTURES, expected, fixture_names
from test_salvage import LOG0, batches_of, flip_payload, garbage, insert, overwrite, seal

DAMAGED = {"corrupt_flip-0", "corrupt_garbage-0", "crashed-0"}
CLEAN = [n for n in fixture_names() if n not in DAMAGED]
FIELDS = {"code", "file", "position", "offset", "message"}


def codes(report):
    return sorted({p["code"] for p in report["problems"]})


def only(report, code):
    found = [p for p in report["problems"] if p["code"] == code]
    assert found, report["problems"]
    return found


@pytest.mark.parametrize("name", CLEAN)
def test_clean_fixtures_verify_deep_and_shallow(name):
    exp = expected(FIXTURES / name)
    report = verify_partition(FIXTURES / name)
    assert report["ok"] and report["problems"] == [], report["problems"]
    assert report["deep"]
    assert sum(s["records"] for s in report["segments"]) == \
        sum(s["record_count"] for s in exp["segments"])
    shallow = verify_partition(FIXTURES / name, deep=False)
    assert shallow["ok"] and not shallow["deep"]
    assert all(s["records"] is None for s in shallow["segments"])


def test_problems_are_dicts_with_stable_codes():
    for name in sorted(DAMAGED):
        report = verify_partition(FIXTURES / name)
        assert not report["ok"]
        for p in report["problems"]:
            assert set(p) == FIELDS and p["code"] in CODES
            assert isinstance(p["message"], str) and p["message"]
            json.dumps(p)


def test_crashed_fixture_torn_tail_and_both_zero_tails():
    d = FIXTURES / "crashed-0"
    report = verify_partition(d)
    assert codes(report) == ["index_zero_tail", "torn_tail"]
    [torn] = only(report, "torn_tail")
    assert torn["file"] == str(d / "00000000000000000612.log")
    assert (torn["position"], torn["offset"]) == (3936, 639)
    tails = {p["file"]: p for p in only(report, "index_zero_tail")}
    # the offset index and the time index (the latter was missed before)
    assert set(tails) == {str(d / "00000000000000000612.index"),
                          str(d / "00000000000000000612.timeindex")}
    assert all(p["position"] == 0 and "all" in p["message"] for p in tails.values())


def test_crc_mismatch_and_garbage_tail_fixtures():
    report = verify_partition(FIXTURES / "corrupt_flip-0")
    [p] = report["problems"]
    assert (p["code"], p["position"], p["offset"]) == ("crc_mismatch", 38490, 1890)
    assert p["file"].endswith("00000000000000001470.log")
    report = verify_partition(FIXTURES / "corrupt_garbage-0")
    [p] = report["problems"]
    assert (p["code"], p["position"], p["offset"]) == ("corrupt_batch", 39804, None)


def test_gzip_batch_with_valid_crc_but_undecodable_records(fixture_copy):
    d = fixture_copy("gzip-0")
    row = flip_payload(d / LOG0, 3)
    assert verify_partition(d, deep=False)["ok"]         # the CRC check alone misses it
    report = verify_partition(d)
    [p] = report["problems"]
    assert p["code"] == "undecodable_records"
    assert p["file"] == str(d / LOG0)
    assert (p["position"], p["offset"]) == (int(row["position"]), int(row["base_offset"]))
    assert "gzip" in p["message"]


@pytest.mark.parametrize("name", ["plain-0", "gzip-0"])
@pytest.mark.parametrize("delta", [1, -1])
def test_record_count_mismatch(fixture_copy, name, delta):
    d = fixture_copy(name)
    log = d / LOG0
    row = batches_of(log)[2]
    data = bytearray(log.read_bytes())
    pos = int(row["position"])
    struct.pack_into(">i", data, pos + 57, int(row["record_count"]) + delta)
    seal(data, pos)
    log.write_bytes(bytes(data))
    report = verify_partition(d)
    [p] = report["problems"]
    assert (p["code"], p["position"], p["offset"]) == \
        ("record_count_mismatch", pos, int(row["base_offset"]))


def test_all_zero_time_index(fixture_copy):
    d = fixture_copy("plain-0")
    tidx = d / "00000000000000000000.timeindex"
    size = tidx.stat().st_size
    tidx.write_bytes(b"\0" * size)
    report = verify_partition(d)
    [p] = report["problems"]
    assert (p["code"], p["file"], p["position"]) == ("index_zero_tail", str(tidx), 0)
    assert f"all {size // 12} entries are zero" in p["message"]


def test_index_zero_tails(fixture_copy):
    d = fixture_copy("multiseg-0")
    idx = d / "00000000000000002000.index"
    tidx = d / "00000000000000002000.timeindex"
    size = idx.stat().st_size
    with open(idx, "ab") as f:                           # left at a preallocated size
        f.write(b"\0" * 800)
    data = bytearray(tidx.read_bytes())                  # the last 3 entries lost
    data[-36:] = b"\0" * 36
    tidx.write_bytes(bytes(data))
    report = verify_partition(d)
    assert codes(report) == ["index_zero_tail"]
    tails = {p["file"]: p for p in report["problems"]}
    assert tails[str(idx)]["position"] == size and "100 all-zero entries" in \
        tails[str(idx)]["message"]
    assert tails[str(tidx)]["position"] == len(data) - 36


def test_time_index_entry_mismatch(fixture_copy):
    d = fixture_copy("plain-0")
    tidx = d / "00000000000000000000.timeindex"
    data = bytearray(tidx.read_bytes())
    ts, rel = struct.unpack_from(">qi", data, 5 * 12)
    struct.pack_into(">q", data, 5 * 12, ts - 1)         # no longer the max so far
    struct.pack_into(">i", data, 9 * 12 + 8, 10**6)      # offset outside the segment
    tidx.write_bytes(bytes(data))
    report = verify_partition(d)
    found = {p["position"]: p for p in only(report, "time_index_mismatch")}
    assert set(found) == {5 * 12, 9 * 12}
    assert found[60]["offset"] == rel and found[108]["offset"] == 10**6


def test_offset_index_entry_not_at_a_batch(fixture_copy):
    d = fixture_copy("plain-0")
    idx = d / "00000000000000000000.index"
    data = bytearray(idx.read_bytes())
    rel, pos = struct.unpack_from(">ii", data, 3 * 8)
    struct.pack_into(">i", data, 3 * 8 + 4, pos + 1)
    idx.write_bytes(bytes(data))
    report = verify_partition(d)
    [p] = report["problems"]
    assert (p["code"], p["file"], p["position"], p["offset"]) == \
        ("index_entry_not_at_batch", str(idx), 24, rel)


def test_garbage_in_the_middle_of_a_segment(fixture_copy):
    d = fixture_copy("multiseg-0")
    log = d / "00000000000000004000.log"
    rows = batches_of(log)
    at = int(rows["position"][20])
    insert(log, at, garbage(200))
    overwrite(log, int(rows["position"][40]) + 200 + 100, garbage(50, seed=2))
    report = verify_partition(d)
    damage = [p for p in report["problems"] if p["file"] == str(log)]
    assert [(p["code"], p["position"]) for p in damage] == [
        ("corrupt_batch", at), ("crc_mismatch", int(rows["position"][40]) + 200)]
    assert "the next intact batch is at position" in damage[0]["message"]
    # index entries past the inserted bytes point 200 bytes early now
    assert "index_entry_not_at_batch" in codes(report)
    # the batches after both damaged regions are still checked (deep): all records counted
    seg = next(s for s in report["segments"] if s["file"] == log.name)
    assert seg["records"] == 10 * (len(rows) - 1)


def test_offsets_not_increasing(fixture_copy):
    d = fixture_copy("plain-0")
    log = d / LOG0
    rows = batches_of(log)
    data = bytearray(log.read_bytes())
    # the base offset is outside the CRC: a batch claiming its predecessor's offsets
    struct.pack_into(">q", data, int(rows["position"][7]), int(rows["base_offset"][6]))
    log.write_bytes(bytes(data))
    report = verify_partition(d)
    p = only(report, "offsets_not_increasing")[0]
    assert (p["position"], p["offset"]) == (int(rows["position"][7]), int(rows["base_offset"][6]))


def test_offsets_not_increasing_across_segments(fixture_copy):
    d = fixture_copy("multiseg-0")
    logs = sorted(d.glob("*.log"))
    rows = batches_of(logs[1])
    data = bytearray(logs[1].read_bytes())
    struct.pack_into(">q", data, 0, int(rows["base_offset"][0]) - 1)
    logs[1].write_bytes(bytes(data))
    report = verify_partition(d)
    p = only(report, "offsets_not_increasing")[0]
    assert p["file"] == str(logs[1]) and p["position"] == 0


def test_snapshot_above_the_log_end_and_corrupt_snapshot(fixture_copy):
    d = fixture_copy("gzip-0")
    last = d / "00000000000000006130.snapshot"
    shutil.copyfile(last, d / "00000000000000009999.snapshot")
    data = bytearray((d / "00000000000000002830.snapshot").read_bytes())
    data[-1] ^= 0xFF
    (d / "00000000000000002830.snapshot").write_bytes(bytes(data))
    report = verify_partition(d)
    assert report["offsets"]["log_end_offset"] == 6130
    assert codes(report) == ["corrupt_snapshot", "snapshot_above_log_end"]
    [above] = only(report, "snapshot_above_log_end")
    assert above["offset"] == 9999 and above["file"].endswith("00000000000000009999.snapshot")
    [bad] = only(report, "corrupt_snapshot")
    assert bad["offset"] == 2830


def test_leader_epoch_checkpoint(fixture_copy):
    d = fixture_copy("multiseg-0")
    epochs = d / "leader-epoch-checkpoint"
    epochs.write_text("0\n3\n0 0\n1 12000\n4 20000\n")    # epoch 1 started at 10000
    report = verify_partition(d)
    mismatch = only(report, "leader_epoch_mismatch")
    assert mismatch[0]["offset"] == 10000 and "epoch 0" in mismatch[0]["message"]
    epochs.write_text("0\n3\n0 0\n1 10000\n4 40000\n")
    assert codes(verify_partition(d)) == ["leader_epoch_above_log_end"]
    epochs.write_text("0\n3\n0 0\n4 10000\n1 20000\n")
    assert "leader_epoch_out_of_order" in codes(verify_partition(d))
    epochs.write_text("0\nthree\n")
    report = verify_partition(d)
    [p] = only(report, "corrupt_checkpoint")
    assert p["file"] == str(epochs)
    assert codes(report) == ["cannot_open", "corrupt_checkpoint"]     # as a broker could not


def test_memory_stays_bounded_chunk_size_does_not_change_the_result(fixture_copy):
    d = fixture_copy("gzip-0")
    flip_payload(d / LOG0, 5)
    big = verify_partition(d)
    small = verify_partition(d, chunk_bytes=1)            # one batch per decode call
    assert big["problems"] == small["problems"]
    assert [s["records"] for s in big["segments"]] == [s["records"] for s in small["segments"]]


# ------------------------------------------------------------------------------ the CLI
def test_verify_cli_text_and_json(capfd):
    assert main(["verify", str(FIXTURES / "txn-0"), str(FIXTURES / "legacy_v1_codecs-0")]) == 0
    out = capfd.readouterr().out
    assert out.count("OK ") == 2 and "records" in out
    assert main(["verify", str(FIXTURES / "corrupt_flip-0")]) == 1
    out = capfd.readouterr().out
    assert "crc_mismatch: 00000000000000001470.log position 38490 offset 1890:" in out
    assert "CRC" in out
    assert main(["verify", "--json", str(FIXTURES / "crashed-0")]) == 1
    doc = json.loads(capfd.readouterr().out)
    problems = doc["partitions"][0]["problems"]
    assert not doc["ok"] and all(set(p) == FIELDS for p in problems)
    assert any(p["code"] == "torn_tail" and p["position"] == 3936 for p in problems)


def test_verify_cli_shallow_opt_out(fixture_copy, capfd):
    d = fixture_copy("zstd-0")
    flip_payload(d / LOG0, 1)
    assert main(["verify", "--shallow", str(d)]) == 0
    assert "records" not in capfd.readouterr().out
    assert main(["verify", str(d)]) == 1
    out = capfd.readouterr().out
    assert "undecodable_records" in out


def test_verify_a_whole_log_dir_with_progress(capfd):
    assert main(["verify", "--progress", str(FIXTURES)]) == 1      # it holds damaged ones
    captured = capfd.readouterr()
    assert captured.out.count("OK ") == len(CLEAN) and captured.out.count("FAIL") == 3
    assert "kafkalog verify: " in captured.err and "B/s" in captured.err   # tqdm's bar


def test_render_problem():
    report = verify_partition(FIXTURES / "crashed-0")
    lines = [render_problem(p, report["dir"]) for p in report["problems"]]
    assert lines[0].startswith("torn_tail: 00000000000000000612.log position 3936 offset 639: ")


def test_preallocated_log_zero_tail(fixture_copy):
    d = fixture_copy("plain-0")
    log = d / LOG0
    size = log.stat().st_size
    with open(log, "ab") as f:
        f.write(b"\0" * 4096)
    report = verify_partition(d)
    [p] = report["problems"]
    assert (p["code"], p["position"]) == ("log_zero_tail", size)
    assert report["segments"][0]["valid_bytes"] == size


def test_a_short_middle_segment_is_missing_data_not_a_torn_write(fixture_copy):
    d = fixture_copy("multiseg-0")
    logs = sorted(d.glob("*.log"))
    middle = logs[4]
    size = middle.stat().st_size
    with open(middle, "r+b") as f:
        f.truncate(size - 100)
    report = verify_partition(d)
    [p] = [p for p in report["problems"] if p["file"] == str(middle)]
    assert p["code"] == "missing_data" and "not a torn write" in p["message"]
    assert "torn_tail" not in codes(report)
    # the same cut at the end of the last segment is a torn write
    last = logs[-1]
    with open(last, "r+b") as f:
        f.truncate(last.stat().st_size - 100)
    assert [p["file"] for p in only(verify_partition(d), "torn_tail")] == [str(last)]
