"""Build of the compiled CPU kernels (arrpos._backends._cpu); everything else is in pyproject.toml.

OpenMP is used when the compiler accepts it and ARRPOS_NO_OPENMP is not set; without it the
kernels are built single-threaded. No -march=native: wheels must run on any x86-64/aarch64.

The extension is optional: without a working C compiler (or Cython) the package installs
without it and runs the generic Array API code (``arrpos info`` says the kernels are not
built). ``ARRPOS_REQUIRE_EXTENSION=1`` turns a failed build into an error (CI).
"""
import glob
import os
import subprocess
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_REQUIRED = os.environ.get("ARRPOS_REQUIRE_EXTENSION", "") not in ("", "0")


class optional_build_ext(build_ext):
    """build_ext that warns and goes on when the compiler fails (unless the build is required)."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # DistutilsPlatformError, CCompilerError, OSError...
            self._skip(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._skip(exc)

    def _skip(self, exc):
        if _REQUIRED:
            raise exc
        print(f"arrpos: WARNING: the compiled kernels were not built ({exc}); the package "
              "works without them (generic Array API code)", file=sys.stderr)


def _extensions(ext):
    try:
        from Cython.Build import cythonize
    except ImportError:
        if _REQUIRED:
            raise
        print("arrpos: WARNING: Cython is missing; installing without compiled kernels",
              file=sys.stderr)
        return []
    return cythonize([ext], compiler_directives={"language_level": "3"}, include_path=["csrc"])


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

setup(ext_modules=_extensions(ext), cmdclass={"build_ext": optional_build_ext})
