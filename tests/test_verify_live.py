"""verify of a partition a writer holds open (issue #39 part 4): the writer's normal state is
not damage. The writer runs in another process, driven step by step through a pipe; verify's
phases are interleaved with the writer's appends and rolls by hooks, not by sleeps."""
import os
import subprocess
import sys

import pytest

from kafkalog import locks, verify
from kafkalog.cli import main
from kafkalog.verify import verify_partition

from conftest import REPO

WRITER = """
import sys
from kafkalog import Log, Record
log = Log.open(sys.argv[1], {"segment.bytes": 4096, "index.interval.bytes": 256})
print("ready", flush=True)
for line in sys.stdin:
    cmd, n = line.split()
    for _ in range(int(n)):
        if cmd == "append":
            log.append([Record(key=b"k", value=b"v" * 100) for _ in range(3)])
        elif cmd == "roll":
            log.roll()
    print("ok", log.log_end_offset, flush=True)
log.close()
"""


class Writer:
    """A writable Log in another process; ``do(cmd, n)`` returns once it is done."""

    def __init__(self, path):
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().split() == ["ready"]

    def do(self, cmd, n=1):
        self.proc.stdin.write(f"{cmd} {n}\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline().split()[1])

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture
def writer(tmp_path):
    w = Writer(tmp_path / "t-0")
    yield w
    w.close()


# verify's phases, and what the writer does just before each (an append past the end read,
# a roll that writes a snapshot and a new segment)
HOOKS = ["_verify_segment", "_verify_indexes", "_verify_snapshots", "_verify_leader_epochs"]


def test_no_false_problem_beside_a_writer(writer, tmp_path, monkeypatch):
    d = tmp_path / "t-0"
    writer.do("append", 12)
    assert locks.writer_holds(str(d))
    runs = 0
    for hook in HOOKS:
        for cmds in (["append"], ["roll"], ["append", "roll"]):
            real = getattr(verify, hook)

            def interleaved(*args, real=real, cmds=cmds, **kwargs):
                for cmd in cmds:        # (a roll after appends: a snapshot above the end)
                    writer.do(cmd, 2 if cmd == "append" else 1)
                return real(*args, **kwargs)
            with monkeypatch.context() as m:
                m.setattr(verify, hook, interleaved)
                report = verify_partition(d)
            runs += 1
            assert report["live"] and report["problems"] == [], (hook, cmds, report["problems"])
            writer.do("append", 3)
    assert runs == 12


def test_damage_is_still_reported_in_a_live_partition(writer, tmp_path, capfd):
    d = tmp_path / "t-0"
    writer.do("append", 30)
    first = d / "00000000000000000000.log"
    data = bytearray(first.read_bytes())
    data[200] ^= 0xFF                    # inside the first batch's records: a CRC failure
    first.write_bytes(bytes(data))
    report = verify_partition(d)
    assert report["live"] and [p["code"] for p in report["problems"]] == ["crc_mismatch"]
    assert main(["verify", str(d)]) == 1
    assert "live: a writer holds it" in capfd.readouterr().out


def test_a_closed_partition_is_not_live(tmp_path):
    w = Writer(tmp_path / "t-0")
    w.do("append", 5)
    w.close()
    report = verify_partition(tmp_path / "t-0")
    assert report["ok"] and not report["live"]
