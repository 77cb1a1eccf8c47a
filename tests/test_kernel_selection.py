"""Which kernels run (#17): a compiled module that fails to load must not silently cost
5-50x; the fallback warns once, naming the module and why, unless the pure-Python kernels were
chosen with KAFKALOG_NO_EXTENSIONS=1."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = """
    import sys, warnings
    sys.modules["kafkalog._core"] = None          # the compiled module cannot be imported
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import kafkalog
        import kafkalog._kernels
        import kafkalog.log                       # importing more loads the kernels once
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)
               and "kafkalog" in str(w.message)]
    print(len(runtime), kafkalog.compiled(), kafkalog._kernels.KERNELS_FILE)
    for w in runtime:
        print(w.message)
"""


def _probe(**env):
    environment = {k: v for k, v in os.environ.items() if k != "KAFKALOG_NO_EXTENSIONS"}
    environment.update(PYTHONPATH=ROOT, **env)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE)], capture_output=True,
                          text=True, env=environment, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_failed_compiled_import_warns_once_and_names_the_cause():
    lines = _probe()
    count, compiled, where = lines[0].split(" ", 2)
    assert count == "1" and compiled == "False" and where.endswith("_core_py.py")
    assert "kafkalog._core" in lines[1] and "pure-Python" in lines[1]
    assert "import of kafkalog._core halted" in lines[1]      # the ImportError's own words


def test_choosing_the_pure_python_kernels_does_not_warn():
    lines = _probe(KAFKALOG_NO_EXTENSIONS="1")
    assert lines[0].split(" ", 1)[0] == "0"
