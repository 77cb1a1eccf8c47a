"""Remote logs opened and read from a listing a caller holds (``storage.listed``): verify,
dump and salvage of a bucket list its root once and ask nothing more of what it listed (no
LIST per partition, no HEAD), each object read once; a Log opened inside a listing reads what
one opened by path reads."""
import io
import os
import shutil
from contextlib import redirect_stdout

import pytest

from conftest import FIXTURES
from s3_proxy import CountingProxy

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from kafkalog import storage  # noqa: E402
from kafkalog.cli import main as cli_main  # noqa: E402
from kafkalog.log import Log  # noqa: E402
from kafkalog.storage_backend import Entry  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_storage")  # conftest

SOURCE = FIXTURES / "plain-0"           # 1 segment: .log, 2 indexes, snapshot, 2 checkpoints
PARTITIONS = 4


@pytest.fixture(scope="module")
def bucket(s3, tmp_path_factory):
    """(URL of a log dir of ``PARTITIONS`` copies of plain-0, objects in it, the same log dir
    on local disk)."""
    if not os.path.isdir(SOURCE):
        pytest.skip("no kafka-written/plain-0 fixture")
    local = tmp_path_factory.mktemp("listed-open") / "logdir"
    for i in range(PARTITIONS):
        shutil.copytree(SOURCE, local / f"plain-{i}")
    return s3.upload(local, "listed-open/logdir"), PARTITIONS * len(os.listdir(SOURCE)), \
        str(local)


@pytest.fixture
def proxied(s3, monkeypatch):
    """A counting proxy in front of moto, the AWS_* environment pointing at it (as the CLI
    reads it)."""
    proxy = CountingProxy(s3.endpoint)
    s3.use_environment(monkeypatch)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    yield proxy
    proxy.close()


def _cli(*args):
    out = io.StringIO()
    with redirect_stdout(out):
        status = cli_main(list(args))
    return status, out.getvalue()


def _each_once(counts, objects):
    """No LIST but the root's one page, no HEAD, each object read (``objects``) once, by a
    ranged GET of its listed size."""
    assert counts == {"LIST": 1, "GET range": objects}, counts


def test_verify_of_a_bucket_lists_once_and_reads_each_object_once(bucket, proxied):
    url, objects, local = bucket
    status, out = _cli("verify", "--json", url)
    _each_once(proxied.take(), objects)
    # the rows of the local copy (a remote partition verified alone, asking the store for
    # everything, gives those: test_object_storage)
    assert (status, out.replace(url, "<dir>")) == \
        (0, _cli("verify", "--json", local)[1].replace(local, "<dir>"))


def test_dump_and_salvage_of_a_bucket_list_once(bucket, proxied):
    url, objects, local = bucket
    status, out = _cli("dump", "--json", url)
    _each_once(proxied.take(), objects - PARTITIONS)     # partition.metadata: not dumped
    assert (status, out) == (0, _cli("dump", "--json", local)[1])
    status, out = _cli("salvage", "--json", url)
    _each_once(proxied.take(), PARTITIONS)               # the .log of each
    assert (status, out.replace(url, "<dir>")) == \
        (0, _cli("salvage", "--json", local)[1].replace(local, "<dir>"))


def test_log_opened_in_its_listing_reads_what_one_opened_by_path_reads(s3, proxied):
    """txn-0: transactions (aborted ones, transaction indexes on some segments only), 10
    segments, producer snapshots."""
    name = "txn-0"
    if not os.path.isdir(FIXTURES / name):
        pytest.skip(f"no kafka-written/{name} fixture")
    url = s3.upload(FIXTURES / name, f"kafka-written/{name}")

    def what(log):
        rows = [(r.offset, r.timestamp, r.key, r.value, r.headers)
                for r in log.records(isolation="committed")]
        return (log.offsets(), [(s.base_offset, s.size) for s in log.segments], rows,
                log.offset_for_timestamp(1_700_000_000_500))
    # its log dir as discovery lists it: the partition, no checkpoint files
    tree = {os.path.dirname(url): [Entry(name, 0, False, True)], **storage.list_tree(url)}
    proxied.take()
    with storage.listed(tree), Log.open(url, read_only=True) as listed:
        from_listing = what(listed)
    counts = proxied.take()
    assert set(counts) == {"GET range"}, counts              # no LIST, no HEAD
    with Log.open(FIXTURES / name, read_only=True) as by_path:
        assert what(by_path) == from_listing


def test_a_listing_answers_for_its_directories_only(tmp_path):
    """Existence, kind, size and listing of a listed directory's files come from the listing
    (no request: the bucket does not exist); a file missing from it is missing; a path outside
    it, or local, is asked as always."""
    d = "s3://no-such-bucket-listed/logdir/t-0"
    entries = [Entry("00000000000000000000.log", 7, True, False), Entry("sub", 0, False, True)]
    (tmp_path / "local").write_bytes(b"abc")
    with storage.listed({d: entries, f"{d}/sub": []}):
        assert storage.list_dir(d) == entries and storage.listdir(d) == [e.name for e in entries]
        assert storage.list_tree(d) == {d: entries, f"{d}/sub": []}
        assert storage.isdir(d) and storage.isdir(f"{d}/sub") and storage.exists(f"{d}/sub")
        assert storage.isfile(f"{d}/00000000000000000000.log")
        assert storage.size_of(f"{d}/00000000000000000000.log") == 7
        assert not storage.exists(f"{d}/00000000000000000000.index")
        with pytest.raises(FileNotFoundError):
            storage.read_file(f"{d}/leader-epoch-checkpoint")
        assert storage.size_of(tmp_path / "local") == 3
        with storage.listed({}, keep_read=True):          # nested: the outer one still holds
            assert storage.size_of(f"{d}/00000000000000000000.log") == 7
    assert storage.isfile(tmp_path / "local")
