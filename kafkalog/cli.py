"""``kafkalog`` command line: ``dump`` (and, as they land, ``verify`` and ``recover``)."""
import argparse
import json
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
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
