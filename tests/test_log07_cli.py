"""``kafkalog dump``, ``verify`` and ``recover`` (and ``salvage``'s refusal) on Kafka 0.7
partition directories, found by their ``.kafka`` files; hand-built bytes from test_log07."""
import base64
import gzip
import json
import os

import pytest

from kafkalog.cli import main
from kafkalog.files import log07_file_name

from test_log07 import entry, gzip_wrapper, snappy_wrapper, write_dir


@pytest.fixture
def log_dir(tmp_path):
    """A log dir holding ``my_topic_0``: two files, the newest with a bad-CRC entry followed
    by zeros. Returns (log dir, partition dir, first invalid offset, bytes after it)."""
    f0 = entry(b"a", magic=0) + gzip_wrapper(b"g1", b"g2")
    good = entry(b"b") + snappy_wrapper(b"s1")
    bad = entry(b"nonsense", crc=7) + b"\0" * 20
    d = write_dir(tmp_path, {log07_file_name(0): f0, log07_file_name(len(f0)): good + bad},
                  name="my_topic_0")
    return tmp_path, d, len(f0) + len(good), len(bad)


def test_dump_text_and_json(log_dir, capfd):
    root, d, invalid, _ = log_dir
    assert main(["dump", str(root)]) == 1                 # damage found: exit 1
    out = capfd.readouterr().out
    assert "Kafka 0.7 partition directory my_topic_0 (topic my_topic, partition 0)" in out
    assert "offset: 0 next_offset: 10 size: 10 magic: 0 codec: none" in out
    assert out.count("codec: gzip") == 2 and "payload: s1" in out
    assert f"invalid bytes from offset {invalid}" in out
    assert main(["dump", "--json", str(d)]) == 1
    doc = json.loads(capfd.readouterr().out)
    assert (doc["format"], doc["topic"], doc["partition"]) == ("0.7", "my_topic", 0)
    messages = [m for s in doc["segments"] for m in s["messages"]]
    assert [base64.b64decode(m["payload"]) for m in messages] == [b"a", b"g1", b"g2", b"b",
                                                                  b"s1"]
    assert {"offset", "size", "crc", "codec", "payload"} <= set(messages[0])
    assert doc["segments"][1]["next_offset"] == invalid
    assert len(doc["problems"]) == 1


def test_verify_names_the_first_invalid_offset_and_writes_nothing(log_dir, capfd):
    root, d, invalid, cut = log_dir
    before = {n: (d / n).read_bytes() for n in os.listdir(d)}
    assert main(["verify", str(root)]) == 1
    out = capfd.readouterr().out
    assert f"offset {invalid}" in out and "crc_mismatch" in out
    assert main(["verify", "--json", str(d)]) == 1
    (report,) = json.loads(capfd.readouterr().out)["partitions"]
    assert report["format"] == "0.7" and report["offsets"]["log_end_offset"] == invalid
    assert [p["offset"] for p in report["problems"]] == [invalid]
    assert sum(s["records"] for s in report["segments"]) == 5
    assert {n: (d / n).read_bytes() for n in os.listdir(d)} == before


def test_recover(log_dir, tmp_path, capfd):
    root, d, invalid, cut = log_dir
    newest = d / sorted(os.listdir(d))[-1]
    size = newest.stat().st_size
    assert main(["recover", "--dry-run", str(d)]) == 0
    assert f"would: truncated {newest.name} (offset {invalid}, {cut} bytes)" in \
        capfd.readouterr().out
    assert newest.stat().st_size == size
    assert main(["recover", "--keep", str(tmp_path / "kept"), "--json", str(root)]) == 0
    (result,) = json.loads(capfd.readouterr().out)["partitions"]
    assert result["log_end_offset"] == invalid
    assert [a["action"] for a in result["actions"]] == ["kept_bytes", "truncated"]
    assert (result["dropped"]["records"], result["dropped"]["bytes"]) == (0, cut)
    assert newest.stat().st_size == size - cut
    assert os.path.getsize(tmp_path / "kept" / "my_topic_0" /
                           f"{newest.name}.from-{size - cut}") == cut
    assert main(["verify", str(d)]) == 0
    capfd.readouterr()


def test_salvage_refuses_a_0_7_directory(log_dir, capfd):
    assert main(["salvage", str(log_dir[1])]) == 1
    assert "Kafka 0.7 partition directory" in capfd.readouterr().err


def test_dump_of_one_kafka_file(log_dir, capfd):
    _, d, invalid, _ = log_dir
    second = sorted(os.listdir(d))[1]
    assert main(["dump", "--json", str(d / second)]) == 1
    doc = json.loads(capfd.readouterr().out)
    assert (doc["file"], doc["format"]) == (second, "0.7")
    assert [base64.b64decode(m["payload"]) for m in doc["segment"]["messages"]] == [b"b", b"s1"]
    assert doc["segment"]["next_offset"] == invalid and len(doc["problems"]) == 1
    assert main(["dump", str(d / second)]) == 1
    assert "payload: s1" in capfd.readouterr().out


def test_verify_deep_decodes_wrappers(tmp_path, capfd):
    bad = entry(gzip.compress(entry(b"x") + b"\0\0"), attributes=1)   # valid CRC, torn inside
    d = write_dir(tmp_path, {log07_file_name(0): entry(b"a") + bad})
    assert main(["verify", "--shallow", str(d)]) == 0
    capfd.readouterr()
    assert main(["verify", "--json", str(d)]) == 1
    (report,) = json.loads(capfd.readouterr().out)["partitions"]
    assert [(p["code"], p["offset"]) for p in report["problems"]] == \
        [("undecodable_records", len(entry(b"a")))]
