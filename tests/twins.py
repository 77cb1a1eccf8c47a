"""Twin tests: the compiled kernels (``kafkalog._core``) and their pure-Python twins
(``kafkalog._core_py``) run on the same inputs in one process, which proves the twins without
running the whole suite a second time with ``KAFKALOG_NO_EXTENSIONS=1`` (aiokafka, msgpack and
fastavro test their C and Python twins this way).

- ``compiled_module()``: ``kafkalog._core``, after asserting it really is the compiled module
  (and, unless ``KAFKALOG_NO_EXTENSIONS=1``, the one ``kafkalog._kernels`` selected), so that
  a twin is never compared with itself.
- ``same(call)``: ``call(module)`` for both modules; their results, or the exceptions they raise,
  must agree. Returns the compiled kernel's result.
- ``kernels_of(module)`` (``pure_kernels()`` for the twins): every Python-level path (``Log``,
  ``iter_batches``, dump, the cleaner...) through ``module``'s kernels, in-process. kafkalog's
  modules bind the kernels when they are imported (``from kafkalog._kernels import
  walk_batches``), so patching ``kafkalog._kernels`` alone would change nothing; this swaps
  every binding of a kernel, found by identity, in every loaded ``kafkalog`` module (module
  globals and the attributes of the classes defined there) and swaps back on exit, including
  the bindings of modules first imported inside the block.
"""
import contextlib
import functools
import importlib
import os
import sys
import types

import numpy as np
import pytest

import kafkalog
from kafkalog import _core_py, _kernels
from kafkalog._kernels import KERNEL_NAMES

PURE = os.environ.get("KAFKALOG_NO_EXTENSIONS", "") in ("1", "true", "yes")


def compiled_module():
    """``kafkalog._core``, checked to be the compiled extension and not a twin."""
    try:
        core = importlib.import_module("kafkalog._core")
    except ImportError as e:
        if PURE:
            pytest.skip(f"twin tests need the compiled kernels, which are not built ({e})")
        raise
    assert not core.__file__.endswith(".py"), core.__file__
    if not PURE:
        assert kafkalog.compiled() and _kernels.KERNELS_FILE == core.__file__
        assert _kernels.walk_batches is core.walk_batches
    for name in KERNEL_NAMES:
        assert getattr(core, name) is not getattr(_core_py, name), name
        assert not isinstance(getattr(core, name), types.FunctionType), name
    return core


def plain(value):
    """``value`` in a form that compares by content across the two modules: arrays as their
    dtype, shape and rows, iterators as lists, either module's ``Record`` as its fields."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.descr, value.shape, value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, [plain(v) for v in value])
    if type(value).__name__ == "Record" and hasattr(value, "headers"):
        return ("Record", value.offset, value.timestamp, value.timestamp_type, value.key,
                value.value, value.headers)
    if hasattr(value, "__next__"):
        return ("iterator", [plain(v) for v in value])
    return value


def outcome(call, module):
    """("ok", result) or ("raise", type, position, base_offset, message) of ``call(module)``."""
    try:
        return ("ok", plain(call(module)))
    except Exception as e:  # noqa: BLE001 - the exception is the outcome being compared
        return ("raise", type(e), getattr(e, "position", None), getattr(e, "base_offset", None),
                str(e))


def same(call, what=""):
    """``call(module)`` for the compiled kernels and for the twins: equal results, or the same
    exception (type, position, base offset and message). Returns the compiled outcome."""
    compiled = outcome(call, compiled_module())
    twin = outcome(call, _core_py)
    assert compiled == twin, f"{what}: the compiled kernel and its twin differ:\n" \
        f"{_short(compiled)}\n{_short(twin)}"
    return compiled


def _short(value, limit=600):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# --- swapping the kernels of the Python-level paths -------------------------------------------

def _kafkalog_modules():
    """Loaded kafkalog modules that use the kernels (not the kernel modules themselves)."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "kafkalog" or name.startswith("kafkalog.")):
            continue
        if name == "kafkalog._core" or name.endswith("_py"):
            continue
        yield module


def _namespaces(module):
    """The module's globals, and the attribute dicts of the classes it defines."""
    yield module
    for value in list(vars(module).values()):
        if isinstance(value, type) and value.__module__ == module.__name__:
            yield value


_BINDINGS = []      # [(namespace, attribute)] that held a kernel when its module was first seen
_SEEN = set()


def _bindings():
    """Where loaded kafkalog modules bind a kernel (either module's). kafkalog binds kernels
    at import only, so each module is looked at once, when it is first seen loaded."""
    if len(sys.modules) != len(_SEEN):
        kernels = {id(getattr(m, n)) for m in _available() for n in KERNEL_NAMES}
        for module in _kafkalog_modules():
            if module.__name__ not in _SEEN:
                _BINDINGS.extend((space, attr) for space in _namespaces(module)
                                 for attr, value in vars(space).items() if id(value) in kernels)
        _SEEN.clear()
        _SEEN.update(sys.modules)
    return _BINDINGS


def _rebind(table):
    """Replace every binding of a key of ``table`` (by identity) with its value; returns how
    many bindings changed."""
    changed = 0
    for space, attr in _bindings():
        value = vars(space).get(attr)
        new = table.get(id(value))
        if new is not None and new[0] is value:
            setattr(space, attr, new[1])
            changed += 1
    return changed


@functools.cache
def _table(source, target):
    return {id(getattr(source, n)): (getattr(source, n), getattr(target, n)) for n in KERNEL_NAMES}


@functools.cache
def _available():
    try:
        return importlib.import_module("kafkalog._core"), _core_py
    except ImportError:
        return (_core_py,)


def modules():
    """The kernel modules to compare: the compiled one (asserted loaded) and the twins; under
    ``KAFKALOG_NO_EXTENSIONS=1`` the twins alone when the extension is not built."""
    return [compiled_module(), _core_py] if not PURE else list(_available())


def _selected():
    """The kernel module the loaded kafkalog modules use now."""
    return next(m for m in _available() if _kernels.walk_batches is m.walk_batches)


def bindings_of(module):
    """The bindings in loaded kafkalog modules that hold one of ``module``'s kernels."""
    kernels = {id(getattr(module, n)) for n in KERNEL_NAMES}
    return [f"{m.__name__}.{a}" for m in _kafkalog_modules() for s in _namespaces(m)
            for a, v in vars(s).items() if id(v) in kernels]


@contextlib.contextmanager
def kernels_of(module):
    """Every kafkalog path through ``module``'s kernels (compiled or twins), in-process."""
    current = _selected()
    if module is current:
        yield module
        return
    flags = (_kernels.COMPILED, _kernels.KERNELS_FILE, kafkalog._COMPILED)
    assert _rebind(_table(current, module)) >= len(KERNEL_NAMES)
    _kernels.COMPILED = kafkalog._COMPILED = module is not _core_py
    _kernels.KERNELS_FILE = module.__file__
    try:
        yield module
    finally:
        _rebind(_table(module, current))
        _kernels.COMPILED, _kernels.KERNELS_FILE, kafkalog._COMPILED = flags


def pure_kernels():
    """``kernels_of`` the twins, in a process that runs the compiled kernels."""
    compiled_module()
    assert not PURE, "the twins are already in place: there is nothing to swap"
    return kernels_of(_core_py)


def both_ways(scenario, *args):
    """``scenario(*args)`` with the compiled kernels, then with the twins swapped in: the two
    results must be equal. Returns the result."""
    compiled = scenario(*args)
    with pure_kernels():
        twin = scenario(*args)
    assert plain(compiled) == plain(twin), \
        f"a Python-level path gives another result with the twins:\n{_short(plain(compiled))}" \
        f"\n{_short(plain(twin))}"
    return compiled
