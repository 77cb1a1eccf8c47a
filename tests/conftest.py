"""Shared fixtures. Ground truth lives in ../shared/fixtures (written by Apache Kafka)."""
import json
import os
import shutil
from pathlib import Path

import pytest

import kafkalog
from kafkalog import _core_py

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("KAFKALOG_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures" / "kafka-written"
LARGE_FIXTURES = SHARED / "fixtures" / "kafka-written-large"
PURE = os.environ.get("KAFKALOG_NO_EXTENSIONS", "") in ("1", "true", "yes")


def pytest_sessionstart(session):
    if not FIXTURES.is_dir():
        raise pytest.UsageError(f"Kafka-written fixtures not found at {FIXTURES}")
    if not PURE and not kafkalog.compiled():
        raise pytest.UsageError("the compiled kafkalog._core did not load; build it "
                                "(bash scripts/setup.sh) or set KAFKALOG_NO_EXTENSIONS=1")
    if os.environ.get("KAFKALOG_EXPECT_INSTALLED") == "1":
        here = str(REPO / "kafkalog")
        if os.path.abspath(kafkalog.__file__).startswith(here):
            raise pytest.UsageError(f"testing the source tree ({kafkalog.__file__}), not the "
                                    f"installed wheel")


def fixture_dirs(root=FIXTURES):
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
