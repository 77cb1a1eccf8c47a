"""Kafka data read from object storage (a moto S3 server on 127.0.0.1, spoken to over HTTP by
s3fs/botocore exactly as AWS would be): every reader returns what it returns for the local copy;
faults (deleted, truncated objects, wrong credentials, 503s) give typed errors or are retried."""
import json
import mmap
import os
import shutil
import time

import pytest

from conftest import FIXTURES, LARGE_FIXTURES, fixture_dirs
from s3_proxy import CountingProxy

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from kafkalog import storage, storage_backend  # noqa: E402
from kafkalog._kernels import FileMapping  # noqa: E402
from kafkalog.cli import main as cli_main  # noqa: E402
from kafkalog.dump import dump_path  # noqa: E402
from kafkalog.errors import (  # noqa: E402
    LogNotFoundError, ObjectChangedError, ReadOnlyStorageError, StorageAccessDeniedError,
)
from kafkalog.index import OffsetIndex, TimeIndex  # noqa: E402
from kafkalog.log import Log  # noqa: E402
from kafkalog.records import iter_batches  # noqa: E402
from kafkalog.verify import verify_partition  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_storage")  # conftest

KAFKA_DIRS = [p.name for p in fixture_dirs(FIXTURES)]


def _open(url, s3):
    return Log.open(url, read_only=True, storage_options=s3.options)


def _records(log, **kw):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in log.records(**kw)]


def _outcome(fn, *paths):
    """What ``fn()`` returns, or the error it raises with the paths in it replaced (the
    damaged fixtures fail the same way both ways)."""
    try:
        return fn()
    except Exception as e:
        text = str(e)
        for p in paths:
            text = text.replace(str(p), "<dir>")
        return (type(e).__name__, text)


def _same_log(remote, local):
    paths = (remote.path, local.path)
    assert remote.offsets() == local.offsets()
    assert [s.base_offset for s in remote.segments] == [s.base_offset for s in local.segments]
    for kw in ({"isolation": "log_end"}, {"isolation": "high_watermark"},
               {"isolation": "committed"}, {"include_control": True},
               {"validate_crc": False}):
        assert _outcome(lambda: _records(remote, **kw), *paths) == \
            _outcome(lambda: _records(local, **kw), *paths)
    for ts in (0, 1_700_000_000_000, 1_700_000_000_500, 1_700_000_030_000, 2**62):
        assert _outcome(lambda: remote.offset_for_timestamp(ts), *paths) == \
            _outcome(lambda: local.offset_for_timestamp(ts), *paths)

    def read(lg, offset):
        info = lg.read(offset, 5000, "committed")
        return bytes(info.records), info.aborted_transactions
    for offset in range(local.log_start_offset, local.log_end_offset,
                        max(1, (local.log_end_offset - local.log_start_offset) // 7)):
        assert _outcome(lambda: read(remote, offset), *paths) == \
            _outcome(lambda: read(local, offset), *paths)


@pytest.mark.parametrize("name", KAFKA_DIRS)
def test_kafka_written_log_matches_local(s3, name):
    url = s3.upload(FIXTURES / name, f"kafka-written/{name}")
    with _open(url, s3) as remote, Log.open(FIXTURES / name, read_only=True) as local:
        _same_log(remote, local)


def test_kafkalog_written_log_dir_matches_local(s3, s3_kafkalog_dir):
    local_dir, url = s3_kafkalog_dir
    for partition in ("events-0", "events-1"):
        with _open(f"{url}/{partition}", s3) as remote, \
                Log.open(os.path.join(local_dir, partition), read_only=True) as local:
            assert local.log_end_offset > 0 and len(local.segments) > 1
            # the log dir's checkpoints (high watermark, ...) are read from the bucket too
            _same_log(remote, local)


def test_s3a_alias_and_file_url(s3):
    name = "txn-0" if "txn-0" in KAFKA_DIRS else pytest.skip("no txn-0 fixture")
    url = s3.upload(FIXTURES / name, f"kafka-written/{name}")
    s3a = url.replace("s3://", "s3a://")
    with _open(s3a, s3) as remote, Log.open(f"file://{FIXTURES / name}", read_only=True) as fl, \
            Log.open(FIXTURES / name, read_only=True) as local:
        assert remote.path == url
        assert fl.path == str(FIXTURES / name)
        _same_log(remote, local)
        _same_log(fl, local)


@pytest.mark.parametrize("name", KAFKA_DIRS)
def test_iter_batches_and_indexes(s3, name):
    url = s3.upload(FIXTURES / name, f"kafka-written/{name}")
    for entry in sorted(os.listdir(FIXTURES / name)):
        local = os.path.join(FIXTURES / name, entry)
        remote = f"{url}/{entry}"
        if entry.endswith(".log"):
            def rows(path, **kw):
                out = []
                try:
                    for b in iter_batches(path, **kw):
                        out.append((b.position, b.base_offset, b.last_offset,
                                    [(r.offset, r.key, r.value) for r in b]))
                except Exception as e:   # the damaged fixtures: the same error both ways
                    out.append((type(e).__name__, str(e).replace(url, str(FIXTURES / name))))
                return out
            assert rows(remote, storage_options=s3.options) == rows(local)
            assert rows(f"file://{local}") == rows(local)
        elif entry.endswith((".index", ".timeindex")):
            cls = OffsetIndex if entry.endswith(".index") else TimeIndex
            base = int(entry.split(".")[0])
            with cls.reading(remote, base, storage_options=s3.options) as a, \
                    cls.reading(local, base) as b:
                assert a.entries == b.entries
                assert [x.tolist() for x in a.entries_array()] == \
                    [x.tolist() for x in b.entries_array()]


def _without_paths(value, *paths):
    text = json.dumps(value, sort_keys=True)
    for p in paths:
        text = text.replace(str(p), "<dir>")
    return json.loads(text)


@pytest.mark.parametrize("name", KAFKA_DIRS)
def test_dump_and_verify_match_local(s3, name):
    url = s3.upload(FIXTURES / name, f"kafka-written/{name}")
    local = str(FIXTURES / name)
    assert _without_paths(dump_path(url, storage_options=s3.options), url) == \
        _without_paths(dump_path(local), local)
    assert _without_paths(verify_partition(url, storage_options=s3.options), url) == \
        _without_paths(verify_partition(local), local)


def test_cli_uses_the_aws_environment(s3, s3_kafkalog_dir, monkeypatch, capfd):
    """No flags, no storage_options: the AWS_* environment (AWS_ENDPOINT_URL incl.)."""
    local_dir, url = s3_kafkalog_dir
    s3.use_environment(monkeypatch)
    assert cli_main(["dump", "--json", f"{url}/events-0"]) == 0
    remote = capfd.readouterr().out
    assert cli_main(["dump", "--json", os.path.join(local_dir, "events-0")]) == 0
    assert remote == capfd.readouterr().out
    assert cli_main(["verify", "--json", url]) == 0
    report = json.loads(capfd.readouterr().out)
    assert report["ok"] and len(report["partitions"]) == 2


def test_storage_options_win_over_the_environment(s3, s3_kafkalog_dir, monkeypatch):
    _, url = s3_kafkalog_dir
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")     # nothing listens there
    with _open(f"{url}/events-0", s3) as remote:
        assert remote.log_end_offset > 0


def test_writable_open_of_a_url_is_refused(s3, s3_kafkalog_dir):
    _, url = s3_kafkalog_dir
    with pytest.raises(ReadOnlyStorageError, match="read-only"):
        Log.open(f"{url}/events-0", storage_options=s3.options)


def test_missing_prefix_names_the_url(s3):
    url = s3.url("no/such/topic-0")
    with pytest.raises(LogNotFoundError, match="s3://kafkalog-test/no/such/topic-0"):
        _open(url, s3)
    with pytest.raises(LogNotFoundError, match="no-such-bucket-kl"):
        _open("s3://no-such-bucket-kl/topic-0", s3)


def test_wrong_credentials_name_the_url(s3, s3_kafkalog_dir, monkeypatch):
    """moto checks access keys once IAM authentication is on (INITIAL_NO_AUTH_ACTION_COUNT
    reached): an unknown key is refused with 403 InvalidAccessKeyId, as AWS refuses it."""
    from moto import settings
    from moto.core.responses import ActionAuthenticatorMixin
    _, url = s3_kafkalog_dir
    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    monkeypatch.setattr(ActionAuthenticatorMixin, "request_count", 1)
    wrong = dict(s3.options, key="AKIAWRONGWRONGWRONG1", secret="wrong")
    with pytest.raises(StorageAccessDeniedError, match=f"{url}/events-0") as e:
        Log.open(f"{url}/events-0", read_only=True, storage_options=wrong)
    assert e.value.url.startswith(url)


def _fault_copy(s3, tmp_path, prefix):
    local = FIXTURES / "multiseg-0"
    if not os.path.isdir(local):
        pytest.skip("no multiseg-0 fixture")
    return s3.upload(local, prefix), local


def test_object_deleted_between_open_and_read(s3, tmp_path):
    url, local = _fault_copy(s3, tmp_path, "faults/deleted/multiseg-0")
    with _open(url, s3) as remote:
        first = remote.segments[0]
        s3.client.delete_object(Bucket=s3.bucket,
                                Key=f"faults/deleted/multiseg-0/{os.path.basename(first.log_path)}")
        with pytest.raises(ObjectChangedError, match="deleted") as e:
            list(remote.records(0, 10))
        assert e.value.url == first.log_path


def test_object_truncated_after_open(s3, tmp_path):
    url, local = _fault_copy(s3, tmp_path, "faults/truncated/multiseg-0")
    with _open(url, s3) as remote:
        first = remote.segments[0]
        name = os.path.basename(first.log_path)
        data = (local / name).read_bytes()
        s3.client.put_object(Bucket=s3.bucket, Key=f"faults/truncated/multiseg-0/{name}",
                             Body=data[:len(data) // 2])
        with pytest.raises(ObjectChangedError, match="truncated or replaced"):
            list(remote.records(0, 10))


@pytest.fixture
def proxy(s3):
    """A counting proxy in front of moto (``s3_proxy.CountingProxy``)."""
    p = CountingProxy(s3.endpoint)
    yield p
    p.close()


def test_throttling_and_5xx_are_retried(s3, proxy, monkeypatch):
    from botocore.retries.standard import ExponentialBackoff
    name = "multiseg-0" if "multiseg-0" in KAFKA_DIRS else pytest.skip("no multiseg-0")
    url = s3.upload(FIXTURES / name, f"kafka-written/{name}")
    options = dict(s3.options, endpoint_url=proxy.endpoint)
    # botocore waits up to 1, 2 and 4 s before its retries: the same retries, a 100th the wait
    delays = []
    delay_amount = ExponentialBackoff.delay_amount
    monkeypatch.setattr(ExponentialBackoff, "delay_amount",
                        lambda self, context: delays.append(delay_amount(self, context) / 100)
                        or delays[-1])
    proxy.fail = 3
    with Log.open(url, read_only=True, storage_options=options) as remote, \
            Log.open(FIXTURES / name, read_only=True) as local:
        assert _records(remote) == _records(local)
    assert proxy.failed == 3
    assert len(delays) == 3             # each 503 was retried by botocore, after its backoff


def _bench_upload(s3):
    local = LARGE_FIXTURES / "bench-0"
    if not os.path.isdir(local):
        pytest.skip("no kafka-written-large/bench-0 fixture")
    return s3.upload(local, "kafka-written-large/bench-0"), local


def test_last_percent_read_fetches_only_what_it_needs(s3, proxy, capfd, monkeypatch):
    """Measured: a read of the last 1% of bench-0's offsets fetches the blocks the offset index
    points to, not whole segments; and a full scan next to the local mmap read."""
    url, local = _bench_upload(s3)
    options = dict(s3.options, endpoint_url=proxy.endpoint)
    with Log.open(local, read_only=True) as lg:
        end = lg.log_end_offset
        start = end - end // 100
        local_tables = list(lg.record_tables(start, end))
        t0 = time.perf_counter()
        local_full = sum(len(t) for t in lg.record_tables(validate_crc=True))
        local_full_t = time.perf_counter() - t0
        info_bytes = 0          # bytes of the batches holding offsets >= start
        for seg in lg.segments:
            batches = seg.batches()[0]
            info_bytes += int(batches["size"][batches["last_offset"] >= start].sum())
        total_bytes = sum(s.size for s in lg.segments)
        n_segments = len(lg.segments)
    lines = []
    for block in (storage_backend.BLOCK_SIZE, 1024 * 1024):
        monkeypatch.setattr(storage_backend, "BLOCK_SIZE", block)
        storage.clear_cache()
        proxy.reset()
        with Log.open(url, read_only=True, storage_options=options) as remote:
            open_gets, open_bytes = proxy.gets, proxy.get_bytes
            proxy.reset()
            remote_tables = list(remote.record_tables(start, end))
            read_gets, read_bytes = proxy.gets, proxy.get_bytes
        assert sum(len(t) for t in remote_tables) == sum(len(t) for t in local_tables) \
            == end - start
        # Only what the index points to: far less than the log (87 MB in 6 segments).
        assert open_bytes + read_bytes < 0.2 * total_bytes
        lines.append(f"  block {block >> 20} MiB: open {open_gets} GETs {open_bytes} bytes, "
                     f"read {read_gets} GETs {read_bytes} bytes; fetched / returned = "
                     f"{(open_bytes + read_bytes) / info_bytes:.2f}")
    monkeypatch.undo()
    storage.clear_cache()
    proxy.reset()
    with Log.open(url, read_only=True, storage_options=options) as remote:
        t0 = time.perf_counter()
        remote_full = sum(len(t) for t in remote.record_tables(validate_crc=True))
        remote_full_t = time.perf_counter() - t0
        full_gets, full_bytes = proxy.gets, proxy.get_bytes
    assert remote_full == local_full
    with capfd.disabled():
        print(f"\n[object storage] bench-0: {total_bytes} bytes in {n_segments} segments; "
              f"last 1% = offsets [{start}, {end}): {info_bytes} bytes of batches returned")
        print("\n".join(lines))
        print(f"  full scan (CRC checked, records decoded): S3 "
              f"{total_bytes / remote_full_t / 1e6:.0f} MB/s ({full_gets} GETs, {full_bytes} "
              f"bytes), local mmap {total_bytes / local_full_t / 1e6:.0f} MB/s")


def test_local_reads_stay_mapped(tmp_path):
    """A local path (and file://) is read through mmap, never through the remote buffers."""
    name = KAFKA_DIRS[0] if KAFKA_DIRS else pytest.skip("no fixtures")
    shutil.copytree(FIXTURES / name, tmp_path / name)
    # the compiled FileMapping (an mmap that keeps no descriptor), else mmap.mmap
    mapped = (mmap.mmap,) + ((FileMapping,) if isinstance(FileMapping, type) else ())
    with Log.open(f"file://{tmp_path / name}", read_only=True) as lg:
        assert all(isinstance(seg.buffer(), mapped) for seg in lg.segments if seg.size)
