"""The op table machinery on a CPU: loading and its errors, the expression language, the
check plan (Python side), the generated C++ and the fakes, on small tables written here."""

from __future__ import annotations

import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kernels_ext import checks, codegen, compile_check  # noqa: E402
from kernels_ext import expr as ex  # noqa: E402
from kernels_ext.fakes import make_fake  # noqa: E402
from kernels_ext.ops import describe, make_wrapper  # noqa: E402
from kernels_ext.optable import CSRC, OpTableError, load_table  # noqa: E402


def write_table(root: Path, family: str, text: str) -> Path:
    path = root / "csrc" / family / "ops.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return root / "csrc"


# Every feature a table entry can use: required, optional, mutable and non-contiguous
# tensors; named, variadic, expression and literal dims; dtype sets and "dtype of";
# float / int / bool / str-enum / optional scalars; requirements with placeholders; two
# outputs with shapes from the bound dims.
FULL = """
fused_linear:
  doc: A synthetic op that uses every feature of the table.
  impl: custom
  args:
    x: {type: Tensor, shape: "[*B, K]", dtypes: half}
    w: {type: Tensor, shape: "[N, K]", dtype: x}
    scale: {type: Tensor, shape: "[2, N // 2]", dtypes: [float32]}
    cache: {type: Tensor, shape: "[...]", dtypes: float32, mutable: true, contiguous: false}
    bias: {type: "Tensor?", shape: "[N]", dtype: x}
    alpha: {type: float, default: 1}
    groups: {type: int, default: 1}
    causal: {type: bool, default: false}
    mode: {type: str, choices: [fast, exact], default: exact}
    limit: {type: "float?"}
  returns:
    y: {shape: "[*B, N]", dtype: x}
    lse: {shape: "[*B]", dtype: float32}
  requires:
    - {check: "K % 8 == 0", error: "K must be a multiple of 8, got {K}"}
    - {check: "N % groups == 0 and groups > 0", error: "groups ({groups}) must divide N = {N}"}
"""


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    root = tmp_path_factory.mktemp("full")
    (op,) = load_table(write_table(root, "fused", FULL))
    return op


def test_schema_of_every_feature_parses(full):
    schema = full.schema()
    assert schema == (
        "fused_linear(Tensor x, Tensor w, Tensor scale, Tensor(a!) cache, Tensor? bias=None, "
        "float alpha=1.0, int groups=1, bool causal=False, str mode='exact', "
        "float? limit=None) -> (Tensor, Tensor)")
    parsed = torch._C.parse_schema(schema)
    assert [a.name for a in parsed.arguments] == [a.name for a in full.args]
    assert len(parsed.returns) == 2


def _full_args(**over):
    half = torch.bfloat16
    args = dict(x=torch.randn(3, 5, 16).to(half), w=torch.randn(4, 16).to(half),
                scale=torch.randn(2, 2), cache=torch.zeros(4, 4).t(), bias=None, alpha=1.0,
                groups=1, causal=False, mode="exact", limit=None)
    args.update(over)
    return args


def _validate(op, **over):
    return checks.python_validator(op)(tuple(_full_args(**over).values()))


@pytest.mark.parametrize("over,error,pattern", [
    ({"x": [1.0]}, TypeError, r"x must be a torch\.Tensor, got list"),
    ({"bias": 3}, TypeError, r"bias must be a torch\.Tensor or None, got int"),
    ({"alpha": "1"}, TypeError, r"alpha must be a float, got str"),
    ({"groups": 1.5}, TypeError, r"groups must be an int, got float"),
    ({"groups": True}, TypeError, r"groups must be an int, got bool"),
    ({"causal": 1}, TypeError, r"causal must be a bool, got int"),
    ({"limit": "x"}, TypeError, r"limit must be a float or None, got str"),
    ({"mode": "slow"}, ValueError, r"mode must be one of 'fast', 'exact'; got 'slow'"),
    ({"x": torch.randn(3, 16)}, TypeError, r"x has dtype float32; supported: bfloat16, float16"),
    ({"w": torch.randn(4, 16)}, TypeError, r"w has dtype float32 but x has bfloat16"),
    ({"bias": torch.randn(4)}, TypeError, r"bias has dtype float32 but x has bfloat16"),
    ({"x": torch.zeros((), dtype=torch.bfloat16)}, ValueError,
     r"x must have shape \[\*B, K\] \(at least 1 dimension\), got \[\]"),
    ({"w": torch.zeros(4, dtype=torch.bfloat16)}, ValueError,
     r"w must have shape \[N, K\] \(2 dimensions\), got \[4\]"),
    ({"w": torch.zeros(4, 8, dtype=torch.bfloat16)}, ValueError,
     r"w must have shape \[N, K\] with K = 16 \(from x\), got \[4, 8\]"),
    ({"scale": torch.zeros(2, 3)}, ValueError,
     r"scale must have shape \[2, N // 2\] with N // 2 = 2, got \[2, 3\]"),
    ({"scale": torch.zeros(3, 2)}, ValueError,
     r"scale must have shape \[2, N // 2\], got \[3, 2\]"),
    ({"bias": torch.zeros(5, dtype=torch.bfloat16)}, ValueError,
     r"bias must have shape \[N\] with N = 4 \(from w\), got \[5\]"),
    ({"x": torch.zeros(3, 12, dtype=torch.bfloat16), "w": torch.zeros(4, 12, dtype=torch.bfloat16)},
     ValueError, r"K must be a multiple of 8, got 12"),
    ({"groups": 3}, ValueError, r"groups \(3\) must divide N = 4"),
    ({"x": torch.randn(3, 5, 16).to(torch.bfloat16).transpose(0, 1)}, ValueError,
     r"x must be contiguous"),
    ({}, ValueError, r"x is on cpu; a CUDA tensor is required"),
])
def test_python_checks_of_every_feature(full, over, error, pattern):
    with pytest.raises(error, match=r"^kernels_ext\.fused_linear: " + pattern):
        _validate(full, **over)


def test_dims_bound_and_optional_tensor_checked_when_present(full):
    # Skip the device checks (the last steps) to see what a valid call binds.
    steps = [s for s in checks.plan(full) if not (isinstance(s, checks.Check)
                                                  and s.kind == "device")]
    assert [s.kind for s in steps if isinstance(s, checks.Check)][-1] == "layout"
    ctx = checks.Ctx(_full_args(bias=torch.zeros(4, dtype=torch.bfloat16)),
                     tuple(s.name for s in full.scalars))
    for s in steps:
        if isinstance(s, checks.Bind):
            ctx.values[s.name] = s.value(ctx)
        elif s.when is None or ctx.args[s.when] is not None:
            assert s.ok(ctx), s.text(ctx)
    assert {k: ctx.values[k] for k in ("B", "K", "N")} == {"B": (3, 5), "K": 16, "N": 4}
    # The cache is declared non-contiguous-allowed: no layout check names it.
    layout = [s.text(ctx) for s in steps if isinstance(s, checks.Check) and s.kind == "layout"]
    assert layout == ["x must be contiguous (call .contiguous() first)",
                      "w must be contiguous (call .contiguous() first)",
                      "scale must be contiguous (call .contiguous() first)",
                      "bias must be contiguous (call .contiguous() first)"]


def test_fake_outputs_follow_the_declared_rules(full):
    fake = make_fake(full)
    a = _full_args()
    y, lse = fake(a["x"], a["w"], a["scale"], a["cache"])  # defaults left out
    assert y.shape == (3, 5, 4) and y.dtype == torch.bfloat16
    assert lse.shape == (3, 5) and lse.dtype == torch.float32


def test_wrapper_signature_and_doc(full):
    import inspect

    fn = make_wrapper(full)
    sig = inspect.signature(fn)
    assert str(sig) == ("(x, w, scale, cache, bias=None, alpha=1.0, groups=1, causal=False, "
                        "mode='exact', limit=None)")
    assert fn.__doc__ == describe(full)
    assert "bias: Tensor? [N], dtype of x, contiguous" in fn.__doc__
    assert "cache: Tensor [...], float32, written in place" in fn.__doc__
    assert "mode: str in {'fast', 'exact'}, default 'exact'" in fn.__doc__
    a = _full_args()
    with pytest.raises(ValueError, match=r"kernels_ext\.fused_linear: x is on cpu"):
        fn(a["x"], a["w"], a["scale"], a["cache"])


def test_generated_cpp_of_every_feature(full):
    text = codegen.generate([full])
    assert ("std::tuple<at::Tensor, at::Tensor> fused_linear(const at::Tensor& x, "
            "const at::Tensor& w, const at::Tensor& scale, const at::Tensor& cache, "
            "const std::optional<at::Tensor>& bias, double alpha, int64_t groups, bool causal, "
            "c10::string_view mode, std::optional<double> limit);") in text
    assert "return sk::impl::fused_linear(x, w, scale, cache, bias, alpha, groups, causal, " \
           "mode, limit);" in text
    assert "if (bias.has_value()) {" in text
    assert '"K must be a multiple of 8, got ", dim_K' in text
    assert "(*bias).size(0) == dim_N" in text
    assert "cache.is_contiguous()" not in text
    assert 'm.def("' + full.schema() + '");' in text


def _compiles(tmp_path: Path, text: str, name: str) -> None:
    if compile_check.find_nvcc() is None:
        pytest.skip("no nvcc / CUDA headers")
    command = compile_check.host_command(tmp_path)
    if command is None:
        pytest.skip("no host compiler")
    src = tmp_path / name
    src.write_text(text)
    result = compile_check.compile_binding(command, src, tmp_path)
    assert result.ok, result.message


def test_generated_cpp_of_every_feature_compiles(full, tmp_path):
    _compiles(tmp_path, codegen.generate([full]), "full_ops.cpp")


ROWS_AND_MAP = """
scaled_norm:
  doc: A rows op with an optional tensor, an int, a bool, a str enum and two outputs.
  impl: rows
  args:
    x: {type: Tensor, shape: "[..., N]", dtypes: float}
    gain: {type: "Tensor?", shape: "[N]", dtype: x}
    passes: {type: int, default: 2}
    centre: {type: bool, default: true}
    kind: {type: str, choices: [l1, l2], default: l2}
  returns:
    y: {like: x}
    stats: {shape: "[2]", dtype: float32}

blend:
  doc: A map op with three inputs and a float.
  impl: map
  args:
    a: {type: Tensor, shape: "[*S]", dtypes: [float32, bfloat16]}
    b: {type: Tensor, shape: "[*S]", dtype: a}
    c: {type: Tensor, shape: "[*S]", dtype: a}
    t: {type: float, default: 0.5}
  returns:
    out: {like: a}
"""


def test_templates_launchers_and_compiled_output(tmp_path):
    ops = load_table(write_table(tmp_path, "synth", ROWS_AND_MAP))
    norm, blend = ops
    assert codegen.launcher_declaration(norm) == (
        "cudaError_t scaled_norm(const sk::RowsIO<2, 2>& io, int64_t passes, bool centre, "
        "int kind, cudaStream_t stream);")
    assert codegen.launcher_declaration(blend) == (
        "cudaError_t blend(const sk::MapIO<3>& io, float t, cudaStream_t stream);")
    text = codegen.generate(ops)
    assert "gain.has_value() ? &*gain : nullptr" in text
    assert 'sk::bind::choice_index(kind, {"l1", "l2"})' in text
    assert "static_cast<float>(t)" in text
    _compiles(tmp_path, text, "synth_ops.cpp")


def test_rows_template_refuses_rows_longer_than_int(tmp_path):
    ops = load_table(write_table(tmp_path, "synth", ROWS_AND_MAP))
    huge = torch.zeros(1).expand(3, 2**31)
    with pytest.raises(ValueError, match=r"scaled_norm: rows of 2147483648 elements are longer"):
        checks.python_validator(ops[0])((huge, None, 2, True, "l2"))


# --------------------------------------------------------------------------- loader errors
_MAP_OK = """
  doc: d
  impl: map
  args:
    x: {type: Tensor, shape: "[*S]", dtypes: float}
  returns:
    y: {like: x}
"""


@pytest.mark.parametrize("entry,pattern", [
    (_MAP_OK + "  colour: red\n", r"op\.entry\.colour: unknown field"),
    (_MAP_OK.replace("impl: map", "impl: fast"), r"op\.impl: must be one of map, rows, custom"),
    (_MAP_OK.replace("dtypes: float", "dtypes: [float33]"), r"op\.args\.x\.dtypes: unknown dtype "
                                                             r"'float33'"),
    (_MAP_OK.replace('"[*S]"', "[N]"), r"op\.args\.x\.shape: expected a quoted shape"),
    (_MAP_OK.replace('"[*S]"', '"[*A, ..., N]"'),
     r"op\.args\.x\.shape: '\[\*A, \.\.\., N\]' has more than one variadic entry"),
    (_MAP_OK.replace('"[*S]"', '"[N ** 2]"'), r"op\.args\.x\.shape: .*is not allowed"),
    (_MAP_OK.replace("doc: d", "doc: ''"), r"op\.doc: must be a non-empty string"),
    (_MAP_OK.replace("x: {type", "class: {type").replace("like: x", "like: class"),
     r"op\.args\.class: not a usable argument name"),
    (_MAP_OK.replace("type: Tensor", 'type: "Tensor[]"'), r"op\.args\.x\.type: must be Tensor"),
    (_MAP_OK.replace("like: x", "like: z"), r"op\.returns\.y\.like: 'z' is not a required tensor"),
    (_MAP_OK.replace("dtypes: float", "dtypes: [float64]"),
     r"op\.args\.x: impl map passes only float32, bfloat16, float16"),
    (_MAP_OK.replace('"[*S]"', '"[N]"'),
     r"op\.args\.x\.shape: impl map: the first tensor's shape must be one "
                                         r"variadic dim"),
    (_MAP_OK + "  requires:\n    - {check: \"M > 0\", error: e}\n",
     r"op\.requires\[0\]\.check: 'M > 0': 'M' is not a dim bound by a required tensor"),
    (_MAP_OK + "  requires:\n    - {check: \"S > 0\", error: e}\n",
     r"op\.requires\[0\]\.check: 'S > 0': 'S' is a variadic dim: use prod\(S\)"),
    (_MAP_OK.replace("impl: map", "impl: custom").replace("like: x", "shape: \"[M]\", dtype: x"),
     r"op\.returns\.y\.shape: 'M': 'M' is not a dim bound"),
])
def test_malformed_entries_are_named(tmp_path, entry, pattern):
    csrc = write_table(tmp_path, "bad", "op:" + entry)
    with pytest.raises(OpTableError, match=r"bad/ops\.yaml: " + pattern):
        load_table(csrc)


@pytest.mark.parametrize("args,pattern", [
    ("""    x: {type: Tensor, shape: "[*S]", dtypes: float}
    mode: {type: str, default: a}""", r"op\.args\.mode: a str argument needs 'choices'"),
    ("""    x: {type: Tensor, shape: "[*S]", dtypes: float}
    eps: {type: float, default: tiny}""", r"op\.args\.eps\.default: 'tiny' is not a valid float"),
    ("""    x: {type: Tensor, shape: "[*S]", dtypes: float}
    eps: {type: float, default: 1.0}
    y: {type: Tensor, shape: "[*S]", dtype: x}""", r"op\.args\.y: an argument without a default "
                                                   r"follows one with a default"),
    ("""    x: {type: Tensor, shape: "[*S]", dtype: y}""", r"op\.args\.x\.dtype: 'y' is not an "
                                                       r"earlier required tensor"),
    ("""    x: {type: Tensor, shape: "[*S]", dtypes: float}
    b: {type: "Tensor?", shape: "[M]", dtype: x}""", r"an optional tensor can only use dims that "
                                                     r"a required tensor binds"),
    ("""    b: {type: "Tensor?", shape: "[M]", dtypes: float}""", r"needs at least one required "
                                                              r"Tensor"),
])
def test_malformed_arguments_are_named(tmp_path, args, pattern):
    text = f"op:\n  doc: d\n  impl: custom\n  args:\n{args}\n  returns: {{}}\n"
    with pytest.raises(OpTableError, match=pattern):
        load_table(write_table(tmp_path, "bad", text))


def test_an_op_declared_twice_is_an_error(tmp_path):
    write_table(tmp_path, "one", "op:" + _MAP_OK)
    csrc = write_table(tmp_path, "two", "op:" + _MAP_OK)
    with pytest.raises(OpTableError, match=r"two/ops\.yaml: op 'op' is already declared in "
                                           r".*one/ops\.yaml"):
        load_table(csrc)


# --------------------------------------------------------------------------- expressions
def test_expressions_evaluate_and_render():
    e = ex.parse("N > 0 or prod(B) == 0")
    assert ex.evaluate(e, {"N": 0, "B": (3, 0)}, {}) is True
    assert ex.evaluate(e, {"N": 0, "B": (3,)}, {}) is False
    names = ex.CppNames(value=lambda n: "dim_" + n, variadic=lambda n: "dims_" + n,
                        tensor=lambda n: n, optional=lambda n: n)
    assert ex.to_cpp(e, names) == ("((dim_N > int64_t{0}) || "
                                   "(c10::multiply_integers(dims_B) == int64_t{0}))")
    f = ex.parse("not defined(bias) or numel(bias) * itemsize(x) % 16 == 0")
    assert f.tensors == {"bias", "x"}
    assert ex.evaluate(f, {}, {"bias": None, "x": torch.zeros(2)}) is True
    assert ex.evaluate(f, {}, {"bias": torch.zeros(3), "x": torch.zeros(2)}) is False
    assert ex.to_cpp(ex.parse("D // 2 - 1"), names) == "((dim_D / int64_t{2}) - int64_t{1})"


@pytest.mark.parametrize("text", ["N ** 2", "x.size(0)", "a < b < c", "'s'", "f(N)",
                                  "numel(x, 1)", "N if M else K", "[N]"])
def test_expressions_outside_the_grammar_are_rejected(text):
    with pytest.raises(ex.ExprError, match="not allowed|cannot parse"):
        ex.parse(text)


# --------------------------------------------------------------------------- three files
_NEW_CU = r"""
// A new elementwise op: the functor and one registration line, nothing else.
#include "../common/map.cuh"

namespace sk {
namespace {
struct ProbeTanh {
  template <bool kLow>
  __device__ __forceinline__ static float apply(float x) { return tanhf(x); }
};
}  // namespace
}  // namespace sk

SK_MAP_OP(probe_tanh, ProbeTanh, 1)
"""

_NEW_ENTRY = """
probe_tanh:
  doc: tanh(x), elementwise.
  impl: map
  args:
    x: {type: Tensor, shape: "[*S]", dtypes: float}
  returns:
    y: {like: x}
"""


def test_a_new_elementwise_op_needs_only_its_cu_and_its_table_entry(tmp_path):
    """Everything the library needs for a new map op comes from the .cu (functor +
    SK_MAP_OP) and the table entry (the third file is its spec, for the harness): the
    schema, the checked C++ wrapper and registrations, the launcher declaration that the
    .cu's SK_MAP_OP defines (same mangled symbol: the library links), the Python wrapper
    with its checks and doc, and the fake."""
    csrc = write_table(tmp_path, "probe", _NEW_ENTRY)
    (csrc / "common").symlink_to(CSRC / "common", target_is_directory=True)
    cu = csrc / "probe" / "probe.cu"
    cu.write_text(_NEW_CU)
    (op,) = load_table(csrc)
    text = codegen.generate([op])
    assert 'm.def("probe_tanh(Tensor x) -> Tensor");' in text
    assert text.count('m.impl("probe_tanh", &sk::generated::probe_tanh);') == 2
    declaration = codegen.launcher_declaration(op)
    assert declaration in text
    assert "probe_tanh" in make_wrapper(op).__doc__ or make_wrapper(op).__doc__.startswith("tanh")
    with pytest.raises(ValueError, match=r"kernels_ext\.probe_tanh: x is on cpu"):
        make_wrapper(op)(torch.zeros(3))
    assert make_fake(op)(torch.zeros(2, 3)).shape == (2, 3)

    nvcc = compile_check.find_nvcc()
    cxx = shutil.which("c++") or shutil.which("g++")
    if nvcc is None or cxx is None or shutil.which("nm") is None:
        pytest.skip("no nvcc / host compiler / nm to check the link")
    kernel_obj = tmp_path / "probe.o"
    built = subprocess.run([nvcc, *compile_check.NVCC_FLAGS, "-gencode=arch=compute_80,code=sm_80",
                            "-c", str(cu), "-o", str(kernel_obj)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    caller = tmp_path / "caller.cpp"
    cuda_include = compile_check.cuda_include_dir()
    caller.write_text('#include <cuda_runtime_api.h>\n#include "common/op_io.h"\n'
                      f"namespace sk::ops {{ {declaration} }}\n"
                      "void* probe_address() {\n"
                      "  return reinterpret_cast<void*>(&sk::ops::probe_tanh);\n}\n")
    caller_obj = tmp_path / "caller.o"
    built = subprocess.run([cxx, "-std=c++17", f"-I{CSRC}", f"-I{cuda_include}", "-c", str(caller),
                            "-o", str(caller_obj)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    assert compile_check.missing_symbols([kernel_obj, caller_obj]) == []
    wanted = subprocess.run(["nm", "-u", str(caller_obj)], capture_output=True, text=True).stdout
    assert re.search(r"_ZN2sk3ops10probe_tanh", wanted)
    # And without the SK_MAP_OP line the same check names the missing launcher.
    assert compile_check.missing_symbols([caller_obj])[0].startswith(
        "sk::ops::probe_tanh(sk::MapIO<1> const&, CUstream_st*)")
