"""kernels_ext on a CUDA GPU: every op against a float64 PyTorch reference.

Run on the GPU machine:
    python -m pytest -m gpu tests/gpu -x -q
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import kernels_ext  # noqa: E402

pytestmark = pytest.mark.gpu

DEV = "cuda"
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# About 2-4 output ulps: every kernel computes in fp32 and rounds once.
RTOL = {torch.float32: 2e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}
ROW_LENGTHS = [1, 33, 1000, 4097, 8192, 262144]


@pytest.fixture(scope="module", autouse=True)
def built_library():
    return kernels_ext.build(progress=print)


def _id(v):
    return str(v).replace("torch.", "")


def rand(shape, dtype, scale=1.0, offset=0.0, gen_seed=0):
    g = torch.Generator(device=DEV).manual_seed(gen_seed)
    return (torch.randn(shape, device=DEV, generator=g, dtype=torch.float32) * scale
            + offset).to(dtype)


def poison(shape, dtype):
    """Leave NaN in the caching allocator's next block of this size, so an output
    element the kernel forgets to write shows up as NaN."""
    t = torch.full(shape, float("nan"), device=DEV, dtype=dtype)
    del t


def assert_close(out, ref, rtol, atol=0.0, scale=None, what=""):
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    o = out.double()
    assert not torch.isnan(o).any(), f"{what}: NaN in output (unwritten or bad math)"
    bound = atol + rtol * (ref.abs() if scale is None else scale)
    err = (o - ref).abs()
    bad = err > bound
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())}/{bad.numel()} elements out of tolerance; first at flat "
            f"index {i}: got {o.flatten()[i].item()!r}, want {ref.flatten()[i].item()!r} "
            f"(max abs err {err.max().item():.3g})")


def row_shapes():
    shapes = []
    for n in ROW_LENGTHS:
        shapes.append((1, n))                                 # a single row
        shapes.append((3 if n > 8192 else 64, n))             # several rows
    shapes += [(10000, 1), (4096, 3), (2048, 33), (2, 3, 1000), (5, 4, 7)]  # tiny rows, 3-D
    return shapes


ROW_SHAPES = row_shapes()


# --------------------------------------------------------------------------- pointwise
NUMELS = [1, 7, 33, 1000, 4097, 1_000_003, (1 << 22) + 3]

UNARY = {
    "relu": (kernels_ext.relu, lambda x: torch.relu(x)),
    "gelu": (kernels_ext.gelu, lambda x: F.gelu(x)),
    "gelu_tanh": (lambda x: kernels_ext.gelu(x, approximate="tanh"),
                  lambda x: F.gelu(x, approximate="tanh")),
    "silu": (kernels_ext.silu, F.silu),
    "sigmoid": (kernels_ext.sigmoid, torch.sigmoid),
}


@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "offset1"])
@pytest.mark.parametrize("n", NUMELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, dtype, n, misaligned):
    fn, ref_fn = UNARY[name]
    base = rand((n + 1,), dtype, scale=4.0)
    x = base[1:] if misaligned else base[:n]  # offset 1: not 16-byte aligned, scalar path
    poison((n,), dtype)
    out = fn(x)
    ref = ref_fn(x.double())
    assert_close(out, ref, RTOL[dtype], atol=1e-6, what=f"{name} {dtype} n={n}")


BINARY = {
    "add": (kernels_ext.add, lambda a, b: a + b, lambda a, b: a.abs() + b.abs()),
    "mul": (kernels_ext.mul, lambda a, b: a * b, None),
    "swiglu": (kernels_ext.swiglu, lambda a, b: F.silu(a) * b, None),
}


@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "offset1"])
@pytest.mark.parametrize("n", NUMELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, dtype, n, misaligned):
    fn, ref_fn, scale_fn = BINARY[name]
    a0 = rand((n + 1,), dtype, scale=3.0, gen_seed=1)
    b0 = rand((n + 1,), dtype, scale=3.0, gen_seed=2)
    a, b = (a0[1:], b0[1:]) if misaligned else (a0[:n], b0[:n])
    poison((n,), dtype)
    out = fn(a, b)
    ad, bd = a.double(), b.double()
    ref = ref_fn(ad, bd)
    scale = scale_fn(ad, bd) if scale_fn else None
    assert_close(out, ref, RTOL[dtype], atol=1e-6, scale=scale, what=f"{name} {dtype} n={n}")


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_pointwise_keeps_shape_and_handles_empty(dtype):
    x = rand((3, 5, 7), dtype)
    assert kernels_ext.relu(x).shape == (3, 5, 7)
    e = torch.empty(0, 4, device=DEV, dtype=dtype)
    assert kernels_ext.add(e, e).shape == (0, 4)
    assert kernels_ext.gelu(e).shape == (0, 4)


# --------------------------------------------------------------------------- reductions
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_row_sum(dtype, shape):
    x = rand(shape, dtype, scale=2.0)
    poison(shape[:-1], dtype)
    out = kernels_ext.row_sum(x)
    xd = x.double()
    ref = xd.sum(-1)
    # Output rounding is relative to the result; fp32 accumulation error grows with the
    # sum of magnitudes (cancellation), hence the second term.
    scale = ref.abs() + 1e-3 * xd.abs().sum(-1)
    assert_close(out, ref, RTOL[dtype], atol=1e-6, scale=scale, what=f"row_sum {shape}")


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_row_max(dtype, shape):
    x = rand(shape, dtype, scale=2.0, offset=-50.0)  # all negative: a 0 init would show
    poison(shape[:-1], dtype)
    out = kernels_ext.row_max(x)
    assert_close(out, x.double().amax(-1), 0.0, what=f"row_max {shape}")  # exact


def _big_values(dtype, n):
    """Values whose sum a 16-bit accumulator cannot hold or resolve; fp16 sums must
    still fit in fp16 (65504)."""
    if dtype == torch.float16:
        return rand((n,), dtype, scale=0.5, offset=7.0)
    return rand((n,), dtype, scale=5.0, offset=100.0)


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_row_sum_large_values_need_fp32_accumulation(dtype):
    n = 8192 if dtype == torch.float16 else 262144
    x = _big_values(dtype, 4 * n).view(4, n)
    out = kernels_ext.row_sum(x)
    assert_close(out, x.double().sum(-1), RTOL[dtype], what="row_sum large")


def assert_sum_close(out, xd, dtype, what):
    """A sum in dtype vs the float64 sum. Where that sum rounds to +-inf in dtype (an
    fp16 sum beyond 65504), the infinity is the correctly rounded answer (torch.sum
    gives it too), so the kernel must return exactly it."""
    ref = xd.sum()
    rounded = ref.to(dtype).double()
    if not torch.isfinite(rounded):
        assert out.double().item() == rounded.item(), (
            f"{what}: got {out.item()!r}, want {rounded.item()!r} (float64 sum {ref.item()!r} "
            f"rounded to {dtype})")
        return
    assert_close(out, ref, RTOL[dtype], scale=xd.abs().sum() + 1e-30, what=what)


@pytest.mark.parametrize("n", [1, 7, 1000, 4097, 1_000_003, (1 << 22) + 5])
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_sum_all_and_max_all(dtype, n):
    x = rand((n,), dtype, scale=2.0, offset=-30.0)  # fp16: sums from n=4097 overflow
    poison((), dtype)
    s = kernels_ext.sum_all(x)
    xd = x.double()
    assert s.shape == () and s.dtype == dtype
    assert_sum_close(s, xd, dtype, what=f"sum_all n={n}")
    poison((), dtype)
    m = kernels_ext.max_all(x)
    assert_close(m, xd.max(), 0.0, what=f"max_all n={n}")
    xm = x[1:]  # misaligned start: scalar path
    assert_sum_close(kernels_ext.sum_all(xm), xm.double(), dtype, what="sum_all offset1")
    if xm.numel():
        assert_close(kernels_ext.max_all(xm), xm.double().max(), 0.0, what="max_all offset1")


@pytest.mark.parametrize("n", [2 * 8192 + 37, 2 * 16000 + 37])
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_sum_all_cancelling_values_need_fp32_accumulation(dtype, n):
    """+1000 (first half) then -1000, then 37 ones: every partial sum is an integer of
    magnitude <= 1000 * n / 2 < 2^24 (exact in fp32 in any order), far beyond fp16's
    65504 and bf16's resolution, so a 16-bit running sum would overflow or round; the
    exact total fits every dtype."""
    k = (n - 37) // 2
    x = torch.cat([torch.full((k,), 1000.0), torch.full((k,), -1000.0),
                   torch.ones(37)]).to(device=DEV, dtype=dtype)
    assert k * 1000 < 2 ** 24
    assert kernels_ext.sum_all(x).double().item() == 37.0
    xm = x[1:]  # misaligned start: scalar path; the total -963 rounds once to dtype
    want = xm.double().sum().to(dtype).double().item()
    assert kernels_ext.sum_all(xm).double().item() == want


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_sum_all_large_values(dtype):
    n = 8192 if dtype == torch.float16 else 1 << 20
    x = _big_values(dtype, n)
    assert_close(kernels_ext.sum_all(x), x.double().sum(), RTOL[dtype], what="sum_all large")


def test_max_propagates_nan():
    x = torch.randn(4, 1000, device=DEV)
    x[2, 500] = float("nan")
    r = kernels_ext.row_max(x)
    assert torch.isnan(r[2]) and not torch.isnan(r[[0, 1, 3]]).any()
    assert torch.isnan(kernels_ext.max_all(x))


# --------------------------------------------------------------------------- softmax
SOFTMAX_ATOL = {torch.float32: 1e-9, torch.bfloat16: 1e-9, torch.float16: 1e-7}  # fp16 subnormals


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_softmax(dtype, shape):
    x = rand(shape, dtype, scale=3.0)
    poison(shape, dtype)
    out = kernels_ext.softmax(x)
    ref = torch.softmax(x.double(), dim=-1)
    assert_close(out, ref, RTOL[dtype], atol=SOFTMAX_ATOL[dtype], what=f"softmax {shape}")


@pytest.mark.parametrize("n", [33, 8192, 262144])
def test_softmax_large_logits_and_masks(n):
    x = rand((4, n), torch.float32, scale=30.0, offset=1000.0)  # exp would overflow unshifted
    x[1, ::3] = float("-inf")                                      # masked positions
    out = kernels_ext.softmax(x)
    ref = torch.softmax(x.double(), dim=-1)
    assert_close(out, ref, RTOL[torch.float32], atol=1e-12, what="softmax large logits")
    assert (out[1, ::3] == 0).all()


def test_softmax_misaligned_rows():
    base = rand((4 * 1000 + 1,), torch.bfloat16)
    x = base[1:].view(4, 1000)  # aligned row length, misaligned pointer -> scalar path
    assert_close(kernels_ext.softmax(x), torch.softmax(x.double(), -1), RTOL[torch.bfloat16],
                 atol=1e-9, what="softmax offset1")


# --------------------------------------------------------------------------- norms
def rms_ref(h, w, eps):
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_rmsnorm(dtype, shape):
    x = rand(shape, dtype, scale=2.0, offset=0.5)
    w = rand(shape[-1:], dtype, gen_seed=3)
    poison(shape, dtype)
    out = kernels_ext.rmsnorm(x, w, eps=1e-6)
    assert_close(out, rms_ref(x.double(), w.double(), 1e-6), RTOL[dtype], atol=1e-6,
                 what=f"rmsnorm {shape}")


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_add_rmsnorm(dtype, shape):
    x = rand(shape, dtype, scale=2.0, gen_seed=4)
    r = rand(shape, dtype, scale=2.0, gen_seed=5)
    w = rand(shape[-1:], dtype, gen_seed=6)
    poison(shape, dtype)
    poison(shape, dtype)
    y, h = kernels_ext.add_rmsnorm(x, r, w, eps=1e-6)
    hd = x.double() + r.double()
    assert_close(h, hd, RTOL[dtype], atol=1e-6, scale=x.double().abs() + r.double().abs(),
                 what=f"add_rmsnorm h {shape}")
    # y normalises h as stored (rounded), like the unfused pair: one more half-ulp.
    assert_close(y, rms_ref(hd, w.double(), 1e-6), 1.5 * RTOL[dtype], atol=1e-6,
                 what=f"add_rmsnorm y {shape}")


@pytest.mark.parametrize("shape", ROW_SHAPES, ids=_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_layernorm(dtype, shape):
    x = rand(shape, dtype, scale=2.0, offset=3.0)  # offset: mean far from 0
    w = rand(shape[-1:], dtype, gen_seed=7)
    b = rand(shape[-1:], dtype, gen_seed=8)
    poison(shape, dtype)
    out = kernels_ext.layernorm(x, w, b, eps=1e-5)
    xd = x.double()
    xhat = (xd - xd.mean(-1, keepdim=True)) * torch.rsqrt(xd.var(-1, unbiased=False,
                                                                  keepdim=True) + 1e-5)
    ref = xhat * w.double() + b.double()
    scale = (xhat * w.double()).abs() + b.double().abs()
    # Rows of length 1 normalise to exactly 0 (x - mean == 0): output is the bias.
    assert_close(out, ref, RTOL[dtype], atol=1e-5, scale=scale, what=f"layernorm {shape}")


# --------------------------------------------------------------------------- ops API
def _opcheck_cases():
    x = torch.randn(8, 96, device=DEV)
    xb = x.bfloat16()
    w = torch.randn(96, device=DEV)
    b = torch.randn(96, device=DEV)
    ops = torch.ops.solbench_kernels
    return [
        ("add", lambda: (ops.add.default, (x, x * 2))),
        ("mul", lambda: (ops.mul.default, (xb, xb))),
        ("relu", lambda: (ops.relu.default, (x,))),
        ("gelu", lambda: (ops.gelu.default, (x, "tanh"))),
        ("silu", lambda: (ops.silu.default, (xb,))),
        ("sigmoid", lambda: (ops.sigmoid.default, (x,))),
        ("swiglu", lambda: (ops.swiglu.default, (x, x))),
        ("row_sum", lambda: (ops.row_sum.default, (x,))),
        ("row_max", lambda: (ops.row_max.default, (xb,))),
        ("sum_all", lambda: (ops.sum_all.default, (x,))),
        ("max_all", lambda: (ops.max_all.default, (x,))),
        ("softmax", lambda: (ops.softmax.default, (xb,))),
        ("rmsnorm", lambda: (ops.rmsnorm.default, (x, w, 1e-6))),
        ("add_rmsnorm", lambda: (ops.add_rmsnorm.default, (x, x, w, 1e-6))),
        ("layernorm", lambda: (ops.layernorm.default, (x, w, b, 1e-5))),
    ]


# This file's families; the other families' GPU tests opcheck their own ops.
OPCHECKED = ("add", "mul", "relu", "gelu", "silu", "sigmoid", "swiglu", "row_sum", "row_max",
             "sum_all", "max_all", "softmax", "rmsnorm", "add_rmsnorm", "layernorm")


@pytest.mark.parametrize("name", OPCHECKED)
def test_opcheck(name):
    kernels_ext.ensure_loaded()
    cases = dict(_opcheck_cases())
    op, args = cases[name]()
    torch.library.opcheck(op, args)


def test_the_library_registers_the_whole_table():
    kernels_ext.ensure_loaded()
    missing = [n for n in kernels_ext.OPS if not hasattr(torch.ops.solbench_kernels, n)]
    assert not missing, f"ops in the table but not in the library: {missing}"
    assert set(OPCHECKED) <= set(kernels_ext.OPS)


def test_torch_compile_uses_the_op():
    x = torch.randn(64, 4096, device=DEV, dtype=torch.bfloat16)
    f = torch.compile(lambda t: kernels_ext.softmax(t) * 2, fullgraph=False)
    assert_close(f(x), torch.softmax(x.double(), -1) * 2, 2 * RTOL[torch.bfloat16], atol=1e-9,
                 what="compiled softmax")


def test_device_errors_name_the_op():
    x = torch.randn(4, 8, device=DEV)
    with pytest.raises(ValueError, match=r"kernels_ext\.add: b is on cpu"):
        kernels_ext.add(x, x.cpu())
    # The C++ op checks too, for callers that skip the Python wrapper.
    with pytest.raises((ValueError, RuntimeError), match="solbench_kernels::softmax"):
        torch.ops.solbench_kernels.softmax(x.t())


def _x():
    return torch.randn(4, 8, device=DEV)


def _w():
    return torch.randn(8, device=DEV)


# (op, what is wrong, arguments): each made lazily, on the GPU.
BAD_CALLS = [
    ("add", "dtype not supported", lambda: (_x().double(), _x().double())),
    ("add", "shapes differ", lambda: (_x(), _x()[:, :4].contiguous())),
    ("mul", "dtypes differ", lambda: (_x(), _x().bfloat16())),
    ("add", "devices differ", lambda: (_x(), _x().cpu())),
    ("gelu", "not a choice", lambda: (_x(), "fast")),
    ("softmax", "no row dim", lambda: (torch.tensor(1.0, device=DEV),)),
    ("softmax", "not contiguous", lambda: (_x().t(),)),
    ("rmsnorm", "N differs", lambda: (_x(), _w()[:7], 1e-6)),
    ("rmsnorm", "weight rank", lambda: (_x(), _w().view(1, 8), 1e-6)),
    ("add_rmsnorm", "*B differs", lambda: (_x(), _x()[:3], _w(), 1e-6)),
    ("layernorm", "bias dtype", lambda: (_x(), _w(), _w().half(), 1e-5)),
    ("row_max", "max of empty rows", lambda: (torch.empty(3, 0, device=DEV),)),
    ("row_max", "one empty row", lambda: (torch.empty(0, device=DEV),)),
    ("max_all", "max of nothing", lambda: (torch.empty(0, device=DEV),)),
]


@pytest.mark.parametrize("name,why,make", BAD_CALLS, ids=[f"{n}-{w}" for n, w, _ in BAD_CALLS])
def test_compiled_op_and_wrapper_give_the_same_error(name, why, make):
    """The table's checks run in the wrapper and in the compiled op: same exception type,
    same message after the prefix, for a caller of torch.ops.solbench_kernels directly."""
    kernels_ext.ensure_loaded()
    args = make()
    errors = []
    for fn, prefix in ((getattr(kernels_ext, name), f"kernels_ext.{name}: "),
                       (getattr(torch.ops.solbench_kernels, name), f"solbench_kernels::{name}: ")):
        with pytest.raises((TypeError, ValueError)) as info:
            fn(*args)
        first = str(info.value).splitlines()[0]
        assert first.startswith(prefix), first
        errors.append((type(info.value), first[len(prefix):]))
    assert errors[0] == errors[1], errors


def test_compiled_op_refuses_cpu_tensors_with_the_table_message():
    with pytest.raises(ValueError, match=r"solbench_kernels::softmax: x is on cpu; a CUDA "
                                         r"tensor is required"):
        torch.ops.solbench_kernels.softmax(torch.randn(4, 8))


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_row_sum_of_empty_rows_is_zero(dtype):
    out = kernels_ext.row_sum(torch.empty(3, 0, device=DEV, dtype=dtype))
    assert out.shape == (3,) and (out == 0).all()
    one = kernels_ext.row_sum(torch.empty(0, device=DEV, dtype=dtype))
    assert one.shape == () and one.item() == 0
    assert kernels_ext.row_sum(torch.empty(0, 5, device=DEV, dtype=dtype)).shape == (0,)
    assert kernels_ext.softmax(torch.empty(3, 0, device=DEV, dtype=dtype)).shape == (3, 0)


def test_aot_library_loads_in_a_fresh_process(tmp_path):
    env = dict(os.environ)
    built = subprocess.run([sys.executable, "-m", "kernels_ext.build", "--out", str(tmp_path)],
                           capture_output=True, text=True, timeout=1800, env=env)
    assert built.returncode == 0, built.stderr
    so = built.stdout.strip().splitlines()[-1]
    assert so.endswith(".so") and os.path.exists(so)
    script = textwrap.dedent(f"""
        import torch
        torch.ops.load_library({so!r})
        x = torch.randn(16, 4096, device="cuda")
        y = torch.ops.solbench_kernels.softmax(x)
        ref = torch.softmax(x.double(), -1)
        assert torch.allclose(y.double(), ref, rtol=2e-5, atol=1e-9), (y - ref).abs().max()
        print("aot ok")
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert "aot ok" in run.stdout
