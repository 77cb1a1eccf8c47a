"""The Spark reader and ``kafkalog verify`` see a partition as the log itself does.

Partition directories in every state a reader meets them: *live* (a Log open for writing in
this process, before and after a flush, and after the commit of a transaction that was open),
*crashed* (the writing process SIGKILLed, with and without an open transaction, and with a torn
last batch), *cleanly closed*, and Kafka's own ``crashed-0`` fixture. The ground truth for each
is ``Log.open(path, read_only=True)``: its log end offset, last stable offset, ``records()``,
``records(isolation="committed")`` and ``offset_for_timestamp``. The Spark planner must not
re-derive those facts from file names (a producer snapshot named after the log end offset is
only there after a clean close).

Run as ``python tests/test_reader_views.py child DIR VARIANT`` it is the writing child that the
crash tests SIGKILL.
"""
import functools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import FIXTURES, planned_end
from kafkalog import Log, LogConfig, Record, build_batch, build_control_batch

TOPIC = "views"
T0 = 1_700_000_000_000                       # record timestamps: T0 + 10 * offset
LAYOUTS = {
    # many segments: rolls write producer snapshots at segment bases, never at the log end
    "multi": {"segment.bytes": 4096, "index.interval.bytes": 256, "file.delete.delay.ms": 0},
    # one segment: no producer snapshot at all until a clean close
    "single": {"segment.bytes": 1 << 20, "index.interval.bytes": 256,
               "file.delete.delay.ms": 0},
}
OPEN_PID, ABORTED_PID, COMMITTED_PID = 102, 100, 101


# ----------------------------------------------------------------------------------------------
# Writing (shared by this process and the child that is killed)

class Writer:
    """Appends records whose timestamps grow with their offsets, and transactions."""

    def __init__(self, log):
        self.log = log
        self.sequences = {}

    def _records(self, n):
        start = self.log.log_end_offset
        return [Record(key=b"k%d" % o, value=b"v%d:" % o + b"x" * 40, timestamp=T0 + 10 * o)
                for o in range(start, start + n)]

    def plain(self, n=5, times=1):
        for _ in range(times):
            self.log.append(self._records(n))

    def transactional(self, pid, n=4):
        seq = self.sequences.get(pid, 0)
        self.log.append(self._records(n), producer_id=pid, producer_epoch=0,
                        base_sequence=seq, transactional=True)
        self.sequences[pid] = seq + n

    def end(self, pid, kind):
        self.log.append(build_control_batch(kind, producer_id=pid, producer_epoch=0,
                                            timestamp=T0 + 10 * self.log.log_end_offset))


def write_workload(log, txn):
    """A few hundred records; with ``txn`` an aborted and a committed transaction, then one
    left open (with plain records appended after its start, across rolls in "multi")."""
    w = Writer(log)
    w.plain(times=10)
    if not txn:
        w.plain(times=40)
        return w
    w.transactional(ABORTED_PID)
    w.plain()
    w.transactional(ABORTED_PID)
    w.end(ABORTED_PID, "abort")
    w.transactional(COMMITTED_PID)
    w.transactional(COMMITTED_PID)
    w.plain()
    w.end(COMMITTED_PID, "commit")
    w.plain(times=10)
    w.transactional(OPEN_PID)                # the open transaction starts here
    w.plain(times=8)
    w.transactional(OPEN_PID)
    w.plain(times=8)
    return w


def commit_open_transaction(w):
    w.end(OPEN_PID, "commit")
    w.plain(times=3)


def partition_dir(root):
    path = Path(root) / "logdir" / f"{TOPIC}-0"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _child(directory, variant):
    txn, layout = variant.split("-")
    log = Log.open(directory, LogConfig(LAYOUTS[layout]))
    write_workload(log, txn == "txn")
    sys.stdout.write(f"READY {log.log_end_offset}\n")
    sys.stdout.flush()
    time.sleep(600)                          # killed here, the Log never closed


def write_crashed(directory, variant, torn=False):
    """A child process writes the workload and is SIGKILLed with its Log open."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "child",
                             str(directory), variant],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        line = proc.stdout.readline() if ready else b""
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        err = proc.stderr.read().decode(errors="replace")
        proc.stdout.close()
        proc.stderr.close()
    assert line.startswith(b"READY"), f"the writing child did not get ready: {err[-2000:]}"
    if torn:
        # The kill landed inside the write of the next batch: half of it reached the file.
        end = int(line.split()[1])
        batch = build_batch([Record(key=b"k%d" % (end + i), value=b"torn" * 20,
                                    timestamp=T0 + 10 * (end + i)) for i in range(5)],
                            base_offset=end)
        last = max(directory.glob("*.log"))
        with open(last, "ab") as f:
            f.write(batch[:len(batch) // 2])
    return int(line.split()[1])


# ----------------------------------------------------------------------------------------------
# Scenarios

def _build(name, root):
    """``name`` is state-txn-layout; a live scenario holds its writing Log open."""
    state, txn, layout = name.rsplit("-", 2)
    path = partition_dir(root)
    scenario = SimpleNamespace(name=name, path=path, writer=None, txn=txn == "txn")
    if state.startswith("live"):
        log = Log.open(path, LogConfig(LAYOUTS[layout]))
        w = write_workload(log, txn == "txn")
        if state == "live-flushed":
            log.flush()
        elif state == "live-committed":
            commit_open_transaction(w)
        scenario.writer = log
    elif state.startswith("crashed"):
        write_crashed(path, f"{txn}-{layout}", torn=state == "crashed-torn")
    elif state == "clean":
        log = Log.open(path, LogConfig(LAYOUTS[layout]))
        write_workload(log, txn == "txn")
        log.close()
    else:
        raise AssertionError(name)
    return scenario


SCENARIOS = [
    "live-unflushed-plain-multi", "live-unflushed-txn-single", "live-unflushed-txn-multi",
    "live-flushed-plain-multi", "live-flushed-txn-multi",
    "live-committed-txn-single", "live-committed-txn-multi",
    "crashed-plain-multi", "crashed-txn-single", "crashed-txn-multi",
    "crashed-torn-plain-multi",
    "clean-plain-multi", "clean-txn-single", "clean-txn-multi",
]


def truth(path):
    """What the log itself says about ``path``, opened read-only (no recovery, no writes)."""
    log = Log.open(path, read_only=True)
    try:
        snap = log.offsets()
        records = [(r.offset, r.timestamp) for r in log.records()]
        t = SimpleNamespace(
            log_start=log.log_start_offset, log_end=log.log_end_offset,
            lso=log.last_stable_offset, hw=log.high_watermark, snapshot=snap,
            uncommitted=[o for o, _ in records],
            committed=[r.offset for r in log.records(isolation="committed")])
        # timestamps to resolve: a record's a third of the way in, and one just before a
        # record's near the end (in the last segment)
        n = len(records)
        targets = sorted({records[n // 3][1], records[n - 4][1] - 1})
        t.timestamps = {ts: log.offset_for_timestamp(ts) for ts in targets}
        return t
    finally:
        log.close()


@pytest.fixture(scope="module", params=SCENARIOS)
def scenario(request, tmp_path_factory):
    s = _build(request.param, tmp_path_factory.mktemp(request.param))
    s.truth = truth(s.path)
    s.views = Views(s.path, s.truth)
    yield s
    if s.writer is not None:
        s.writer.close()


# ----------------------------------------------------------------------------------------------
# Views: every Spark read of a directory, planned one by one, run as one Spark job

COMMITTED = {"kafka.isolation.level": "read_committed"}
UNCOMMITTED = {"kafka.isolation.level": "read_uncommitted"}


def _partition_spec(path, offset):
    return json.dumps({Path(path).name.rsplit("-", 1)[0]: {"0": offset}})


def queries(path, t):
    """{label: (check, options, the offsets the read must return)} from the ground truth."""
    q = {}
    both = (("read_uncommitted", UNCOMMITTED, t.uncommitted),
            ("read_committed", COMMITTED, t.committed))
    q["read_uncommitted"] = ("uncommitted", UNCOMMITTED, t.uncommitted)
    q[f"read_committed (LSO {t.lso}, log end {t.log_end})"] = ("committed", COMMITTED,
                                                               t.committed)
    # As Spark's Kafka source: a batch read cannot start at latest.
    for start in ("latest", _partition_spec(path, -1)):
        for name, opts, _ in both:
            q[f"{name} startingOffsets={start}"] = ("latest", dict(opts, startingOffsets=start),
                                                    Refused("can't be latest"))
    middle = t.uncommitted[len(t.uncommitted) * 2 // 3]
    for name, opts, offsets in both:
        # read_committed ends at the last stable offset; a start above it is Spark's
        # "resolved start offset ... greater than the resolved end offset"
        end = t.lso if opts is COMMITTED else t.log_end
        q[f"{name} startingOffsets {middle}"] = (
            "json", dict(opts, startingOffsets=_partition_spec(path, middle)),
            [o for o in offsets if o >= middle] if middle <= end else
            Refused("greater than the resolved end offset"))
    q[f"read_uncommitted startingOffsets {t.log_end} (the log end)"] = (
        "json", dict(UNCOMMITTED, startingOffsets=_partition_spec(path, t.log_end)), [])
    for ts, found in t.timestamps.items():
        assert found is not None, (ts, found)
        for name, opts, offsets in both:
            # a timestamp only matches below latest (ListOffsets answers below the last
            # stable offset for read_committed): else "No offset matched"
            end = t.lso if opts is COMMITTED else t.log_end
            q[f"{name} startingTimestamp {ts} (offset_for_timestamp: {found})"] = (
                "timestamp", dict(opts, startingTimestamp=str(ts)),
                [o for o in offsets if o >= found[0]] if found[0] < end else
                Refused("No offset matched"))
    return q


class Refused:
    """What a query Spark's Kafka source refuses must give: a planning error saying this."""

    def __init__(self, says):
        self.says = says

    def __repr__(self):
        return f"Refused({self.says!r})"


class Views:
    """The Spark reads of one directory and what each must return. Reads are planned one by one
    (``kafkalog.spark.read``) and run together as one Spark job: every check's reads at the
    first check."""

    def __init__(self, path, t):
        self.path, self.truth = path, t
        self.queries = queries(path, t)
        self._results = {}

    def _run(self, spark, labels):
        from pyspark.sql import functions as F

        import kafkalog.spark as ks
        frames = []
        for label in labels:
            try:                               # planning happens here, on the driver
                df = ks.read(spark, str(self.path), **self.queries[label][1])
            except Exception as e:             # reported by the check that made the read
                self._results[label] = e
                continue
            self._results[label] = []
            frames.append(df.select(F.lit(label).alias("query"), "offset"))
        if frames:
            union = functools.reduce(lambda a, b: a.unionAll(b), frames)
            for row in union.coalesce(1).collect():
                self._results[row.query].append(row.offset)
        for label in labels:
            if not isinstance(self._results[label], Exception):
                self._results[label].sort()

    def check(self, spark, kind):
        mine = [label for label, (check, _, _) in self.queries.items() if check == kind]
        if any(label not in self._results for label in mine):
            self._run(spark, [label for label in self.queries if label not in self._results])
        wrong = []
        for label in mine:
            got, want = self._results[label], self.queries[label][2]
            if isinstance(want, Refused):
                if not (isinstance(got, ValueError) and want.says in str(got)):
                    wrong.append(f"{label}: want a planning error saying {want.says!r}, got "
                                 f"{got!r}")
            elif isinstance(got, Exception):
                wrong.append(f"{label}: planning raised {got!r}")
            elif got != want:
                wrong.append(f"{label}: Spark read {_summary(got)}, the read-only Log holds "
                             f"{_summary(want)}; missing {sorted(set(want) - set(got))[:8]}, "
                             f"extra {sorted(set(got) - set(want))[:8]}")
        assert not wrong, "\n".join(wrong)


def _summary(offsets):
    return f"{len(offsets)} offsets {offsets[0]}..{offsets[-1]}" if offsets else "nothing"


def check_ground_truth(t):
    assert t.uncommitted and t.uncommitted[-1] < t.log_end
    assert t.hw == t.log_end                  # one copy: the high watermark is the log end
    assert t.snapshot.log_end_offset == t.log_end
    assert t.snapshot.last_stable_offset == t.lso
    assert all(o < t.lso for o in t.committed)
    assert set(t.committed) <= set(t.uncommitted)


def check_planned_start(path, t):
    """A read_uncommitted read ends at latest: the high watermark, here the log end offset."""
    import kafkalog.spark as ks
    ends = [planned_end(task) for task in ks.plan([str(path)], {}) if "end_offset" in task]
    assert ends and max(ends) == t.log_end, ends


def run_verify_json(path):
    r = subprocess.run([sys.executable, "-m", "kafkalog", "verify", "--json", str(path)],
                       check=False, capture_output=True, text=True,
                       env=dict(os.environ))
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] == (r.returncode == 0)
    assert len(doc["partitions"]) == 1, doc
    return doc, doc["partitions"][0]


def check_verify(path, t, clean):
    doc, report = run_verify_json(path)
    assert os.path.samefile(report["dir"], path)
    segments = report["segments"]
    assert all(s.get("crc_errors", 0) == 0 for s in segments), segments
    last = [s["last_offset"] for s in segments if s.get("last_offset") is not None]
    assert last and max(last) + 1 == t.log_end, (
        f"verify's segments end at {max(last) + 1 if last else None}, the log end offset is "
        f"{t.log_end}")
    offsets = report["offsets"]           # the engine's read-only view, as verify reports it
    for key, want in (("log_end_offset", t.log_end), ("last_stable_offset", t.lso),
                      ("log_start_offset", t.log_start)):
        assert offsets[key] == want, (key, offsets[key], want)
    if clean:
        assert doc["ok"] and not report["problems"], report["problems"]
    else:
        # what it reports of an unclosed log is the state of its files, never damage
        for p in report["problems"]:
            assert p["code"] in {"index_zero_tail", "torn_tail"}, p


# ----------------------------------------------------------------------------------------------
# The scenarios

def test_ground_truth(scenario):
    t = scenario.truth
    check_ground_truth(t)
    if scenario.writer is not None:           # the read-only view is the writer's own view
        w = scenario.writer
        assert (t.log_end, t.lso) == (w.log_end_offset, w.last_stable_offset)
        assert t.uncommitted == [r.offset for r in w.records()]
        assert t.committed == [r.offset for r in w.records(isolation="committed")]
    if scenario.txn and "committed" not in scenario.name:
        assert t.lso < t.log_end              # the open transaction holds the LSO back
        assert t.committed[-1] < t.lso < t.uncommitted[-1]
    else:
        assert t.lso == t.log_end


def test_read_uncommitted(spark, scenario):
    scenario.views.check(spark, "uncommitted")


def test_read_committed(spark, scenario):
    scenario.views.check(spark, "committed")


def test_starting_offsets_latest(spark, scenario):
    scenario.views.check(spark, "latest")
    check_planned_start(scenario.path, scenario.truth)


def test_starting_offsets_json(spark, scenario):
    scenario.views.check(spark, "json")


def test_starting_timestamp(spark, scenario):
    scenario.views.check(spark, "timestamp")


def test_verify_json(scenario):
    check_verify(scenario.path, scenario.truth, clean=scenario.name.startswith("clean"))


# ----------------------------------------------------------------------------------------------
# Kafka's own crashed partition (no transactions, killed with its Log open)

@pytest.fixture(scope="module")
def crashed_0(tmp_path_factory):
    """A copy of the fixture, shared by the tests below (they only read it): every check's
    Spark reads run as one Spark job, at the first check."""
    path = tmp_path_factory.mktemp("crashed") / "crashed-0"
    shutil.copytree(FIXTURES / "crashed-0", path)
    for f in path.iterdir():
        f.chmod(0o644)
    t = truth(path)
    return SimpleNamespace(path=path, truth=t, views=Views(path, t))


def test_crashed_fixture_ground_truth(crashed_0):
    t = crashed_0.truth
    check_ground_truth(t)
    assert (t.log_end, t.lso) == (639, 639)
    assert t.committed == t.uncommitted == list(range(639))


def test_crashed_fixture_read_committed_returns_every_record(spark, crashed_0):
    assert crashed_0.truth.committed == list(range(639))     # no transactions in it at all
    crashed_0.views.check(spark, "committed")


def test_crashed_fixture_read_uncommitted(spark, crashed_0):
    crashed_0.views.check(spark, "uncommitted")


def test_crashed_fixture_starting_offsets_latest(spark, crashed_0):
    crashed_0.views.check(spark, "latest")
    check_planned_start(crashed_0.path, crashed_0.truth)


def test_crashed_fixture_starting_offsets_json(spark, crashed_0):
    crashed_0.views.check(spark, "json")


def test_crashed_fixture_starting_timestamp(spark, crashed_0):
    crashed_0.views.check(spark, "timestamp")


def test_crashed_fixture_verify_json(crashed_0):
    check_verify(crashed_0.path, crashed_0.truth, clean=False)


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "child":
    _child(sys.argv[2], sys.argv[3])
else:
    # the one session-scoped SparkSession of the suite (defined in test_spark.py)
    from test_spark import spark  # noqa: F401
    pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")
