"""kernels_ext on a machine without a GPU: cheap import, input errors before any build."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import kernels_ext  # noqa: E402
from kernels_ext import _build  # noqa: E402


@pytest.fixture(autouse=True)
def no_build(monkeypatch):
    """Any attempt to build or load the library fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("kernels_ext tried to build or load the CUDA library")

    monkeypatch.setattr(_build, "build", refuse)
    monkeypatch.setattr(_build, "_compile", refuse)
    monkeypatch.setattr(torch.ops, "load_library", refuse)


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
from kernels_ext._build import CSRC
text = (CSRC / "bindings" / "registry.cpp").read_text()
schemas = re.findall(r'm\.def\("([^"]+)"\)', text)
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
import kernels_ext._fake  # the real fake registrations
ops = torch.ops.solbench_kernels
x = torch.randn(4, 16); w = torch.randn(16); b = torch.randn(16)
cases = {
    "add": (x, x), "mul": (x, x), "relu": (x,), "gelu": (x, "tanh"), "silu": (x,),
    "sigmoid": (x,), "swiglu": (x, x), "row_sum": (x,), "row_max": (x,), "sum_all": (x,),
    "max_all": (x,), "softmax": (x,), "rmsnorm": (x, w, 1e-6), "add_rmsnorm": (x, x, w, 1e-6),
    "layernorm": (x, w, b, 1e-5),
}
assert sorted(cases) == sorted(s.split("(")[0] for s in schemas), schemas
for name, args in cases.items():
    torch.library.opcheck(getattr(ops, name).default, args,
                          test_utils=("test_schema", "test_faketensor"))
print("schemas ok", len(cases))
'''


def test_schemas_and_fake_impls_agree_with_reference_semantics():
    """The C++ schemas parse, and each fake impl matches the metadata of a CPU
    stand-in (run in a subprocess: it defines the op namespace)."""
    out = subprocess.run([sys.executable, "-c", _SCHEMA_CHECK], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "schemas ok 15" in out.stdout
