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
