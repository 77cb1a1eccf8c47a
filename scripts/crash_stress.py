#!/usr/bin/env python3
"""Crash-consistency stress run: ``python scripts/crash_stress.py [KILLS] [--seed S]``.

Kills a writing child process KILLS times (default 1000) at random moments and checks the
log after each kill; prints a tally and exits 1 on any failure.
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from crash_harness import run_kills  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kills", nargs="?", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tally = run_kills(args.kills, d, seed=args.seed, verbose=not args.quiet)
    print(f"kills: {tally['kills']}  failures: {tally['failures']}  "
          f"records acknowledged: {tally['acknowledged']}")
    for line in tally["details"][:20]:
        print("  " + line)
    return 1 if tally["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
