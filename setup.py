"""Build of the compiled CPU kernels (arrpos._backends._cpu); everything else is in pyproject.toml.

C++17 templates (csrc/*.hpp) behind a Cython module. Threads come from the kernels' own pool
(csrc/pool.hpp), not OpenMP; ARRPOS_NO_THREADS=1 (or the older ARRPOS_NO_OPENMP=1) builds a
single-threaded extension. No -march=native: wheels must run on any x86-64/aarch64; the AVX2 and
AVX-512 code is chosen at run time.
"""
import glob
import os
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup


def _flags():
    if sys.platform == "win32":
        return ["/O2", "/std:c++17", "/DARRPOS_NO_THREADS"]
    flags = ["-O3", "-std=c++17", "-ffp-contract=off", "-fno-math-errno"]
    if os.environ.get("ARRPOS_NO_THREADS") or os.environ.get("ARRPOS_NO_OPENMP"):
        flags.append("-DARRPOS_NO_THREADS")
    else:
        flags.append("-pthread")
    return flags


ext = Extension(
    "arrpos._backends._cpu",
    ["csrc/_cpu.pyx"],
    language="c++",
    include_dirs=["csrc", numpy.get_include()],
    depends=sorted(glob.glob("csrc/*.hpp") + glob.glob("csrc/*.inc")),  # rebuild on change
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    # fp-contract off keeps the exact splits exact on targets with FMA.
    extra_compile_args=_flags(),
    extra_link_args=[] if sys.platform == "win32" else ["-pthread"],
)

setup(
    ext_modules=cythonize(
        [ext], compiler_directives={"language_level": "3"}, include_path=["csrc"]
    ),
)
