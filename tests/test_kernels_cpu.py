"""kernels_ext on a machine without a GPU: cheap import, input errors before any build."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import kernels_ext  # noqa: E402
from kernels_ext import _build  # noqa: E402


pytestmark = pytest.mark.usefixtures("no_kernel_build")


def test_import_is_cheap_and_touches_neither_torch_nor_cuda():
    code = (
        "import sys, kernels_ext\n"
        "assert 'torch' not in sys.modules, 'importing kernels_ext imported torch'\n"
        "assert callable(kernels_ext.build)\n"
        "import kernels_ext.build\n"  # the AOT module must not shadow the function
        "assert callable(kernels_ext.build)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def _x(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


# (op name, call with valid CPU tensors)
VALID_CPU_CALLS = [
    ("add", lambda: kernels_ext.add(_x(4, 8), _x(4, 8))),
    ("mul", lambda: kernels_ext.mul(_x(4, 8), _x(4, 8))),
    ("relu", lambda: kernels_ext.relu(_x(4, 8))),
    ("gelu", lambda: kernels_ext.gelu(_x(4, 8))),
    ("gelu", lambda: kernels_ext.gelu(_x(4, 8), approximate="tanh")),
    ("silu", lambda: kernels_ext.silu(_x(4, 8))),
    ("sigmoid", lambda: kernels_ext.sigmoid(_x(4, 8))),
    ("swiglu", lambda: kernels_ext.swiglu(_x(4, 8), _x(4, 8))),
    ("row_sum", lambda: kernels_ext.row_sum(_x(4, 8))),
    ("row_max", lambda: kernels_ext.row_max(_x(4, 8))),
    ("sum_all", lambda: kernels_ext.sum_all(_x(4, 8))),
    ("max_all", lambda: kernels_ext.max_all(_x(4, 8))),
    ("softmax", lambda: kernels_ext.softmax(_x(4, 8))),
    ("rmsnorm", lambda: kernels_ext.rmsnorm(_x(4, 8), _x(8))),
    ("add_rmsnorm", lambda: kernels_ext.add_rmsnorm(_x(4, 8), _x(4, 8), _x(8))),
    ("layernorm", lambda: kernels_ext.layernorm(_x(4, 8), _x(8), _x(8))),
]


@pytest.mark.parametrize("op,call", VALID_CPU_CALLS, ids=[f"{n}-{i}" for i, (n, _) in
                                                         enumerate(VALID_CPU_CALLS)])
def test_cpu_tensors_are_rejected_naming_the_op(op, call):
    with pytest.raises(ValueError, match=rf"kernels_ext\.{op}: .*cpu.*CUDA"):
        call()
    assert not torch.cuda.is_initialized()


BAD_DTYPE_CALLS = [
    ("add", lambda: kernels_ext.add(_x(4, 8).double(), _x(4, 8).double())),
    ("relu", lambda: kernels_ext.relu(torch.ones(4, 8, dtype=torch.int32))),
    ("softmax", lambda: kernels_ext.softmax(_x(4, 8).double())),
    ("row_sum", lambda: kernels_ext.row_sum(torch.ones(4, 8, dtype=torch.int64))),
    ("sum_all", lambda: kernels_ext.sum_all(torch.ones(3, dtype=torch.bool))),
    ("rmsnorm", lambda: kernels_ext.rmsnorm(_x(4, 8), _x(8, dtype=torch.bfloat16))),
    ("swiglu", lambda: kernels_ext.swiglu(_x(4, 8), _x(4, 8, dtype=torch.float16))),
    ("layernorm", lambda: kernels_ext.layernorm(_x(4, 8), _x(8), _x(8).double())),
]


@pytest.mark.parametrize("op,call", BAD_DTYPE_CALLS, ids=[n for n, _ in BAD_DTYPE_CALLS])
def test_bad_dtype_is_a_type_error_naming_the_op(op, call):
    with pytest.raises(TypeError, match=rf"kernels_ext\.{op}: .*dtype"):
        call()


BAD_SHAPE_CALLS = [
    ("add", lambda: kernels_ext.add(_x(4, 8), _x(4, 9))),
    ("mul", lambda: kernels_ext.mul(_x(4, 8), _x(8, 4))),
    ("swiglu", lambda: kernels_ext.swiglu(_x(2, 4, 8), _x(4, 8))),
    ("rmsnorm", lambda: kernels_ext.rmsnorm(_x(4, 8), _x(7))),
    ("rmsnorm", lambda: kernels_ext.rmsnorm(_x(4, 8), _x(1, 8))),
    ("add_rmsnorm", lambda: kernels_ext.add_rmsnorm(_x(4, 8), _x(3, 8), _x(8))),
    ("layernorm", lambda: kernels_ext.layernorm(_x(4, 8), _x(8), _x(9))),
    ("softmax", lambda: kernels_ext.softmax(torch.tensor(1.0))),
    ("row_sum", lambda: kernels_ext.row_sum(torch.tensor(1.0))),
]


@pytest.mark.parametrize("op,call", BAD_SHAPE_CALLS, ids=[f"{n}-{i}" for i, (n, _) in
                                                         enumerate(BAD_SHAPE_CALLS)])
def test_bad_shape_is_a_value_error_naming_the_op(op, call):
    with pytest.raises(ValueError, match=rf"kernels_ext\.{op}: .*(shape|dimension)"):
        call()


def test_non_contiguous_is_rejected():
    x = _x(8, 4).t()
    with pytest.raises(ValueError, match=r"kernels_ext\.softmax: x must be contiguous"):
        kernels_ext.softmax(x)


def test_not_a_tensor_and_bad_gelu_mode():
    with pytest.raises(TypeError, match=r"kernels_ext\.relu: x must be a torch\.Tensor"):
        kernels_ext.relu([1.0, 2.0])
    with pytest.raises(ValueError, match=r"kernels_ext\.gelu: approximate"):
        kernels_ext.gelu(_x(4), approximate="fast")


def test_max_of_empty_is_rejected():
    with pytest.raises(ValueError, match=r"kernels_ext\.max_all"):
        kernels_ext.max_all(torch.empty(0))


def test_unknown_attribute():
    with pytest.raises(AttributeError):
        kernels_ext.no_such_op  # noqa: B018


@pytest.mark.parametrize(
    "text,flags",
    [
        ("9.0", ["-gencode=arch=compute_90a,code=sm_90a"]),
        ("9.0a", ["-gencode=arch=compute_90a,code=sm_90a"]),
        ("8.0;8.6", ["-gencode=arch=compute_80,code=sm_80",
                     "-gencode=arch=compute_86,code=sm_86"]),
        ("8.9+PTX", ["-gencode=arch=compute_89,code=sm_89",
                     "-gencode=arch=compute_89,code=compute_89"]),
        ("sm_90a 8.0", ["-gencode=arch=compute_90a,code=sm_90a",
                        "-gencode=arch=compute_80,code=sm_80"]),
    ],
)
def test_parse_arch_list(text, flags):
    assert _build.parse_arch_list(text) == flags


def test_parse_arch_list_rejects_garbage():
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST"):
        _build.parse_arch_list("Hopper-ish")


def test_capability_flags():
    assert _build.capability_arch_flags(9, 0) == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert _build.capability_arch_flags(8, 6) == ["-gencode=arch=compute_86,code=sm_86"]


def test_build_failure_names_the_file():
    plan = _build.BuildPlan(name="solbench_kernels_x", directory=_build.cache_root() / "x",
                            sources=(), arch_flags=(), cuda_flags=(), cxx_flags=())
    log = ("Error building extension 'solbench_kernels_x': [1/8] nvcc ...\n"
           "FAILED: softmax.cuda.o\n"
           "/src/kernels_ext/csrc/softmax/softmax.cu(12): error: identifier \"foo\" is undefined\n")
    err = _build._explain_build_failure(RuntimeError(log), plan)
    assert "csrc/softmax/softmax.cu" in str(err)
    assert 'identifier "foo" is undefined' in str(err)


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SOLBENCH_KERNELS_CACHE", str(tmp_path))
    assert _build.cache_root() == tmp_path


def test_every_kernel_family_has_sources_and_no_torch_in_kernels():
    families = {"elementwise", "activation", "reduce", "softmax", "rmsnorm", "layernorm"}
    for fam in families:
        cu = list((_build.CSRC / fam).glob("*.cu"))
        assert cu, f"no .cu in {fam}"
        for f in cu:
            text = f.read_text()
            assert "torch/" not in text and "ATen/" not in text, f"{f} includes PyTorch"


def test_compile_check_without_nvcc(monkeypatch, capsys):
    from kernels_ext import compile_check

    monkeypatch.setattr(compile_check, "find_nvcc", lambda: None)
    assert compile_check.main([]) == 0
    assert "nvcc not found: compile check skipped" in capsys.readouterr().out


def test_ptxas_summary():
    from kernels_ext import compile_check

    log = ("ptxas info    : Used 40 registers\n    0 bytes stack frame, 0 bytes spill stores, "
           "0 bytes spill loads\nptxas info    : Used 72 registers\n"
           "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n")
    assert compile_check.summarize_ptxas(log) == (72, 1)


_SCHEMA_CHECK = r'''
import re, torch, torch.nn.functional as F
from kernels_ext.codegen import generate
from kernels_ext.optable import load_table
# The schemas exactly as the library registers them (the generated TORCH_LIBRARY block).
schemas = re.findall(r'm\.def\("([^"]+)"\)', generate(load_table()))
lib = torch.library.Library("solbench_kernels", "DEF")
for s in schemas:
    lib.define(s)
# CPU stand-ins with the same output metadata as the CUDA kernels (defaults: the
# dispatcher drops arguments equal to the schema default for Python kernels).
rms = lambda h, w, eps=1e-6: h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w
impls = {
    "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "relu": torch.relu,
    "gelu": lambda x, approximate="none": F.gelu(x, approximate=approximate),
    "silu": F.silu, "sigmoid": torch.sigmoid, "swiglu": lambda a, b: F.silu(a) * b,
    "row_sum": lambda x: x.sum(-1), "row_max": lambda x: x.amax(-1),
    "sum_all": lambda x: x.sum(), "max_all": lambda x: x.max(),
    "softmax": lambda x: torch.softmax(x, -1), "rmsnorm": rms,
    "add_rmsnorm": lambda x, r, w, eps=1e-6: (rms(x + r, w, eps), x + r),
    "layernorm": lambda x, w, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], w, b, eps),
}
for name, fn in impls.items():
    lib.impl(name, fn, "CPU")
import kernels_ext._fake  # the fake registrations made from the table
ops = torch.ops.solbench_kernels
x = torch.randn(2, 3, 16); w = torch.randn(16); b = torch.randn(16)
cases = {
    "add": (x, x), "mul": (x, x), "relu": (x,), "gelu": (x, "tanh"), "silu": (x,),
    "sigmoid": (x,), "swiglu": (x, x), "row_sum": (x,), "row_max": (x,), "sum_all": (x,),
    "max_all": (x,), "softmax": (x,), "rmsnorm": (x, w, 1e-6), "add_rmsnorm": (x, x, w, 1e-6),
    "layernorm": (x, w, b, 1e-5),
}
# The ops with CPU stand-ins here are all of this file's families; the ops other families
# declare get their schema parsed and a fake registered (checked below), and their own
# GPU tests run opcheck.
assert set(cases) <= {s.split("(")[0] for s in schemas}, schemas
from torch._library.simple_registry import singleton
for s in schemas:
    entry = singleton.find("solbench_kernels::" + s.split("(")[0])
    assert entry.fake_impl.kernel is not None, s
for name, args in cases.items():
    torch.library.opcheck(getattr(ops, name).default, args,
                          test_utils=("test_schema", "test_faketensor"))
# Defaults left out: the fakes fill them in as the dispatcher does.
for name, args in {"gelu": (x,), "rmsnorm": (x, w), "add_rmsnorm": (x, x, w),
                   "layernorm": (x, w, b)}.items():
    torch.library.opcheck(getattr(ops, name).default, args, test_utils=("test_faketensor",))
print("schemas ok", len(cases), "fakes", len(schemas))
'''


def test_schemas_and_fake_impls_agree_with_reference_semantics():
    """The C++ schemas parse, and each fake impl matches the metadata of a CPU
    stand-in (run in a subprocess: it defines the op namespace)."""
    out = subprocess.run([sys.executable, "-c", _SCHEMA_CHECK], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    from kernels_ext.optable import load_table

    assert f"schemas ok 15 fakes {len(load_table())}" in out.stdout


# --------------------------------------------------------------------------- one op table
def test_ops_wrappers_and_docs_come_from_the_table():
    import inspect

    from kernels_ext import ops
    from kernels_ext.optable import NO_DEFAULT, load_table

    table = load_table()
    assert kernels_ext.OPS == tuple(op.name for op in table)
    assert len(set(kernels_ext.OPS)) == len(kernels_ext.OPS)
    for op in table:
        fn = getattr(kernels_ext, op.name)
        assert fn is getattr(ops, op.name)
        assert fn.__doc__ == ops.describe(op) and fn.__doc__.startswith(op.doc)
        params = inspect.signature(fn).parameters
        assert list(params) == [a.name for a in op.args]
        for a in op.scalars:
            want = inspect.Parameter.empty if a.default is NO_DEFAULT else a.default
            assert params[a.name].default == want, (op.name, a.name)


def test_generated_registrations_cover_every_op_once():
    import re

    from kernels_ext import checks
    from kernels_ext.codegen import generate
    from kernels_ext.optable import load_table

    table = load_table()
    text = generate(table)
    defs = re.findall(r'm\.def\("([^"]+)"\)', text)
    assert defs == [op.schema() for op in table]
    for key in ("CUDA", "CPU"):
        block = text.split(f"TORCH_LIBRARY_IMPL(solbench_kernels, {key}, m) {{")[1].split("}")[0]
        assert re.findall(r'm\.impl\("(\w+)"', block) == [op.name for op in table], key
    for op in table:
        # Every check the Python wrapper runs that applies to C++ callers is in the
        # compiled wrapper too (same statement, same message).
        flat = " ".join(text.split())
        for stmt in checks.cpp_checks(op):
            assert " ".join(stmt.split()) in flat, (op.name, stmt)
        launcher = f"sk::ops::{op.name}(" if op.impl != "custom" else f"{op.function}("
        assert launcher in text, op.name


def _string_constants(path):
    import ast

    tree = ast.parse(path.read_text())
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
               and isinstance(n.value, str)}
    defs = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return strings, defs


def test_nothing_but_the_table_declares_ops():
    """No hand-kept op list, schema, registration, wrapper or fake outside the table:
    C++ sources never register with the dispatcher (the build generates that), and the
    Python modules name no op (bench.py only uses them, by attribute, in its cases)."""
    from kernels_ext.optable import CSRC, load_table

    names = {op.name for op in load_table()}
    for path in sorted(CSRC.rglob("*")):
        if path.suffix not in (".cpp", ".cu", ".cuh", ".h"):
            continue
        text = path.read_text()
        for marker in ("TORCH_LIBRARY", "m.def(", ".impl(\"", "set_python_module"):
            assert marker not in text, (
                f"{path.relative_to(CSRC)} registers ops itself ({marker!r}): declare them in "
                "the op table (kernels_ext/README.md, 'The op table')")
    package = CSRC.parent
    for path in sorted(package.glob("*.py")):
        if path.name == "bench.py":
            continue
        strings, defs = _string_constants(path)
        named = sorted((strings | defs) & names)
        assert not named, f"{path.name} names ops {named}: they belong in the op table"
        assert not [s for s in strings if s.startswith("solbench_kernels::")], path.name


def test_table_files_live_in_family_folders():
    from kernels_ext.optable import CSRC, load_table

    for op in load_table():
        assert op.source == CSRC / op.family / "ops.yaml"
        if op.impl != "custom":
            assert list((CSRC / op.family).glob("*.cu")), f"{op.name}: no .cu in {op.family}"


def test_non_contiguous_weight_and_row_length_limit_named():
    x = _x(4, 8)
    with pytest.raises(ValueError, match=r"kernels_ext\.layernorm: weight must be contiguous"):
        kernels_ext.layernorm(x, _x(8, 2)[:, 0], _x(8))
    with pytest.raises(ValueError, match=r"kernels_ext\.rmsnorm: weight must have shape \[N\] "
                                         r"with N = 8 \(from x\), got \[7\]"):
        kernels_ext.rmsnorm(x, _x(7))
    # A stride-0 view: a row of 2^31 elements without the memory. The row kernels index
    # with int, so the table's rows template refuses it (before the layout check).
    huge = torch.zeros(1).expand(1, 2**31)
    with pytest.raises(ValueError, match=r"kernels_ext\.softmax: rows of 2147483648 elements "
                                         r"are longer than the supported 2147483647"):
        kernels_ext.softmax(huge)


def test_row_max_of_a_1d_empty_row_is_rejected():
    # One row (no leading dims) of no elements: its max does not exist.
    with pytest.raises(ValueError, match=r"kernels_ext\.row_max: cannot take the max of empty"):
        kernels_ext.row_max(torch.empty(0))
    # No rows at all is fine up to the device check.
    with pytest.raises(ValueError, match=r"kernels_ext\.row_max: x is on cpu"):
        kernels_ext.row_max(torch.empty(0, 5))


def test_scalar_arguments_are_type_checked():
    with pytest.raises(TypeError, match=r"kernels_ext\.rmsnorm: eps must be a float, got str"):
        kernels_ext.rmsnorm(_x(4, 8), _x(8), eps="1e-6")
    with pytest.raises(TypeError, match=r"kernels_ext\.gelu: approximate must be a str"):
        kernels_ext.gelu(_x(4, 8), approximate=None)


def test_registrations_compile_against_the_torch_headers(tmp_path):
    """The C++ the table generates compiles (host compiler, torch's headers), as the
    build will compile it; skipped where no compiler or CUDA headers are found."""
    from kernels_ext import compile_check

    if compile_check.find_nvcc() is None:
        pytest.skip("no nvcc / CUDA headers")
    command = compile_check.host_command(tmp_path)
    if command is None:
        pytest.skip("no host compiler")
    generated = compile_check.binding_sources(tmp_path)[-1]
    result = compile_check.compile_binding(command, generated, tmp_path)
    assert result.ok, result.message


def test_sources_that_would_share_an_object_file_are_named(tmp_path):
    a, b, c = tmp_path / "x" / "params.cu", tmp_path / "y" / "params.cu", tmp_path / "params.cpp"
    assert _build.object_clashes([a, c, b]) == [(a, b)]
    assert _build.object_clashes(_build.kernel_sources()) == []


_STALE_LIBRARY = r'''
import torch
from kernels_ext import _build
from kernels_ext.optable import load_table
lib = torch.library.Library("solbench_kernels", "DEF")
for op in load_table()[1:]:  # a library built before the first op was added
    lib.define(op.schema())
try:
    _build.ensure_loaded()
except _build.KernelBuildError as err:
    print("refused:", err)
'''


def test_a_library_from_another_table_is_refused_by_name():
    out = subprocess.run([sys.executable, "-c", _STALE_LIBRARY], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    first = kernels_ext.OPS[0]
    want = f"refused: kernels_ext: the loaded solbench_kernels library has no {first}:"
    assert want in out.stdout


def test_shim_build_names_a_missing_source_list_and_builds_a_library_with_its_register_report(tmp_path):
    """scripts/dev/shim_build.sh, behind gemm_build.sh and families_build.sh: the ctypes libraries the
    dev benches load, with the ptxas report PERF.md quotes registers and spills from."""
    from pathlib import Path
    import shutil

    script = str(Path(__file__).resolve().parents[1] / "scripts" / "dev" / "shim_build.sh")
    refused = subprocess.run(["bash", script, "probe", str(tmp_path / "none"), "sm_80"],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "no source files given" in refused.stderr
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found: the build itself is not checked")
    src = tmp_path / "twice.cu"
    src.write_text('__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n'
                   'extern "C" int sk_probe_answer() { return 7; }\n')
    built = subprocess.run(["bash", script, "probe", str(tmp_path / "lib"), "sm_80", str(src)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert built.stdout.strip() == str(tmp_path / "lib" / "libskprobe.so")
    assert (tmp_path / "lib" / "libskprobe.so").stat().st_size > 0
    report = (tmp_path / "lib" / "probe_ptxas.txt").read_text()
    assert report.startswith("== twice\n") and "Used" in report and "registers" in report
    assert "WARNING" not in built.stderr
