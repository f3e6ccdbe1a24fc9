"""The GEMM family on a CUDA GPU, through the kernels_ext Python API, against float64.

Run on the GPU machine:
    python -m pytest -m gpu tests/gpu/test_gemm.py -q
Every output starts poisoned with NaN (an unwritten element fails), inputs are fresh random
normals, errors are normwise: ||out - ref|| / ||ref|| (K-long dot products make elementwise
relative errors meaningless).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import kernels_ext  # noqa: E402

pytestmark = pytest.mark.gpu

DEV = "cuda"
HOPPER = torch.cuda.get_device_capability() == (9, 0)
needs_hopper = pytest.mark.skipif(not HOPPER, reason="wgmma/TMA kernels need compute capability 9.0")
# The output's rounding dominates: bf16 2^-9, fp16 2^-12 per element (normwise a little less).
TOL = {torch.float32: 2e-5, torch.bfloat16: 6e-3, torch.float16: 1.5e-3}
HALF = [torch.bfloat16, torch.float16]
# (M, N, K): not multiples of any tile; K % 8 == 0 so the TMA variants take them too.
ODD = [(1, 256, 512), (33, 1000, 264), (1000, 1000, 1000), (129, 264, 4104), (77, 1000, 72),
       (64, 128, 8), (5, 40, 16)]   # K = 8, 16: rows narrower than one 64-wide TMA box
WGMMA_CONFIGS = ["auto", "128x256_s4_c2", "128x256_s3_c2", "128x256_s4_c1", "128x256_s3_c1",
                 "128x128_s6_c2", "128x128_s6_c1", "direct_store"]
RESIDUAL_CONFIGS = ["auto", "128x256_s3_c2", "128x256_s3_c1", "128x128_s6_c1", "direct_store"]


@pytest.fixture(scope="module", autouse=True)
def built_library():
    return kernels_ext.build(progress=print)


def _id(v):
    return str(v).replace("torch.", "")


def rand(shape, dtype, seed, scale=1.0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return (torch.randn(shape, device=DEV, generator=g) * scale).to(dtype)


def poison(shape, dtype):
    """Leave NaN in the caching allocator's next block of this size and dtype."""
    t = torch.full(shape, float("nan"), device=DEV, dtype=dtype)
    del t


def reference(a, w, residual=None, scale=1.0):
    ref = (a.double() @ w.double().t()) * scale
    return ref if residual is None else ref + residual.double()


def assert_normwise(out, ref, tol, what):
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    o = out.double()
    assert torch.isfinite(o).all(), f"{what}: non-finite output (an element left unwritten?)"
    err = float((o - ref).norm() / ref.norm())
    assert err <= tol, f"{what}: normwise error {err:.3e} > {tol:.1e}"


# ---------------------------------------------------------------------------- correctness

@pytest.mark.parametrize("m,n,k", ODD + [(300, 1000, 4100), (5, 7, 3)])
@pytest.mark.parametrize("dtype", [torch.float32, *HALF], ids=_id)
def test_gemm_picks_a_correct_variant(m, n, k, dtype):
    a, w = rand((m, k), dtype, 1), rand((n, k), dtype, 2)
    poison((m, n), dtype)
    assert_normwise(kernels_ext.gemm(a, w), reference(a, w), TOL[dtype], f"gemm {dtype} {m}x{n}x{k}")


# Interior tiles (the unpredicated copies of bk32 / bk64) and tiles with a K tail next to them.
INTERIOR = [(256, 512, 512), (384, 768, 200), (128, 256, 64), (256, 256, 4104)]


@pytest.mark.parametrize("config", ["auto", "bk16", "bk32", "bm64"])
@pytest.mark.parametrize("m,n,k", ODD + INTERIOR + [(1000, 1000, 4100), (3, 5, 7)])
def test_sgemm_configs(m, n, k, config):
    a, w = rand((m, k), torch.float32, 37), rand((n, k), torch.float32, 38)
    poison((m, n), torch.float32)
    out = kernels_ext.sgemm(a, w, config)
    assert_normwise(out, reference(a, w), TOL[torch.float32], f"sgemm[{config}] {m}x{n}x{k}")


@pytest.mark.parametrize("m,n,k", [(300, 1000, 100), (256, 512, 512), (129, 257, 4104)])
def test_sgemm_configs_sum_in_the_same_order(m, n, k):
    # Every configuration accumulates each output with one fmaf chain over k = 0, 1, ..., so the
    # loader and the block shape must not change a bit.
    a, w = rand((m, k), torch.float32, 39), rand((n, k), torch.float32, 40)
    ref = kernels_ext.sgemm(a, w, "bk32")
    for config in ("bk16", "bm64", "auto"):
        assert torch.equal(kernels_ext.sgemm(a, w, config), ref), f"sgemm[{config}] differs from bk32"


@pytest.mark.parametrize("config", ["auto", "bk32", "bk64", "bk64_pipe"])
@pytest.mark.parametrize("m,n,k", ODD + INTERIOR + [(1000, 1000, 4100), (3, 5, 7), (1024, 1024, 4099)])
@pytest.mark.parametrize("dtype", HALF, ids=_id)
def test_gemm_mma(m, n, k, dtype, config):
    a, w = rand((m, k), dtype, 5), rand((n, k), dtype, 6)
    poison((m, n), dtype)
    out = kernels_ext.gemm_mma(a, w, config)
    assert_normwise(out, reference(a, w), TOL[dtype], f"gemm_mma[{config}] {m}x{n}x{k}")


@needs_hopper
@pytest.mark.parametrize("config", WGMMA_CONFIGS)
@pytest.mark.parametrize("m,n,k", ODD + [(512, 768, 1024)])
@pytest.mark.parametrize("dtype", HALF, ids=_id)
def test_gemm_wgmma(m, n, k, dtype, config):
    a, w = rand((m, k), dtype, 7), rand((n, k), dtype, 8)
    poison((m, n), dtype)
    out = kernels_ext.gemm_wgmma(a, w, config)
    assert_normwise(out, reference(a, w), TOL[dtype], f"gemm_wgmma[{config}] {m}x{n}x{k}")


@needs_hopper
@pytest.mark.parametrize("n", [1001, 999, 6])
def test_gemm_wgmma_any_n_through_the_direct_epilogue(n):
    a, w = rand((65, 128), torch.bfloat16, 9), rand((n, 128), torch.bfloat16, 10)
    poison((65, n), torch.bfloat16)
    assert_normwise(kernels_ext.gemm_wgmma(a, w), reference(a, w), TOL[torch.bfloat16], f"N={n}")


@needs_hopper
def test_gemm_wgmma_large_matches_cublas_accuracy():
    a, w = rand((2048, 2048), torch.bfloat16, 11), rand((2048, 2048), torch.bfloat16, 12)
    ref = reference(a, w)
    ours = float((kernels_ext.gemm_wgmma(a, w).double() - ref).norm() / ref.norm())
    cublas = float(((a @ w.t()).double() - ref).norm() / ref.norm())
    assert ours <= 1.5 * cublas + 1e-6, f"wgmma error {ours:.2e} vs cuBLAS {cublas:.2e}"


def pad16(x: torch.Tensor) -> torch.Tensor:
    """x zero-padded at the end of both dims to multiples of 16."""
    rows, cols = (-x.shape[0]) % 16, (-x.shape[1]) % 16
    out = torch.zeros((x.shape[0] + rows, x.shape[1] + cols), device=x.device, dtype=torch.float32)
    out[:x.shape[0], :x.shape[1]] = x.float()
    return out.to(x.dtype)


@needs_hopper
@pytest.mark.parametrize("m,n,k", [(1, 256, 512), (33, 1000, 272), (129, 264, 4112), (1000, 1000, 1008)])
@pytest.mark.parametrize("scales", [(1.0, 1.0), (3.7e-3, 2.9e-2), (150.0, 0.011)])
def test_gemm_fp8_with_scales_far_from_one(m, n, k, scales):
    g = torch.Generator(device=DEV).manual_seed(13)
    a = (torch.randn((m, k), device=DEV, generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    w = (torch.randn((n, k), device=DEV, generator=g) * 32).clamp(-448, 448).to(torch.float8_e4m3fn)
    sa = torch.tensor(scales[0], device=DEV)
    sb = torch.tensor(scales[1], device=DEV)
    poison((m, n), torch.bfloat16)
    out = kernels_ext.gemm_fp8(a, w, sa, sb)
    assert out.dtype == torch.bfloat16
    ref = reference(a, w, scale=scales[0] * scales[1])
    assert_normwise(out, ref, 6e-3, f"gemm_fp8 {m}x{n}x{k} scales {scales}")
    # torch._scaled_mm (no fast accumulation) sets the bar: ours is as accurate. It takes only
    # dims divisible by 16, so it gets zero-padded copies (zeros change no sum) and its result is cut.
    theirs = torch._scaled_mm(pad16(a), pad16(w).t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)[:m, :n]
    ours_err = float((out.double() - ref).norm() / ref.norm())
    theirs_err = float((theirs.double() - ref).norm() / ref.norm())
    assert ours_err <= 1.5 * theirs_err + 1e-6, f"fp8 error {ours_err:.2e} vs _scaled_mm {theirs_err:.2e}"


@needs_hopper
def test_gemm_fp8_without_scales_is_unit_scaled():
    a = rand((64, 256), torch.float32, 14).to(torch.float8_e4m3fn)
    w = rand((96, 256), torch.float32, 15).to(torch.float8_e4m3fn)
    assert_normwise(kernels_ext.gemm_fp8(a, w), reference(a, w), 6e-3, "gemm_fp8 unit")


@needs_hopper
@pytest.mark.parametrize("split_k", [0, 1, 2, 4, 8])
@pytest.mark.parametrize("m,n,k", [(1, 256, 512), (16, 1000, 264), (33, 777, 4104), (64, 4096, 2048)])
@pytest.mark.parametrize("dtype", HALF, ids=_id)
def test_gemm_decode(m, n, k, dtype, split_k):
    a, w = rand((m, k), dtype, 16), rand((n, k), dtype, 17)
    poison((m, n), dtype)
    out = kernels_ext.gemm_decode(a, w, split_k)
    assert_normwise(out, reference(a, w), TOL[dtype], f"gemm_decode split {split_k} {m}x{n}x{k}")


# M <= 16; N from one row to past 6336 (the 32-row CTAs; below it 16-row ones); K tails inside a
# chunk (K % 32 != 0) and K-splits of unequal length.
DECODE_MMA = [(1, 256, 512), (16, 1000, 264), (5, 40, 16), (16, 64, 8), (9, 4100, 4104),
              (16, 8192, 512), (2, 1, 96), (16, 130, 2056), (13, 9000, 1032)]


@pytest.mark.parametrize("m,n,k", DECODE_MMA)
@pytest.mark.parametrize("dtype", HALF, ids=_id)
@pytest.mark.parametrize("grid", ["auto", "tiles", "waves"])
def test_gemm_decode_mma(m, n, k, dtype, grid):
    # waves on a small N spreads a few rows over many CTAs: row slots past a CTA's rows re-read
    # its last row from other warps than the one that owns it, and must not be written
    a, w = rand((m, k), dtype, 39), rand((n, k), dtype, 40)
    poison((m, n), dtype)
    out = kernels_ext.gemm_decode_mma(a, w, grid)
    assert_normwise(out, reference(a, w), TOL[dtype], f"gemm_decode_mma {m}x{n}x{k} grid={grid}")


def test_gemm_decode_mma_grids_agree_bit_for_bit():
    # the grid only deals rows to CTAs; each row's K-split sums keep their order
    a, w = rand((16, 2048), torch.bfloat16, 47), rand((8192, 2048), torch.bfloat16, 48)
    tiles = kernels_ext.gemm_decode_mma(a, w, "tiles")
    assert torch.equal(tiles, kernels_ext.gemm_decode_mma(a, w, "waves"))


def test_gemm_decode_mma_is_deterministic_and_matches_cublas_accuracy():
    a, w = rand((16, 4096), torch.bfloat16, 41), rand((8192, 4096), torch.bfloat16, 42)
    first = kernels_ext.gemm_decode_mma(a, w)
    assert torch.equal(first, kernels_ext.gemm_decode_mma(a, w)), "K-split sums must not depend on timing"
    ref = reference(a, w)
    ours = float((first.double() - ref).norm() / ref.norm())
    cublas = float(((a @ w.t()).double() - ref).norm() / ref.norm())
    assert ours <= 1.5 * cublas + 1e-6, f"gemm_decode_mma error {ours:.2e} vs cuBLAS {cublas:.2e}"


def test_gemm_decode_mma_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="M <= 16"):
        kernels_ext.gemm_decode_mma(rand((17, 64), torch.bfloat16, 43), rand((8, 64), torch.bfloat16, 44))
    with pytest.raises(ValueError, match="multiple of 8"):
        kernels_ext.gemm_decode_mma(rand((4, 100), torch.bfloat16, 45), rand((8, 100), torch.bfloat16, 46))
    with pytest.raises(ValueError, match="grid"):
        kernels_ext.gemm_decode_mma(rand((4, 64), torch.bfloat16, 45), rand((8, 64), torch.bfloat16, 46), "rows")


# fp32 at M <= 16: every token count's template (1, 2, 4, 8, 16 and counts between), N from one
# row to past the 32-row CTAs' threshold, K tails inside a 32-k chunk and K-splits of unequal
# length (K = 4100: 129 chunks over 4 or 8 splits).
SGEMM_DECODE = [(1, 256, 512), (2, 1, 96), (3, 40, 4), (5, 1000, 264), (8, 4100, 4100),
                (9, 130, 2056), (13, 9000, 1032), (16, 8192, 512), (16, 64, 12), (4, 333, 36)]
# tf32x3 is gemm_decode_mma's tensor-core kernel on fp32 (three TF32 products per fp32 one)
SDECODE_CONFIGS = ["rows4", "rows2", "rows4_d3", "tf32x3"]


@pytest.mark.parametrize("m,n,k", SGEMM_DECODE)
@pytest.mark.parametrize("config", ["auto"] + SDECODE_CONFIGS)
@pytest.mark.parametrize("grid", ["auto", "tiles", "waves"])
def test_sgemm_decode(m, n, k, config, grid):
    a, w = rand((m, k), torch.float32, 51), rand((n, k), torch.float32, 52)
    poison((m, n), torch.float32)
    out = kernels_ext.sgemm_decode(a, w, config, grid)
    assert_normwise(out, reference(a, w), TOL[torch.float32], f"sgemm_decode[{config}, {grid}] {m}x{n}x{k}")


def test_sgemm_decode_is_deterministic_whatever_the_grid():
    # the grid only deals rows to CTAs; a row's lane and K-split sums keep their order
    a, w = rand((16, 4096), torch.float32, 53), rand((8192, 4096), torch.float32, 54)
    for config in SDECODE_CONFIGS:
        tiles = kernels_ext.sgemm_decode(a, w, config, "tiles")
        assert torch.equal(tiles, kernels_ext.sgemm_decode(a, w, config, "tiles")), config
        assert torch.equal(tiles, kernels_ext.sgemm_decode(a, w, config, "waves")), config


@pytest.mark.parametrize("m,n,k", [(16, 4096, 2048), (3, 1000, 4100), (1, 130, 36)])
def test_decode_prefetch_changes_no_bit(m, n, k):
    # the L2 prefetch only asks for lines early (past the split's end it is predicated off)
    a32, w32 = rand((m, k), torch.float32, 59), rand((n, k), torch.float32, 60)
    off = kernels_ext.sgemm_decode(a32, w32, "auto", "auto", 0)
    assert_normwise(off, reference(a32, w32), TOL[torch.float32], f"sgemm_decode {m}x{n}x{k}")
    for pf in (1, 4, 64):
        for config in ("rows4", "rows2", "tf32x3"):
            assert torch.equal(kernels_ext.sgemm_decode(a32, w32, config, "auto", pf),
                               kernels_ext.sgemm_decode(a32, w32, config, "auto", 0)), (config, pf)
    if k % 8 == 0:
        a16, w16 = a32.bfloat16(), w32.bfloat16()
        off16 = kernels_ext.gemm_decode_mma(a16, w16, "auto", 0)
        for pf in (1, 4, 64):
            assert torch.equal(kernels_ext.gemm_decode_mma(a16, w16, "auto", pf), off16), pf


@pytest.mark.parametrize("m,k", [(1, 512), (7, 1000), (16, 4096)])
def test_gemm_runs_sgemm_decode_for_fp32_decode(m, k):
    a, w = rand((m, k), torch.float32, 61), rand((3000, k), torch.float32, 62)
    assert torch.equal(kernels_ext.gemm(a, w), kernels_ext.sgemm_decode(a, w))


def test_gemm_takes_the_tiled_sgemm_where_sgemm_decode_cannot_read():
    a, w = rand((8, 1023), torch.float32, 63), rand((500, 1023), torch.float32, 64)
    assert torch.equal(kernels_ext.gemm(a, w), kernels_ext.sgemm(a, w))
    assert_normwise(kernels_ext.gemm(a, w), reference(a, w), TOL[torch.float32], "gemm fp32 8x500x1023")


@pytest.mark.parametrize("config", ["auto", "tf32x3"])
def test_sgemm_decode_matches_cublas_accuracy(config):
    a, w = rand((16, 8192), torch.float32, 57), rand((4096, 8192), torch.float32, 58)
    ref = reference(a, w)
    ours = float((kernels_ext.sgemm_decode(a, w, config).double() - ref).norm() / ref.norm())
    assert not torch.backends.cuda.matmul.allow_tf32, "the cuBLAS comparison needs true fp32"
    cublas = float(((a @ w.t()).double() - ref).norm() / ref.norm())
    assert ours <= 1.5 * cublas + 1e-9, f"sgemm_decode[{config}] error {ours:.2e} vs cuBLAS {cublas:.2e}"


def _with_specials(case, m, n, k):
    """x (m x k) and W (n x k) fp32 with special values planted so that every output is the same
    whatever the summation order: one inf or NaN per dot product at most, or one product near the
    float32 limit beside small ones."""
    a, w = rand((m, k), torch.float32, 65), rand((n, k), torch.float32, 66)
    if case == "w":   # two CTAs meet specials (rows 5 and 7, row 250), the rest run the TF32 path
        w[5, 20], w[7, 30], w[250, 1] = float("-inf"), float("nan"), float("inf")
    elif case == "x":   # every CTA: an inf, and a value that rounds to inf as TF32
        a[3, 10], a[m - 1, 40] = float("inf"), 3.4027e38
    else:   # "overflow": finite inputs whose product overflows, in one output only
        a[2, 0], w[100, 0] = 1e20, 1e20
    return a, w


def assert_ieee_like(out, want, what):
    """NaN where cuBLAS fp32 has NaN, the same infinities, and the finite rest within TOL."""
    assert torch.equal(torch.isnan(out), torch.isnan(want)), f"{what}: NaN pattern differs"
    inf = torch.isinf(want)
    assert torch.equal(torch.isinf(out), inf), f"{what}: inf pattern differs"
    assert torch.equal(out[inf], want[inf]), f"{what}: an inf has the wrong sign"
    fin = torch.isfinite(want)
    assert_normwise(out[fin], want[fin].double(), TOL[torch.float32], f"{what} (finite outputs)")


@pytest.mark.parametrize("case", ["w", "x", "overflow"])
@pytest.mark.parametrize("m", [16, 5])
@pytest.mark.parametrize("config", ["auto"] + SDECODE_CONFIGS)
def test_sgemm_decode_keeps_ieee_specials(case, m, config):
    # tf32x3's split of an inf is inf + NaN: its CTAs redo such rows in fp32 FMAs
    assert not torch.backends.cuda.matmul.allow_tf32, "the cuBLAS comparison needs true fp32"
    a, w = _with_specials(case, m, 300, 512)
    want = a @ w.t()
    assert (~torch.isfinite(want)).any(), "the planted specials reach no output"
    assert_ieee_like(kernels_ext.sgemm_decode(a, w, config), want, f"sgemm_decode[{config}] {case} M={m}")
    if config == "auto":
        assert_ieee_like(kernels_ext.gemm(a, w), want, f"gemm fp32 {case} M={m}")


def test_sgemm_decode_refuses_what_it_cannot_read():
    f32 = torch.float32
    with pytest.raises(ValueError, match="M <= 16"):
        kernels_ext.sgemm_decode(rand((17, 64), f32, 43), rand((8, 64), f32, 44))
    with pytest.raises(ValueError, match="multiple of 4"):
        kernels_ext.sgemm_decode(rand((4, 102), f32, 45), rand((8, 102), f32, 46))
    with pytest.raises(ValueError, match="config"):
        kernels_ext.sgemm_decode(rand((4, 64), f32, 45), rand((8, 64), f32, 46), "rows8")
    with pytest.raises(TypeError, match="float32"):
        kernels_ext.sgemm_decode(rand((4, 64), torch.bfloat16, 45), rand((8, 64), torch.bfloat16, 46))


@pytest.mark.parametrize("m,n,k", ODD + [(100, 300, 4100), (77, 1001, 128)])
@pytest.mark.parametrize("dtype", HALF, ids=_id)
def test_linear_residual(m, n, k, dtype):
    x, w, r = rand((m, k), dtype, 18), rand((n, k), dtype, 19), rand((m, n), dtype, 20)
    poison((m, n), dtype)
    out = kernels_ext.linear_residual(x, w, r)
    assert_normwise(out, reference(x, w, r), TOL[dtype], f"linear_residual {m}x{n}x{k}")


@pytest.mark.parametrize("m,n,k", [(33, 1000, 264), (300, 520, 4104), (1000, 1000, 1000)])
@pytest.mark.parametrize("config", RESIDUAL_CONFIGS)
def test_linear_residual_configs(m, n, k, config):
    x, w, r = (rand((m, k), torch.bfloat16, 22), rand((n, k), torch.bfloat16, 23),
               rand((m, n), torch.bfloat16, 24))
    out = kernels_ext.linear_residual(x, w, r, config)
    assert_normwise(out, reference(x, w, r), TOL[torch.bfloat16], f"linear_residual {config} {m}x{n}x{k}")


def test_empty_and_k_zero_shapes():
    a, w = torch.empty((0, 8), device=DEV, dtype=torch.bfloat16), rand((16, 8), torch.bfloat16, 21)
    assert kernels_ext.gemm(a, w).shape == (0, 16)
    a0, w0 = torch.empty((4, 0), device=DEV), torch.empty((5, 0), device=DEV)
    assert torch.equal(kernels_ext.sgemm(a0, w0), torch.zeros(4, 5, device=DEV))
    x0, wk0 = torch.empty((4, 0), device=DEV, dtype=torch.float16), torch.empty((5, 0), device=DEV,
                                                                                dtype=torch.float16)
    r = rand((4, 5), torch.float16, 22)
    assert torch.equal(kernels_ext.linear_residual(x0, wk0, r), r)


# ------------------------------------------------------------------------------ bad input

def test_bad_inputs_get_clear_errors():
    a, w = rand((8, 16), torch.bfloat16, 23), rand((4, 16), torch.bfloat16, 24)
    with pytest.raises(ValueError, match="gemm"):
        kernels_ext.gemm(a, rand((4, 12), torch.bfloat16, 25))          # mismatched K
    with pytest.raises(TypeError, match="dtype"):
        kernels_ext.gemm(a, w.float())                                   # mixed dtypes
    with pytest.raises(ValueError, match="contiguous"):
        kernels_ext.gemm(rand((16, 8), torch.bfloat16, 26).t(), w)       # transposed view
    with pytest.raises(ValueError, match="cuda|CUDA"):
        kernels_ext.gemm(a.cpu(), w.cpu())
    with pytest.raises(TypeError, match="dtype"):
        kernels_ext.sgemm(a, w)                                          # sgemm is fp32 only
    with pytest.raises(TypeError, match="dtype"):
        kernels_ext.gemm_fp8(a, w)


@needs_hopper
def test_tma_variants_name_the_alignment_rule():
    a, w = rand((64, 4100), torch.bfloat16, 27), rand((64, 4100), torch.bfloat16, 28)
    with pytest.raises(ValueError, match="multiple of 8"):
        kernels_ext.gemm_wgmma(a, w)
    with pytest.raises(ValueError, match="multiple of 8"):
        kernels_ext.gemm_decode(a, w)
    with pytest.raises(ValueError, match="M <= 64"):
        kernels_ext.gemm_decode(rand((65, 64), torch.bfloat16, 29), rand((8, 64), torch.bfloat16, 30))
    with pytest.raises(ValueError, match="split_k"):
        kernels_ext.gemm_decode(rand((8, 64), torch.bfloat16, 31), rand((8, 64), torch.bfloat16, 32), 3)
    with pytest.raises(ValueError, match="N % 8"):
        kernels_ext.gemm_wgmma(rand((64, 64), torch.bfloat16, 33), rand((1001, 64), torch.bfloat16, 34),
                               "128x128_s6_c1")
    # the front door falls back instead of refusing
    assert_normwise(kernels_ext.gemm(a, w), reference(a, w), TOL[torch.bfloat16], "gemm K=4100")


@pytest.mark.skipif(HOPPER, reason="checks the refusal on non-Hopper GPUs")
def test_hopper_variants_refuse_other_gpus():
    a, w = rand((64, 64), torch.bfloat16, 35), rand((64, 64), torch.bfloat16, 36)
    with pytest.raises(NotImplementedError, match="9.0"):
        kernels_ext.gemm_wgmma(a, w)


@needs_hopper
def test_a_configuration_keeps_its_own_grid_whatever_ran_before():
    """The persistent grid's size is memoised per tile configuration. Keyed on the kernel's type (which
    every configuration shares), the first configuration launched fixed the grid of all later ones: an
    unpaired kernel after a 2-CTA one ran on half the SMs at 0.56x. Time each unpaired configuration
    before and after its 2-CTA twin, in both orders, in this one process."""
    a = torch.randn(4096, 4096, device=DEV).to(torch.bfloat16)
    w = torch.randn(4096, 4096, device=DEV).to(torch.bfloat16)

    def ms(config: str) -> float:
        for _ in range(3):
            kernels_ext.gemm_wgmma(a, w, config)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            kernels_ext.gemm_wgmma(a, w, config)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 10

    for c1, c2 in (("128x256_s4_c1", "128x256_s4_c2"), ("128x128_s6_c1", "128x128_s6_c2")):
        before = ms(c1)
        ms(c2)
        after = ms(c1)
        twin = ms(c2)
        assert after < 1.2 * before and before < 1.2 * after, (c1, before, after)
        # An unpaired grid of half the SMs would run at about half the paired kernel's speed.
        assert after < 1.5 * twin, (c1, after, c2, twin)
