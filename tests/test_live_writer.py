"""Readers beside a writer that cuts files under them (issue 39, part 1): a read-only ``Log``,
``read_arrow``, ``iter_batches(path)`` and ``Log07`` get correct records or a
``kafkalog.errors`` exception, never a signal (before: SIGBUS, exit 135) or a wrong row.

Each scenario runs in its own process, so a signal fails one test; both kernel sets
(``KAFKALOG_NO_EXTENSIONS=1``: the twins, whose read-only mapping is a copy). The stress test
counts iterations, not time: a writer process appends, rolls, truncates, compacts, deletes by
retention and cuts its active ``.log`` with ``os.truncate`` (then reopens, as a broker's
recovery), while a reader process loops a fixed number of times."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import kafkalog

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODES = ["compiled", "twins"] if kafkalog.compiled() else ["twins"]

COMMON = textwrap.dedent('''
    import glob, os, sys
    import kafkalog
    from kafkalog import Log, Record
    from kafkalog.errors import KafkaLogError

    def val(o):
        return (b"v%d-" % o) * 50

    def write(d, n, segment_bytes):
        w = Log.open(d, {"segment.bytes": segment_bytes, "cleanup.policy": "compact"})
        for i in range(0, n, 10):
            w.append([Record(key=b"k%d" % (j % 7), value=val(j)) for j in range(i, i + 10)])
        return w

    def newest(d, ext=".log"):
        return sorted(glob.glob(os.path.join(d, "*" + ext)))[-1]

    def check(offsets_values):
        """Offsets increase and every value is the writer's for its offset."""
        last = -1
        for o, v in offsets_values:
            assert o > last and v == val(o), (o, last, v[:40] if v else v, len(v or b""))
            last = o
''')

SCENARIOS = {
    # a read-only Log mid-iteration while the writer truncates its active segment
    "truncate_to_mid_iteration": '''
        w = write(d, 1200, 24 * 1024); r = Log.open(d, read_only=True)
        it = r.records(); seen = [next(it) for _ in range(1100)]
        w.truncate_to(1050)
        seen += list(it)
        check((x.offset, x.value) for x in seen)
    ''',
    # the active .log cut to nothing under a read-only Log's mapping
    "os_truncate_active": '''
        w = write(d, 1200, 24 * 1024); r = Log.open(d, read_only=True)
        it = r.records(); seen = [next(it) for _ in range(1100)]
        os.truncate(newest(d), 0)
        seen += list(it)
        check((x.offset, x.value) for x in seen)
    ''',
    # a compaction swaps in a smaller .log under the name a read-only Log listed
    "compact_after_open": '''
        w = write(d, 1200, 24 * 1024); r = Log.open(d, read_only=True)
        w.roll(); w.compact()
        check((x.offset, x.value) for x in r.records())
    ''',
    # truncate_to deletes segments a read-only Log listed
    "truncate_deletes_listed": '''
        w = write(d, 1200, 24 * 1024); r = Log.open(d, read_only=True)
        w.truncate_to(100)
        check((x.offset, x.value) for x in r.records())
    ''',
    # retention deletes the segments a read-only Log listed
    "retention_deleted": '''
        w = write(d, 1200, 24 * 1024); r = Log.open(d, read_only=True)
        w.delete_records(1000); w.delete_old_segments()
        check((x.offset, x.value) for x in r.records())
    ''',
    # the file cut between the mapping and the reads (a page past the new end: a fault)
    "iter_batches_cut": '''
        w = write(d, 300, 1 << 30); p = newest(d)
        it = kafkalog.iter_batches(p); seen = list(next(it))
        os.truncate(p, 10000)
        seen += [x for b in it for x in b]
        check((x.offset, x.value) for x in seen)
    ''',
    "read_arrow_cut": '''
        w = write(d, 300, 1 << 30); w.flush(); p = newest(d)
        import kafkalog.records as R
        opened = R.open_buffer
        def cut_after_open(x):
            b = opened(x); os.truncate(p, 10000); return b
        R.open_buffer = cut_after_open
        t = kafkalog.read_arrow(d)
        check(zip(t.column("offset").to_pylist(), t.column("value").to_pylist()))
    ''',
    "log07_cut": '''
        from kafkalog import Log07
        import kafkalog.log07.log as L
        os.makedirs(d); w = Log07.open(d)
        for i in range(300):
            w.append([val(i)])
        w.flush(); p = newest(d, ".kafka")
        r = Log07.open(d, read_only=True)
        opened = L.open_buffer
        def cut_after_open(x):
            b = opened(x); os.truncate(p, 10000); return b
        L.open_buffer = cut_after_open
        payloads = [m.payload for m in r.messages()]
        assert payloads == [val(i) for i in range(len(payloads))]
    ''',
}


def run_python(code, args, mode, timeout=120):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("KAFKALOG_NO_EXTENSIONS", None)
    if mode == "twins":
        env["KAFKALOG_NO_EXTENSIONS"] = "1"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)


# The twins read copies, which a cut never reaches: run where they meet something else (a
# deleted segment, a compacted file, a cut before the copy), to keep the suite's time down.
TWIN_SCENARIOS = ("compact_after_open", "iter_batches_cut", "retention_deleted",
                  "truncate_deletes_listed")


@pytest.mark.parametrize("mode,name", [(mode, name) for name in sorted(SCENARIOS)
                                       for mode in MODES
                                       if mode == "compiled" or name in TWIN_SCENARIOS])
def test_reader_beside_writer_scenario(tmp_path, name, mode):
    body = textwrap.dedent(SCENARIOS[name])
    code = COMMON + textwrap.dedent('''
        d = sys.argv[1]
        try:
    ''') + textwrap.indent(body, "    ") + textwrap.dedent('''
        except KafkaLogError as e:
            print("TYPED", type(e).__name__, e)
        else:
            print("OK")
    ''')
    p = run_python(code, [str(tmp_path / "t-0")], mode)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    out = p.stdout.strip().splitlines()[-1]
    assert out == "OK" or out.startswith("TYPED"), p.stdout
    if name in ("truncate_deletes_listed", "retention_deleted"):
        assert out.startswith("TYPED SegmentDeletedError"), out
    elif mode == "compiled" and name in ("os_truncate_active", "iter_batches_cut",
                                         "read_arrow_cut", "log07_cut"):
        # the cut seen as such (a fault, or zeros where the file now ends), not as damage
        assert out.startswith("TYPED FileShrunkError"), out
    elif out != "OK":       # the twins read copies: the cut is not seen
        assert mode == "compiled" and name not in ("compact_after_open",), out


WRITER = COMMON + textwrap.dedent('''
    d = sys.argv[1]
    w = write(d, 200, 32 * 1024)
    print("ready", flush=True)
    step = 0
    while not os.path.exists(os.path.join(os.path.dirname(d), "stop")):
        step += 1
        o = w.log_end_offset
        w.append([Record(key=b"k%d" % (j % 7), value=val(j)) for j in range(o, o + 10)])
        if step % 7 == 0:
            w.truncate_to(w.log_end_offset - 15)
        if step % 40 == 0:
            w.roll(); w.compact()
        if step % 60 == 0:
            w.delete_records(w.log_end_offset - 400); w.delete_old_segments()
        if step % 90 == 0:        # the active .log cut; reopened as after a crash
            p = newest(d); os.truncate(p, os.path.getsize(p) // 2)
            w.close(); w = Log.open(d, {"segment.bytes": 32 * 1024,
                                        "cleanup.policy": "compact"})
    w.close()
''')

READER = COMMON + textwrap.dedent('''
    import json
    d, loops = sys.argv[1], int(sys.argv[2])
    counts = {"ok": 0}
    def typed(e):
        counts[type(e).__name__] = counts.get(type(e).__name__, 0) + 1
    for i in range(loops):
        try:
            kind = i % 3
            if kind == 0:
                with Log.open(d, read_only=True) as r:
                    check((x.offset, x.value) for x in r.records())
            elif kind == 1:
                t = kafkalog.read_arrow(d)
                check(zip(t.column("offset").to_pylist(), t.column("value").to_pylist()))
            else:
                check((x.offset, x.value) for b in kafkalog.iter_batches(newest(d)) for x in b)
            counts["ok"] += 1
        except KafkaLogError as e:
            typed(e)
        except AssertionError:
            print("wrong row in reader", kind, file=sys.stderr)
            raise
    print(json.dumps(counts))
''')


@pytest.mark.parametrize("mode", MODES)
def test_reader_process_beside_writer_process(tmp_path, mode):
    """Counted outcomes: every iteration correct records or a typed error; no signal, no
    wrong row (``check`` fails the reader with an AssertionError: not a typed error)."""
    d = str(tmp_path / "t-0")
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("KAFKALOG_NO_EXTENSIONS", None)
    if mode == "twins":
        env["KAFKALOG_NO_EXTENSIONS"] = "1"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, d], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert writer.stdout.readline().strip() == "ready"
        reader = run_python(READER, [d, "30" if mode == "compiled" else "9"], mode,
                            timeout=300)
    finally:
        (tmp_path / "stop").touch()
        writer_err = writer.communicate(timeout=120)[1]
    assert reader.returncode == 0, (reader.returncode, reader.stderr[-3000:])
    assert writer.returncode == 0, writer_err[-3000:]
    counts = json.loads(reader.stdout.strip().splitlines()[-1])
    assert sum(counts.values()) == (30 if mode == "compiled" else 9)
    assert counts["ok"] > 0, counts


@pytest.mark.skipif(not kafkalog.compiled(), reason="the SIGBUS guard is the compiled module's")
@pytest.mark.parametrize("faulthandler", [False, True])
def test_mapping_guard_and_faults_elsewhere(tmp_path, faulthandler):
    """A cut under a registered mapping: zeros never handed out, FileShrunkError; a fault in
    a mapping kafkalog did not make still ends the process with SIGBUS (after faulthandler's
    traceback, once, when it is enabled)."""
    code = textwrap.dedent('''
        import faulthandler, mmap, os, sys
        from kafkalog._kernels import FileMapping, crc32c
        from kafkalog.errors import FileShrunkError
        if sys.argv[2] == "1":
            faulthandler.enable()
        p = sys.argv[1]
        with open(p, "wb") as f:
            f.write(b"x" * 65536)
        fd = os.open(p, os.O_RDONLY)
        m = FileMapping(fd, 1 << 20, False, p)          # more than the file: fstat's size
        assert len(m) == 65536 and not m.faulted
        other = mmap.mmap(fd, 65536, access=mmap.ACCESS_READ)    # not kafkalog's: unguarded
        os.truncate(p, 100)
        try:
            crc32c(m)                                   # reads every page
        except FileShrunkError as e:
            assert e.mapped_size == 65536 and e.size_now == 100 and e.path == p, e
        else:
            raise AssertionError("no error")
        assert m.faulted
        for touch in (lambda: m[0:10], lambda: memoryview(m), lambda: m[5]):
            try:
                touch()
                raise AssertionError("no error")
            except FileShrunkError:
                pass
        m.close()
        print("guarded", flush=True)
        other[60000]
        print("not reached", flush=True)
    ''')
    p = run_python(code, [str(tmp_path / "f"), "1" if faulthandler else "0"], "compiled")
    assert p.stdout.split() == ["guarded"], (p.stdout, p.stderr[-2000:])
    assert p.returncode == -7, (p.returncode, p.stderr[-2000:])
    assert p.stderr.count("Bus error") == (1 if faulthandler else 0), p.stderr
