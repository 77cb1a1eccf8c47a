"""``kafkalog`` command line: ``dump``, ``verify``, ``recover``, ``salvage`` and the answers about
Kafka's internal topics (``offsets``, ``groups``, ``transactions``, ``metadata``), and ``serve``."""
import argparse
import contextlib
import json
import logging
import os
import re
import sys

from kafkalog import __version__
from kafkalog._text import counted
from kafkalog.dump import (
    PAYLOAD_FORMATS, RECORD_MODES, DumpOptions, DumpReport, iter_json, iter_text,
)
from kafkalog.errors import KafkaLogError, with_closest


def _dump(args):
    """Stream each path's dump to stdout; exit status 1 when a path could not be dumped or
    anything in it was damaged (each problem is also named on stderr)."""
    try:
        options = DumpOptions(records=args.records, max_bytes=args.max_bytes,
                              start_offset=args.start_offset, end_offset=args.end_offset,
                              payload=args.payload, decoder=args.decoder)
    except KafkaLogError as e:
        print(f"kafkalog dump: {e}", file=sys.stderr)
        return 2
    report = DumpReport()
    status = 0
    pieces = iter_json if args.json else iter_text
    out = sys.stdout
    try:
        for path in args.paths:
            try:
                for piece in pieces(path, options, report, rsm_keys=args.keys):
                    out.write(piece)
            except BrokenPipeError:
                raise
            except (KafkaLogError, OSError) as e:
                out.flush()
                print(f"kafkalog dump: {_about(path, e)}", file=sys.stderr)
                status = 1
        out.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python's exit-time flush
        # of stdout from failing again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
    for p in report.problems:
        where = f" at position {p['position']}" if p["position"] is not None else ""
        print(f"kafkalog dump: {p['file']}{where}: {p['message']}", file=sys.stderr)
    return 1 if status or report.damaged else 0


@contextlib.contextmanager
def _progress_bar(args):
    """A bar on stderr of the bytes of log the command gets through: with ``--progress``, or
    when stderr is a terminal (for ``dump``, one that is not also its output). Lines printed
    meanwhile on a terminal go above the bar."""
    if args.command == "serve" or not (args.progress or (
            sys.stderr.isatty() and not (args.command == "dump" and sys.stdout.isatty()))):
        yield
        return
    from tqdm import tqdm
    from tqdm.contrib import DummyTqdmFile
    from tqdm.contrib.logging import logging_redirect_tqdm

    from kafkalog import progress
    # the internal-topic commands read one topic of a log dir: no total to reach
    total = None if args.command not in ("dump", "verify", "recover", "salvage") else \
        _log_bytes(getattr(args, "paths", None) or [args.path])
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(tqdm(total=total or None, unit="B", unit_scale=True,
                                       unit_divisor=1024, desc=f"kafkalog {args.command}",
                                       file=sys.stderr, leave=False, dynamic_ncols=True))
        stack.enter_context(progress.reporting(bar.update))
        # what is written meanwhile to the bar's terminal goes above it, not through it
        stack.enter_context(logging_redirect_tqdm([logging.getLogger("kafkalog")]))
        if sys.stderr.isatty():
            stack.enter_context(contextlib.redirect_stderr(DummyTqdmFile(sys.stderr)))
        if sys.stdout.isatty():
            stack.enter_context(contextlib.redirect_stdout(DummyTqdmFile(sys.stdout)))
        yield


def _log_bytes(paths):
    """Bytes of the ``.log`` files of the partitions under ``paths`` (0 where unknown), from
    the one listing of each path (no request per partition on an object store)."""
    from kafkalog import storage
    from kafkalog.log_dirs import partition_listing
    total = 0
    for path in paths:
        try:
            if not storage.isdir(path):
                total += storage.size_of(path)
                continue
            for _, entries in partition_listing(storage.locate(os.fspath(path)).root).partitions:
                total += sum(e.size for e in entries if e.name.endswith(".log"))
        except (KafkaLogError, OSError):
            pass                # the command says what is wrong with the path
    return total


def _about(path, e):
    """``e``'s message naming ``path`` once: prefixed with it unless it starts with it (as the
    typed errors about a path do)."""
    text = str(e)
    return text if text.startswith((os.fspath(path), os.path.abspath(path))) else \
        f"{path}: {text}"


def _partitions(paths, rsm_keys=None):
    """(the partition directories under ``paths``, the errors of those that hold none, the
    entries of every directory listed on the way: for ``storage.listed``)."""
    from kafkalog.verify import partition_listing
    found, errors, listed = [], [], {}
    for path in paths:
        try:
            listing = partition_listing(path, rsm_keys=rsm_keys)
        except (KafkaLogError, OSError) as e:
            errors.append(_about(path, e))
            continue
        found.extend(d for d, _ in listing.partitions)
        listed.update(listing.listed)
    return found, errors, listed


def _verify(args):
    from kafkalog import storage
    from kafkalog.log_dirs import each_partition
    from kafkalog.verify import problem, render_problem, verify_partition
    dirs, errors, listed = _partitions(args.paths, args.keys)

    def verify(d):
        try:
            return verify_partition(d, deep=not args.shallow)
        except (KafkaLogError, OSError) as e:
            return {"dir": d, "ok": False, "deep": not args.shallow, "live": False,
                    "offsets": None,
                    "segments": [], "problems": [problem("cannot_open", d, str(e))]}
    with storage.listed(listed):           # no request per partition for what was listed
        reports = list(each_partition(verify, dirs))
    ok = not errors and all(r["ok"] for r in reports)
    if args.json:
        json.dump({"ok": ok, "errors": errors, "partitions": reports}, sys.stdout)
        sys.stdout.write("\n")
    else:
        for err in errors:
            print(f"ERROR {err}")
        for r in reports:
            batches = sum(s["batches"] for s in r["segments"])
            records = "" if not r["deep"] else \
                f", {counted(sum(s['records'] or 0 for s in r['segments']), 'record')}"
            print(f"{'OK  ' if r['ok'] else 'FAIL'} {r['dir']}: "
                  f"{counted(len(r['segments']), 'segment')}, {counted(batches, 'batch')}"
                  f"{records}"
                  + (f", {counted(len(r['problems']), 'problem')}" if r["problems"] else "")
                  + ("; live: a writer holds it, checked as a snapshot" if r.get("live")
                     else ""))
            for p in r["problems"]:
                print(f"     {render_problem(p, r['dir'])}")
    return 0 if ok else 1


def _salvage(args):
    from kafkalog import storage
    from kafkalog.log_dirs import each_partition
    from kafkalog.salvage import salvage_partition, write_partition
    from kafkalog.verify import partition_listing
    try:
        listing = partition_listing(args.path)
    except (KafkaLogError, OSError) as e:
        print(f"kafkalog salvage: {e}", file=sys.stderr)
        return 1
    dirs = [d for d, _ in listing.partitions]
    single = dirs == [next(iter(listing.listed))]        # the path named a partition
    config = _config(args, "salvage")
    if config is None:
        return 1

    def salvage(d):
        try:
            return d, salvage_partition(d)
        except (KafkaLogError, OSError) as e:
            return d, e
    status, docs = 0, []
    # the gaps are printed below, once: not also as WARNINGs
    with _quiet("kafkalog.salvage"), storage.listed(listing.listed):
        # read several at once (a bucket's), from the listing; written one after the other:
        # the copies share their log dir's checkpoint files
        for d, found in each_partition(salvage, dirs):
            written = None
            if not isinstance(found, Exception) and args.out:
                out = args.out if single else os.path.join(args.out, os.path.basename(d))
                try:
                    written = write_partition(found, out, config)
                except (KafkaLogError, OSError) as e:
                    found = e
            if isinstance(found, Exception):
                print(f"kafkalog salvage: {_about(d, found)}", file=sys.stderr)
                status = 1
                continue
            docs.append({"dir": d, "batches": found.batch_count, "records": found.record_count,
                         "first_offset": found.first_offset, "last_offset": found.last_offset,
                         "gaps": [g._asdict() for g in found.gaps], "written": written})
            if not args.json:
                _print_salvage(d, found, written)
    if args.json:
        json.dump({"partitions": docs}, sys.stdout)
        sys.stdout.write("\n")
    return status


def _print_salvage(d, found, written):
    span = f"offsets {found.first_offset}-{found.last_offset}" \
        if found.first_offset is not None else "no offsets"
    print(f"{d}: {counted(found.record_count, 'record')} in "
          f"{counted(found.batch_count, 'intact batch')} ({span}), "
          f"{counted(len(found.gaps), 'gap')}")
    for g in found.gaps:
        before = "the start" if g.offset_before is None else f"offset {g.offset_before}"
        after = "the end" if g.offset_after is None else f"offset {g.offset_after}"
        print(f"  gap {os.path.basename(g.file)} bytes [{g.start}, {g.end}) "
              f"({counted(g.bytes, 'byte')}) between {before} and {after}: {g.code}: "
              f"{g.message}")
    if written:
        print(f"  wrote {written['dir']}: {counted(len(written['segments']), 'segment')}, "
              f"log start offset {written['log_start_offset']}, log end offset "
              f"{written['log_end_offset']}")


def _config(args, command):
    """The topic settings of ``--config`` (a ``LogConfig``), or None after saying why not."""
    from kafkalog.config import LogConfig
    try:
        return LogConfig.of(args.config)
    except KafkaLogError as e:
        print(f"kafkalog {command}: {e}", file=sys.stderr)
        return None


@contextlib.contextmanager
def _quiet(name):
    """Logger ``name`` says nothing below ERROR meanwhile: the command prints what it logs."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


#: ``kafkalog recover``'s exit status when records left (or would leave) the log.
RECORDS_DROPPED = 3


def _recover(args):
    from kafkalog.recovery import recover_partition
    config = _config(args, "recover")
    if config is None:
        return 1
    dirs, errors, _ = _partitions(args.paths)      # local: recovery writes
    status = 1 if errors else 0
    for e in errors:
        print(f"ERROR {e}", file=sys.stderr)
    results = []
    for d in dirs:
        keep = os.path.join(args.keep, os.path.basename(d)) if args.keep else None
        try:
            # each action is printed below, once: not also as the loader's WARNING
            with _quiet("kafkalog.loader"):
                result = recover_partition(d, dry_run=args.dry_run, keep=keep, config=config)
        except (KafkaLogError, OSError) as e:
            print(f"ERROR {_about(d, e)}", file=sys.stderr)
            status = 1
            continue
        results.append(result)
        if not args.json:
            _print_recovery(result, args.dry_run)
    if args.json:
        json.dump({"dry_run": args.dry_run, "errors": errors, "partitions": results},
                  sys.stdout)
        sys.stdout.write("\n")
    lost = [r for r in results if r["dropped"]["records"]]
    if not lost:
        return status
    records = sum(r["dropped"]["records"] for r in lost)
    where = counted(len(lost), "partition")
    path = args.paths[0] if len(args.paths) == 1 else "PATH"
    if args.keep:
        verb = "would be" if args.dry_run else "were"
        print(f"kafkalog recover: {records} intact records {verb} moved out of {where} into "
              f"{args.keep}", file=sys.stderr)
    elif args.dry_run:
        print(f"kafkalog recover: recovery would drop {records} intact records from {where}; "
              f"to keep them, copy every intact batch first with `kafkalog salvage --out "
              f"NEW_DIR {path}`, or recover with --keep DIR", file=sys.stderr)
    else:
        print(f"kafkalog recover: recovery dropped {records} intact records from {where} "
              f"(to keep such records, run `kafkalog salvage --out NEW_DIR {path}` before "
              f"recovering, or recover with --keep DIR)", file=sys.stderr)
    return status or RECORDS_DROPPED


def _print_recovery(result, dry_run):
    """A partition's recovery: its offsets, each action once, and what left the log."""
    verb = "would" if dry_run else "did"
    print(f"{result['dir']}: log start offset {result['log_start_offset']}, log end offset "
          f"{result['log_end_offset']}" + ("" if result["actions"] else ", nothing to repair"))
    for a in result["actions"]:
        where = [f"offset {a['offset']}"] if a["offset"] is not None else []
        where += [counted(a["bytes"], "byte")] if a["bytes"] is not None else []
        print(f"  {verb}: {a['action'].replace('_', ' ')} {a['file']}"
              + (f" ({', '.join(where)})" if where else "")
              + (f": {a['reason']}" if a["reason"] else ""))
    d = result["dropped"]
    if not d["bytes"]:
        return
    records = "no intact record" if not d["records"] else \
        f"{counted(d['records'], 'intact record')} (offsets {d['first_offset']}-" \
        f"{d['last_offset']})"
    segments = f"{counted(d['segments'], 'segment')} and " if d["segments"] else ""
    print(f"  {'would drop' if dry_run else 'dropped'}: {records}; {segments}"
          f"{counted(d['bytes'], 'byte')} in all")


def _internal(args):
    """``offsets``, ``groups``, ``transactions``, ``metadata``: a table, or JSON."""
    from kafkalog.internal import cluster_metadata, committed_offsets, groups, transactions
    from kafkalog.internal import render
    answer = {"offsets": (committed_offsets, render.offsets_lines),
              "groups": (groups, render.groups_lines),
              "transactions": (transactions, render.transactions_lines),
              "metadata": (cluster_metadata, render.metadata_lines)}[args.command]
    results, status = [], 0
    for path in args.paths:
        try:
            results.append(answer[0](path))
        except (KafkaLogError, OSError) as e:
            print(f"kafkalog {args.command}: {_about(path, e)}", file=sys.stderr)
            status = 1
    if args.command == "metadata":
        out = results[0] if len(results) == 1 else results
        lines = [line for r in results for line in answer[1](r)]
    else:
        out = [row for r in results for row in r]
        lines = answer[1](out)
    if args.json:
        json.dump(out, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    elif results:           # no table (an empty header) when every path failed: the errors say it
        print("\n".join(lines))
    return status


def _serve(args):
    from kafkalog.serve.command import run
    return run(args, args.keys)


def _non_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _rsm_key(text):
    key_id, sep, path = text.partition("=")
    if not sep or not key_id or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: expected ID=PATH (a key-pair id and its "
                                         f"RSA private key file in PEM)")
    return key_id, path


def _add_rsm_key(parser):
    parser.add_argument("--rsm-key", type=_rsm_key, action="append", default=[],
                        metavar="ID=PATH",
                        help="RSA private key (PEM file) of key pair ID, for encrypted "
                             "tiered-storage segments (Aiven's format); repeatable")


def _add_progress(parser):
    parser.add_argument("--progress", action="store_true",
                        help="show a progress bar on stderr even when it is not a terminal "
                             "(it is shown on a terminal anyway)")


def _add_config(parser):
    parser.add_argument("--config", metavar="FILE.properties",
                        help="the topic's settings (a Kafka .properties file, as "
                             "kafka-configs describes them): rebuilt indexes follow its "
                             "index.interval.bytes")


class _Parser(argparse.ArgumentParser):
    """argparse, answering a misspelt option or command with the closest valid one (as the
    Spark and Arrow options are answered)."""

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(self, "commands", {}).get(getattr(parsed, "command", None), self)
            flags = re.findall(r"--[\w-]+", command.format_help())
            self.error("unrecognized arguments: " + " ".join(
                with_closest(a.split("=")[0], flags) if a.startswith("--") else a
                for a in extras))
        return parsed

    def error(self, message):
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if choice and "did you mean" not in message:
            names = re.findall(r"'([^']*)'", choice.group(2))
            message = message.replace(f"'{choice.group(1)}'",
                                      with_closest(choice.group(1), names, quote="'"), 1)
        super().error(message)


def build_parser():
    parser = _Parser(
        prog="kafkalog", description="Read, verify and repair Kafka log directories.")
    parser.add_argument("--version", action="version", version=f"kafkalog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    parser.commands = sub.choices
    dump = sub.add_parser("dump", help="print batches, records, indexes and snapshots")
    dump.add_argument("--json", action="store_true",
                      help="the JSON document of docs/dump-json.md (one line per partition "
                           "directory)")
    dump.add_argument("--records", choices=RECORD_MODES, default="full",
                      help="per-record listing (full), only a digest, or none")
    dump.add_argument("--max-bytes", type=_non_negative, metavar="N",
                      help="read at most N bytes of each .log file (as kafka-dump-log)")
    dump.add_argument("--start-offset", type=int, metavar="OFFSET",
                      help="only batches and records at or after OFFSET")
    dump.add_argument("--end-offset", type=int, metavar="OFFSET",
                      help="only batches and records before OFFSET (exclusive)")
    payload = dump.add_mutually_exclusive_group()
    payload.add_argument("--hex", dest="payload", action="store_const", const="hex",
                         help="print keys and values in hex")
    payload.add_argument("--base64", dest="payload", action="store_const", const="base64",
                         help="print keys and values in base64")
    dump.set_defaults(payload=PAYLOAD_FORMATS[0])
    decoder = dump.add_mutually_exclusive_group()
    for flag, name in [("--offsets-decoder", "offsets"),
                       ("--transaction-log-decoder", "transaction-log"),
                       ("--cluster-metadata-decoder", "cluster-metadata")]:
        decoder.add_argument(flag, dest="decoder", action="store_const", const=name,
                             help=f"decode keys and values as kafka-dump-log's {flag} does "
                                  f"(the default for its internal topic)")
    decoder.add_argument("--no-decode", dest="decoder", action="store_const", const="none",
                         help="print internal topics' keys and values as bytes")
    dump.set_defaults(decoder="auto")
    _add_rsm_key(dump)
    _add_progress(dump)
    dump.add_argument("paths", nargs="+", metavar="PATH",
                      help="log dir, partition directory, or "
                           ".log/.index/.timeindex/.txnindex/.snapshot/leader-epoch-checkpoint")
    dump.set_defaults(func=_dump)
    verify = sub.add_parser("verify", help="check batches, CRCs, offsets and indexes "
                                           "(exit 1 on problems)")
    verify.add_argument("--json", action="store_true",
                        help="problems as {code, file, position, offset, message}")
    verify.add_argument("--shallow", action="store_true",
                        help="skip decoding records (structure, CRCs, offsets, indexes and "
                             "snapshots only; faster)")
    _add_progress(verify)
    _add_rsm_key(verify)
    verify.add_argument("paths", nargs="+", metavar="PATH",
                        help="partition directory or log dir")
    verify.set_defaults(func=_verify)
    salvage = sub.add_parser("salvage", help="read every intact batch of a damaged partition, "
                                             "skipping damaged regions; copy them to a new "
                                             "partition directory")
    salvage.add_argument("--out", metavar="DIR",
                         help="write the intact batches (bytes unchanged, indexes rebuilt) "
                              "into DIR, a new partition directory (for a log dir: a new log "
                              "dir, one partition directory each); without it, only report")
    _add_config(salvage)
    salvage.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_progress(salvage)
    salvage.add_argument("path", metavar="PATH", help="partition directory or log dir")
    salvage.set_defaults(func=_salvage)
    recover = sub.add_parser("recover", help="Kafka's recovery, offline: cut invalid tails, "
                                             "rebuild indexes (exit 3 when intact records "
                                             "leave the log)")
    recover.add_argument("--dry-run", action="store_true",
                         help="recover a scratch copy and say exactly what would change")
    recover.add_argument("--keep", metavar="DIR",
                         help="move what recovery would delete (bytes cut from a segment, "
                              "segments after a truncated one) into DIR/<partition> instead")
    _add_config(recover)
    recover.add_argument("--json", action="store_true", help="print the reports as JSON")
    _add_progress(recover)
    recover.add_argument("paths", nargs="+", metavar="PATH",
                         help="partition directory or log dir")
    recover.set_defaults(func=_recover)
    for name, help_, what in [
            ("offsets", "committed offsets of every group, topic and partition, as the group "
                        "coordinator loads __consumer_offsets", "__consumer_offsets"),
            ("groups", "groups (classic, consumer, share) with state, protocol, "
                       "generation/epoch, members and assignments", "__consumer_offsets"),
            ("transactions", "transactional ids with producer id/epoch, state, partitions "
                             "and timeout; open and hanging ones flagged",
             "__transaction_state"),
            ("metadata", "the cluster metadata image (topics, partitions, brokers, configs, "
                         "features, producer ids): newest KRaft snapshot plus the log after it",
             "__cluster_metadata")]:
        answer = sub.add_parser(name, help=help_)
        answer.add_argument("--json", action="store_true", help="print the answer as JSON")
        _add_progress(answer)
        answer.add_argument("paths", nargs="+", metavar="PATH",
                            help=f"a {what} partition directory or a log dir holding one")
        answer.set_defaults(func=_internal)
    serve = sub.add_parser("serve", help="a read-only Kafka endpoint: any Kafka client "
                                         "consumes the partitions under the paths")
    from kafkalog.serve.command import add_arguments
    add_arguments(serve)
    _add_rsm_key(serve)
    serve.add_argument("paths", nargs="+", metavar="PATH",
                       help="partition directory, log dir, fsspec URL or tiered-storage prefix")
    serve.set_defaults(func=_serve)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        # the keys of this command's reads (a keyring: loaded, and checked, once)
        args.keys = None
        if getattr(args, "rsm_key", None):
            from kafkalog import tiered
            args.keys = tiered.keyring(dict(args.rsm_key)).keys
    except KafkaLogError as e:
        print(f"kafkalog {args.command}: {e}", file=sys.stderr)
        return 2
    try:
        with _progress_bar(args):
            return args.func(args)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
