"""The one-call GPU check, tested without a GPU (.ci/gpu, .ci/gpu-wheels.sh, .ci/gpu_check.py).

No GPU has run this project's CUDA kernels yet; the day one is lent there is one device call
of a few minutes. What can go wrong in it is checked here: the carried wheels are exactly what
the GPU tests import beyond the machine's own packages; ``.ci/gpu --dry-run`` shows every step
and nothing in the script reaches the network; the program run under compute-sanitizer
launches every name expression of the CUDA code and its calls are valid (they run against
the CUDA emulation of tests/cuda_emulation.py, with results checked); the report is written
from the step table, JUnit files and logs; the shell is shellcheck-clean where shellcheck is
installed. No timing is asserted.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CI = ROOT / ".ci"
BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="needs bash")


if not (CI / "gpu_check.py").exists():  # an unpacked sdist: .ci/ is a checkout's only
    pytest.skip("needs the source checkout's .ci/", allow_module_level=True)


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", CI / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gpu_check = _gpu_check()


def _bash(*args, env=None, timeout=120):
    return subprocess.run([BASH, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ------------------------------------------------------------------------------------------
# the wheels: exactly the imports of the GPU run beyond the machine's own packages

# import name -> distribution, where they differ
_DISTRIBUTION = {"array_api_compat": "array-api-compat", "Cython": "cython",
                 "cupy": "cupy-cuda13x", "cupyx": "cupy-cuda13x", "ml_dtypes": "ml-dtypes",
                 "PIL": "pillow", "yaml": "pyyaml", "sklearn": "scikit-learn",
                 "cv2": "opencv-python-headless"}
# what the GPU run executes itself (the sweep's other modules: test_sweep_imports_are_there)
_GPU_FILES = ["tests/test_cupy.py", "tests/test_torch_ops.py", "tests/conftest.py",
              "conftest.py", ".ci/gpu_check.py", "benchmarks/__init__.py",
              "benchmarks/bench_gpu.py", "benchmarks/_timing.py", "setup.py"]


def _wheels():
    out = _bash(".ci/gpu-wheels.sh", "--list")
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def _device_has():
    out = _bash(".ci/gpu-wheels.sh", "--device-has")
    assert out.returncode == 0, out.stderr
    return {_canonical(n) for n in out.stdout.split()}


def _local_modules():
    return ({p.stem for p in (ROOT / "tests").glob("*.py")}
            | {"arrpos", "benchmarks", "gpu_check"})


def _imports(path, top_level_only=False):
    """Top-level names of every absolute import in ``path`` (inside functions too, unless
    ``top_level_only``), and of ``pytest.importorskip("name")``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else ast.walk(tree)
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip"
              and node.args and isinstance(node.args[0], ast.Constant)):
            names.add(str(node.args[0].value).split(".")[0])
    return names


def _third_party(names):
    local = _local_modules()
    return {n for n in names if n not in sys.stdlib_module_names and n not in local}


def _gpu_run_imports():
    """Third-party imports of the files the GPU run executes, following the tests' own
    helper modules (``reference`` ...) they import."""
    todo = [ROOT / f for f in _GPU_FILES if (ROOT / f).exists()]
    seen, names = set(), set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        found = _imports(path)
        names |= found
        todo += [ROOT / "tests" / f"{n}.py" for n in found
                 if (ROOT / "tests" / f"{n}.py").exists()]
    return _third_party(names)


def _pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirement_names(reqs):
    return {_canonical(re.match(r"[A-Za-z0-9_.-]+", r).group(0)) for r in reqs}


@needs_bash
def test_wheels_are_pinned():
    wheels = _wheels()
    assert wheels, "no wheel listed"
    for req in wheels:
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][A-Za-z0-9.+!-]*", req), req
    assert len({_canonical(r.split("==")[0]) for r in wheels}) == len(wheels)  # one each


@needs_bash
def test_wheels_are_what_the_gpu_run_imports_beyond_the_machine():
    """Every third-party import of the GPU tests, .ci/gpu_check.py, the GPU benchmarks and the
    build, plus arrpos's declared dependencies and build requirements, is either on the GPU
    machine or carried as a wheel; nothing else is carried."""
    imports = {_canonical(_DISTRIBUTION.get(n, n)) for n in _gpu_run_imports()}
    project = _pyproject()
    needed = imports | _requirement_names(project["project"]["dependencies"]) \
        | _requirement_names(project["build-system"]["requires"])
    wheels = {_canonical(r.split("==")[0]) for r in _wheels()}
    assert needed - _device_has() == wheels
    # the list is not vacuous: the GPU tests do import these
    assert {"numpy", "pytest", "torch", "cupy-cuda13x", "array-api-compat"} <= needed


def _optional_packages():
    """tests/conftest.py's OPTIONAL: packages whose absence makes a test skip, not fail."""
    tree = ast.parse((ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "OPTIONAL"
                                                for t in node.targets):
            return set(ast.literal_eval(node.value.args[0]))
    raise AssertionError("tests/conftest.py defines no OPTIONAL")


@needs_bash
def test_sweep_imports_are_there():
    """The sweep collects every test module: a module-level import that is neither optional
    (a skip) nor on the machine nor carried would be a collection error there."""
    have = _device_has() | {_canonical(r.split("==")[0]) for r in _wheels()}
    optional = _optional_packages()
    missing = {}
    for path in sorted((ROOT / "tests").glob("*.py")):
        for name in _third_party(_imports(path, top_level_only=True)) - optional:
            if _canonical(_DISTRIBUTION.get(name, name)) not in have:
                missing.setdefault(name, []).append(path.name)
    assert not missing, missing


# ------------------------------------------------------------------------------------------
# .ci/gpu: the dry run, no network, the files it leaves


STEPS = ["env", "wheels", "compile", "build", "test-cupy", "memcheck", "bench", "racecheck",
         "initcheck", "sweep"]


@needs_bash
def test_dry_run_prints_every_step_and_runs_nothing(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out))
    res = _bash(".ci/gpu", "--dry-run", env=env)
    assert res.returncode == 0, res.stderr
    text = res.stdout
    positions = [re.search(rf"^{re.escape(s)}\s+\d+ s ", text, re.M) for s in STEPS]
    assert all(positions), [s for s, p in zip(STEPS, positions) if not p]
    assert [p.start() for p in positions] == sorted(p.start() for p in positions)  # in order
    for command in ["gpu_check.py env", "pip install --no-index", "--find-links .ci/gpu-wheels",
                    "setup.py -q build_ext --inplace", "gpu_check.py compile",
                    "pytest tests/test_cupy.py -x -q", "--junitxml=" + str(out),
                    "compute-sanitizer --tool memcheck --error-exitcode 99",
                    "kernels --public --no-pool", "--tool racecheck", "--tool initcheck",
                    "gpu_check.py bench", "gpu_check.py sweep",
                    "pytest tests/test_torch_ops.py -x -q", "junit-torch-ops.xml"]:
        assert command in text, command
    assert not out.exists()  # a dry run writes nothing


def test_gpu_script_never_reaches_the_network():
    """The GPU machine has no network: no download, and every pip call is --no-index."""
    for name in ("gpu", "gpu_check.py"):
        code = "\n".join(line.split(" #")[0] for line in (CI / name).read_text().splitlines()
                         if not line.lstrip().startswith("#"))
        for word in ("pip download", "curl ", "wget ", "apt-get", "git clone", "urllib",
                     "requests."):
            assert word not in code, (name, word)
        for m in re.finditer(r"pip\" install[^\n]*|pip install[^\n]*", code):
            assert "--no-index" in m.group(0), m.group(0)
    assert "PIP_NO_INDEX=1" in (CI / "gpu").read_text()


@needs_bash
def test_out_files_fit_what_the_device_returns():
    """At most 8 files come back from $OUT, each named in letters, digits, '.', '_', '-'."""
    res = _bash(".ci/gpu", "--dry-run")
    names = re.search(r"^files in \$OUT: (.*)$", res.stdout, re.M).group(1).split()
    assert 1 <= len(names) <= 8
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", n) for n in names), names
    written = set(re.findall(r"\$OUT/([A-Za-z0-9._-]+)", (CI / "gpu").read_text()))
    assert written and written <= set(names), written - set(names)


def test_scripts_are_executable_and_ignored_outputs():
    for name in ("gpu", "gpu-wheels.sh"):
        assert os.access(CI / name, os.X_OK), name
    ignore = (ROOT / ".gitignore").read_text().splitlines()
    assert ".ci/gpu-wheels/" in ignore and ".ci/gpu-out/" in ignore


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck_clean():
    res = subprocess.run(["shellcheck", str(CI / "gpu"), str(CI / "gpu-wheels.sh")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout


# ------------------------------------------------------------------------------------------
# the kernels program: every name expression, valid calls (the CUDA emulation)


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    import cuda_emulation

    try:
        return cuda_emulation.build(tmp_path_factory.mktemp("cuda_emulation_gpu_check"))
    except RuntimeError as exc:
        pytest.skip(f"CUDA emulation unavailable: {exc}")


@pytest.fixture
def cp(emulator, monkeypatch):
    """The emulation's stand-in for CuPy, with the few names the public pass also uses; the
    driver's compiled modules forgotten around it."""
    import cuda_emulation

    fake = cuda_emulation.FakeCupy(emulator)
    for name in ("float16", "float32"):
        setattr(fake, name, getattr(np, name))
    fake.asnumpy = lambda a: np.array(a)
    gpu_check.cuda().forget()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    yield fake
    gpu_check.cuda().forget()


def _record_vector_flags(monkeypatch):
    """``{name: {vec argument of each launch}}`` for the apply kernels (the argument before
    the last: tests/test_cuda_emulated.py reads it the same way)."""
    import cuda_emulation

    flags = {}
    original = cuda_emulation.FakeKernel.__call__

    def call(self, grid, block, args, shared_mem=0):
        if self.name.startswith("arrpos::apply_rope"):
            flags.setdefault(self.name, set()).add(int(args[-2]))
        return original(self, grid, block, args, shared_mem)

    monkeypatch.setattr(cuda_emulation.FakeKernel, "__call__", call)
    return flags


def test_kernels_program_launches_every_name_expression(cp, monkeypatch):
    cuda = gpu_check.cuda()
    lookup = getattr(cuda.driver, cuda._lookup)
    flags = _record_vector_flags(monkeypatch)
    rec = gpu_check.Recorder()
    lines = []
    with rec.installed():
        failed = gpu_check.run_cases(gpu_check.driver_cases(), gpu_check.Device(cp), rec,
                                     log=lines.append)
    assert not failed, "\n".join(lines)
    assert gpu_check.coverage(rec) == []
    names = set(cuda.kernel_names())
    assert {n for n, _, _ in cp.launches} == names == set(rec.launches)
    assert len(cp.launches) == len(rec.launches)  # the recorder counts launches, not lookups
    # both paths of every apply kernel: two pairs per thread and pair by pair
    apply_names = {n for n in names if n.startswith("arrpos::apply_rope")}
    assert set(flags) == apply_names
    assert all(v == {0, 1} for v in flags.values()), flags
    # a launch split along its rows (the wide-short grid) and one frequency set in two blocks
    assert any(grid[1] > 1 for n, grid, _ in cp.launches if "alibi" in n)
    assert sum(1 for label, _ in gpu_check.driver_cases() if "200 frequencies" in label) == 2
    assert getattr(cuda.driver, cuda._lookup) is lookup  # the wrapper is gone


def test_kernels_program_fails_on_wrong_results(cp, monkeypatch):
    """A kernel that computes nothing (here: launches that do not run) fails every case it
    serves: a launch that is clean under the sanitizer but wrong is a failure."""
    import cuda_emulation

    original = cuda_emulation.FakeKernel.__call__

    def lazy(self, grid, block, args, shared_mem=0):
        if not self.name.startswith("arrpos::apply_rope<"):
            return original(self, grid, block, args, shared_mem)
        self.log.append((self.name, tuple(grid), block))

    monkeypatch.setattr(cuda_emulation.FakeKernel, "__call__", lazy)
    rec = gpu_check.Recorder()
    lines = []
    cases = [c for c in gpu_check.driver_cases() if c[0].startswith("apply_rope float32 <int>")]
    with rec.installed():
        failed = gpu_check.run_cases(cases, gpu_check.Device(cp), rec, log=lines.append)
    assert failed == [label for label, _ in cases], "\n".join(lines)


def test_kernels_program_fails_when_the_generic_code_runs(cp, monkeypatch):
    """A module that cannot be built (the adapter then declines) fails every case."""
    cp.compile_error = RuntimeError("simulated NVRTC failure")
    rec = gpu_check.Recorder()
    lines = []
    cases = gpu_check.driver_cases()[:2]
    with rec.installed(), pytest.warns(RuntimeWarning, match="simulated NVRTC failure"):
        failed = gpu_check.run_cases(cases, gpu_check.Device(cp), rec, log=lines.append)
    assert failed == [label for label, _ in cases]


def test_public_pass_reaches_the_kernels(cp, monkeypatch):
    """The --public pass through the public functions, its CuPy rows on the emulation (the
    dispatcher pointed at the CuPy front-end for the stand-in's arrays); torch rows need CUDA."""
    import cuda_emulation
    from arrpos import _dispatch
    from arrpos._lib._memo import clear_memos

    front = gpu_check.cuda().front
    monkeypatch.setattr(_dispatch, "candidates", lambda xp: (front,))
    # the public functions compare devices: the stand-in's are one device, as CuPy's are
    dev = cuda_emulation.FakeDevice
    monkeypatch.setattr(dev, "__eq__", lambda a, b: isinstance(b, dev) and a.id == b.id)
    monkeypatch.setattr(dev, "__hash__", lambda a: hash(a.id))
    rec = gpu_check.Recorder()
    lines = []
    clear_memos()  # plans of earlier calls chose their routes without the patch
    try:
        with rec.installed():
            cases = gpu_check.public_cases(cp, None, rec)
            failed = gpu_check.run_cases(cases, gpu_check.Device(cp), rec, log=lines.append)
    finally:
        clear_memos()  # nor may later calls meet the routes chosen here
    assert len(cases) == 5
    assert not failed, "\n".join(lines)
    assert {n.split("<")[0] for n in rec.launches} == {
        "arrpos::sinusoid_table", "arrpos::rope_cos_sin", "arrpos::apply_rope",
        "arrpos::apply_rope_cached", "arrpos::alibi_bias", "arrpos::alibi_bias_from_positions",
        "arrpos::relative_bias", "arrpos::conv_positional", "arrpos::resample_grid"}


# ------------------------------------------------------------------------------------------
# the sweep's selection and the report


class _Item:
    def __init__(self, nodeid, params=None):
        self.nodeid = nodeid
        if params is not None:
            self.callspec = type("Spec", (), {"params": params})()


def test_sweep_selects_the_cupy_rows():
    assert gpu_check.gpu_row(_Item("tests/test_rope.py::test_x[cupy-1]", {"backend": "cupy"}))
    assert gpu_check.gpu_row(_Item("tests/test_dispatch.py::test_y[cupy]", {"kind": "cupy"}))
    assert not gpu_check.gpu_row(_Item("tests/test_rope.py::test_x[numpy]",
                                       {"backend": "numpy"}))
    assert not gpu_check.gpu_row(_Item("tests/test_cuda_emulated.py::test_z"))
    assert gpu_check.gpu_row(_Item("tests/test_readme.py::test_readme_block_runs[gpu.md-0]",
                                   {"doc": pathlib.Path("gpu.md"), "i": 0}))


def test_sweep_hides_golden_references_of_another_version(monkeypatch):
    import importlib.metadata

    pytest.importorskip("tomllib")  # Python 3.11+ (the GPU machine has 3.12)
    pins = gpu_check._pinned_peers()
    assert {"transformers", "diffusers", "onnxruntime"} <= set(pins)
    for module in pins:  # restored after the test, whatever hide_unpinned_peers does
        monkeypatch.setitem(sys.modules, module, sys.modules.get(module))
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0.0")
    hidden = gpu_check.hide_unpinned_peers(log=lambda *a: None)
    assert len(hidden) == len(pins)
    assert all(sys.modules[m] is None for m in pins)
    assert importlib.util.find_spec("transformers") is None  # what tests/conftest.py asks


_JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest"
errors="0" failures="1" skipped="2" tests="5" time="3.5"><testcase classname="tests.test_cupy"
name="test_a" time="0.1"/><testcase classname="tests.test_cupy" name="test_b" time="0.1">
<failure message="assert 1.5e-05 &lt;= 1e-05">trace</failure></testcase></testsuite>
</testsuites>"""


def test_report_from_steps_junit_and_logs(tmp_path):
    state, out = tmp_path / "state", tmp_path / "out"
    (state / "running").mkdir(parents=True)
    out.mkdir()
    (state / "steps.tsv").write_text("env\tPASS\t2\tmachine\ntest-cupy\tFAIL\t40\ttests\n"
                                     "torch-ops\tABSENT\t0\tnot there\n")
    (state / "env.log").write_text("python: 3.12.3\ngpu 0: NVIDIA H100 80GB HBM3, compute "
                                   "capability 9.0, 132 SMs, 79.2 GiB\n")
    (state / "compile.json").write_text(
        '{"seconds": 21.5, "kernels": 24, "compute_capability": "90", "nvrtc": "13.0",'
        ' "options": [], "rows": [{"kernel": "k", "registers": 40, "local_bytes": 0,'
        ' "max_threads": 256, "binary": 90}]}')
    (state / "bench.md").write_text("| kernel | size | ms | vs memory | vs user code |\n")
    (out / "junit-cupy.xml").write_text(_JUNIT)
    (out / "sanitizer.log").write_text(
        "=== memcheck: every kernel\nok case\nkernels: 24/24 name expressions launched\n"
        "========= ERROR SUMMARY: 0 errors\n\n=== racecheck: every kernel\n"
        "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n\n"
        "=== initcheck: every kernel\n========= Device not supported\n")
    assert gpu_check.main(["report", "--state", str(state), "--out", str(out)]) == 0
    md = (out / "gpu-report.md").read_text()
    assert md.startswith("# arrpos GPU check: FAIL")
    assert "1 step(s) failed: test-cupy" in md
    assert "| cupy | 5 | 2 | 1 | 0 | 2 | 3.5 |" in md
    assert "tests.test_cupy::test_b: assert 1.5e-05 <= 1e-05" in md
    assert "| memcheck | 0 | kernels: 24/24 name expressions launched |" in md
    assert "| racecheck | 0 |" in md
    assert "| initcheck | ? | compute-sanitizer refused this device" in md
    assert "NVRTC 13.0, sm_90: 24 kernels compiled and loaded in 21.5 s" in md
    assert "- gpu 0: NVIDIA H100 80GB HBM3" in md
    assert not list(out.glob(".gpu-report*"))  # the temporary file was renamed

    (state / "steps.tsv").write_text("env\tPASS\t2\tmachine\n")
    (state / "running" / "memcheck").write_text("")
    gpu_check.main(["report", "--state", str(state), "--out", str(out)])
    md = (out / "gpu-report.md").read_text()
    assert md.startswith("# arrpos GPU check: INCOMPLETE") and "Still running: memcheck" in md


# ------------------------------------------------------------------------------------------
# the docs


def test_docs_say_how_to_run_it_and_what_has_run():
    doc = (ROOT / "docs" / "gpu.md").read_text()
    assert "bash .ci/gpu" in doc and '".ci/gpu-wheels"' in doc and "bash .ci/gpu-wheels.sh" in doc
    assert "## What has run on a GPU" in doc
    readme = (ROOT / "README.md").read_text()
    gpu_section = readme[readme.index("## GPU"):]
    gpu_section = gpu_section[:gpu_section.index("\n## ", 4)]
    assert ".ci/gpu" in gpu_section
