"""Build of the compiled CPU kernels (arrpos._backends._cpu); everything else is in pyproject.toml.

OpenMP is used when the compiler accepts it and ARRPOS_NO_OPENMP is not set; without it the
kernels are built single-threaded. No -march=native: wheels must run on any x86-64/aarch64.
"""
import glob
import os
import subprocess
import sys
import tempfile

from Cython.Build import cythonize
from setuptools import Extension, setup


def _openmp_flags():
    if os.environ.get("ARRPOS_NO_OPENMP") or sys.platform == "win32":
        return [], []
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "t.c")
        with open(src, "w") as f:
            f.write("#include <omp.h>\nint main(void){return omp_get_max_threads() < 1;}\n")
        try:
            res = subprocess.run(
                [cc, "-fopenmp", src, "-o", os.path.join(tmp, "t")],
                capture_output=True,
            )
        except OSError:
            return [], []
    if res.returncode != 0:
        print("arrpos: building without OpenMP (the compiler does not accept -fopenmp)")
        return [], []
    return ["-fopenmp"], ["-fopenmp"]


compile_omp, link_omp = _openmp_flags()
ext = Extension(
    "arrpos._backends._cpu",
    ["csrc/_cpu.pyx"],
    include_dirs=["csrc"],
    depends=sorted(glob.glob("csrc/*.h")),  # a header change must rebuild the extension
    # fp-contract off keeps the exact splits exact on targets with FMA.
    extra_compile_args=["-O3", "-ffp-contract=off", "-std=c99"] + compile_omp,
    extra_link_args=link_omp,
)

setup(
    ext_modules=cythonize(
        [ext], compiler_directives={"language_level": "3"}, include_path=["csrc"]
    ),
)
