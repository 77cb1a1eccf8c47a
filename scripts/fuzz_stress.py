#!/usr/bin/env python3
"""Fuzzing stress run: ``python scripts/fuzz_stress.py [CASES] [--seed S] [--crc-valid]``.

Feeds CASES mutated copies of Kafka-written data (bit flips, truncation, zero runs, garbage,
huge and negative length fields, inserted bytes) to the batch walker, the record decoder,
the codecs, the index, checkpoint and snapshot readers and (one case in 50) ``Log.open`` of a
damaged partition directory. Prints a tally: cases, typed errors, and failures (any other
exception); exits 1 on a failure.

``--crc-valid`` (issue #16): every case is a batch mutated with its CRC recomputed after each
mutation (header fields at boundary values, bit flips, varints, record lengths, records cut,
repeated or dropped, compressed payloads of every codec damaged before or after compression,
legacy wrappers' inner message sets), fed to the walker, every reader of records (batch
iteration, columnar decode, the Arrow gather), ``validate_batches`` (what recovery keeps must
decode) and, one case in ``--recover-every``, a real segment recovery whose result must read
cleanly. ``--kernels`` picks the compiled kernels, the pure-Python twins, or both (then they
must agree case by case). Failures: any exception other than CorruptRecordError (or
RecordTooLargeError for a payload declaring more than the decompression limit), and any broken
invariant.
"""
import argparse
import logging
import os
import random
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from kafkalog import OffsetIndex, TimeIndex, codecs, iter_batches  # noqa: E402
from kafkalog._kernels import walk_batches  # noqa: E402
from kafkalog.checkpoint import read_leader_epoch_checkpoint  # noqa: E402
from kafkalog.errors import KafkaLogError  # noqa: E402
from kafkalog.producer_state import read_snapshot  # noqa: E402
from kafkalog.records import decode_batches  # noqa: E402
from test_faults import OPEN_FUZZ_NAMES, SEEDS, mutate, open_damaged_copy  # noqa: E402
from conftest import FIXTURES  # noqa: E402
import test_fuzz_crc_valid as crc_fuzz  # noqa: E402


def case_records(rng, tmp):
    data = mutate(rng.choice(SEEDS), rng)
    batches = walk_batches(data)[0]
    for b in iter_batches(data, validate_crc=True):
        list(b)
    decode_batches(data, batches)


def case_codec(rng, tmp):
    codec = rng.choice([codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD])
    data = codecs.compress(codec, rng.randbytes(rng.randint(0, 2000)) * rng.randint(1, 4))
    codecs.decompress(codec, mutate(data, rng), limit=1 << 20)


def case_files(rng, tmp):
    src = {"i": FIXTURES / "plain-0" / "00000000000000000000.index",
           "t": FIXTURES / "plain-0" / "00000000000000000000.timeindex",
           "e": FIXTURES / "multiseg-0" / "leader-epoch-checkpoint",
           "s": FIXTURES / "txn-0" / "00000000000000000645.snapshot"}
    kind = rng.choice(sorted(src))
    path = os.path.join(tmp, f"00000000000000000000.{kind}")
    with open(path, "wb") as f:
        f.write(mutate(src[kind].read_bytes(), rng))
    if kind in "it":
        idx = (OffsetIndex if kind == "i" else TimeIndex)(path, 0, writable=False)
        try:
            idx.sanity_check()
            idx.lookup(rng.randrange(5000))
        finally:
            idx.close()
    elif kind == "e":
        read_leader_epoch_checkpoint(path)
    else:
        read_snapshot(path)


def case_open(rng, tmp):
    open_damaged_copy(rng, tmp, OPEN_FUZZ_NAMES)


def crc_valid(args):
    """The ``--crc-valid`` run; returns the exit status."""
    from kafkalog import _core_py
    modules = {"pure": [_core_py]}
    try:
        from kafkalog import _core
        modules["compiled"] = [_core]
        modules["both"] = [_core, _core_py]
    except ImportError:
        pass
    if args.kernels not in modules:
        print(f"kernels {args.kernels!r} are not available")
        return 2
    # recovery's truncation warnings would be one line per damaged case
    logging.getLogger("kafkalog").setLevel(logging.ERROR)
    rng = random.Random(args.seed)
    tally = {"cases": 0, "decoded": 0, "corrupt": 0, "recoveries": 0, "untyped": 0,
             "invariant": 0}
    failures = []
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.cases):
            seed = rng.randrange(2**32)
            case_rng = random.Random(seed)
            recover = args.recover_every > 0 and i % args.recover_every == 0
            data = crc_fuzz.make_case(case_rng)     # a failure here is the fuzzer's own
            try:
                tally[{"ok": "decoded", "corrupt": "corrupt"}[
                    crc_fuzz.run_case(data, modules[args.kernels], tmp if recover else None)]] += 1
                tally["recoveries"] += recover
            except AssertionError:
                tally["invariant"] += 1
                failures.append(f"seed {seed}: {traceback.format_exc(limit=4)}")
            except Exception:  # noqa: BLE001 - any other exception is what is counted
                tally["untyped"] += 1
                failures.append(f"seed {seed}: {traceback.format_exc(limit=4)}")
            tally["cases"] += 1
    print(f"crc-valid ({args.kernels}): " +
          "  ".join(f"{k}: {v}" for k, v in tally.items()) +
          f"  ({time.time() - started:.0f} s)")
    for f in failures[:10]:
        print(f)
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="?", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--crc-valid", action="store_true",
                    help="CRC-recomputing mutations of batches (see the module docstring)")
    ap.add_argument("--kernels", choices=["compiled", "pure", "both"], default="compiled",
                    help="with --crc-valid: the kernels that read (both: they must agree)")
    ap.add_argument("--recover-every", type=int, default=20,
                    help="with --crc-valid: recover a real segment every N cases (0: never)")
    args = ap.parse_args()
    if args.crc_valid:
        return crc_valid(args)
    rng = random.Random(args.seed)
    tally = {"cases": 0, "typed_errors": 0, "failures": 0}
    kinds = [case_records] * 25 + [case_codec] * 12 + [case_files] * 12 + [case_open]
    started = time.time()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.cases):
            case = rng.choice(kinds)
            seed = rng.randrange(2**32)
            try:
                case(random.Random(seed), tmp)
            except KafkaLogError:
                tally["typed_errors"] += 1
            except Exception:  # noqa: BLE001 - any other exception is what is counted
                tally["failures"] += 1
                failures.append(f"{case.__name__} seed {seed}: {traceback.format_exc(limit=3)}")
            tally["cases"] += 1
    print(f"cases: {tally['cases']}  typed errors: {tally['typed_errors']}  "
          f"failures: {tally['failures']}  ({time.time() - started:.0f} s)")
    for f in failures[:10]:
        print(f)
    return 1 if tally["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
