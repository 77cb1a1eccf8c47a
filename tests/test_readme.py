"""Every example of the README runs as written: its python blocks in order, sharing names as a
reader's session would, and its `kafkalog ...` command lines, in a directory laid out as the
checkout after the README's first command (``sample-data/`` written by ``kafkalog.demo``,
``../shared`` beside it). Spark blocks run with the suite's one SparkSession, the S3 block
against the suite's moto server (a bucket ``backups`` holding ``sample-data``); a block
needing an extra that is not installed is skipped by name. Also: the README stays a user's
document (short before any table of figures) and the documents it links exist."""
import os
import re
import shlex

import pytest

import test_spark
from conftest import REPO, SHARED, fixtures_present
from kafkalog.cli import main
from kafkalog.demo import write_sample_07_partition, write_sample_partition

spark = test_spark.spark          # the one session-scoped SparkSession of the suite

README = (REPO / "README.md").read_text()
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
# Documents other sessions add: linked before they land.
LATER = {"docs/format-0.7.md", "docs/broker-scale.md"}


def blocks(language):
    return [body for lang, body in BLOCK.findall(README) if lang == language]


def commands():
    """The `kafkalog ...` lines of the bash blocks, comments dropped."""
    return [shlex.split(line, comments=True) for body in blocks("bash")
            for line in body.splitlines() if line.startswith("kafkalog ")]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """A working directory as the README's readers have it: sample-data/ and ../shared."""
    root = tmp_path_factory.mktemp("readme")
    (root / "shared").symlink_to(os.fspath(SHARED), target_is_directory=True)
    work = root / "kafkalog"
    work.mkdir()
    write_sample_partition(str(work / "sample-data"))
    write_sample_07_partition(str(work / "sample-data-0.7"))
    return work


@pytest.fixture
def inside(checkout, monkeypatch):
    monkeypatch.chdir(checkout)
    return checkout


def test_readme_is_for_users_first():
    before_figures = README.split("\n| ")[0]      # the first table, if any
    assert len(before_figures.splitlines()) <= 250
    assert README.startswith("# kafkalog\n")
    first = blocks("bash")[0].splitlines()
    assert [line.split("#")[0].strip() for line in first] == \
        ["bash scripts/demo.sh", "bash scripts/test.sh"]
    # the first needs the clone alone: the Kafka-written fixtures are the test command's
    demo = (REPO / "scripts" / "demo.sh").read_text().splitlines()
    assert not [line for line in demo if "shared" in line and not line.startswith("#")]
    assert ".venv/bin/python -m kafkalog.demo sample-data" in demo
    ci = (REPO / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci
    # the Log.open example shows every keyword Log.open takes
    import inspect
    from kafkalog import Log
    keywords = [p for p in inspect.signature(Log.open).parameters if p not in ("cls", "path",
                                                                              "config")]
    example = next(b for b in blocks("python") if "kafkalog.Log.open(\n" in b)
    assert all(f"    {k}=" in example for k in keywords), keywords


def test_linked_documents_exist():
    links = set(re.findall(r"\]\((docs/[\w.-]+\.md)", README))
    assert {"docs/performance.md", "docs/reliability.md", "docs/modules.md",
            "docs/dump-json.md", "docs/compatibility.md"} <= links
    missing = [link for link in links - LATER if not (REPO / link).exists()]
    assert not missing


def _needs(body):
    """Skip a block whose extra is not installed."""
    for module in re.findall(r"^import (\w+)", body, re.M):
        if module not in ("os", "time", "kafkalog"):
            pytest.importorskip(module)


def test_python_examples_without_spark(inside, s3, monkeypatch, capfd):
    if not fixtures_present():
        pytest.skip("the tiered example reads ../shared")
    s3.use_environment(monkeypatch)
    if "backups" not in s3.uploaded:
        s3.client.create_bucket(Bucket="backups")
        for name in sorted(os.listdir(inside / "sample-data" / "demo-0")):
            s3.client.upload_file(str(inside / "sample-data" / "demo-0" / name), "backups",
                                  f"sample-data/demo-0/{name}")
        s3.uploaded.add("backups")
    namespace = {}
    ran = 0
    for body in blocks("python"):
        if "spark" in body:
            continue
        _needs(body)
        exec(compile(body, "README.md", "exec"), namespace)
        ran += 1
    assert ran >= 6
    out = capfd.readouterr().out
    assert "1490 " in out                   # the sample partition's records were printed


@pytest.mark.allow_slow("the README's Spark examples: three jobs and a stream, the first "
                        "of which may start the session's Python workers")
def test_spark_examples(inside, spark):
    namespace = {}
    spark_blocks = [b for b in blocks("python") if "spark" in b]
    assert len(spark_blocks) == 2
    for body in spark_blocks:
        exec(compile(body, "README.md", "exec"), namespace)
    assert namespace["spark"] is spark       # getOrCreate: the suite's session
    # the stream read every record of the sample (1,500 and the aborted one: read_uncommitted)
    import pyarrow.parquet as pq
    assert pq.read_table(namespace["path"] + "-parquet").num_rows == 1501


@pytest.mark.parametrize("argv", commands(), ids=" ".join)
def test_command_lines(inside, argv, capfd):
    assert argv[0] == "kafkalog"
    assert main(argv[1:]) == 0
    assert capfd.readouterr().out
