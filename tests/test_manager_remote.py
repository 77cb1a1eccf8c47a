"""``LogManager(url, read_only=True)``: the log dirs of a bucket (a moto S3 server on 127.0.0.1,
spoken to over HTTP), opened read-only through ``kafkalog.storage``, give what the local copies
give and write nothing; a writable manager of a URL is refused."""
import os
import shutil

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from kafkalog import storage  # noqa: E402
from kafkalog.errors import (  # noqa: E402
    KafkaLogError, LogNotFoundError, ReadOnlyStorageError,
)
from kafkalog.manager import LogManager  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_storage():
    storage.reset()
    yield
    storage.reset()


@pytest.fixture(scope="module")
def split_dirs(s3, s3_kafkalog_dir, tmp_path_factory):
    """(local dirs, their URLs): the kafkalog-written log dir split in two log dirs, one
    partition each, both with the log dir's checkpoint files."""
    local_dir, _ = s3_kafkalog_dir
    root = tmp_path_factory.mktemp("split")
    dirs, urls = [], []
    for i, partition in enumerate(("events-0", "events-1")):
        d = root / f"dir{i}"
        shutil.copytree(os.path.join(local_dir, partition), d / partition)
        for name in os.listdir(local_dir):
            if os.path.isfile(os.path.join(local_dir, name)):
                shutil.copy(os.path.join(local_dir, name), d / name)
        dirs.append(str(d))
        urls.append(s3.upload(d, f"manager-split/dir{i}"))
    return dirs, urls


def _objects(s3):
    listed = s3.client.list_objects_v2(Bucket=s3.bucket)
    return sorted((o["Key"], o["Size"], o["ETag"]) for o in listed.get("Contents", []))


def _contents(manager):
    out = {}
    for key, lg in sorted(manager.logs().items()):
        out[key] = (lg.offsets(), [s.base_offset for s in lg.segments],
                    [(r.offset, r.timestamp, r.key, r.value, r.headers)
                     for r in lg.records(isolation="committed")])
    return out


def test_remote_log_dir_matches_local_and_writes_nothing(s3, s3_kafkalog_dir):
    local_dir, url = s3_kafkalog_dir
    before = _objects(s3)
    with LogManager(url, read_only=True, storage_options=s3.options) as remote, \
            LogManager(local_dir, read_only=True) as local:
        assert remote.log_dirs == [url]
        assert sorted(remote.logs()) == [("events", 0), ("events", 1)]
        assert all(lg.path.startswith(url + "/") for lg in remote.logs().values())
        # the high watermark and log start come from the bucket's checkpoint files
        assert _contents(remote) == _contents(local)
        assert remote.scheduler._queue == []            # no retention/flush/checkpoint task
        remote.checkpoint()
        assert remote.cleanup_logs() == 0               # read-only logs delete nothing
        with pytest.raises(KafkaLogError, match="read-only"):
            remote.get_or_create_log("events", 7)
        with pytest.raises(KafkaLogError, match="read-only"):
            remote.delete_log("events", 0)
    assert _objects(s3) == before                       # no lock, checkpoint or marker


def test_list_of_remote_log_dirs(s3, split_dirs):
    dirs, urls = split_dirs
    s3a = [u.replace("s3://", "s3a://") + "/" for u in urls]
    before = _objects(s3)
    with LogManager(s3a, read_only=True, storage_options=s3.options) as remote, \
            LogManager(dirs, read_only=True) as local:
        assert remote.log_dirs == urls                  # s3a:// is s3://, no trailing slash
        assert remote._log_dir_of == {("events", 0): urls[0], ("events", 1): urls[1]}
        assert _contents(remote) == _contents(local)
    assert _objects(s3) == before


def test_mixed_local_and_remote_log_dirs(s3, split_dirs):
    dirs, urls = split_dirs
    with LogManager([dirs[0], urls[1]], read_only=True, storage_options=s3.options) as m, \
            LogManager(dirs, read_only=True) as local:
        assert _contents(m) == _contents(local)


def test_aws_environment_when_no_options(s3, s3_kafkalog_dir, monkeypatch):
    _, url = s3_kafkalog_dir
    s3.use_environment(monkeypatch)
    with LogManager(url, read_only=True) as m:
        assert len(m.logs()) == 2


def test_writable_manager_of_a_url_is_refused(s3, s3_kafkalog_dir):
    _, url = s3_kafkalog_dir
    before = _objects(s3)
    with pytest.raises(ReadOnlyStorageError, match="read-only"):
        LogManager(url, storage_options=s3.options)
    with pytest.raises(ReadOnlyStorageError, match=url):
        LogManager([url], background=False, storage_options=s3.options)
    assert _objects(s3) == before


def test_missing_remote_log_dir_names_the_url(s3):
    url = s3.url("no/such/logdir")
    with pytest.raises(LogNotFoundError, match=url):
        LogManager(url, read_only=True, storage_options=s3.options)
