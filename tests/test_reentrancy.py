"""Nothing is re-entered half way (issue 39): an iterator advanced by a second caller (a
thread, a ``gc.callbacks`` callback, a ``__del__`` or ``weakref.finalize`` run by the garbage
collector inside its ``next``) raises "already executing"; a ``Log`` call that changes the
log re-entered from the same thread raises ReentrantCallError before writing; a Record with a
deleted field is an AttributeError, never a crash; a compaction's swap racing its manager's
shutdown completes.

The scenarios are in ``reentrancy_scenarios.py``; each family runs in its own process (with
the compiled kernels, and with the twins), so a signal fails that family's test, naming the
scenario it was in. Outcomes are counted; nothing depends on timing. (One process per family,
not per scenario: a process's imports cost more than its scenarios.)"""
import json
import os
import subprocess
import sys

import pytest

from twins import PURE

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HOWS = ("gc_callback", "del", "finalize")

FAMILIES = {
    "records": [f"records_reentered:how={how}{extra}"
                for how in HOWS for extra in ("", ",compression=gzip")] +
               ["records_threads", "records_threads:compression=gzip"],
    "batches": [f"batches_reentered:how={how}" for how in HOWS],
    "append": [f"append_reentered:how={how}{extra}"
               for how in HOWS for extra in ("", ",nested_call=roll")],
    "log": ["log_threads:how=gc_callback", "log_threads:how=del", "record_delete",
            "swap_after_shutdown"],
}
KERNELS = ["twins"] if PURE else ["compiled", "twins"]


def run_family(tmp_path, scenarios, kernels):
    """{scenario: its counted outcomes}, all run in one process; a signal fails here naming
    the scenario it came in."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    if kernels == "twins":
        env["KAFKALOG_NO_EXTENSIONS"] = "1"
    proc = subprocess.run([sys.executable, os.path.join(HERE, "reentrancy_scenarios.py"),
                           str(tmp_path), *scenarios], env=env, capture_output=True, text=True,
                          timeout=300)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    current = lines[-1].get("start") if lines else None
    assert proc.returncode == 0, (current, proc.returncode, proc.stderr[-3000:])
    assert "Exception ignored" not in proc.stderr, proc.stderr[-3000:]
    return {start["start"]: out for start, out in zip(lines[::2], lines[1::2])}


def check(scenario, out):
    assert not [k for k in out if k.startswith("untyped:")], out
    assert out.get("wrong_record", 0) == 0, out
    assert out["repeated"] == 0, out
    assert out.get("missing", 0) == 0, out
    name = scenario.partition(":")[0]
    if name in ("append_reentered", "log_threads"):
        assert out.get("bad_read", 0) == 0, out
        assert out["acked_twice"] == 0 and out["wrong_readback"] == 0, out
        assert out["stored"] == out["acknowledged"] and out["stored_not_acked"] == 0, out
        assert not [k for k in out if k.startswith("close_raised")], out
        assert {k for k in out if k.startswith("typed:")} <= {
            "typed:ReentrantCallError", "typed:LogClosedError"}, out
    elif name == "record_delete":
        # the fields cannot be deleted, even through their descriptors
        assert out.get("refused", 0) == 36 and out.get("deleted", 0) == 0, out
        assert out["records"] > 0, out
    elif name == "swap_after_shutdown":
        assert out.get("compacted", 0) + out.get("aborted", 0) == 1, out
        assert out["left_over"] == 0 and out["swap_finished_at_open"] == 0, out
        assert out["wrong_latest"] == 0, out
    else:
        assert not [k for k in out if k.startswith("typed:")], out


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("family", FAMILIES)
def test_reentrancy(tmp_path, family, kernels):
    scenarios = FAMILIES[family]
    if kernels == "twins":      # (the twins are slow with a collection at every allocation)
        scenarios = [s + (",n=60" if s.startswith("append") else "") for s in scenarios]
    results = run_family(tmp_path, scenarios, kernels)
    assert list(results) == scenarios
    for scenario, out in results.items():
        check(scenario, out)
