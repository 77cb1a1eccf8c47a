#!/usr/bin/env python3
"""A broker's worth of partitions (issue #31): a LogManager of --partitions partitions (default
2,000, default config) created, shut down cleanly, opened clean, written to, killed with
SIGKILL and opened again (recovery), each phase in a fresh process.

For each phase: wall time, the process's peak RSS, its open descriptors at the end of the phase
(``/proc/self/fd``, the manager still open), and the real disk the log dir holds after it
(``st_blocks`` x 512, the dir's files: sparse index files count only their blocks).
Targets: create <= 10 s, clean open <= 2 s, clean shutdown <= 5 s, <= 1 MiB of real disk per
idle partition.

Usage: python bench/broker_scale.py [--partitions 2000] [--dir PATH] [--written 200]
       [--json | --markdown]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Each phase runs this in a fresh interpreter: argv = phase, log dir, partitions, written.
PHASE = r"""
import json, os, resource, signal, sys, time
from kafkalog import Record
from kafkalog.manager import LogManager
phase, root, n, written = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def fds():
    return len(os.listdir("/proc/self/fd"))

def report(seconds, **extra):
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": seconds, "rss": rss, **extra}), flush=True)

start = time.perf_counter()
mgr = LogManager(root, background=False)
if phase == "create":
    for p in range(n):
        mgr.get_or_create_log("t", p)
    report(time.perf_counter() - start, fds=fds())
    mgr.shutdown()
elif phase in ("open", "open_after_kill"):
    opened = time.perf_counter() - start
    report(opened, fds=fds())
    mgr.shutdown()
elif phase == "shutdown":
    loaded = time.perf_counter() - start
    start = time.perf_counter()
    mgr.shutdown()
    report(time.perf_counter() - start, open_seconds=loaded)
elif phase == "write_and_kill":
    value = b"v" * 200
    for p in range(written):
        log = mgr.get_log("t", p)
        for _ in range(20):
            log.append([Record(value=value)])
    report(time.perf_counter() - start, fds=fds(), written=written)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def real_disk(root):
    total = 0
    for d, _, names in os.walk(root):
        for name in names:
            try:
                total += os.lstat(os.path.join(d, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def run_phase(phase, root, n, written):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(PHASE), phase, root, str(n),
                           str(written)], capture_output=True, text=True, env=env)
    if phase != "write_and_kill" and done.returncode != 0:
        raise SystemExit(f"{phase} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["disk"] = real_disk(root)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--written", type=int, default=200,
                        help="partitions written to before the SIGKILL")
    parser.add_argument("--dir", help="log dir to use (emptied first; default: a temp dir)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    n = args.partitions
    root = args.dir or tempfile.mkdtemp(prefix="kafkalog-broker-scale-")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    try:
        phases = [("create", "create (idle partitions)"),
                  ("shutdown", "clean shutdown"),
                  ("open", "open after a clean shutdown"),
                  ("write_and_kill", f"write {args.written} partitions, SIGKILL"),
                  ("open_after_kill", "open after SIGKILL (recovery)")]
        rows = []
        for phase, label in phases:
            result = run_phase(phase, root, n, min(args.written, n))
            result["phase"], result["label"] = phase, label
            rows.append(result)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps({"partitions": n, "phases": rows}, indent=1))
        return
    targets = {"create": 10.0, "shutdown": 5.0, "open": 2.0}
    header = ["phase", "seconds", "target", "peak RSS MiB", "descriptors", "real disk MiB",
              "real disk KiB / partition"]
    lines = []
    for r in rows:
        target = targets.get(r["phase"])
        lines.append([r["label"], f"{r['seconds']:.2f}",
                      f"<= {target:g} s" if target else "",
                      f"{r['rss'] / 2**20:.0f}", str(r.get("fds", "")),
                      f"{r['disk'] / 2**20:.1f}", f"{r['disk'] / n / 1024:.1f}"])
    if args.markdown:
        print(f"{n} partitions, default config\n")
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for line in lines:
            print("| " + " | ".join(line) + " |")
    else:
        print(f"{n} partitions, default config")
        widths = [max(len(x) for x in col) for col in zip(header, *lines)]
        for line in [header, *lines]:
            print("  ".join(x.ljust(w) for x, w in zip(line, widths)))


if __name__ == "__main__":
    main()
