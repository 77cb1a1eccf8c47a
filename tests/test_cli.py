"""``kafkalog dump``: the JSON document equals Kafka's reading; text listing; single files."""
import json
import os
import subprocess
import sys

import pytest

from kafkalog.cli import main

from conftest import FIXTURES, expected
from test_records import diff


def run_cli(*args):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "kafkalog", *args], capture_output=True,
                          text=True, env=env)


@pytest.mark.parametrize("name", ["txn-0", "legacy_v1_codecs-0", "crashed-0"])
def test_dump_json_subprocess_equals_expected(name):
    exp = expected(FIXTURES / name)
    r = run_cli("dump", "--json", "--records", exp["records_mode"], str(FIXTURES / name))
    assert r.returncode == 0, r.stderr
    assert diff(exp, json.loads(r.stdout)) is None


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


def test_dump_text_listing(capfd):
    assert main(["dump", str(FIXTURES / "txn-0")]) == 0
    out = capfd.readouterr().out
    assert "Dumping 00000000000000000000.log" in out
    assert "baseOffset: 0 lastOffset:" in out and "isvalid: true" in out
    assert "endTxnMarker: ABORT coordinatorEpoch: 10" in out
    assert "| offset: 0 CreateTime:" in out
    assert "Dumping 00000000000000000645.snapshot" in out
    assert "epoch: 0 startOffset: 0" in out


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


def test_dump_bad_paths(tmp_path, capfd):
    assert main(["dump", str(tmp_path / "missing")]) == 1
    assert "missing" in capfd.readouterr().err
    (tmp_path / "notes.txt").write_text("x")
    assert main(["dump", str(tmp_path / "notes.txt")]) == 1
    assert "not a partition directory" in capfd.readouterr().err


def test_dump_does_not_modify_files(fixture_copy):
    d = fixture_copy("crashed-0")
    before = {f.name: (f.stat().st_size, f.read_bytes()) for f in d.iterdir()}
    assert main(["dump", "--json", str(d)]) == 0
    after = {f.name: (f.stat().st_size, f.read_bytes()) for f in d.iterdir()}
    assert before == after


def test_version():
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("kafkalog ")


def test_verify_clean_and_damaged_fixtures(capfd):
    assert main(["verify", str(FIXTURES / "txn-0"), str(FIXTURES / "legacy_v1_codecs-0")]) == 0
    assert capfd.readouterr().out.count("OK ") == 2
    assert main(["verify", str(FIXTURES / "corrupt_flip-0")]) == 1
    out = capfd.readouterr().out
    assert "position 38490" in out and "CRC" in out
    assert main(["verify", "--json", str(FIXTURES / "crashed-0")]) == 1
    doc = json.loads(capfd.readouterr().out)
    problems = doc["partitions"][0]["problems"]
    assert not doc["ok"] and any("position 3936" in p for p in problems)
    assert any("all-zero entries" in p for p in problems)


def test_verify_a_whole_log_dir_with_progress(capfd):
    assert main(["verify", "--progress", str(FIXTURES)]) == 1      # it holds damaged ones
    captured = capfd.readouterr()
    assert captured.out.count("OK ") == 12 and captured.out.count("FAIL") == 3
    assert "verifying [" in captured.err


@pytest.mark.parametrize("name,truncated", [("crashed-0", 656), ("corrupt_flip-0", 1314),
                                            ("corrupt_garbage-0", 100)])
def test_recover_dry_run_then_recover(fixture_copy, capfd, name, truncated):
    d = fixture_copy(name)
    before = {f.name: f.read_bytes() for f in d.iterdir()}
    assert main(["recover", "--dry-run", str(d)]) == 0
    out = capfd.readouterr().out
    assert "would truncate" in out and f"by {truncated} bytes" in out
    assert {f.name: f.read_bytes() for f in d.iterdir()} == before
    assert main(["recover", str(d)]) == 0
    assert "did truncate" in capfd.readouterr().out
    assert main(["verify", str(d)]) == 0
    assert main(["recover", str(d)]) == 0
    assert "nothing to repair" in capfd.readouterr().out


def test_verify_and_recover_bad_paths(tmp_path, capfd):
    assert main(["verify", str(tmp_path / "nope")]) == 1
    assert main(["recover", str(tmp_path)]) == 1
    assert "neither a partition directory" in capfd.readouterr().err
