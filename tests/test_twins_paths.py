"""The Python-level paths that call the kernels (``Log`` open, recovery, reads and appends,
``iter_batches``, ``decode_batches``, dump, verify, salvage, the cleaner, the Arrow reader) run
end to end twice in one process: with the compiled kernels, and with their pure-Python twins
swapped in (``twins.pure_kernels``). The two runs must give the same results, and each must
give what Kafka wrote where the fixture says so. This replaces running the whole suite a
second time with ``KAFKALOG_NO_EXTENSIONS=1`` for the paths between the kernels."""
import gc
import json
import shutil
import tempfile
from pathlib import Path

import pytest

import kafkalog
from kafkalog import _core_py, build_control_batch, decode_batches, iter_batches
from kafkalog._kernels import KERNEL_NAMES
from kafkalog.errors import KafkaLogError
from kafkalog.log import Log

from conftest import FIXTURES, expected
from twins import PURE, both_ways, bindings_of, compiled_module, pure_kernels

NOW = 1_800_000_000_000


@pytest.fixture
def twin_paths(tmp_path):
    """``both_ways``, in a process whose compiled kernels really loaded; afterwards every
    binding holds its compiled kernel again."""
    if PURE:
        pytest.skip("KAFKALOG_NO_EXTENSIONS=1 runs every path with the twins already")
    compiled_module()
    yield both_ways
    assert bindings_of(_core_py) == [], "the twins stayed bound after the swap"


def fresh(tmp_path, name=None):
    """A new directory under ``tmp_path`` (with a writable copy of fixture ``name``)."""
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    if name is None:
        return root
    shutil.copytree(FIXTURES / name, root / name)
    for f in (root / name).iterdir():
        f.chmod(0o644)
    return root / name


def anonymous(value, root):
    """``value`` as JSON with the run's directory taken out (the two runs use two)."""
    return json.loads(json.dumps(value, default=repr).replace(str(root), "<dir>"))


def fields(records):
    return [(r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value, r.headers)
            for r in records]


def caught(read, root):
    """``read()``, or the kafkalog error it raised (type, message without ``root``,
    position)."""
    try:
        return ("ok", read())
    except KafkaLogError as e:
        return ("error", type(e).__name__, str(e).replace(str(root), "<dir>"),
                getattr(e, "position", None))


# --- the swap itself --------------------------------------------------------------------------

def test_the_swap_reaches_every_binding_and_undoes_itself(twin_paths):
    """Inside ``pure_kernels`` no kafkalog module (nor a class, a default argument or a table
    of it) refers to a compiled kernel; afterwards none refers to a twin."""
    core = compiled_module()
    with pure_kernels():
        assert not kafkalog.compiled() and kafkalog.Record is _core_py.Record
        assert bindings_of(core) == [] and len(bindings_of(_core_py)) >= len(KERNEL_NAMES)
        for name in KERNEL_NAMES:
            owners = [r for r in gc.get_referrers(getattr(core, name))
                      if isinstance(r, dict) and r is not vars(core)
                      and str(r.get("__name__", "")).startswith("kafkalog")]
            assert owners == [], name
    assert kafkalog.compiled()
    for name in KERNEL_NAMES:
        twin = getattr(_core_py, name)
        owners = [r.get("__name__") for r in gc.get_referrers(twin) if isinstance(r, dict)
                  and str(r.get("__name__", "")).startswith("kafkalog.")
                  and not str(r["__name__"]).endswith("_py")]
        assert owners == [], name


# --- Log: open (recovery), read, search, append, reopen ---------------------------------------

def log_scenario(tmp_path, name, clean):
    path = fresh(tmp_path, name)
    log = Log.open(path, clean_shutdown=clean)
    out = {"offsets": (log.log_start_offset, log.recovery_point, log.log_end_offset),
           "segments": [(s.base_offset, s.size) for s in log.segments],
           "records": caught(lambda: fields(log.records(include_control=True)), path),
           "committed": caught(lambda: fields(log.records(isolation="committed")), path),
           "unchecked": caught(lambda: len(list(log.records(validate_crc=False))), path)}
    end = log.log_end_offset
    fetches = []
    for offset in sorted({log.log_start_offset, end // 3, end // 2, max(end - 1, 0)}):
        info = caught(lambda: log.read(offset, max_bytes=5000), path)
        fetches.append(info if info[0] != "ok" else bytes(info[1].records))
    out["fetches"] = fetches
    out["by time"] = [caught(lambda: log.offset_for_timestamp(t), path)
                      for t in (-2, -1, 0, 1_500_000_000_000, 1_700_000_000_000, NOW)]
    appended = log.append([dict(key=b"k%d" % i, value=b"v" * i, timestamp=NOW + i,
                                headers=[("h", b"x")]) for i in range(5)])
    out["appended"] = (appended.first_offset, appended.last_offset)
    log.close()
    # recovers from offset 0 (the close recorded the log end as the recovery point)
    log = Log.open(path, clean_shutdown=False, recovery_point=0)
    out["reopened"] = (log.log_end_offset, fields(log.records(start_offset=appended.first_offset)))
    log.close()
    return out


@pytest.mark.parametrize("name", ["plain-0", "gzip-0", "zstd-0", "txn-0", "append_time-0",
                                  "headers-0", "legacy_v1_codecs-0", "legacy_v0-0", "crashed-0",
                                  "corrupt_flip-0"])
def test_log_open_read_append_and_recover(twin_paths, tmp_path, name):
    clean = name == "corrupt_flip-0"          # opened clean, the flipped batch stays to read
    got = twin_paths(log_scenario, tmp_path, name, clean)
    want = [r["offset"] for s in expected(FIXTURES / name)["segments"] for b in s["batches"]
            for r in b.get("records", []) if r["offset"] < got["offsets"][2]]
    kind, records = got["records"][:2]
    if clean:
        assert kind == "error" and got["records"][3] == 38490       # the batch at 1890
        assert got["reopened"] == (1890, [])    # recovery cuts there, the appends with it
    else:
        assert kind == "ok" and [r[0] for r in records] == want
        assert got["reopened"][1][-1][3:5] == (b"k4", b"vvvv")


# --- records: batches and tables over a segment's bytes ---------------------------------------

def records_scenario(name):
    data = (FIXTURES / name / "00000000000000000000.log").read_bytes()
    batches = []
    for b in iter_batches(data, validate_crc=True):
        batches.append((b.base_offset, b.last_offset, b.record_count, b.is_valid(),
                        fields(b)))
    rows = kafkalog._kernels.walk_batches(data)[0]          # the kernels in place
    table = decode_batches(data, rows)
    return batches, table.keys(), fields(table.to_records())


@pytest.mark.parametrize("name", ["plain-0", "snappy-0", "lz4-0", "txn-0", "legacy_v1-0",
                                  "legacy_v1_codecs-0", "append_time-0"])
def test_iter_batches_and_decode_batches(twin_paths, name):
    batches, _, records = twin_paths(records_scenario, name)
    want = [r["offset"] for s in expected(FIXTURES / name)["segments"][:1]
            for b in s["batches"] for r in b.get("records", [])]
    assert [r[0] for r in records] == want
    assert [r[0] for b in batches for r in b[4]] == want


# --- dump, verify, salvage, recover -----------------------------------------------------------

def tools_scenario(tmp_path, name):
    from kafkalog.dump import dump_partition
    from kafkalog.recovery import recover_partition
    from kafkalog.salvage import salvage_partition
    from kafkalog.verify import verify_partition
    path = fresh(tmp_path, name)
    salvaged = salvage_partition(path)
    out = {"dump": dump_partition(path, "full"),
           "verify": verify_partition(path),
           "salvage": [(s.base_offset, s.batches.tolist()) for s in salvaged.segments],
           "gaps": [repr(g) for g in salvaged.gaps],
           "recover": recover_partition(path)}
    return anonymous(out, path)


@pytest.mark.parametrize("name", ["gzip-0", "txn-0", "corrupt_garbage-0", "crashed-0",
                                  "legacy_v1-0"])
def test_dump_verify_salvage_and_recover(twin_paths, tmp_path, name):
    got = twin_paths(tools_scenario, tmp_path, name)
    assert got["verify"]["ok"] is (name not in ("corrupt_garbage-0", "crashed-0"))


# --- the cleaner ------------------------------------------------------------------------------

def cleaner_scenario(tmp_path):
    log = Log.open(fresh(tmp_path) / "c-0", {"segment.bytes": 1024, "cleanup.policy": "compact",
                                             "file.delete.delay.ms": 0})
    for i in range(300):
        log.append([dict(key=b"k%d" % (i % 7), value=None if i % 50 == 3 else b"v%d" % i,
                         timestamp=NOW + i)])
        if i % 40 == 5:
            log.append([dict(key=b"t%d" % i, value=b"txn", timestamp=NOW)], producer_id=9,
                       producer_epoch=0, base_sequence=i // 40, transactional=True)
            log.append(build_control_batch("abort" if i % 80 == 5 else "commit",
                                           producer_id=9, producer_epoch=0))
    stats = log.compact(NOW)
    out = (stats.records_retained, stats.segments_cleaned, fields(log.records()),
           [(s.base_offset, s.size) for s in log.segments])
    log.close()
    return out


def test_the_cleaner(twin_paths, tmp_path):
    retained, cleaned, records, _ = twin_paths(cleaner_scenario, tmp_path)
    assert cleaned > 0 and len(records) < 300


# --- the Arrow reader (the Spark reader's read path, without Spark) ---------------------------

def arrow_scenario(name):
    return kafkalog.read_arrow(FIXTURES / name, includeHeaders=True).to_pylist()


@pytest.mark.parametrize("name", ["headers-0", "txn-0"])
def test_arrow_reader(twin_paths, name):
    pytest.importorskip("pyarrow")
    rows = twin_paths(arrow_scenario, name)
    assert len(rows) == sum(len(b.get("records", [])) for s in
                            expected(FIXTURES / name)["segments"] for b in s["batches"]
                            if not b["is_control"])
