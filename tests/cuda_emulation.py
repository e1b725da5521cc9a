"""Run the CUDA kernels of ``kernels.cu`` on the CPU, through the real CUDA driver, without a
GPU.

``kernels.cu`` is compiled as plain C++ (``ARRPOS_HOST_EMULATION``) behind a small shim that
supplies the CUDA built-ins (``threadIdx`` ..., ``__fma_rn``, ``__dmul_rn``, ``__dadd_rn``) and,
in place of the kernels' inline PTX, the same operations in C++ (``mul.rn.f32`` is a float
product compiled with ``-ffp-contract=off``, ``fma.rn.f32`` is ``std::fma``, ``cvt.rz`` a
rounding towards zero, the half conversions ``_Float16``): the float arithmetic therefore gives
the bits the GPU gives; only ``sincos`` comes from the host's libm. Every kernel of
``driver.kernel_names()`` gets a launcher that runs the 2-D grid one thread at a time (the
kernels use no shared memory and no barriers, so any order is a valid schedule) with its
arguments passed the CUDA way, as an array of pointers to each value (structures by value,
from the size-1 structured NumPy arrays that CuPy would pass as their bytes).

:class:`FakeCupy` is a stand-in for the ``cupy`` module built on NumPy, just large enough for
``arrpos._backends.cuda`` (the driver and its front-ends): its ``RawModule`` launches through
the emulator and checks what a GPU would punish — the kernel name is one of the name expressions, the block fits
``__launch_bounds__(256)``, and every argument has exactly the C type of the kernel parameter
(a ``numpy.int32`` where the kernel takes ``long long`` would be garbage on a GPU).

What this does not check: NVRTC itself (``.ci/check_nvrtc.sh`` compiles the module with NVRTC
as CuPy does, ``.ci/check_nvcc.sh`` with nvcc), the PTX itself, device ``sincos`` accuracy,
DLPack, streams and speed.
"""
from __future__ import annotations

import ctypes
import pathlib
import shutil
import subprocess

import numpy as np

from arrpos._backends.cuda import driver, tap_blocks

_SHIM = r"""
#define ARRPOS_HOST_EMULATION 1
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <math.h>

struct arrpos_dim3 { unsigned int x = 1, y = 1, z = 1; };
static arrpos_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__ __restrict

static inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
static inline double __dmul_rn(double a, double b) { return a * b; }  // -ffp-contract=off
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline float arrpos_emu_fmaf(float a, float b, float c) { return std::fma(a, b, c); }
static inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d)
{
    long long u; std::memcpy(&u, &d, 8); return u;
}
static inline double __longlong_as_double(long long u)
{
    double d; std::memcpy(&d, &u, 8); return d;
}
static inline float arrpos_emu_double2float_rz(double v)
{
    float f = (float)v;  // round to nearest, then step back towards zero if it went past
    if (std::isfinite(v) && std::fabs((double)f) > std::fabs(v)) f = std::nextafter(f, 0.0f);
    return f;
}
static inline unsigned short arrpos_emu_float_to_half(float f)
{
    _Float16 h = (_Float16)f; unsigned short b; std::memcpy(&b, &h, 2); return b;
}
static inline float arrpos_emu_half_to_float(unsigned short b)
{
    _Float16 h; std::memcpy(&h, &b, 2); return (float)h;
}
using ::sincos;

#include "@SOURCE@"

template <typename T> struct code { static const char c = '?'; };
template <typename T> struct code<T *> { static const char c = 'P'; };
template <> struct code<long long> { static const char c = 'x'; };
template <> struct code<int> { static const char c = 'i'; };
template <> struct code<double> { static const char c = 'd'; };
template <> struct code<arrpos::freq_block> { static const char c = 'F'; };
template <> struct code<arrpos::strides4> { static const char c = 'S'; };
template <> struct code<arrpos::taps_block> { static const char c = 'T'; };

template <typename... A> static std::string signature(void (*)(A...))
{
    return std::string{code<A>::c...};
}

template <typename... A, std::size_t... I>
static void call(void (*k)(A...), void **args, std::index_sequence<I...>)
{
    k(*static_cast<A *>(args[I])...);
}

template <typename... A>
static void run(void (*k)(A...), unsigned gx, unsigned gy, unsigned bx, unsigned by,
                void **args)
{
    gridDim.x = gx; gridDim.y = gy; blockDim.x = bx; blockDim.y = by;
    for (unsigned b = 0; b < gx; ++b)
        for (unsigned c = 0; c < gy; ++c)
            for (unsigned ty = 0; ty < by; ++ty)
                for (unsigned tx = 0; tx < bx; ++tx) {
                    blockIdx.x = b; blockIdx.y = c; threadIdx.x = tx; threadIdx.y = ty;
                    call(k, args, std::index_sequence_for<A...>{});
                }
}

extern "C" int emu_struct_size(char c)
{
    if (c == 'F') return (int)sizeof(arrpos::freq_block);
    if (c == 'T') return (int)sizeof(arrpos::taps_block);
    return c == 'S' ? (int)sizeof(arrpos::strides4) : -1;
}

static std::string signatures[@COUNT@];

extern "C" const char *emu_signature(int i)
{
    switch (i) {
@SIGNATURES@
    }
    return signatures[i].c_str();
}

extern "C" int emu_launch(int i, unsigned gx, unsigned gy, unsigned bx, unsigned by, void **args)
{
    switch (i) {
@LAUNCHES@
    default: return 1;
    }
    return 0;
}
"""


def emulator_source() -> str:
    names = driver.kernel_names()
    sigs = "\n".join(f"    case {i}: signatures[{i}] = signature(&{n}); break;"
                     for i, n in enumerate(names))
    runs = "\n".join(f"    case {i}: run(&{n}, gx, gy, bx, by, args); break;"
                     for i, n in enumerate(names))
    return (_SHIM.replace("@SOURCE@", str(driver.SOURCE_PATH.resolve()))
            .replace("@COUNT@", str(len(names)))
            .replace("@SIGNATURES@", sigs).replace("@LAUNCHES@", runs))


def build(directory) -> ctypes.CDLL:
    """Compile the emulator into ``directory``; raises RuntimeError when that is impossible."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        raise RuntimeError("no C++ compiler")
    directory = pathlib.Path(directory)
    src = directory / "kernels_emulated.cpp"
    lib = directory / "kernels_emulated.so"
    src.write_text(emulator_source())
    # -ffp-contract=off: every product rounded as written, as the kernels' explicit mul.rn /
    # __dmul_rn are on the GPU; -fno-fast-math: the exact angle reduction needs IEEE doubles
    proc = subprocess.run([cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-ffp-contract=off",
                           "-fno-fast-math", "-o", str(lib), str(src)],
                          capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{cxx} failed:\n{proc.stderr[-3000:]}")
    dll = ctypes.CDLL(str(lib))
    dll.emu_signature.restype = ctypes.c_char_p
    dll.emu_signature.argtypes = [ctypes.c_int]
    dll.emu_launch.restype = ctypes.c_int
    dll.emu_launch.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                               ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
    dll.emu_struct_size.restype = ctypes.c_int
    dll.emu_struct_size.argtypes = [ctypes.c_char]
    return dll


# ------------------------------------------------------------------------------------------
# A NumPy-backed stand-in for the parts of cupy that arrpos._backends.cuda uses


class _Ptr:
    def __init__(self, ptr):
        self.ptr = ptr


class FakeDevice:
    def __init__(self, id=0):
        self.id = id
        self.attributes = {"MultiProcessorCount": 2}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class FakeArray(np.ndarray):
    """A NumPy array that answers ``.device`` and ``.data.ptr`` as a CuPy array does."""

    @property
    def device(self):
        return FakeDevice(0)

    @property
    def data(self):
        return _Ptr(self.__array_interface__["data"][0])


def _fake(a):
    return np.asarray(a).view(FakeArray)


class _Stream:
    def synchronize(self):
        pass


class FakeKernel:
    last_args: tuple = ()  # the arguments of the latest launch

    def __init__(self, lib, index, name, log):
        self.lib, self.index, self.name, self.log = lib, index, name, log
        self.signature = lib.emu_signature(index).decode()

    def __call__(self, grid, block, args, shared_mem=0):
        gx, gy = (tuple(grid) + (1,))[:2]
        bx, by = block
        assert len(grid) <= 2 and gx >= 1 and gy >= 1 and bx >= 1 and by >= 1, (grid, block)
        assert gy <= 65535, f"grid {grid}: gridDim.y is at most 65535"
        assert bx * by <= 256, f"block {block} exceeds __launch_bounds__(256)"
        assert len(args) == len(self.signature), (self.name, len(args), self.signature)
        slots, keep = [], []
        for k, (a, c) in enumerate(zip(args, self.signature)):
            v = self._argument(k, a, c)
            keep.append(v)
            slots.append(ctypes.cast(ctypes.pointer(v), ctypes.c_void_p))
        arr = (ctypes.c_void_p * len(slots))(*[s.value for s in slots])
        self.log.append((self.name, tuple(grid), block))
        FakeKernel.last_args = tuple(args)
        assert self.lib.emu_launch(self.index, gx, gy, bx, by, arr) == 0

    _STRUCTS = {"F": driver.FREQ_DTYPE, "S": driver.STRIDES_DTYPE, "T": tap_blocks.TAPS_DTYPE}

    def _argument(self, k, a, c):
        """The C value of argument ``k`` for a parameter of type code ``c``, checked as a GPU
        would need it (a wrong width is garbage there, not an error)."""
        where = f"{self.name} argument {k}"
        if c == "P":
            assert isinstance(a, FakeArray), f"{where}: {type(a)} for a pointer"
            return ctypes.c_void_p(a.data.ptr)
        if c in self._STRUCTS:  # CuPy passes a size-1 NumPy array by value, as its bytes
            want = self._STRUCTS[c]
            assert type(a) is np.ndarray and a.size == 1 and a.dtype == want, \
                f"{where}: {type(a)} {getattr(a, 'dtype', None)} for a structure {want}"
            assert a.dtype.itemsize == self.lib.emu_struct_size(c.encode()), where
            return ctypes.c_char.from_address(a.ctypes.data)  # the struct is copied from here
        scalar = {"x": (np.int64, ctypes.c_longlong), "i": (np.int32, ctypes.c_int),
                  "d": (np.float64, ctypes.c_double)}
        assert c in scalar, f"{self.name}: parameter type {c!r} not emulated"
        want, ctype = scalar[c]
        assert type(a) is want, f"{where}: {type(a)} for {ctype.__name__}"
        return ctype(a.item())


class FakeRawModule:
    def __init__(self, lib, log, *, code, options=(), name_expressions=()):
        spec = driver.module_spec()
        assert (code, tuple(options), list(name_expressions)) == \
            (spec["code"], tuple(spec["options"]), list(spec["name_expressions"]))
        self.lib, self.log = lib, log
        self.names = list(name_expressions)

    def get_function(self, name):
        assert name in self.names, f"{name} is not a name expression of the module"
        return FakeKernel(self.lib, driver.kernel_names().index(name), name, self.log)


class FakeCupy:
    """``sys.modules['cupy']`` stand-in; ``launches`` records every kernel launch."""

    float64 = np.float64
    int64 = np.int64
    ndarray = FakeArray

    def __init__(self, lib):
        self.launches = []
        fake = self

        class _Cuda:
            Device = FakeDevice

            @staticmethod
            def get_current_stream():
                return _Stream()

        self.cuda = _Cuda

        def raw_module(**kw):
            fake.modules_built += 1
            if fake.compile_error is not None:  # e.g. NVRTC missing on a driver-only machine
                raise fake.compile_error
            return FakeRawModule(lib, fake.launches, **kw)

        self.modules_built = 0
        self.compile_error = None

        self.RawModule = raw_module

    @staticmethod
    def empty(shape, dtype=np.float64):
        return _fake(np.empty(shape, dtype=dtype))

    @staticmethod
    def asarray(a, dtype=None):
        return _fake(np.array(a, dtype=dtype))

    @staticmethod
    def ascontiguousarray(a, dtype=None):
        return _fake(np.ascontiguousarray(a, dtype=dtype))

    @staticmethod
    def broadcast_to(a, shape):
        return _fake(np.broadcast_to(a, shape))

    @staticmethod
    def arange(*args, dtype=None):
        return _fake(np.arange(*args, dtype=dtype))

    @staticmethod
    def cumsum(a, axis=None, dtype=None):
        return _fake(np.cumsum(a, axis=axis, dtype=dtype))

    @staticmethod
    def may_share_memory(a, b):
        return np.may_share_memory(a, b)

    @staticmethod
    def from_dlpack(t):
        return _fake(np.from_dlpack(t))

    asfake = staticmethod(_fake)
