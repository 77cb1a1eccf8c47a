"""The command line: `verify` and `recover` on bad paths, `--version`, the entry points.

Dump: tests/test_dump.py; verify: tests/test_verify.py; recover: tests/test_recover.py."""
import os
import subprocess
import sys

import pytest

from kafkalog.cli import main



def run_cli(*args):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "kafkalog", *args], capture_output=True,
                          text=True, env=env)


# dump: tests/test_dump.py


def test_version():
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("kafkalog ")


# verify: tests/test_verify.py


@pytest.mark.parametrize("name,truncated", [("crashed-0", 656), ("corrupt_flip-0", 1314),
                                            ("corrupt_garbage-0", 100)])
def test_recover_dry_run_then_recover(fixture_copy, capfd, name, truncated):
    d = fixture_copy(name)
    before = {f.name: f.read_bytes() for f in d.iterdir()}
    assert main(["recover", "--dry-run", str(d)]) == 0
    out = capfd.readouterr().out
    assert "would: truncated" in out and f"({truncated} bytes)" in out
    assert {f.name: f.read_bytes() for f in d.iterdir()} == before
    assert main(["recover", str(d)]) == 0
    assert "did: truncated" in capfd.readouterr().out
    assert main(["verify", str(d)]) == 0
    assert main(["recover", str(d)]) == 0
    assert "nothing to repair" in capfd.readouterr().out


def test_verify_and_recover_bad_paths(tmp_path, capfd):
    assert main(["verify", str(tmp_path / "nope")]) == 1
    assert main(["recover", str(tmp_path)]) == 1
    assert "neither a partition directory" in capfd.readouterr().err


@pytest.mark.parametrize("argv,answer", [
    (["verfy", "x"], "invalid choice: 'verfy' (did you mean verify?)"),
    (["dump", "--records", "ful", "x"], "invalid choice: 'ful' (did you mean full?)"),
    (["recover", "--dry-rn", "x"], "unrecognized arguments: --dry-rn (did you mean --dry-run?)"),
    (["verify", "--shalow", "--jsn", "x"], "--jsn (did you mean --json?)"),
])
def test_typos_are_answered_with_the_closest_name(argv, answer, capfd):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and answer in capfd.readouterr().err


def _log_bytes(d):
    return sum(p.stat().st_size for p in d.glob("*.log"))


@pytest.mark.parametrize("argv", [["verify"], ["dump", "--records", "none"], ["salvage"],
                                  ["recover", "--dry-run"]])
def test_progress_of_one_partition(fixture_copy, argv, capfd):
    d = fixture_copy("multiseg-0")
    main([*argv, str(d)])
    assert capfd.readouterr().err == ""          # piped: silent unless asked
    main([*argv, "--progress", str(d)])
    err = capfd.readouterr().err
    assert f"kafkalog {argv[0]}: " in err and "B/s" in err


def test_the_library_reports_progress_and_never_prints(fixture_copy, capfd):
    from kafkalog import progress
    from kafkalog.dump import DumpOptions, iter_json
    from kafkalog.recovery import recover_partition
    from kafkalog.salvage import salvage_partition
    from kafkalog.verify import verify_partition
    d = fixture_copy("multiseg-0")
    for work in (lambda: verify_partition(d), lambda: salvage_partition(d),
                 lambda: recover_partition(d, dry_run=True),
                 lambda: "".join(iter_json(d, DumpOptions(records="none")))):
        seen = []
        with progress.reporting(seen.append):
            work()
        assert sum(seen) == _log_bytes(d) and len(seen) > 1
    assert capfd.readouterr() == ("", "")


def test_counts_take_the_singular_for_one(tmp_path, capfd):
    """Every count the commands print comes from one helper: "1 segment", "1 more problem"."""
    from kafkalog import Log, Record, iter_batches
    from kafkalog._text import counted
    assert [counted(1, "intact batch"), counted(2, "intact batch"), counted(0, "entry"),
            counted(3, "partition directory")] == \
        ["1 intact batch", "2 intact batches", "0 entries", "3 partition directories"]
    part = tmp_path / "t-0"
    with Log.open(part) as log:
        for _ in range(22):
            log.append([Record(value=b"x" * 20)])
    assert main(["verify", str(part)]) == 0
    assert "1 segment, 22 batches, 22 records\n" in capfd.readouterr().out
    segment = part / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    for batch in list(iter_batches(segment))[1::2]:      # 11 CRC failures between intact batches
        data[batch.position + batch.size_in_bytes - 1] ^= 0xFF
    segment.write_bytes(data)
    assert main(["verify", str(part)]) == 1
    out = capfd.readouterr().out
    assert ", 11 problems" in out and "crc_mismatch: 00000000000000000000.log: 1 more problem " \
        "like the ones above" in out


@pytest.mark.parametrize("command", ["offsets", "groups", "transactions", "metadata"])
def test_an_internal_topic_command_on_a_wrong_directory_prints_only_its_error(command, tmp_path,
                                                                              capfd):
    (tmp_path / "demo-0").mkdir()
    assert main([command, str(tmp_path)]) == 1
    out, err = capfd.readouterr()
    assert out == "" and err.startswith(f"kafkalog {command}: {tmp_path}: ")
