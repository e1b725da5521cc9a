"""Build of the compiled CPU kernels (arrpos._backends._cpu); everything else is in pyproject.toml.

C++17 templates (csrc/*.hpp) behind a Cython module. Threads come from the kernels' own pool
(csrc/pool.hpp); ARRPOS_NO_THREADS=1 builds a single-threaded extension (ARRPOS_NO_OPENMP=1, its
name from when the kernels used OpenMP, still works and is deprecated). No -march=native: wheels
must run on any x86-64/aarch64; the AVX2 and AVX-512 code is chosen at run time.

The extension is optional: without a working C compiler (or Cython) the package installs
without it and runs the generic Array API code (``arrpos info`` says the kernels are not
built). ``ARRPOS_REQUIRE_EXTENSION=1`` turns a failed build into an error (CI).
"""
import glob
import os
import sys

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
        import numpy
        from Cython.Build import cythonize
    except ImportError as exc:
        if _REQUIRED:
            raise
        print(f"arrpos: WARNING: {exc}; installing without compiled kernels", file=sys.stderr)
        return []
    ext.include_dirs.append(numpy.get_include())
    # the generated C++ goes to build/ (ignored, never shipped), not beside the sources
    return cythonize([ext], compiler_directives={"language_level": "3"}, include_path=["csrc"],
                     build_dir=os.path.join("build", "cython"))


def _flags():
    """Compiler flags. The same kernels everywhere (docs/platforms.md): GCC/Clang on Linux and
    macOS, MSVC on Windows (its /fp:precise contracts nothing into FMA, as -ffp-contract=off
    here; the thread pool is std::thread, so Windows builds are threaded too). No -march: the
    x86 AVX2/AVX-512 levels carry their own target attributes and are picked at run time;
    aarch64 gets NEON, its baseline; other CPUs the portable level, vectorised by -O3 (MSVC:
    /O2). ARRPOS_NO_SIMD=1 builds the portable level alone."""
    msvc = sys.platform == "win32"
    if msvc:
        flags = ["/O2", "/std:c++17", "/fp:precise"]
    else:
        # no-trapping-math: the kernels never read the floating-point exception flags, and GCC
        # (not Clang, where it is the default) vectorises no loop with a float comparison
        # choosing between values without it.
        flags = ["-O3", "-std=c++17", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math"]
    define = (lambda name: "/D" + name) if msvc else (lambda name: "-D" + name)
    if os.environ.get("ARRPOS_NO_OPENMP"):
        print("arrpos: WARNING: ARRPOS_NO_OPENMP is deprecated (the kernels use their own thread "
              "pool, not OpenMP): set ARRPOS_NO_THREADS=1", file=sys.stderr)
    if os.environ.get("ARRPOS_NO_THREADS") or os.environ.get("ARRPOS_NO_OPENMP"):
        flags.append(define("ARRPOS_NO_THREADS"))
    elif not msvc:
        flags.append("-pthread")
    if os.environ.get("ARRPOS_NO_SIMD", "") not in ("", "0"):
        flags.append(define("ARRPOS_NO_SIMD"))
    return flags


ext = Extension(
    "arrpos._backends._cpu",
    ["csrc/_cpu.pyx"],
    language="c++",
    include_dirs=["csrc"],  # + numpy's headers, added in _extensions
    depends=sorted(glob.glob("csrc/*.hpp") + glob.glob("csrc/*.inc")),  # rebuild on change
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    # fp-contract off keeps the exact splits exact on targets with FMA.
    extra_compile_args=_flags(),
    extra_link_args=[] if sys.platform == "win32" else ["-pthread"],
)

setup(ext_modules=_extensions(ext), cmdclass={"build_ext": optional_build_ext})
