"""Crash consistency: a child process appends and flushes in a loop and is SIGKILLed at random
moments; after each kill the log is reopened and checked.

Each child is forked by a zygote process that imported kafkalog once (a fresh interpreter per
kill spent most of the loop's time importing); a SIGKILLed fork dies as any process does: its
descriptors and ``flock`` locks dropped, nothing flushed. Run as ``python
tests/crash_harness.py zygote`` (the zygote) or import ``run_kills``.
"""
import hashlib
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

CONFIG = {"segment.bytes": 8192, "index.interval.bytes": 256, "segment.index.bytes": 4096,
          "file.delete.delay.ms": 0, "retention.bytes": 131072}
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
ACK_WAIT_S = 120


def value_for(offset):
    """The value every record at ``offset`` must hold (so a reader can check it)."""
    digest = hashlib.sha256(b"%d" % offset).digest()
    return b"%d:" % offset + digest * (1 + offset % 7)


def child(directory, seed):
    from kafkalog import Record, build_control_batch
    from kafkalog.manager import LogManager
    rng = random.Random(seed)
    # A LogManager (checkpoint files written under the kill) over the partition's log dir.
    mgr = LogManager([os.path.dirname(directory)], CONFIG, background=False)
    log = mgr.get_or_create_log("crash", 0)
    out = sys.stdout
    out.write(f"OPEN {log.log_end_offset}\n")
    out.flush()
    pid = 1000 + seed % 1000
    while True:
        start = log.log_end_offset
        n = rng.randint(1, 20)
        batch = [Record(key=b"%d" % (start + i), value=value_for(start + i),
                        timestamp=1_700_000_000_000 + start + i) for i in range(n)]
        if rng.random() < 0.15:               # a transaction, committed or aborted
            log.append(batch, compression=rng.choice(CODECS), producer_id=pid,
                       producer_epoch=0, transactional=True)
            log.append(build_control_batch(rng.choice(["commit", "abort"]), producer_id=pid,
                                           producer_epoch=0))
        else:
            log.append(batch, compression=rng.choice(CODECS))
        if rng.random() < 0.05:
            log.delete_old_segments()         # retention: renames and deletes under the kill
        if rng.random() < 0.1:
            mgr.checkpoint()                  # checkpoint files rewritten under the kill
        if rng.random() < 0.3:
            log.flush()
            out.write(f"ACK {log.log_end_offset}\n")
            out.flush()


def check(directory):
    """Reopen after a kill (as the LogManager would); returns (log end offset, problems)."""
    from kafkalog import iter_batches
    from kafkalog._kernels import walk_batches
    from kafkalog.manager import LogManager
    problems = []
    mgr = LogManager([os.path.dirname(directory)], CONFIG, background=False)
    log = mgr.get_log("crash", 0)
    try:
        expected_offset = log.log_start_offset
        for segment in log.segments:
            for batch in iter_batches(segment.buffer(), validate_crc=True):
                if not batch.is_valid():
                    problems.append(f"CRC failure at {batch.base_offset}")
                for record in batch:
                    if record.offset < expected_offset:
                        continue                 # before the log start offset
                    if record.offset != expected_offset:
                        problems.append(f"gap or disorder at {record.offset} (expected "
                                        f"{expected_offset})")
                    elif not batch.is_control and (
                            record.value != value_for(record.offset)
                            or record.key != b"%d" % record.offset):
                        problems.append(f"record {record.offset} does not hold what was "
                                        f"written")
                    expected_offset = record.offset + 1
                    if problems:
                        break
                if problems:
                    break
        if expected_offset != log.log_end_offset:
            problems.append(f"read up to {expected_offset}, log end offset "
                            f"{log.log_end_offset}")
        for segment in log.segments:
            batches, status, _, _ = walk_batches(segment.buffer(), validate_crc=True)
            if status != 0 or (batches["crc_valid"] != 1).any():
                problems.append(f"{segment.log_path}: invalid batch after recovery")
            segment.full_sanity_check()
        end = log.log_end_offset
        log.append([__import__("kafkalog").Record(key=b"%d" % end, value=value_for(end),
                                                  timestamp=1)])
        log.flush()
        return log.log_end_offset, problems
    finally:
        mgr.shutdown()


def zygote():
    """For each line ``DIRECTORY SEED`` on stdin, forks a child that writes ``PID n`` and then
    runs ``child`` until it is killed; once it is dead, writes ``DEAD n``. All on stdout, so a
    child's lines come before its ``DEAD``."""
    import kafkalog.manager  # noqa: F401 - imported once, inherited by every child
    for line in iter(sys.stdin.readline, ""):
        directory, seed = line.split()
        pid = os.fork()
        if pid == 0:
            try:
                sys.stdout.write(f"PID {os.getpid()}\n")
                child(directory, int(seed))
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(1)
        os.waitpid(pid, 0)
        sys.stdout.write(f"DEAD {pid}\n")
        sys.stdout.flush()


def _put_lines(stream, into):
    for line in iter(stream.readline, b""):
        into.put(line)
    into.put(b"")


def run_kills(kills, directory, seed=0, max_wait=0.4, verbose=False):
    """Kill a writing child ``kills`` times; returns a tally dict."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    part = os.path.join(directory, "logdir", "crash-0")
    os.makedirs(os.path.dirname(part), exist_ok=True)
    acked = 0
    failures = []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    # stderr to a file: the children's warnings (index rebuilds) must not fill a pipe
    with tempfile.TemporaryFile() as errors, subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "zygote"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=errors, env=env) as zygote_proc:
        lines = queue.Queue()       # the zygote's and its children's stdout, read by a thread
        threading.Thread(target=_put_lines, args=(zygote_proc.stdout, lines),
                         daemon=True).start()

        def next_line(seconds):
            """The next line; b"" once the zygote ended, None after ``seconds`` without one."""
            try:
                return lines.get(timeout=max(0.0, seconds))
            except queue.Empty:
                return None

        def died(k, line):
            errors.seek(0)
            failures.append(f"kill {k}: the child died before its kill ({line!r}): "
                            f"{errors.read().decode(errors='replace')[-1000:]}")

        pid = None
        try:
            for k in range(kills):
                zygote_proc.stdin.write(b"%s %d\n" % (part.encode(), rng.randrange(2**32)))
                zygote_proc.stdin.flush()
                line = next_line(ACK_WAIT_S) or b""
                if not line.startswith(b"PID "):
                    died(k, line)
                    break
                pid = int(line.split()[1])
                line = next_line(ACK_WAIT_S) or b""   # the child opened (and recovered) the log
                if not line.startswith(b"OPEN"):
                    died(k, line)
                    break
                window = time.monotonic() + rng.uniform(0.0, max_wait)
                # Until the run has seen an acknowledgement, the kill waits for one (capped): on
                # a busy machine a child may not flush within its window, and the run must
                # check acknowledged data.
                cap = time.monotonic() + ACK_WAIT_S
                line = None
                while (left := (window if acked else cap) - time.monotonic()) > 0:
                    line = next_line(left)
                    if line is None or not line.startswith(b"ACK "):
                        break
                    acked = max(acked, int(line.split()[1]))
                if line is not None and not line.startswith(b"ACK "):
                    died(k, line)
                    break
                os.kill(pid, signal.SIGKILL)
                # acknowledgements fully written before the kill still count
                while (line := next_line(ACK_WAIT_S) or b"").startswith(b"ACK "):
                    acked = max(acked, int(line.split()[1]))
                if not line.startswith(b"DEAD"):
                    raise RuntimeError(f"kill {k}: the zygote answered {line!r}, not DEAD")
                pid = None
                end, problems = check(part)
                if end - 1 < acked:
                    problems.append(f"acknowledged up to {acked} but the log ends at {end - 1}")
                if problems:
                    failures.append(f"kill {k}: " + "; ".join(problems))
                acked = max(acked, end)
                if verbose:
                    print(f"kill {k + 1}/{kills}: log end offset {end}, acknowledged {acked}, "
                          f"{'FAIL' if problems else 'ok'}", flush=True)
        finally:
            if pid is not None:               # a child left running (a failure above)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            zygote_proc.stdin.close()        # the zygote ends
    return {"kills": kills, "failures": len(failures), "details": failures,
            "acknowledged": acked}


if __name__ == "__main__" and sys.argv[1:] == ["zygote"]:
    zygote()
