"""Shared fixtures. Ground truth lives in ../shared/fixtures (written by Apache Kafka).

Without ../shared (a clone on its own, or ``KAFKALOG_SHARED`` pointing elsewhere) the tests that
need the Kafka-written fixtures are skipped, with the reason, and the rest run. A test needs
them when it is marked ``requires_fixtures`` or when it, a helper of the test modules it calls,
or one of its pytest fixtures names ``FIXTURES``, ``LARGE_FIXTURES``, ``fixture_copy`` or the
helpers that read fixtures (found by looking at their code when the tests are collected).
Reading a fixture file that is not there skips the test (or the module) that tried.
"""
import base64
import json
import os
import shutil
import types
from pathlib import Path

import pytest

import kafkalog
from kafkalog import _core_py

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
PURE = os.environ.get("KAFKALOG_NO_EXTENSIONS", "") in ("1", "true", "yes")


class _FixturePath(type(Path())):
    """A path under the shared fixtures. When its fixture set is absent, listing it yields
    nothing (parametrize lists come out empty instead of failing collection) and reading it
    skips the test, or the module reading it at import, with the reason."""

    def _root_missing(self):
        for root in _ROOTS:
            if (self == root or root in self.parents) and not os.path.isdir(root):
                return root
        return None

    def _skip_if_missing(self):
        root = self._root_missing()
        if root is not None:
            pytest.skip(f"reading {self}: {_missing_reason(root)}", allow_module_level=True)

    def iterdir(self):
        if self._root_missing() is not None:
            return iter(())
        return super().iterdir()

    def read_bytes(self):
        self._skip_if_missing()
        return super().read_bytes()

    def read_text(self, *args, **kwargs):
        self._skip_if_missing()
        return super().read_text(*args, **kwargs)

    def open(self, *args, **kwargs):
        self._skip_if_missing()
        return super().open(*args, **kwargs)


SHARED = _FixturePath(os.environ.get("KAFKALOG_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures" / "kafka-written"
LARGE_FIXTURES = SHARED / "fixtures" / "kafka-written-large"
_ROOTS = (FIXTURES, LARGE_FIXTURES)


def _missing_reason(root):
    return (f"Kafka-written fixtures not found at {root}: put the project's shared/ directory "
            f"beside the checkout, or set KAFKALOG_SHARED to it")


def fixtures_present(root=FIXTURES):
    return os.path.isdir(root)


# conftest helpers that read the Kafka-written fixtures (by default) when a test calls them.
_READERS = {"fixture_names": FIXTURES, "fixture_dirs": FIXTURES, "expected": FIXTURES,
            "verify": FIXTURES}


def _code_names(code):
    """Global (and attribute) names used by ``code`` and the functions nested in it."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _in_tests(fn):
    code = getattr(fn, "__code__", None)
    return code is not None and code.co_filename.startswith(str(TESTS))


def _function_roots(fn, seen):
    """The fixture sets a test-suite function needs: the fixture paths and fixture-reading
    helpers its code names, and what the test-suite functions, classes and module-level
    values it names need in turn."""
    fn = getattr(fn, "__wrapped__", getattr(fn, "__func__", fn))
    if not _in_tests(fn) or fn.__code__ in seen:
        return set()
    seen.add(fn.__code__)
    roots = set()
    for name in _code_names(fn.__code__):
        value = fn.__globals__.get(name)
        if name in _READERS and getattr(value, "__module__", None) == __name__:
            roots.add(_READERS[name])
        else:
            roots |= _value_roots(value, seen)
    return roots


def _value_roots(value, seen):
    if isinstance(value, _FixturePath):
        return {r for r in _ROOTS if value == r or r in value.parents or value in r.parents}
    if isinstance(value, (types.FunctionType, types.MethodType)):
        return _function_roots(value, seen)
    if isinstance(value, type) and value.__module__.startswith("test_"):
        roots = set()
        for member in vars(value).values():
            roots |= _value_roots(getattr(member, "__func__", member), seen)
        return roots
    if isinstance(value, (list, tuple)) and len(value) < 1000:
        roots = set()
        for v in value:
            if isinstance(v, (_FixturePath, list, tuple)):
                roots |= _value_roots(v, seen)
        return roots
    return set()


def _item_roots(item):
    """The fixture sets a collected test needs (see the module docstring)."""
    roots = set()
    for mark in item.iter_markers("requires_fixtures"):
        roots |= {LARGE_FIXTURES if a == "large" else FIXTURES for a in mark.args} or {FIXTURES}
    seen = set()
    roots |= _value_roots(getattr(item, "function", None), seen)
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        if name == "fixture_copy":
            roots.add(FIXTURES)
        for fixturedef in (info.name2fixturedefs.get(name, ()) if info else ()):
            roots |= _value_roots(fixturedef.func, seen)
    callspec = getattr(item, "callspec", None)
    for value in (callspec.params.values() if callspec else ()):
        roots |= _value_roots(value, seen)
    return roots


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "requires_fixtures(*sets): needs ../shared's Kafka-written fixtures "
        "('large' for kafka-written-large); skipped when they are absent")


# A test's call phase may take this long (wall seconds) unless it is marked
# ``allow_slow(reason)``: the suite has a budget (scripts/test.sh, all stages, within 15 minutes
# on 2 cores). The pure-Python kernels are several times slower, so their runs allow more; on
# a machine busier than its cores (other jobs) the limit grows with the load per core, so that
# it fails tests that are slow, not a machine that is busy.
CALL_TIME_LIMIT_S = 120.0 if PURE else 30.0


def _call_time_limit():
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return CALL_TIME_LIMIT_S * max(1.0, load), load


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if not (report.when == "call" and report.passed and report.duration > CALL_TIME_LIMIT_S
            and item.get_closest_marker("allow_slow") is None):
        return
    limit, load = _call_time_limit()
    if report.duration > limit:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} passed but took {report.duration:.1f} s, over the "
                           f"{limit:.0f} s a test may take ({CALL_TIME_LIMIT_S:.0f} s at a load "
                           f"of {load:.1f} per core): make it smaller, or mark it "
                           f"@pytest.mark.allow_slow(reason) if it must be long")


def pytest_report_header(config):
    lines = []
    for root in _ROOTS:
        state = "present" if fixtures_present(root) else "MISSING: tests needing them skip"
        lines.append(f"kafkalog fixtures {root}: {state}")
    return lines


# The longest test files (their seconds in a clean-clone CI, 67c7ac6): run first, so that the
# two pytest processes (``--dist loadfile`` hands out whole files in collection order) end
# together instead of one finishing a long file alone. Stale figures cost time, never results.
_LONG_FILES = {
    "test_tiered.py": 90, "test_reader_views.py": 84, "test_spark_tiered.py": 81,
    "test_object_storage.py": 74, "test_spark_streaming.py": 60, "test_spark_connect.py": 48,
    "test_spark.py": 47, "test_spark_datasource.py": 40, "test_spark_options.py": 40,
    "test_spark_pushdown.py": 26, "test_spark_object_storage.py": 26,
    "test_spark_planning.py": 24, "test_dump.py": 20, "test_descriptors.py": 20,
    "test_crash.py": 17, "test_spark_read_mode_warnings.py": 17,
}


def pytest_collection_modifyitems(config, items):
    # (a stable sort: a file's tests keep their order, the other files theirs)
    items.sort(key=lambda item: -_LONG_FILES.get(item.path.name, 0))
    for item in items:
        roots = _item_roots(item)
        if not roots:
            continue
        item.add_marker(pytest.mark.requires_fixtures(
            *("large" if r == LARGE_FIXTURES else "kafka-written" for r in sorted(roots))))
        missing = sorted(str(r) for r in roots if not fixtures_present(r))
        if missing:
            # Before any "empty parameter set" skip, so the reason says what is missing.
            item.add_marker(pytest.mark.skip(reason=_missing_reason(missing[0])), append=False)


def pytest_sessionstart(session):
    if not PURE and not kafkalog.compiled():
        raise pytest.UsageError("the compiled kafkalog._core did not load; build it "
                                "(bash scripts/setup.sh) or set KAFKALOG_NO_EXTENSIONS=1")
    if os.environ.get("KAFKALOG_EXPECT_INSTALLED") == "1":
        here = str(REPO / "kafkalog")
        if os.path.abspath(kafkalog.__file__).startswith(here):
            raise pytest.UsageError(f"testing the source tree ({kafkalog.__file__}), not the "
                                    f"installed wheel")


def fixture_dirs(root=FIXTURES):
    """The fixture partition directories under ``root``; none when the set is absent."""
    return sorted(p for p in root.iterdir() if p.is_dir())


def fixture_names(root=FIXTURES):
    return [p.name for p in fixture_dirs(root)]


def expected(path):
    return json.loads(path.with_name(path.name + ".expected.json").read_text())


def verify(path):
    return json.loads(path.with_name(path.name + ".verify.json").read_text())


@pytest.fixture
def fixture_copy(tmp_path):
    """Copy a fixture directory somewhere writable (fixtures are read-only ground truth)."""
    def copy(name, root=FIXTURES):
        if not fixtures_present(root):
            pytest.skip(_missing_reason(root))
        dst = tmp_path / name
        shutil.copytree(root / name, dst)
        for f in dst.iterdir():
            f.chmod(0o644)
        return dst
    return copy


def _kernel_modules():
    if PURE:   # the compiled kernels are compared with their twins in the first run
        return {"python": _core_py}
    from kafkalog import _core
    return {"compiled": _core, "python": _core_py}


KERNELS = _kernel_modules()


@pytest.fixture(params=sorted(KERNELS))
def kernels(request):
    """The kernel module under test: both implementations run on the same inputs."""
    return KERNELS[request.param]


@pytest.fixture(autouse=True)
def _no_swallowed_exceptions(capfd):
    """Fail a test whose stderr shows an exception swallowed inside a cdef function."""
    yield
    err = capfd.readouterr().err
    assert "Exception ignored" not in err, err


def process_dies(log_or_manager):
    """What the death of the process does to an open Log or LogManager, in-process: nothing
    is flushed, closed or checkpointed; the kernel drops the process's ``flock`` locks."""
    from kafkalog.manager import LogManager
    logs = [log_or_manager]
    if isinstance(log_or_manager, LogManager):
        logs = list(log_or_manager.logs().values())
        log_or_manager._release_locks()
    for log in logs:
        log._closed = True
        for lock in log._locks:
            lock.release()


# ---------------------------------------------------------------------------- object storage
S3_BUCKET = "kafkalog-test"


class _S3:
    """A moto S3 server on 127.0.0.1 (real HTTP: kafkalog talks to it through s3fs and
    botocore as it would to AWS): ``endpoint``, ``options`` (fsspec storage_options),
    ``client`` (boto3), ``url(prefix)``, ``upload(local_dir, prefix)``."""

    def __init__(self, endpoint):
        import boto3
        self.endpoint = endpoint
        self.bucket = S3_BUCKET
        self.options = {"key": "testing", "secret": "testing", "endpoint_url": endpoint,
                        "client_kwargs": {"region_name": "us-east-1"}}
        self.client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                                   aws_access_key_id="testing", aws_secret_access_key="testing")
        self.client.create_bucket(Bucket=self.bucket)
        self.uploaded = set()

    def url(self, prefix, scheme="s3"):
        return f"{scheme}://{self.bucket}/{prefix}"

    def use_environment(self, monkeypatch):
        """Point the AWS_* environment (what a run without storage options uses) here, and
        nothing else of it set; returns the variables set."""
        env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
            monkeypatch.delenv(var, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        return env

    def upload(self, local_dir, prefix):
        """Upload every file under ``local_dir`` to ``prefix`` (once per session)."""
        if prefix in self.uploaded:
            return self.url(prefix)
        for root, _, names in os.walk(local_dir):
            for name in names:
                full = os.path.join(root, name)
                rel = os.path.relpath(full, local_dir)
                self.client.upload_file(full, self.bucket, f"{prefix}/{rel}")
        self.uploaded.add(prefix)
        return self.url(prefix)


def _write_kafkalog_dir(root):
    """A log dir written by kafkalog: two partitions, several segments, checkpoints, a
    committed and an aborted transaction."""
    from kafkalog.builder import build_control_batch
    from kafkalog.manager import LogManager
    from kafkalog import Record
    with LogManager(root, {"segment.bytes": 20000, "index.interval.bytes": 512},
                    background=False) as manager:
        for partition in (0, 1):
            log = manager.get_or_create_log("events", partition)
            offset = 0
            for i in range(60):
                recs = [Record(key=f"k{i}-{j}".encode(), value=bytes([i % 251]) * (50 + j),
                               timestamp=1_700_000_000_000 + i * 1000 + j,
                               headers=(("h", b"v"),) if j == 0 else ())
                        for j in range(10)]
                if i % 20 == 7:
                    pid = 1000 + i
                    log.append(recs, producer_id=pid, producer_epoch=0, base_sequence=0,
                               transactional=True)
                    log.append(build_control_batch("abort" if i % 40 == 7 else "commit",
                                                   producer_id=pid, producer_epoch=0))
                else:
                    log.append(recs)
                offset += 10
    return root


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """The session's moto S3 server with its bucket; stopped at the end."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield _S3(f"http://{host}:{port}")
    finally:
        server.stop()


@pytest.fixture
def fresh_storage():
    """kafkalog's storage state (filesystems, options, cached buffers) reset around a test."""
    from kafkalog import storage
    storage.reset()
    yield
    storage.reset()


@pytest.fixture
def s3_calls(monkeypatch):
    """The S3 API calls s3fs makes, by operation: {operation: count} (``list_objects_v2``: 1,000
    keys each)."""
    s3fs = pytest.importorskip("s3fs")
    counts = {}
    original = s3fs.S3FileSystem._call_s3

    async def counted(fs, method, *args, **kwargs):
        counts[method] = counts.get(method, 0) + 1
        return await original(fs, method, *args, **kwargs)
    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counted)
    return counts


@pytest.fixture(scope="session")
def s3_kafkalog_dir(s3, tmp_path_factory):
    """(local log dir, its URL) of a log dir written by kafkalog, uploaded."""
    local = _write_kafkalog_dir(str(tmp_path_factory.mktemp("kafkalog-written") / "logdir"))
    return local, s3.upload(local, "kafkalog-written/logdir")


def reference(name, headers=False, keep=lambda r, b: True):
    """What a Kafka consumer sees in a fixture, from Kafka's own reading of it."""
    exp = expected(FIXTURES / name)
    out = []
    for seg in exp["segments"]:
        for b in seg["batches"]:
            if b["is_control"]:
                continue                      # consumers never see control records
            for r in b["records"]:
                if not keep(r, b):
                    continue
                # Kafka's TimestampType ids, as Spark reports them (-1 for magic 0)
                ts_type = {"LOG_APPEND_TIME": 1, "CREATE_TIME": 0}.get(b["timestamp_type"], -1)
                item = (exp["topic"], exp["partition"], r["offset"], r["timestamp"], ts_type,
                        _bytes(r["key_b64"]), _bytes(r["value_b64"]))
                if headers:
                    item += (tuple((h["key"], _bytes(h["value_b64"])) for h in r["headers"])
                             or None,)
                out.append(item)
    return sorted(out, key=lambda x: (x[0], x[1], x[2]))


def _bytes(b64):
    return None if b64 is None else base64.b64decode(b64)


def txn0_committed():
    """``keep`` for ``reference("txn-0", ...)``: what a read_committed consumer sees of the
    transactional fixture (below its last stable offset, no aborted transaction's records)."""
    exp = expected(FIXTURES / "txn-0")
    aborted = [e for s in exp["segments"] if s["txn_index"] for e in s["txn_index"]["entries"]]

    def committed(r, b):
        if r["offset"] >= 637:           # the open transaction of pid 400 bounds the LSO
            return False
        return not (b["is_transactional"] and any(
            a["producer_id"] == b["producer_id"] and a["first_offset"] <= r["offset"]
            <= a["last_offset"] for a in aborted))
    return committed


def planned_end(task):
    """The end offset a planned task reads to: its ``end_offset``, or for a default read
    planned from the listing alone (``end_offset`` None: up to the end of the listed bytes)
    the log end of its partition as the engine reads it."""
    if task["end_offset"] is not None:
        return task["end_offset"]
    from kafkalog.log import Log
    with Log.open(task["dir"], read_only=True, clean_shutdown=True) as log:
        return log.log_end_offset
