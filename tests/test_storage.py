"""kafkalog.storage's dispatch: a plain path to the local backend, a URL to fsspec's, a registered
scheme to its own backend (a view ``<scheme>+<url>`` of other objects, as kafkalog.tiered's
``rsm+``); remote reads themselves are in test_object_storage.py and test_tiered.py."""
import os

import pytest

from kafkalog import storage, storage_local
from kafkalog.errors import ObjectStorageError, ReadOnlyStorageError
from kafkalog.log_dirs import partition_dirs
from kafkalog.storage_backend import Entry, StorageBackend


class _Memory(StorageBackend):
    """A view ``mem+<url>``: one topic group ``g`` holding partition ``t-0`` with a segment."""

    def __init__(self):
        self.calls = []

    def list_dir(self, path):
        self.calls.append(("list_dir", path))
        if path.endswith("/g"):
            return [Entry("t-0", 0, False, True)]
        if path.endswith("/t-0"):
            return [Entry("00000000000000000000.log", 3, True, False)]
        return [Entry("g", 0, False, True)]

    def isdir(self, path):
        return not path.endswith(".log")

    def isfile(self, path):
        return path.endswith(".log")

    def open_file(self, path):
        raise FileNotFoundError(path)

    def read_file(self, path):
        return b"abc"

    def size_of(self, path):
        return 3

    def modified_ms(self, path):
        return 42

    def groups_partitions(self, path):
        return path.endswith("/g")

    def resolve(self, path, keys):
        self.calls.append(("resolve", path, keys))
        if isinstance(path, str) and path.endswith("/memory") and "://" not in path:
            return "mem+file://" + path
        return path

    def set_options(self, path, options):
        self.calls.append(("set_options", path, dict(options)))

    def reset(self):
        self.calls.append(("reset",))


@pytest.fixture
def memory(monkeypatch):
    backend = _Memory()
    monkeypatch.setitem(storage._backends, "mem+", backend)
    return backend


def test_plain_paths_and_file_urls_are_local(tmp_path):
    (tmp_path / "a").write_bytes(b"xyz")
    assert not storage.is_remote(str(tmp_path)) and storage.is_remote("s3://b/k")
    assert storage.normalize(f"file://{tmp_path}/a") == f"{tmp_path}/a"
    assert storage.normalize("s3a://bucket/dir/") == "s3://bucket/dir"
    assert storage.read_file(str(tmp_path / "a")) == b"xyz"
    assert storage.read_files([str(tmp_path / "a")] * 2) == [b"xyz", b"xyz"]
    assert storage.listdir(str(tmp_path)) == ["a"]
    assert storage.list_dir(str(tmp_path)) == [Entry("a", 3, True, False)]
    assert storage.read_ranges(str(tmp_path / "a"), [(1, 3)]) == [b"yz"]
    assert bytes(storage.open_buffer(str(tmp_path / "a"))) == b"xyz"
    assert not storage.groups_partitions(str(tmp_path))
    storage.check_writable(str(tmp_path))
    with pytest.raises(ReadOnlyStorageError):
        storage.check_writable("s3://bucket/dir")


def test_a_local_listing_stats_only_the_files_whose_size_is_asked(tmp_path):
    (tmp_path / "00000000000000000000.log").write_bytes(b"abc")
    (tmp_path / "00000000000000000000.index").write_bytes(b"abcd")
    (tmp_path / "d").mkdir()
    (tmp_path / "link.index").symlink_to(tmp_path / "00000000000000000000.index")
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    listed = storage.list_dir(str(tmp_path), sized=(".log",))
    # kinds from readdir's type; a symbolic link followed (a dangling one left out, as a
    # full listing leaves it out)
    assert listed == [Entry("00000000000000000000.index", -1, True, False),
                      Entry("00000000000000000000.log", 3, True, False),
                      Entry("d", -1, False, True),
                      Entry("link.index", 4, True, False)]
    assert [e.name for e in storage.list_dir(str(tmp_path))] == [e.name for e in listed]


@pytest.mark.parametrize("from_disk", [False, True], ids=["cached", "from-disk"])
def test_directories_are_listed_in_inode_order_and_found_in_name_order(tmp_path, monkeypatch,
                                                                       from_disk):
    names = [f"t-{i}" for i in (3, 1, 20, 2, 10, 4, 5)]
    for name in names:                       # inodes ascend in this (not the name) order
        (tmp_path / name).mkdir()
        (tmp_path / name / "00000000000000000000.log").write_bytes(b"x")
    monkeypatch.setattr(storage_local, "_BATCH", 2)
    if from_disk:                            # every batch read off the disk: threads
        reads = iter(range(0, 10 ** 9, 1000))
        monkeypatch.setattr(storage_local, "_blocks_read", lambda: next(reads))
    by_inode = sorted(names, key=lambda n: os.stat(tmp_path / n).st_ino)
    (tmp_path / "gone").mkdir()
    listed = list(storage.list_dirs_in(str(tmp_path), sorted(names) + ["gone", "missing"],
                                       (".log",)))
    assert [n for n, _ in listed if n in names] == by_inode
    assert dict(listed)["missing"] is None and dict(listed)["t-1"] == [
        Entry("00000000000000000000.log", 1, True, False)]
    assert partition_dirs(str(tmp_path)) == [str(tmp_path / n) for n in sorted(names)]


def test_a_registered_view_serves_its_scheme(memory, tmp_path):
    # the URL inside a view is normalized like any other; a local one becomes file://
    assert storage.normalize(f"MEM+file://{tmp_path}") == f"mem+file://{tmp_path}"
    assert storage.normalize("mem+s3a://bucket/x/") == "mem+s3://bucket/x"
    view = storage.locate(f"{tmp_path}/memory", rsm_keys={}).root
    assert view == f"mem+file://{tmp_path}/memory"
    assert ("resolve", f"{tmp_path}/memory", {}) in memory.calls
    assert storage.is_remote(view)
    assert storage.locate(view, {"key": "k"}).root == view
    assert ("set_options", view, {"key": "k"}) in memory.calls
    assert storage.isdir(view) and storage.exists(view) and not storage.isfile(view)
    log = f"{view}/g/t-0/00000000000000000000.log"
    assert storage.read_file(log) == b"abc" and storage.modified_ms(log) == 42
    with pytest.raises(ObjectStorageError, match="not read by byte ranges"):
        storage.open_buffer(log)                 # the default: this backend has no ranges
    # a log dir's listing looks inside what the backend says groups partitions
    assert partition_dirs(view) == [f"{view}/g/t-0"]
    storage.reset()
    assert ("reset",) in memory.calls


def test_a_location_is_one_immutable_picklable_value(memory, tmp_path, monkeypatch):
    import pickle
    monkeypatch.setattr(storage, "_backends", {"mem+": memory})   # keys for this view only
    options, keys = {"key": "k"}, {"id": "pem"}
    location = storage.locate(f"{tmp_path}/memory", options, keys)
    options["key"] = "changed"                       # the location kept its own copy
    assert location.root == f"mem+file://{tmp_path}/memory"
    assert location.options == {"key": "k"} and location.rsm_keys == {"id": "pem"}
    assert location.backend is memory and location.is_remote
    assert location.task_options(location.root + "/g") == {"key": "k"}
    assert location.task_options(str(tmp_path)) is None      # a local task: no credentials
    assert "k" not in repr(location) and "pem" not in repr(location)
    with pytest.raises(AttributeError):
        location.root = "elsewhere"
    # unpickled (in a Spark worker): options and keys recorded there, the root not resolved
    # again (no listing)
    memory.calls.clear()
    again = pickle.loads(pickle.dumps(location))
    assert again == location and again is not location
    assert memory.calls == [("set_options", location.root, {"key": "k"}),
                            ("resolve", location.root, {"id": "pem"})]
    local = storage.locate(f"file://{tmp_path}")
    assert local.root == str(tmp_path) and local.options is None and not local.is_remote
    assert pickle.loads(pickle.dumps(local)) == local
