"""``kafkalog`` command line: ``dump``, ``verify`` and ``recover``."""
import argparse
import json
import os
import sys

from kafkalog import __version__
from kafkalog.dump import RECORD_MODES, dump_path, render_text
from kafkalog.errors import KafkaLogError


def _dump(args):
    status = 0
    for path in args.paths:
        try:
            doc = dump_path(path, args.records)
        except (KafkaLogError, OSError, ValueError) as e:
            print(f"kafkalog dump: {path}: {e}", file=sys.stderr)
            status = 1
            continue
        if args.json:
            json.dump(doc, sys.stdout, ensure_ascii=False)
            sys.stdout.write("\n")
        else:
            for line in render_text(doc):
                print(line)
    return status


class _Progress:
    """A one-line progress bar on stderr, for runs over many partitions."""

    def __init__(self, total, label, enabled):
        self.total, self.label, self.done = total, label, 0
        self.enabled = enabled and total > 1

    def step(self, name):
        self.done += 1
        if self.enabled:
            width = 30
            filled = width * self.done // self.total
            sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                             f"{self.done}/{self.total} {os.path.basename(name)[:40]:40s}")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def _partitions(paths):
    from kafkalog.verify import partition_dirs
    found, errors = [], []
    for path in paths:
        try:
            found.extend(partition_dirs(path))
        except (KafkaLogError, OSError) as e:
            errors.append(f"{path}: {e}")
    return found, errors


def _verify(args):
    from kafkalog.verify import verify_partition
    dirs, errors = _partitions(args.paths)
    progress = _Progress(len(dirs), "verifying", args.progress or sys.stderr.isatty())
    reports = []
    for d in dirs:
        try:
            reports.append(verify_partition(d))
        except (KafkaLogError, OSError) as e:
            reports.append({"dir": d, "ok": False, "segments": [], "problems": [str(e)]})
        progress.step(d)
    ok = not errors and all(r["ok"] for r in reports)
    if args.json:
        json.dump({"ok": ok, "errors": errors, "partitions": reports}, sys.stdout)
        sys.stdout.write("\n")
    else:
        for e in errors:
            print(f"ERROR {e}")
        for r in reports:
            batches = sum(s["batches"] for s in r["segments"])
            print(f"{'OK  ' if r['ok'] else 'FAIL'} {r['dir']}: {len(r['segments'])} segments, "
                  f"{batches} batches")
            for p in r["problems"]:
                print(f"     {p}")
    return 0 if ok else 1


def _recover(args):
    from kafkalog.recovery import plan_recovery, recover_partition
    dirs, errors = _partitions(args.paths)
    progress = _Progress(len(dirs), "recovering", args.progress or sys.stderr.isatty())
    status = 1 if errors else 0
    for e in errors:
        print(f"ERROR {e}", file=sys.stderr)
    for d in dirs:
        try:
            plan = plan_recovery(d) if args.dry_run else recover_partition(d)
        except (KafkaLogError, OSError) as e:
            print(f"ERROR {d}: {e}", file=sys.stderr)
            status = 1
            progress.step(d)
            continue
        progress.step(d)
        verb = "would" if args.dry_run else "did"
        changes = [s for s in plan["segments"] if s["action"] != "keep"]
        print(f"{d}: log end offset {plan['log_end_offset']}"
              + ("" if changes else ", nothing to repair"))
        for s in changes:
            if s["action"] == "truncate":
                print(f"  {verb} truncate {s['file']} by {s['truncated_bytes']} bytes to "
                      f"{s['valid_bytes']} ({s['reason']})")
            else:
                print(f"  {verb} delete {s['file']} ({s['bytes']} bytes after the first "
                      f"truncation)")
    return status


def build_parser():
    parser = argparse.ArgumentParser(
        prog="kafkalog", description="Read, verify and repair Kafka log directories.")
    parser.add_argument("--version", action="version", version=f"kafkalog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    dump = sub.add_parser("dump", help="print batches, records, indexes and snapshots")
    dump.add_argument("--json", action="store_true", help="the DUMP_JSON document")
    dump.add_argument("--records", choices=RECORD_MODES, default="full",
                      help="per-record listing (full), only a digest, or none")
    dump.add_argument("paths", nargs="+", metavar="PATH",
                      help="partition directory, or .log/.index/.timeindex/.txnindex/.snapshot")
    dump.set_defaults(func=_dump)
    verify = sub.add_parser("verify", help="check batches, CRCs, offsets and indexes "
                                           "(exit 1 on problems)")
    verify.add_argument("--json", action="store_true")
    verify.add_argument("--progress", action="store_true", help="show a progress bar")
    verify.add_argument("paths", nargs="+", metavar="PATH",
                        help="partition directory or log dir")
    verify.set_defaults(func=_verify)
    recover = sub.add_parser("recover", help="Kafka's recovery, offline: cut invalid tails, "
                                             "rebuild indexes")
    recover.add_argument("--dry-run", action="store_true", help="say what would change")
    recover.add_argument("--progress", action="store_true", help="show a progress bar")
    recover.add_argument("paths", nargs="+", metavar="PATH",
                         help="partition directory or log dir")
    recover.set_defaults(func=_recover)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
