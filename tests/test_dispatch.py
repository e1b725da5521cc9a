"""Which implementation each input takes, and that nothing heavy is imported by arrpos."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import arrpos
from arrpos import _dispatch
from arrpos._backends import _xp
from conftest import get_backend

NO_EXT = os.environ.get("ARRPOS_NO_EXTENSIONS", "") not in ("", "0")


def _impl_name(backend, dtype_name):
    dtype = getattr(backend.xp, dtype_name)
    pos = backend.xp.arange(3)
    mod = _dispatch.plan("sinusoid_table", backend.xp, (pos,), dtype=dtype,
                         layout="split").module
    return mod.__name__.rsplit(".", 1)[-1]


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
def test_numpy_takes_compiled_kernel(dtype_name):
    b = get_backend("numpy")
    expected = "_xp" if NO_EXT else "numpy"
    assert _impl_name(b, dtype_name) == expected


def test_numpy_float16_takes_compiled_kernel():
    b = get_backend("numpy")
    assert _impl_name(b, "float16") == ("_xp" if NO_EXT else "numpy")


@pytest.mark.parametrize("name", ["array_api_strict", "jax"])
def test_other_namespaces_take_generic(name):
    b = get_backend(name)
    assert _impl_name(b, "float32") == "_xp"


def test_dask_takes_its_graph_adapter():
    """Dask arrays with NumPy chunks become per-chunk tasks (tests/test_dask.py), also under
    ARRPOS_NO_EXTENSIONS, where each task then runs _xp."""
    assert _impl_name(get_backend("dask"), "float32") == "graph"


def _select_rope(x, cos, sin):
    import array_api_compat

    xp = array_api_compat.array_namespace(x)
    mod = _dispatch.plan("apply_rope", xp, (x, cos, sin, None), layout="half").module
    return mod.__name__.rsplit(".", 1)[-1]


def test_torch_cpu_without_grad_takes_kernels_through_dlpack():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 5, 3, 8)
    cos, sin = torch.randn(5, 1, 8), torch.randn(5, 1, 8)
    assert _select_rope(x, cos, sin) == ("_xp" if NO_EXT else "torch_cpu")
    # zero-copy: rotating in place changes the caller's tensor storage
    ptr = x.data_ptr()
    ref = arrpos.apply_rope(x.clone(), cos, sin)
    got = arrpos.apply_rope(x, cos, sin, out=x)
    assert got is x and x.data_ptr() == ptr
    torch.testing.assert_close(x, ref, rtol=0, atol=1e-6)


def test_torch_requiring_grad_takes_the_custom_op():
    """Autograd through the kernels: the front-end takes the call and hands it to its
    ``torch.library`` op (tests/test_torch_ops.py checks the gradients)."""
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 5, 3, 8, requires_grad=True)
    cos, sin = torch.randn(5, 1, 8), torch.randn(5, 1, 8)
    assert _select_rope(x, cos, sin) == ("_xp" if NO_EXT else "torch_cpu")
    y = arrpos.apply_rope(x, cos, sin)
    assert y.requires_grad
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_torch_half_precision_takes_kernels():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 5, 3, 8, dtype=torch.bfloat16)
    cos = sin = torch.randn(5, 1, 8, dtype=torch.bfloat16)
    assert _select_rope(x, cos, sin) == ("_xp" if NO_EXT else "torch_cpu")


def test_env_var_forces_generic():
    code = (
        "import numpy as np, arrpos._dispatch as d, array_api_compat.numpy as xp;"
        "print(d.plan('sinusoid_table', xp, (np.arange(3),), dtype=np.float32).module.__name__)"
    )
    env = dict(os.environ, ARRPOS_NO_EXTENSIONS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "arrpos._backends._xp"


def test_compiled_extension_builds():
    if NO_EXT:
        pytest.skip("extensions disabled by ARRPOS_NO_EXTENSIONS for this run")
    ok, why = _dispatch.compiled_available()
    assert ok, f"the compiled extension did not import: {why}"


def test_import_is_light():
    """`import arrpos` must not import any array library but NumPy, nor matplotlib."""
    code = (
        "import sys, arrpos;"
        "heavy = [m for m in ('cupy', 'torch', 'jax', 'dask', 'matplotlib') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_result_matches_selected_impl():
    """The public function returns what the selected implementation computes."""
    from arrpos._exact import power_frequencies
    import array_api_compat.numpy as xp

    hi, lo = power_frequencies(8, 16, 10000.0)
    pos = np.arange(300)
    ref = _xp.sinusoid_table(xp.asarray(pos), hi, lo, layout="interleaved", dtype=np.float64,
                             width=16, xp=xp)
    np.testing.assert_allclose(arrpos.sinusoidal(pos, 16), ref, rtol=0, atol=1e-14)


# ------------------------------------------------------------------------------------------
# The dispatch table: every adapter is a twin of _xp


def _adapter_cases(xp):
    """One call per kernelised op, as the public functions make it: (op, args, arrays, kwargs)."""
    pos = xp.asarray([0, 3, 1000, 70000])
    inv = xp.asarray([1.0, 0.1, 0.001], dtype=xp.float64)
    x = xp.asarray(np.random.default_rng(0).normal(size=(2, 4, 3, 8)), dtype=xp.float32)
    cos = xp.asarray(np.random.default_rng(1).normal(size=(4, 1, 6)), dtype=xp.float32)
    sin = xp.asarray(np.random.default_rng(2).normal(size=(4, 1, 6)), dtype=xp.float32)
    hi, lo = np.array([1.0, 0.01]), np.zeros(2)
    return [
        ("sinusoid_table", (pos, hi, lo), (pos,),
         dict(layout="split", dtype=xp.float32, width=4)),
        ("rope_cos_sin", (pos, inv), (pos, inv),
         dict(layout="half", attention_factor=1.0, axes=None, dtype=xp.float64)),
        ("apply_rope", (x, cos, sin), (x, cos, sin, None),
         dict(layout="interleaved", inverse=False, out=None)),
    ]


@pytest.mark.parametrize("kind", sorted(_dispatch.FRONT_ENDS))
def test_each_adapter_in_the_table_is_a_twin_of_xp(kind):
    """Every adapter row imports where its library can run, defines ``supports`` and ops with
    _xp's signatures, and agrees with _xp on the calls it accepts."""
    import inspect

    if NO_EXT:
        assert _dispatch.candidates(get_backend("numpy").xp) == ()
        return
    try:
        xp = get_backend(kind).xp
    except Exception as exc:  # e.g. CuPy without a GPU: its row cannot run here
        pytest.skip(f"{kind} cannot run here: {exc}")
    mods = _dispatch.candidates(xp)
    served = 0
    for mod in mods:
        assert callable(mod.supports)
        for op, args, arrays, kwargs in _adapter_cases(xp):
            if not hasattr(mod, op):
                continue
            assert inspect.signature(getattr(mod, op)) == inspect.signature(getattr(_xp, op))
            if not mod.supports(op, arrays, **kwargs):
                continue
            served += 1
            got = getattr(mod, op)(*args, xp=xp, **kwargs)
            ref = getattr(_xp, op)(*args, xp=xp, **kwargs)
            for g, r in zip(got if isinstance(got, tuple) else (got,),
                            ref if isinstance(ref, tuple) else (ref,)):
                np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=0, atol=2e-6)
    if kind in ("numpy", "torch", "dask"):  # CPU rows: the kernels serve all three ops here
        assert served >= 3, [m.__name__ for m in mods]


def test_front_end_status_lists_every_row():
    status = _dispatch.front_end_status()
    assert set(status) == set(_dispatch.FRONT_ENDS)
    assert status["numpy"]["host.numpy"] == ("disabled by ARRPOS_NO_EXTENSIONS" if NO_EXT
                                             else "available")


def test_ml_dtypes_bfloat16_numpy_arrays_are_first_class():
    """ml_dtypes.bfloat16 NumPy arrays pass validation (NumPy's isdtype refuses them), take the
    compiled kernel where it is built, and round once: within half a bfloat16 ulp of float64."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 4, 8)).astype(bf16)
    inv, _ = arrpos.rope_frequencies(8)
    cos, sin = arrpos.rope_cos_sin(np.arange(3), inv, dtype=bf16)
    assert cos.dtype == bf16 and arrpos.sinusoidal(4, 8, dtype=bf16).dtype == bf16
    got = arrpos.apply_rope(x, cos[:, None], sin[:, None])
    assert got.dtype == bf16
    f64 = [a.astype(np.float64) for a in (x, cos[:, None], sin[:, None])]
    h = 4
    rot = np.concatenate([-f64[0][..., h:], f64[0][..., :h]], axis=-1)
    ref = f64[0] * f64[1] + rot * f64[2]
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(ref), 2.0 ** -126))) - 7)
    assert np.all(np.abs(got.astype(np.float64) - ref) <= ulp / 2 + 1e-12)
    mod = _dispatch.plan("apply_rope", get_backend("numpy").xp,
                         (x, cos[:, None], sin[:, None], None), layout="half").module
    assert mod.__name__.endswith("_xp" if NO_EXT else "host.numpy")


# ------------------------------------------------------------------------------------------
# The op table (arrpos._backends.ops): the one registry of the kernel-backed ops

_FRONT_ENDS = sorted({n for names in _dispatch.FRONT_ENDS.values() for n in names})


def _importable_front_ends():
    import importlib

    for name in _FRONT_ENDS:
        try:
            yield name, importlib.import_module(f"arrpos._backends.{name}")
        except ImportError:  # its library (or the extension) is not installed here
            continue


def test_every_front_end_has_the_interface():
    """What the dispatcher reads from a front-end, required of each (no optional attributes):
    its driver's row of the op table, whether its answers hold per signature, supports, bind,
    cache_clear."""
    from arrpos._backends import ops

    seen = 0
    for name, mod in _importable_front_ends():
        seen += 1
        assert mod.DRIVER in ops.DRIVERS and name.startswith(mod.DRIVER + ".")
        assert isinstance(mod.PER_SIGNATURE, bool)
        for fn in ("supports", "bind", "cache_clear"):
            assert callable(getattr(mod, fn)), (name, fn)
    assert seen >= (1 if NO_EXT else 2)


def test_every_op_in_the_table_is_served_or_declined_by_every_front_end():
    """For each op of the table and each front-end: the front-end's driver has the op (the
    table's ``dtypes``) and the front-end defines it with ``_xp``'s signature, or it declines
    the op (``supports`` is False, and it has no such function); ``_xp`` has every op, and no
    front-end defines an op the table does not list."""
    import inspect

    from arrpos._backends import ops

    xps = {name: getattr(_xp, name) for name in ops.OPS}  # every op has its generic twin
    for name, mod in _importable_front_ends():
        for op, row in ops.OPS.items():
            if mod.DRIVER in row.dtypes:
                assert inspect.signature(getattr(mod, op)) == inspect.signature(xps[op]), \
                    (name, op)
            else:
                assert not hasattr(mod, op), (name, op)
                assert not mod.supports(op, (np.zeros(3),) * len(row.arrays), dtype=np.float32)
        extra = {f for f in getattr(mod, "__all__", ()) if hasattr(_xp, f)} - set(ops.OPS)
        assert not extra, (name, extra)


def test_the_memory_rule_reads_the_table():
    """Which inputs an output may meet, and which one it may replace in place, are the op
    table's slots."""
    from arrpos._backends import memory, ops

    assert ops.OPS["apply_rope_qk"].owns == (0, 1) and len(ops.OPS["apply_rope_qk"].args) == 4
    assert ops.OPS["sinusoid_table"].owns == (None,)
    buf = np.zeros((3, 4, 8))
    q, k = buf[0], buf[1]
    assert memory.temporaries("apply_rope_qk", (q, k, buf[2], buf[2]), (k, None)) == (True,
                                                                                       False)
    assert memory.temporaries("apply_rope", (q, buf[2], buf[2]), q) is None  # in place
    assert memory.temporaries("alibi_bias", (q,), q) is None  # no outputs in the table


def test_an_op_added_to_the_table_reaches_the_cuda_build():
    """The CUDA instantiation list (``cupy.RawModule``'s name expressions, which
    .ci/check_nvrtc.sh compiles, and the nvcc translation unit of .ci/check_nvcc.sh) is read
    from the table: an op added there (here in a subprocess, before the driver reads it) is
    instantiated for its CUDA dtypes, and for each offset type when it says so."""
    code = (
        "from arrpos._backends import ops\n"
        "ops.OPS['toy'] = ops.Op('toy', ('positions',), arrays=('positions',),"
        " outputs=(('out', None),), kernel='toy_kernel', offsets=True,"
        " dtypes={'cuda': ('float32', 'bfloat16')})\n"
        "from arrpos._backends.cuda import driver\n"
        "from arrpos._backends import memory\n"
        "names = driver.module_spec()['name_expressions']\n"
        "assert names == driver.kernel_names(), names\n"
        "toy = [n for n in names if 'toy' in n]\n"
        "assert all('&' + n + ',' in driver.instantiation_source() for n in toy)\n"
        "import numpy as np\n"
        "p = np.zeros(4)\n"
        "assert 'toy' in ops.served_by('cuda') and memory.temporaries('toy', (p,), p) == (True,)\n"
        "print(toy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == str(["arrpos::toy_kernel<float, int>",
                                      "arrpos::toy_kernel<float, long long>",
                                      "arrpos::toy_kernel<arrpos::bfloat16, int>",
                                      "arrpos::toy_kernel<arrpos::bfloat16, long long>"])


def test_the_ci_cuda_checks_read_the_table():
    """.ci/check_nvrtc.sh and .ci/check_nvcc.sh compile what the driver derives from the op
    table, not a list of their own (a check of the source tree: the packaged tests run without
    .ci/)."""
    import pathlib

    ci = pathlib.Path(__file__).resolve().parents[1] / ".ci"
    if not ci.is_dir():
        pytest.skip("not a source checkout (no .ci/ beside tests/)")
    assert "module_spec()" in (ci / "check_nvrtc.sh").read_text()
    assert "instantiation_source()" in (ci / "check_nvcc.sh").read_text()


def test_a_plan_is_named_and_serves_its_signature():
    """``plan`` decides once per signature (a named, immutable Plan); ``call`` along it gives
    what a call deciding afresh gives."""
    xp = get_backend("numpy").xp
    x = np.random.default_rng(3).normal(size=(2, 3, 8))
    cos, sin = np.cos(x[0]), np.sin(x[0])
    opts = dict(layout="half", inverse=False, out=None)
    p = _dispatch.plan("apply_rope", xp, (x, cos, sin, None), **opts)
    assert isinstance(p, _dispatch.Plan) and p._fields == (
        "fn", "validates", "bound", "guards", "module")
    assert p.module.__name__.endswith("_xp" if NO_EXT else "host.numpy")
    assert p.guards is (not NO_EXT)
    got = _dispatch.call("apply_rope", xp, x, cos, sin, plan=p, **opts)
    np.testing.assert_array_equal(got, _dispatch.call("apply_rope", xp, x, cos, sin, **opts))
    p2 = _dispatch.plan("apply_rope_cached", xp, (x, cos[:, :4], sin[:, :4],
                                                 np.zeros((2, 3), np.int64), None), **opts)
    assert p2.validates is (not NO_EXT) and (p2.bound is not None) is (not NO_EXT)


def test_no_backend_module_uses_a_private_name_of_another():
    """Front-ends reach their drivers (and drivers the compiled module, the op table and the
    memory rule) through package-public names only: no ``module._name`` and no
    ``from module import _name`` across the modules of ``_backends`` and the dispatcher
    (a private module itself, such as ``_cpu`` or ``_xp``, may be imported)."""
    import ast
    import pathlib

    root = pathlib.Path(arrpos.__file__).resolve().parent
    files = sorted((root / "_backends").rglob("*.py")) + [root / "_dispatch.py"]

    def is_module(package: pathlib.Path, name: str) -> bool:
        return ((package / name).is_dir() or (package / f"{name}.py").exists()
                or any(package.glob(f"{name}.*.so")) or (package / f"{name}.pyi").exists())

    found = []
    for path in files:
        tree = ast.parse(path.read_text())
        modules = set()  # local names bound to modules of arrpos
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            package = path.parent
            for _ in range(node.level - 1):
                package = package.parent
            for part in (node.module or "").split(".") if node.module else ():
                package = package / part
            for alias in node.names:
                if is_module(package, alias.name):
                    modules.add(alias.asname or alias.name)
                elif alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(root)}: from ... import {alias.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in modules and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                found.append(f"{path.relative_to(root)}:{node.lineno}: "
                             f"{node.value.id}.{node.attr}")
    assert not found, "\n".join(found)
