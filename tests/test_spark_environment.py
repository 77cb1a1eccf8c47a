"""Spark set-up mistakes found before Spark is asked (``kafkalog.spark.environment``), on real
interpreters: Spark's workers on the system's ``python3`` (a virtual environment not
activated) are a ``SparkSetupError`` naming ``PYSPARK_PYTHON``; an editable install made
without ``editable_mode=compat`` (kafkalog imported through setuptools' finder, which PySpark's
lookup of ``pyspark_*`` modules cannot list) is told apart. No SparkSession: the check is
asked with a session's stand-in, the interpreters are run."""
import os
import site
import subprocess
import sys
import types

import pytest

from conftest import REPO
from kafkalog.errors import KafkaLogError, SparkSetupError
from kafkalog.spark import environment

SYSTEM_PYTHON = "/usr/bin/python3"


def classic_session(python):
    """What ``check_workers`` reads of a classic SparkSession: its context's pythonExec."""
    return types.SimpleNamespace(sparkContext=types.SimpleNamespace(pythonExec=python))


@pytest.fixture(autouse=True)
def _fresh_probes():
    environment.probe.cache_clear()
    yield
    environment.probe.cache_clear()


def test_this_interpreter_runs_the_data_source():
    found = environment.check_workers(classic_session(sys.executable))
    assert found is not None and found.missing is None


@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason="no system python3")
def test_workers_on_a_python_without_kafkalog_are_a_typed_error(monkeypatch):
    """A venv's interpreter run without activating it: Spark's default ``python3`` is the
    system's, which (run from the checkout, as Spark's local workers are) finds the checkout's
    kafkalog but not its dependencies."""
    if subprocess.run([SYSTEM_PYTHON, "-c", "import numpy, crc32c, pyarrow"],
                      capture_output=True).returncode == 0:
        pytest.skip("the system python3 has kafkalog's dependencies")
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    with pytest.raises(SparkSetupError) as e:
        environment.check_workers(classic_session(SYSTEM_PYTHON))
    message = str(e.value)
    assert isinstance(e.value, KafkaLogError) and e.value.python == SYSTEM_PYTHON
    assert f"set PYSPARK_PYTHON={sys.executable}" in message and "PYSPARK_PYTHON unset" in message
    assert e.value.missing and f"cannot import {e.value.missing}" in message
    with pytest.raises(SparkSetupError, match="missing-python"):
        environment.check_workers(classic_session(str(REPO / "missing-python")))


def _editable_environment(tmp_path):
    """A virtual environment where kafkalog is an editable install of this checkout made
    without compat mode: the finder setuptools writes (its own template) and a .pth that
    installs it; kafkalog's dependencies from this environment, kafkalog itself not."""
    from setuptools.command.editable_wheel import _finder_template
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    sp = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                         "['purelib'])"], capture_output=True, text=True, check=True)
    target = sp.stdout.strip()
    deps = tmp_path / "deps"
    deps.mkdir()
    ours = {"kafkalog", "pyspark_kafkalog"}
    for root in site.getsitepackages():
        for name in os.listdir(root):
            if name.split("-")[0] not in ours and not name.endswith(".pth") and \
                    not (deps / name).exists():
                (deps / name).symlink_to(os.path.join(root, name))
    mapping = {name: str(REPO / name) for name in ours}
    with open(os.path.join(target, "__editable___kafkalog_finder.py"), "w") as f:
        f.write(_finder_template("__editable___kafkalog_finder", mapping, {}))
    with open(os.path.join(target, "__editable__.kafkalog.pth"), "w") as f:
        f.write(f"{deps}\nimport __editable___kafkalog_finder; "
                "__editable___kafkalog_finder.install()\n")
    return str(python)


def test_an_editable_install_without_compat_mode_is_told_apart(tmp_path):
    python = _editable_environment(tmp_path)
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    found = environment.probe(python, str(elsewhere))
    # the workers import kafkalog (the finder), PySpark's lookup does not list it
    assert found == environment.Probe(None, False)
    assert environment.probe(sys.executable, str(elsewhere)).listed
    assert "editable_mode=compat" in environment.COMPAT
