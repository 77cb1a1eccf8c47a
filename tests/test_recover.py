"""Recovery says what it did: the RecoveryReport of Log.open, `kafkalog recover` (text and
--json), a dry run that predicts it exactly, and --keep that moves instead of deleting. Damage
is done to copies of the Kafka-written fixtures."""
import json
import logging
import time

import pytest

from kafkalog import Log, iter_batches
from kafkalog.cli import RECORDS_DROPPED, main
from kafkalog.config import LogConfig
from kafkalog.errors import InvalidConfigError
from kafkalog.recovery import recover_partition
from kafkalog.salvage import salvage_partition
from kafkalog.segment import LogSegment

from conftest import FIXTURES
from test_segment import reappend_batches



def torn_backup(fixture_copy):
    """multiseg-0 with segment 4 torn mid-batch: recovery cuts it and drops the 10 after."""
    d = fixture_copy("multiseg-0")
    logs = sorted(d.glob("*.log"))
    torn = logs[4]
    size = torn.stat().st_size
    with open(torn, "r+b") as f:
        f.truncate(size - 100)
    return d, logs, torn, size


def test_load_reports_and_logs_every_change(fixture_copy, caplog):
    d, logs, torn, size = torn_backup(fixture_copy)
    snapshots_before = sorted(p.name for p in d.glob("*.snapshot"))
    with caplog.at_level(logging.WARNING, logger="kafkalog.loader"):
        log = Log.open(d, recovery_point=0, clean_shutdown=False)
    actions = [(a["action"], a["file"]) for a in log.recovery_report]
    truncated = [a for a in log.recovery_report if a["action"] == "truncated"]
    assert [a["file"] for a in truncated] == [torn.name]
    assert 0 < truncated[0]["bytes"] < size
    deleted = [f for a, f in actions if a == "deleted_segment"]
    assert deleted == [p.name for p in logs[5:]]
    # the snapshots above the new log end go, as Kafka's truncateAndReload deletes them
    gone = {f for a, f in actions if a == "deleted_snapshot"}
    assert gone and all(int(f[:20]) > log.log_end_offset for f in gone)
    assert sorted(p.name for p in d.glob("*.snapshot")) == \
        sorted(set(snapshots_before) - gone)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for _, f in actions:
        assert f in logged
    log.close()
    # a clean reopen has nothing to say
    with Log.open(d) as again:
        assert not again.recovery_report


def test_dry_run_predicts_exactly_and_changes_nothing(fixture_copy):
    d, _, _, _ = torn_backup(fixture_copy)
    before = {f.name: f.read_bytes() for f in d.iterdir()}
    predicted = recover_partition(d, dry_run=True)
    assert {f.name: f.read_bytes() for f in d.iterdir()} == before
    done = recover_partition(d)
    assert predicted["dry_run"] and not done["dry_run"]
    assert predicted["actions"] == done["actions"] and predicted["actions"]
    assert (predicted["log_start_offset"], predicted["log_end_offset"]) == \
        (done["log_start_offset"], done["log_end_offset"])
    assert recover_partition(d)["actions"] == []


def test_recover_keep_moves_instead_of_deleting(fixture_copy, tmp_path, capfd):
    d, logs, torn, size = torn_backup(fixture_copy)
    keep = tmp_path / "kept"
    originals = {p.name: p.read_bytes() for p in logs[5:]}
    torn_bytes = torn.read_bytes()
    # records left the log (moved, not lost): the exit status says so
    assert main(["recover", "--keep", str(keep), "--json", str(d)]) == RECORDS_DROPPED
    doc = json.loads(capfd.readouterr().out)
    (part,) = doc["partitions"]
    kinds = {a["action"] for a in part["actions"]}
    assert {"truncated", "kept_bytes", "kept_segment"} <= kinds
    assert "deleted_segment" not in kinds
    kept = keep / d.name
    for name, data in originals.items():                   # whole segments, moved
        assert (kept / name).read_bytes() == data
    (cut,) = list(kept.glob(torn.name + ".from-*"))
    valid = int(cut.name.rsplit("-", 1)[1])
    assert torn.read_bytes() + cut.read_bytes() == torn_bytes   # nothing lost
    assert len(torn.read_bytes()) == valid
    # and a Kafka-readable partition is left behind
    with Log.open(d, read_only=True) as log:
        assert log.log_end_offset == part["log_end_offset"]


def flipped_backup(fixture_copy):
    """multiseg-0 with one byte flipped in the batch of offsets 4030-4039 (segment 2): Kafka's
    recovery cuts segment 2 there and deletes the 12 intact segments after it."""
    d = fixture_copy("multiseg-0")
    log = sorted(d.glob("*.log"))[2]
    data = bytearray(log.read_bytes())
    data[5000] ^= 1
    log.write_bytes(bytes(data))
    return d


def test_recover_says_what_it_drops(fixture_copy, capfd):
    d = flipped_backup(fixture_copy)
    intact = salvage_partition(d).record_count           # 29,990: all but the damaged batch
    assert main(["recover", "--dry-run", str(d)]) == RECORDS_DROPPED
    out, err = capfd.readouterr()
    dropped = intact - 4030
    assert f"  would drop: {dropped} intact records (offsets 4040-29999); 12 segments and " \
        in out
    # each action once, on stdout: no loader WARNING naming the scratch copy
    assert "kafkalog-recover-" not in out + err
    assert err.count("\n") == 1 and f"kafkalog salvage --out NEW_DIR {d}" in err
    assert main(["recover", "--json", str(d)]) == RECORDS_DROPPED
    (part,) = json.loads(capfd.readouterr().out)["partitions"]
    assert part["log_end_offset"] == 4030
    assert {k: part["dropped"][k] for k in ("records", "first_offset", "last_offset",
                                            "segments")} == \
        {"records": dropped, "first_offset": 4040, "last_offset": 29999, "segments": 12}
    cut = sum(a["bytes"] for a in part["actions"]
              if a["action"] in ("truncated", "deleted_segment"))
    assert part["dropped"]["bytes"] == cut
    # the log now holds what was kept; nothing is left to drop
    assert main(["recover", str(d)]) == 0
    out = capfd.readouterr().out
    assert "nothing to repair" in out and "  dropped:" not in out


def test_recover_of_a_torn_tail_drops_no_record(fixture_copy, capfd):
    d = fixture_copy("crashed-0")
    assert main(["recover", str(d)]) == 0
    out, err = capfd.readouterr()
    assert "  dropped: no intact record; 656 bytes in all" in out and err == ""


@pytest.mark.parametrize("name", ["crashed-0", "corrupt_flip-0", "corrupt_garbage-0"])
def test_recover_cli_text_matches_the_report(fixture_copy, capfd, name):
    d = fixture_copy(name)
    assert main(["recover", "--dry-run", "--json", str(d)]) == 0
    (predicted,) = json.loads(capfd.readouterr().out)["partitions"]
    assert main(["recover", str(d)]) == 0
    out = capfd.readouterr().out
    for a in predicted["actions"]:
        assert f"did: {a['action'].replace('_', ' ')} {a['file']}" in out
    assert f"log end offset {predicted['log_end_offset']}" in out


def test_rebuilt_indexes_are_reported(fixture_copy):
    d = fixture_copy("multiseg-0")
    logs = sorted(p.name[:20] for p in d.glob("*.log"))
    (d / f"{logs[2]}.index").unlink()
    zeroed = d / f"{logs[3]}.timeindex"
    zeroed.write_bytes(b"\0" * zeroed.stat().st_size)
    result = recover_partition(d)
    rebuilt = [a["file"] for a in result["actions"] if a["action"] == "rebuilt_index"]
    assert sorted(rebuilt) == sorted([f"{logs[2]}.index", f"{logs[3]}.timeindex"])
    assert result["log_end_offset"] == 30000
    assert not [a for a in result["actions"] if a["action"] in ("truncated", "deleted_segment")]


def test_a_corrupt_index_does_not_hide_a_cut(fixture_copy, tmp_path):
    """An index rebuilt inside recovery goes through the same hook: the cut is reported and
    kept, never made silently by a nested rebuild."""
    d = fixture_copy("multiseg-0")
    logs = sorted(d.glob("*.log"))
    (d / (logs[-1].name[:20] + ".index")).write_bytes(b"\1" * 13)    # corrupt
    with open(logs[-1], "ab") as f:
        f.write(b"\0" * 30)
    result = recover_partition(d, keep=tmp_path / "kept")
    assert [a["file"] for a in result["actions"] if a["action"] == "truncated"] == \
        [logs[-1].name]
    assert any(a["action"] == "kept_bytes" for a in result["actions"])


def test_a_dry_run_that_cannot_copy_is_a_typed_error(fixture_copy, monkeypatch):
    import errno
    import shutil
    from kafkalog.errors import KafkaLogError
    d = fixture_copy("crashed-0")
    before = {f.name: f.read_bytes() for f in d.iterdir()}

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(shutil, "copytree", full)
    with pytest.raises(KafkaLogError, match="scratch directory"):
        recover_partition(d, dry_run=True)
    assert {f.name: f.read_bytes() for f in d.iterdir()} == before


def _truncation_reason(d):
    with Log.open(d, recovery_point=0, clean_shutdown=False) as log:
        return [a["reason"] for a in log.recovery_report if a["action"] == "truncated"]


def test_recovery_calls_a_zeroed_tail_zeros(fixture_copy):
    """The reason of a truncation is the segment walker's outcome, not "a torn write" for
    every batch cut short."""
    d = fixture_copy("plain-0")
    log = next(d.glob("*.log"))
    size = log.stat().st_size
    with open(log, "ab") as f:                     # a preallocated tail left by a crash
        f.write(b"\0" * 4096)
    [reason] = _truncation_reason(d)
    assert f"at position {size}: 4096 all-zero bytes" in reason and "torn" not in reason


def test_recovery_calls_a_size_running_past_intact_batches_damage(fixture_copy):
    d = fixture_copy("plain-0")
    log = next(d.glob("*.log"))
    pos = [b.position for b in iter_batches(log)][100]
    with open(log, "r+b") as f:
        f.seek(pos + 8)
        f.write((10**6).to_bytes(4, "big"))
    [reason] = _truncation_reason(d)
    assert f"at position {pos}: " in reason
    assert "the next intact batch is at position" in reason and "torn" not in reason


def test_recovery_calls_a_torn_write_one(fixture_copy):
    d = fixture_copy("plain-0")
    log = next(d.glob("*.log"))
    with open(log, "r+b") as f:
        f.truncate(log.stat().st_size - 100)
    [reason] = _truncation_reason(d)
    assert "(a torn write)" in reason


def test_recovery_of_a_short_middle_segment_says_data_is_missing(fixture_copy):
    d, _, torn, _ = torn_backup(fixture_copy)
    with Log.open(d, recovery_point=0, clean_shutdown=False) as log:
        [cut] = [a for a in log.recovery_report if a["action"] == "truncated"]
    assert cut["file"] == torn.name
    assert "not the last segment" in cut["reason"] and "(a torn write)" not in cut["reason"]


# The topic config: an interval other than the default, so a rebuild with the default differs.
INTERVAL = {"index.interval.bytes": 1000}


def kafka_indexed(name, d, settings):
    """``d``: the segments of fixture ``name`` with the indexes Kafka writes for ``settings``
    (its batches re-appended one by one, as test_segment reproduces Kafka's indexes)."""
    d.mkdir()
    for src in sorted((FIXTURES / name).glob("*.log")):
        reappend_batches(src, LogSegment(d, int(src.name[:20]), LogConfig(settings)))
    return d


def index_files(d):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(d.iterdir()) if p.suffix in (".index", ".timeindex")}


def test_recover_with_the_topic_config_leaves_intact_indexes_alone(tmp_path):
    d = kafka_indexed("multiseg-0", tmp_path / "multiseg-0", INTERVAL)
    before = index_files(d)
    assert len({len(b) for b, _ in before.values()}) == 2    # indexed at the config's interval
    time.sleep(0.01)
    result = recover_partition(d, config=INTERVAL)
    assert result["actions"] == [] and result["log_end_offset"] == 30000
    after = index_files(d)
    assert {n: b for n, (b, _) in after.items()} == {n: b for n, (b, _) in before.items()}
    # Untouched; but the last segment's, which the loader grows for appends (as Kafka's
    # LogLoader resizes the active segment's indexes) and closing trims back.
    active = max(int(n[:20]) for n in after)
    assert [n for n in after if after[n][1] != before[n][1] and int(n[:20]) != active] == []
    # Without the config the same segments' indexes are "wrong" and rewritten.
    rebuilt = [a for a in recover_partition(d)["actions"] if a["action"] == "rebuilt_index"]
    assert len(rebuilt) == len(before)


def test_recover_rebuilds_at_the_config_interval(tmp_path, capfd):
    expected = index_files(kafka_indexed("multiseg-0", tmp_path / "kafka", INTERVAL))
    d = kafka_indexed("multiseg-0", tmp_path / "multiseg-0", INTERVAL)
    base = sorted(expected)[4][:20]
    (d / f"{base}.index").unlink()
    (d / f"{base}.timeindex").write_bytes(b"\0" * 120)
    properties = tmp_path / "topic.properties"
    properties.write_text("# the topic's settings\nindex.interval.bytes=1000\n")
    assert main(["recover", "--config", str(properties), "--json", str(d)]) == 0
    (result,) = json.loads(capfd.readouterr().out)["partitions"]
    assert sorted(a["file"] for a in result["actions"]) == \
        [f"{base}.index", f"{base}.timeindex"]
    assert {n: b for n, (b, _) in index_files(d).items()} == \
        {n: b for n, (b, _) in expected.items()}
    # The Python entry point takes the same file, a LogConfig or a mapping.
    for config in (properties, str(properties), LogConfig(INTERVAL)):
        assert recover_partition(d, config=config)["actions"] == []


def test_recover_with_an_unreadable_config_is_an_error(tmp_path, fixture_copy, capfd):
    d = fixture_copy("plain-0")
    bad = tmp_path / "bad.properties"
    bad.write_text("index.interval.bytes=-1\n")
    assert main(["recover", "--config", str(bad), str(d)]) == 1
    err = capfd.readouterr().err
    assert err.startswith("kafkalog recover: ") and "index.interval.bytes" in err
    assert main(["recover", "--config", str(tmp_path / "missing.properties"), str(d)]) == 1
    assert "cannot read topic settings" in capfd.readouterr().err
    with pytest.raises(InvalidConfigError):
        recover_partition(d, config={"no.such.setting": 1})
