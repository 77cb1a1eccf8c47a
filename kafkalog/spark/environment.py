"""Whether Spark can run kafkalog's data source: the set-up mistakes that end in Spark's bare
``DATA_SOURCE_NOT_FOUND`` (or a ``ModuleNotFoundError`` inside a task), found before Spark is
asked.

- Spark's Python workers run ``PYSPARK_PYTHON`` (``SparkContext.pythonExec``; Spark's default
  is ``python3`` on the PATH). A script run with a virtual environment's interpreter that is
  not activated starts workers on the system's ``python3``, which cannot import kafkalog (or
  its dependencies): ``SparkSetupError`` names the interpreter and what to set.
- PySpark finds ``format("kafkalog")`` by listing the modules named ``pyspark_*`` of the
  interpreter it looks them up with (``pkgutil.iter_modules``, in
  ``pyspark.sql.worker.lookup_data_sources``). An editable install made without
  ``--config-settings editable_mode=compat`` imports kafkalog through a finder that lists
  nothing, so the lookup misses ``pyspark_kafkalog``: ``register`` then registers the source
  for the session, and ``read`` says (once) why ``format("kafkalog")`` alone fails elsewhere.

Each interpreter other than this process's is asked once per process (a subprocess importing
what a worker imports, from this working directory, as Spark's local workers start there).
"""
from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING, Any, NamedTuple

from kafkalog.errors import SparkSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: What a worker imports to run the data source (pyspark comes with Spark's PYTHONPATH).
WORKER_MODULES = ("kafkalog.spark.datasource", "pyarrow", "pandas")
COMPAT = "pip install -e '.[spark]' --config-settings editable_mode=compat"

_PROBE = f"""
import json, pkgutil
missing = None
for name in {WORKER_MODULES!r}:
    try:
        __import__(name)
    except ImportError as e:
        missing = getattr(e, "name", None) or name
        break
print(json.dumps({{"missing": missing,
                  "listed": any(m.name == "pyspark_kafkalog" for m in pkgutil.iter_modules())}}))
"""


class Probe(NamedTuple):
    """What an interpreter can do: ``missing``, the first module a worker needs that it cannot
    import (None: all); ``listed``: whether PySpark's lookup there lists ``pyspark_kafkalog``."""
    missing: str | None
    listed: bool


def worker_python(spark: SparkSession) -> tuple[str, str]:
    """The interpreter Spark's Python workers run for ``spark`` and what chose it."""
    if is_connect(spark):
        python = os.environ.get("PYSPARK_PYTHON")       # a local server's, started from here
    else:
        python = spark.sparkContext.pythonExec
    if python and python == os.environ.get("PYSPARK_PYTHON"):
        return python, "PYSPARK_PYTHON"
    return python or "python3", "Spark's default: python3 on the PATH, PYSPARK_PYTHON unset"


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect client's session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _is_this_interpreter(python: str) -> bool:
    """Whether ``python`` is this process's interpreter (the same file, in the same virtual
    environment: a venv's python is a link to the system's)."""
    found = shutil.which(python)
    if found is None:
        return False
    found = os.path.abspath(found)
    here = os.path.abspath(sys.executable)
    return os.path.dirname(found) == os.path.dirname(here) and \
        os.path.realpath(found) == os.path.realpath(here)


@functools.lru_cache(maxsize=8)
def probe(python: str, cwd: str) -> Probe:
    """``Probe`` of the interpreter ``python`` run in ``cwd`` (this process's own answers when
    it is this interpreter). An interpreter that does not run counts as missing kafkalog."""
    if _is_this_interpreter(python):
        import pkgutil
        return Probe(None, any(m.name == "pyspark_kafkalog" for m in pkgutil.iter_modules()))
    try:
        done = subprocess.run([python, "-c", _PROBE], cwd=cwd, capture_output=True, text=True,
                              timeout=120)
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        return Probe(answer["missing"], bool(answer["listed"]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, KeyError):
        return Probe("kafkalog", False)


def check_workers(spark: SparkSession) -> Probe | None:
    """Raise ``SparkSetupError`` when Spark's Python workers for ``spark`` cannot import what
    the data source needs; the ``Probe`` of their interpreter, or None for a Spark Connect
    session (its server's interpreter is not known here)."""
    if is_connect(spark):
        return None
    python, why = worker_python(spark)
    found = probe(python, os.getcwd())
    if found.missing is not None:
        raise SparkSetupError(
            f"Spark's Python workers run {python} ({why}), which cannot import "
            f"{found.missing}: kafkalog's data source cannot run there (Spark would fail "
            f"with DATA_SOURCE_NOT_FOUND or ModuleNotFoundError). Run Spark's workers with "
            f"the interpreter kafkalog is installed in: set PYSPARK_PYTHON={sys.executable} "
            f"before the SparkSession starts (activating its virtual environment does it "
            f"for python3)", python=python, missing=found.missing)
    return found


def lookup_finds_kafkalog(spark: SparkSession, found: Probe | None) -> bool:
    """Whether PySpark's lookup of ``pyspark_*`` modules found kafkalog's data source for
    ``spark`` (asked of the session where it can be; for Spark Connect, of the interpreter a
    local server looks modules up with)."""
    if not is_connect(spark):
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        return bool(manager.dataSourceExists("kafkalog"))
    if found is None:
        python = os.environ.get("PYSPARK_DRIVER_PYTHON") or \
            os.environ.get("PYSPARK_PYTHON") or "python3"
        found = probe(python, os.getcwd())
    return found.listed


@functools.lru_cache(maxsize=1)
def warn_not_found_by_lookup() -> None:
    """Say once why ``format("kafkalog")`` alone is not found (``read`` registered it)."""
    log.warning(
        "PySpark does not find kafkalog's data source by itself here (its lookup lists no "
        "pyspark_kafkalog module: an editable install made without editable_mode=compat?); "
        "kafkalog.spark.read registered it for this session. spark.read.format(\"kafkalog\") "
        "in a session of its own needs kafkalog.spark.register(spark) first, or kafkalog "
        "installed so that PySpark finds it: %s (or pip install '.[spark]')", COMPAT)
