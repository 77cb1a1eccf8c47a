"""Discovery and planning from one listing (issue 40): a default read of many partitions in a
bucket is planned with no request per partition (the recursive listing, 1,000 keys a request,
and a log dir's checkpoints), read with one ranged GET per one-segment partition, and returns
exactly what the engine's plan returns; planning holds no view of a partition it is done with."""
import errno
import json
import os
import shutil
import threading

import pytest

from conftest import FIXTURES

import kafkalog  # noqa: E402
import kafkalog.arrow  # noqa: E402
import kafkalog.spark as ks  # noqa: E402
from kafkalog import storage, storage_local  # noqa: E402
from kafkalog import verify as verify_module  # noqa: E402
from kafkalog.checkpoint import write_offset_checkpoint  # noqa: E402
from kafkalog.errors import TooManyMappingsError, TooManyOpenFilesError  # noqa: E402
from kafkalog.scan import discovery  # noqa: E402
from kafkalog.scan.reader import read_task  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_storage")  # conftest

SOURCE = FIXTURES / "plain-0"            # one segment of 3,000 records


def _copies(root, n, first=0):
    """``n`` partition directories ``t-<i>`` under ``root``: hard links to a copy of
    ``SOURCE`` beside ``root`` (never to the shared fixture, whose link count is finite)."""
    source = root.parent / "source"
    if not source.exists():
        shutil.copytree(SOURCE, source)
    for i in range(first, first + n):
        d = root / f"t-{i}"
        d.mkdir(parents=True)
        for f in source.iterdir():
            os.link(f, d / f.name)
    return root


def _rows(tasks):
    """(partition, offset) of every record the tasks read."""
    return sorted((t["partition"], o) for t in tasks
                  for b in read_task(t, ["offset"]) for o in b.column("offset").to_pylist())


def test_a_default_s3_plan_makes_no_request_per_partition(s3, s3_calls, tmp_path):
    root = _copies(tmp_path / "logs", 6)
    url = s3.upload(root, "plan-listing/a")
    tasks = ks.plan(url, storage_options=s3.options)
    # the recursive listing, which also tells a tiered-storage view whether the path holds
    # Aiven's topic prefixes: no HEAD, no GET
    planned = dict(s3_calls)
    assert len(tasks) == 6 and planned == {"list_objects_v2": 1}, planned
    # three times the partitions, the same requests
    _copies(root, 12, first=6)
    url = s3.upload(root, "plan-listing/b")
    storage.reset()
    s3_calls.clear()
    tasks = ks.plan(url, storage_options=s3.options)
    assert len(tasks) == 18 and s3_calls == planned, s3_calls
    # a read: the plan's requests and one ranged GET per one-segment partition
    storage.reset()
    s3_calls.clear()
    table = kafkalog.read_arrow(url, storage_options=s3.options, columns=["offset"])
    assert table.num_rows == 18 * 3000
    assert s3_calls == {**planned, "get_object": 18}, s3_calls


def test_a_log_dirs_checkpoints_cost_one_get_each(s3, s3_calls, tmp_path):
    root = _copies(tmp_path / "logs", 5)
    write_offset_checkpoint(root / "replication-offset-checkpoint",
                            {("t", i): 700 * i for i in range(5)})
    url = s3.upload(root, "plan-listing/hw")
    tasks = ks.plan(url, storage_options=s3.options)
    assert s3_calls == {"list_objects_v2": 1, "get_object": 1}, s3_calls
    assert {t["partition"]: t["end_offset"] for t in tasks} == \
        {i: 700 * i for i in range(1, 5)}          # t-0's high watermark 0: nothing to read
    storage.reset()
    table = kafkalog.read_arrow(url, storage_options=s3.options, columns=["partition", "offset"])
    assert sorted(zip(*table.to_pydict().values())) == \
        [(i, o) for i in range(5) for o in range(700 * i)]


def test_the_listing_plan_reads_what_the_engine_plan_reads(tmp_path):
    root = _copies(tmp_path / "logs", 3)
    # a log start above the first offset and a high watermark below the log end
    write_offset_checkpoint(root / "log-start-offset-checkpoint", {("t", 1): 10})
    write_offset_checkpoint(root / "replication-offset-checkpoint", {("t", 2): 2990})
    listed = ks.plan(root)
    assert [t["end_offset"] for t in listed] == [None, None, 2990]
    engine = ks.plan(root, {"startingOffsets": '{"t":{"0":-2,"1":-2,"2":-2}}'})
    assert [t["end_offset"] for t in engine] == [3000, 3000, 2990]
    assert _rows(listed) == _rows(engine)
    assert _rows(listed)[:1] == [(0, 0)] and (1, 9) not in _rows(listed)


def test_planning_keeps_no_view_of_a_partition_it_is_done_with(tmp_path, monkeypatch):
    root = _copies(tmp_path / "logs", 40)
    opened = []
    closed = []
    real_log = discovery.Replica.log
    real_close = discovery.Replica.close

    def log(self):
        if self._log is None:
            opened.append(self.path)
            assert len(opened) - len(closed) <= 1, "a view kept past its partition's plan"
        return real_log.fget(self)

    def close(self):
        if self._log is not None:
            closed.append(self.path)
        real_close(self)
    monkeypatch.setattr(discovery.Replica, "log", property(log))
    monkeypatch.setattr(discovery.Replica, "close", close)
    # a bounded read: every partition opened by the engine, one at a time
    tasks = ks.plan(root, {"startingTimestamp": "0"})
    assert len(tasks) == 40 and len(opened) == 40 == len(closed)


@pytest.mark.parametrize("code, error, knob, refusing", [
    (errno.ENOMEM, TooManyMappingsError, "vm.max_map_count", "FileMapping"),
    (errno.EMFILE, TooManyOpenFilesError, "ulimit -n", "open"),
])
def test_a_kernel_limit_reached_while_reading_names_the_limit(tmp_path, monkeypatch, code,
                                                              error, knob, refusing):
    root = _copies(tmp_path / "logs", 1)
    tasks = ks.plan(root)

    def refused(*args, **kwargs):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(storage_local, refusing, refused, raising=False)
    with pytest.raises(error, match=knob.replace(".", r"\.")) as e:
        list(read_task(tasks[0], ["offset"]))
    assert e.value.errno == code


def test_cli_verify_of_a_bucket_checks_its_partitions_at_once(s3, s3_calls, tmp_path, capfd,
                                                              monkeypatch):
    from kafkalog.cli import main as cli_main
    root = _copies(tmp_path / "logs", 6)
    url = s3.upload(root, "plan-listing/verify")
    s3.use_environment(monkeypatch)
    at_once = []
    real = verify_module.verify_partition

    def verify_partition(d, **kw):
        at_once.append(threading.current_thread().name)
        return real(d, **kw)
    monkeypatch.setattr(verify_module, "verify_partition", verify_partition)
    assert cli_main(["verify", "--json", "--progress", url]) == 0
    doc = json.loads(capfd.readouterr().out)
    assert [p["dir"] for p in doc["partitions"]] == [f"{url}/t-{i}" for i in range(6)]
    assert all(p["ok"] for p in doc["partitions"])
    assert len(set(at_once)) > 1                     # partitions of a bucket verified at once


def test_cli_dump_and_salvage_of_a_bucket_work_on_its_partitions_at_once(
        s3, tmp_path, capfd, monkeypatch):
    # verify's one mechanism (log_dirs.each_partition): partitions at once, output in order,
    # the same as the local log dir's
    from kafkalog import log_dirs
    from kafkalog.cli import main as cli_main
    root = _copies(tmp_path / "logs", 4)
    url = s3.upload(root, "plan-listing/dump")
    s3.use_environment(monkeypatch)
    threads = []
    real = log_dirs.each_partition

    def each_partition(fn, dirs):
        def noted(d):
            threads.append(threading.current_thread().name)
            return fn(d)
        return real(noted, dirs)
    monkeypatch.setattr(log_dirs, "each_partition", each_partition)
    monkeypatch.setattr("kafkalog.dump.partition.each_partition", each_partition)
    assert cli_main(["dump", "--json", "--records", "digest", str(root)]) == 0
    local = capfd.readouterr().out.replace(str(root), "ROOT")
    threads.clear()
    assert cli_main(["dump", "--json", "--records", "digest", url]) == 0
    assert capfd.readouterr().out.replace(url, "ROOT") == local
    assert len(set(threads)) > 1 and len(threads) == 4
    threads.clear()
    assert cli_main(["salvage", "--json", "--out", str(tmp_path / "out"), url]) == 0
    docs = json.loads(capfd.readouterr().out)["partitions"]
    assert [d["dir"] for d in docs] == [f"{url}/t-{i}" for i in range(4)]
    assert all(d["records"] == 3000 and not d["gaps"] for d in docs)
    assert len(set(threads)) > 1
    copy = kafkalog.read_arrow(str(tmp_path / "out"), columns=["partition", "offset"])
    assert copy.num_rows == 4 * 3000


def test_serve_finds_a_buckets_partitions_from_one_listing(s3, s3_calls, tmp_path):
    from kafkalog.serve.catalog import Catalog
    root = _copies(tmp_path / "logs", 4)
    url = s3.upload(root, "plan-listing/serve")
    catalog = Catalog([url], storage_options=s3.options)
    try:
        assert sorted(catalog.topics["t"]) == [0, 1, 2, 3]
        # resolved and discovered from one LIST; its views are opened when first served
        assert s3_calls.get("list_objects_v2") == 1, s3_calls
    finally:
        catalog.close()
