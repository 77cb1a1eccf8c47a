"""Declares the compiled extension; metadata lives in pyproject.toml.

``KAFKALOG_SANITIZE=1`` builds it with AddressSanitizer and UndefinedBehaviorSanitizer instead of
-O3 (scripts/sanitize.sh, into a copy of the tree; never for a distributable build).
"""
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

if os.environ.get("KAFKALOG_SANITIZE") == "1":
    # -O1 keeps the reports' stacks true to the source; -fno-sanitize-recover makes every
    # UBSan check fatal, so nothing reported can be missed in a passing run; -fno-wrapv undoes
    # CPython's -fwrapv (its CFLAGS), under which UBSan cannot see a signed overflow: the
    # kernels must not wrap silently (the wraps they mean go through uint64_t).
    compile_args = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-wrapv",
                    "-fno-omit-frame-pointer", "-O1", "-g"]
    link_args = ["-fsanitize=address,undefined"]
else:
    compile_args, link_args = ["-O3"], []

extensions = [
    Extension(
        "kafkalog._core",
        ["kafkalog/_core.pyx"],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=compile_args,
        extra_link_args=link_args,
    )
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
            "initializedcheck": False,
            "cdivision": True,
        },
    ),
)
